"""Kernels with ``wp.handle`` arguments (warp-lang 1.13+), in a module of their own so that older
warp-langs, which lack the type, never build them."""

import warp as wp


@wp.kernel
def mesh_distance(mesh_id: wp.handle, out: wp.array(dtype=float)):
    i = wp.tid()
    query = wp.mesh_query_point_no_sign(mesh_id, wp.vec3(float(i), 0.5, 0.25), 100.0)
    out[i] = wp.length(wp.mesh_eval_position(mesh_id, query.face, query.u, query.v))


@wp.struct
class MeshHandleField:
    """A mesh reference typed as a handle, which may also sit nested inside another struct."""

    mesh_id: wp.handle


@wp.struct
class MeshHandleOutput:
    """An output whose mesh reference is nested after an ordinary integer field (upstream's layout)."""

    tag: wp.uint64
    nested: MeshHandleField


@wp.kernel
def overwrite_mesh_handle_struct(mesh_id: wp.handle, handles: wp.array(dtype=MeshHandleOutput),
                                 distances: wp.array(dtype=float)):
    """Writes ``mesh_id`` into the struct, then queries the mesh through the stored field."""
    tid = wp.tid()
    value = MeshHandleOutput()
    value.nested.mesh_id = mesh_id
    handles[tid] = value
    query = wp.mesh_query_point_no_sign(handles[tid].nested.mesh_id, wp.vec3(0.0), 100.0)
    distances[tid] = wp.length(wp.mesh_eval_position(handles[tid].nested.mesh_id, query.face, query.u, query.v))


@wp.kernel
def query_nested_handles(handles: wp.array(dtype=MeshHandleOutput), points: wp.array(dtype=wp.vec3),
                         closest: wp.array2d(dtype=wp.vec3)):
    """The closest point on each element's mesh (reached through its ``wp.handle`` field) to each point."""
    i, j = wp.tid()
    mesh_id = handles[i].nested.mesh_id
    query = wp.mesh_query_point_no_sign(mesh_id, points[j], 100.0)
    closest[i, j] = wp.mesh_eval_position(mesh_id, query.face, query.u, query.v)


@wp.kernel
def query_bvh_handles(bvhs: wp.array(dtype=wp.handle), lower: wp.vec3, upper: wp.vec3,
                      hits: wp.array2d(dtype=wp.int32)):
    """How many boxes of each element's Bvh overlap ``[lower, upper]``, and the first one found."""
    i = wp.tid()
    query = wp.bvh_query_aabb(bvhs[i], lower, upper)
    index = int(0)
    count = int(0)
    first = int(-1)
    while wp.bvh_query_next(query, index):
        if count == 0:
            first = index
        count += 1
    hits[i, 0] = count
    hits[i, 1] = first
