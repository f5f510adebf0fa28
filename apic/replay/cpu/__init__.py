"""The CPU interpreter of the op table, and a CPU graph's replay state.

Two floors. The interpreter: ``table.py`` (the op table's layout and opcodes), ``interpreter.py`` (the
Numba-jitted loop) with ``_intrinsics.py`` and ``jit_cache.py``, ``native_entry.py`` and
``native_interpreter.py`` (the loop as a relocatable native object, loaded without Numba),
``param_slots.py``. These import one another, ``apic.record``, the base layer and ``apic.replay.cuda.driver``
(the driver errors a CUDA row reports) only: the parallel planner and everything above build on them.

Above the program and the parallel planner: ``reference.py`` (the op table run row by row in Python, through
``ctypes``), ``profile.py`` (a per-op profile), ``plans.py`` (``Graph.plans``: the parallel plans per thread
count and the timed replays that tune them). These may import ``apic.replay.parallel`` and the program
(``apic.replay.program``), never ``apic.replay.cuda`` (but its driver) nor the backend modules.

Import-light: this file imports nothing (importing ``interpreter`` imports Numba).
"""
