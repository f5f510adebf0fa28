"""The proofs of the parallel replay (docs/PARALLEL.md), made from a kernel's source at capture.

By task (``splittable.py``: the kernel's tasks touch disjoint data), by world (``world_split.py`` the
verdict, ``world_proof.py`` the AST walk, ``world_structs.py``, ``world_launch.py`` the per-launch checks),
by footprint (``footprint.py`` the rule and claim, and its evaluator: ``footprint_eval.py``,
``footprint_body.py``, ``footprint_exprs.py``, ``footprint_shapes.py``, ``footprint_values.py``).

May import ``apic.record`` (its top folder: the ops, layouts) and the base layer; never the recorders
(``apic.record.cpu``, ``apic.record.cuda``), which import it. Import-light: this file imports nothing.
"""
