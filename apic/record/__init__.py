"""Recording: what a capture saw, as plain data (``ops.py``, ``recording.py``) and the recorders that note it.

The folders, bottom to top (``tests/project/test_layering.py`` holds the exact order):

* here: what a recording holds and every layer above reads: the ops (``ops.py``, ``op_addresses.py``), their
  effects (``effects.py``), the memory regions, layouts and handles, named parameters and bindings, the
  native utilities' allow-list (``natives.py``), the control-flow rule (``control_flow.py``) and what both
  recorders share (``base.py``, ``launch_args.py``);
* ``parallel/``: the proofs that a kernel's tasks may run on several threads: by task (``splittable.py``),
  by world (``world_*.py``), by footprint (``footprint*.py``, with the footprint evaluator);
* ``cpu/``: the CPU recorder and the shims on Warp's Python API and natives that feed it;
* ``cuda/``: the recorder alongside Warp's CUDA graph capture (``apic=True``) and its shims.

``cpu/`` and ``cuda/`` import nothing of each other. Recording imports the base layer only (never replay,
the format or the graph types). This file imports nothing.
"""
