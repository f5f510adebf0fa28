"""Targets: what differs between running a graph on the CPU and on a CUDA GPU, in one place per target.

``apic.targets.cpu`` (entry ABI, bounds and descriptor layouts, module file naming, handle calls) and
``apic.targets.cuda`` (parameter layout, launch grid, PTX / CUBIN rules) hold the knowledge; a
:class:`apic.targets.target.Target` is the description of one that the recorders, the ``.wrp`` reader and writer and the
replay read instead of branching on the device. Adding a target is one new module and one entry in ``target.py``.
"""
