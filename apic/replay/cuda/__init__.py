"""A saved CUDA graph loaded and replayed with cuda-python alone (no Warp kernels, no Warp runtime calls).

``driver.py`` (the driver calls, every failure an apic error), ``loaded_graph.py`` (loading),
``resources.py`` (the driver objects a loaded graph owns), ``lowering.py`` (its ops as driver steps, one
CUDA graph built from them), ``conditional.py`` (``capture_if`` / ``capture_while`` as conditional nodes),
``rows.py`` (its replay as rows of the op table, run by the CPU interpreter), ``run.py`` (replay and
captures), ``binding_io.py`` (named-array copies).

The floor above the program: may import ``apic.replay`` (the program, ``relocate``, ``named_params``),
``apic.replay.cpu`` (the op table), the ``apic.replay.backends`` package (not its backend modules),
``apic.record`` and the base layer. ``driver.py`` alone sits at the bottom (it imports the base layer only),
since the op table reports its errors. Import-light: this file imports nothing (cuda-python is imported
lazily).
"""
