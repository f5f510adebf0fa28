"""Replay: a ``Recording`` lowered to an op table and run through a backend.

The folders, bottom to top (a module imports its own floor or a lower one; ``tests/project/test_layering.py``
holds the exact order):

* ``cpu/``: the CPU interpreter: the op table's layout, the Numba loop and its native entry, the reference
  interpreter; above the program, the per-op profile and a CPU graph's plans;
* ``parallel/``: the parallel planner: the footprint checks of a launch and their cache, the task ranges,
  the plans and their costs, the splitter's pool and the threaded launches;
* here: the program (``program.py``: an op table and its arena) and the lowering that makes it
  (``lowering.py``, ``lowering_rows.py``, ``lowering_splits.py``, ``relocate.py``), the loaded graph's index
  checks (``guards.py``) and allocation budget (``budget.py``), the named-parameter API (``named_params.py``);
* ``cuda/``: a loaded CUDA graph: its driver calls, lowering, conditional nodes, rows and replay;
* ``backends/``: the device seam, one module per backend (its ``__init__`` is the bottom floor: every
  floor may import it; its backend modules are the top).

Replay imports ``apic.record`` and the base layer, never ``apic.format`` (the file) nor the graph types.
This file imports nothing.
"""
