"""The native handle kinds: Warp's classes whose ``id`` is the address of a native object kernels
dereference, by the class name the recorder notes, the ``.wrp`` saves and the replay checks. Every module
names a kind through these constants (``tests/test_facts_once.py`` fails on the string spelled elsewhere).
"""

from __future__ import annotations

MESH = "Mesh"
BVH = "Bvh"
HASH_GRID = "HashGrid"
VOLUME = "Volume"
MARCHING_CUBES = "MarchingCubes"  # a handle of Warp's, never recorded: a graph that launches on one is refused

RECORDED = (MESH, BVH, HASH_GRID, VOLUME)  # the kinds a CPU graph may hold, in their saved order
NATIVE = RECORDED + (MARCHING_CUBES,)  # every Warp class of a native handle, by name
