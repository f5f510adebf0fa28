"""Recording alongside Warp's own CUDA graph capture (``wp.ScopedCapture(device="cuda:N", apic=True)``).

``recorder.py`` (the recorder), ``shims.py`` (wrappers of Warp's Python API and sinks on its CUDA natives),
``params.py`` (the ctypes types of a kernel's CUDA parameters), ``fill.py`` (fills done as memsets),
``control_flow.py`` (``capture_if`` / ``capture_while``), ``conditional_tree.py`` (the branches and jumps of a
CUDA recording as the nested bodies of conditional nodes).

May import ``apic.record`` (its top folder) and the base layer; never ``apic.record.cpu`` nor
``apic.record.parallel``. Import-light: this file imports nothing.
"""
