"""The parallel replay's planner and runners (docs/PARALLEL.md): which rows run on several threads, and how.

``split_planner.py`` (the plan: which rows split, grouped, their slots), ``plan_costs.py`` (the measured
costs it is made from), ``thread_count.py`` (the thread counts a caller may ask for), ``split_pool.py`` (the
native splitter of an ``OP_SPLIT`` row and its pool of workers), ``range_entry.py`` and ``range_cache.py``
(a kernel's tasks ``[begin, end)``, kept between processes), ``threaded_launch.py`` (a launch split over
Python threads), ``footprint_launch.py`` and ``footprint_cache.py`` (lowering's check of a launch with a
footprint claim, its verdicts kept between processes).

May import the CPU interpreter's floor of ``apic.replay.cpu`` (the op table, the Numba intrinsics, the
JIT cache), ``apic.record`` (the proofs in ``apic.record.parallel``) and the base layer; never the program,
the lowering, ``apic.replay.cuda`` or the backend modules (``apic.replay.program`` and
``apic.replay.lowering_splits`` import this floor). Import-light: this file imports nothing.
"""
