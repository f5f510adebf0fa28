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
def query_handle_fields(handles: wp.array(dtype=MeshHandleField), points: wp.array(dtype=wp.vec3),
                        closest: wp.array(dtype=wp.vec3)):
    """The closest point of each element's mesh to each query point (a 2-d launch: element, point)."""
    i, j = wp.tid()
    mesh_id = handles[i].mesh_id
    query = wp.mesh_query_point_no_sign(mesh_id, points[j], 100.0)
    closest[i * points.shape[0] + j] = wp.mesh_eval_position(mesh_id, query.face, query.u, query.v)
