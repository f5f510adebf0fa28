"""The CPU capture: the recorder and the shims that feed it.

``recorder.py`` (what a running capture has seen, made into a ``Recording``), ``active_recorder.py`` (which
capture records on this thread), ``shims.py`` and ``launch_shims.py`` (Warp's Python API and launches),
``native_sinks.py`` and ``native_layer.py`` (Warp's natives), ``handle_shims.py`` (Mesh, Bvh, HashGrid,
Volume), ``repeats.py`` (a launch repeated), ``fem.py``, ``sparse.py`` and ``segmented_sort_checks.py``
(``warp.fem``, ``warp.sparse``, segmented sorts).

May import ``apic.record`` (its top folder), ``apic.record.parallel`` (the proofs a launch is checked with)
and the base layer; never ``apic.record.cuda``. Import-light: this file imports nothing.
"""
