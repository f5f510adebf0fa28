"""Kernels of the format-2 golden graph (a mesh moved, refit inside the capture, then queried).

Their own Warp module: kernels that read native Mesh structs mark only this module as tied to the
warp-lang that compiled it (see docs/FORMAT.md, compatibility).
"""

import warp as wp


@wp.kernel
def lift(points: wp.array(dtype=wp.vec3), dz: float):
    i = wp.tid()
    points[i] = points[i] + wp.vec3(0.0, 0.0, dz)


@wp.kernel
def closest(mesh: wp.uint64, queries: wp.array(dtype=wp.vec3), out: wp.array(dtype=float)):
    i = wp.tid()
    q = wp.mesh_query_point_no_sign(mesh, queries[i], 100.0)
    if q.result:
        out[i] = wp.length(wp.mesh_eval_position(mesh, q.face, q.u, q.v) - queries[i])
