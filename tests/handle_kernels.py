"""Kernels with ``wp.handle`` arguments (warp-lang 1.13+), in a module of their own so that older
warp-langs, which lack the type, never build them."""

import warp as wp


@wp.kernel
def mesh_distance(mesh_id: wp.handle, out: wp.array(dtype=float)):
    i = wp.tid()
    query = wp.mesh_query_point_no_sign(mesh_id, wp.vec3(float(i), 0.5, 0.25), 100.0)
    out[i] = wp.length(wp.mesh_eval_position(mesh_id, query.face, query.u, query.v))
