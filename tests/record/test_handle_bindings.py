"""Handles reached only through a binding's ``wp.handle`` fields (warp-lang 1.13+), as upstream saves them.

A named array whose dtype types a word as ``wp.handle`` (a ``@wp.struct`` field, nested or not, or an
array of ``wp.handle``) and holds a live object's id: the save records the object and writes only
those words as handle relocations. A plain ``uint64`` view of the same memory keeps its numbers, even
one equal to the id (upstream's test_save_numpy_handle_alias_preserves_integers and
test_apic_mesh_handle_in_struct). Eager Warp is the oracle for every query made through a loaded handle.
"""

from __future__ import annotations

import json
import sys
import textwrap

import numpy as np
import pytest
import warp as wp

import apic
import fork_server
from conftest import CPU
from persist_helpers import child_env, same_bits, wrp_body

pytestmark = pytest.mark.skipif(not hasattr(wp, "handle"),
                                reason="this warp-lang has no wp.handle type (arrived in 1.13): no word is typed "
                                       "as a handle, and a uint64 holding an id is found by its value")
pytestmark = [pytestmark, pytest.mark.warp_version, pytest.mark.interpreter]

N = 3
POINTS = np.array([[0.0, 0.0, 0.0], [0.9, 0.1, -0.3], [2.0, 2.0, 2.0], [-0.2, 0.7, 0.4]], dtype=np.float32)


@wp.kernel
def halve(a: wp.array(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = a[i] * 0.5


def _cube():
    points = np.array([[-0.5, -0.5, -0.5], [0.5, -0.5, -0.5], [0.5, 0.5, -0.5], [-0.5, 0.5, -0.5],
                       [-0.5, -0.5, 0.5], [0.5, -0.5, 0.5], [0.5, 0.5, 0.5], [-0.5, 0.5, 0.5]], dtype=np.float32)
    indices = np.array([0, 1, 2, 0, 2, 3, 4, 6, 5, 4, 7, 6, 0, 3, 7, 0, 7, 4,
                        1, 5, 6, 1, 6, 2, 0, 4, 5, 0, 5, 1, 3, 2, 6, 3, 6, 7], dtype=np.int32)
    return wp.Mesh(points=wp.array(points, dtype=wp.vec3, device=CPU),
                   indices=wp.array(indices, dtype=wp.int32, device=CPU))


def _closest(handles):
    """The eager query through each element's handle field (the oracle, and the check after a load)."""
    from handle_kernels import query_nested_handles

    points = wp.array(POINTS, dtype=wp.vec3, device=CPU)
    closest = wp.zeros((handles.shape[0], len(POINTS)), dtype=wp.vec3, device=CPU)
    wp.launch(query_nested_handles, dim=closest.shape, inputs=[handles, points, closest], device=CPU)
    return closest.numpy()


def _mesh_scene():
    """A struct array whose ``tag`` (plain uint64) and ``nested.mesh_id`` (wp.handle) both hold a mesh's id,
    a uint64 view of the same memory, and a capture that never touches either."""
    from handle_kernels import MeshHandleOutput

    mesh = _cube()
    backing = np.zeros(N, dtype=MeshHandleOutput.numpy_dtype())
    backing["tag"] = mesh.id
    backing["nested"]["mesh_id"] = mesh.id
    handles = wp.array(backing, dtype=MeshHandleOutput, copy=False, device=CPU)
    integers = wp.array(backing.view(np.uint64), dtype=wp.uint64, copy=False, device=CPU)
    a = wp.array(np.arange(4, dtype=np.float32), device=CPU)
    out = wp.zeros(4, dtype=float, device=CPU)
    with wp.ScopedCapture(device=CPU, apic=True) as capture:
        wp.launch(halve, dim=4, inputs=[a, out], device=CPU)
    return mesh, backing, handles, integers, out, capture.graph


def test_a_handle_field_reached_only_through_a_binding_is_saved_and_remapped(tmp_path):
    from handle_kernels import MeshHandleOutput

    mesh, backing, handles, integers, out, graph = _mesh_scene()
    expected = _closest(handles)
    path = str(tmp_path / "g")
    wp.capture_save(graph, path, outputs={"handles": handles, "integers": integers, "out": out})

    body = wrp_body(path)
    assert [h["kind"] for h in body["handles"]] == ["Mesh"]
    # one slot per typed field: the plain tags (words 0, 2, 4 of the uint64 view) are no slot
    assert sorted(offset for _, offset, _ in body["handle_slots"]) == [8, 24, 40]

    loaded = wp.capture_load(path)
    wp.capture_launch(loaded)
    result = wp.zeros(4, dtype=float, device=CPU)
    loaded.get_param("out", result)
    assert same_bits(result.numpy(), np.arange(4, dtype=np.float32) * 0.5)
    new_id = loaded.recording.handles[0].obj.id
    assert new_id != mesh.id
    restored = wp.zeros(N, dtype=MeshHandleOutput, device=CPU)
    loaded.get_param("handles", restored)
    assert (restored.numpy()["nested"]["mesh_id"] == new_id).all()
    assert (restored.numpy()["tag"] == mesh.id).all(), "a plain uint64 field equal to the id must keep its number"
    words = wp.zeros(2 * N, dtype=wp.uint64, device=CPU)
    loaded.get_param("integers", words)
    assert words.numpy().tolist() == [mesh.id, new_id] * N
    assert same_bits(_closest(restored), expected)
    assert (backing["nested"]["mesh_id"] == mesh.id).all(), "the save changed the live memory"

    # a fresh process: the query through the loaded field meets eager's, the plain words keep their number
    report = _fresh_process_queries(tmp_path, path, expected)
    assert report["words"][0::2] == [mesh.id] * N
    assert len(set(report["words"][1::2])) == 1 and report["words"][1] != mesh.id


_CHILD = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    import warp as wp
    wp.config.quiet = True
    import apic

    @wp.struct
    class MeshHandleField:
        mesh_id: wp.handle

    @wp.struct
    class MeshHandleOutput:
        tag: wp.uint64
        nested: MeshHandleField

    @wp.kernel
    def query(handles: wp.array(dtype=MeshHandleOutput), points: wp.array(dtype=wp.vec3),
              closest: wp.array2d(dtype=wp.vec3)):
        i, j = wp.tid()
        mesh_id = handles[i].nested.mesh_id
        q = wp.mesh_query_point_no_sign(mesh_id, points[j], 100.0)
        closest[i, j] = wp.mesh_eval_position(mesh_id, q.face, q.u, q.v)

    path, points_file, closest_file, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    graph = wp.capture_load(path)
    wp.capture_launch(graph)
    words = wp.zeros(2 * n, dtype=wp.uint64, device="cpu")
    graph.get_param("integers", words)
    # the struct view of the same words, as the saving process typed them
    handles = wp.array(ptr=words.ptr, dtype=MeshHandleOutput, shape=(n,), device="cpu")
    points = wp.array(np.load(points_file), dtype=wp.vec3, device="cpu")
    closest = wp.zeros((n, points.shape[0]), dtype=wp.vec3, device="cpu")
    wp.launch(query, dim=closest.shape, inputs=[handles, points, closest], device="cpu")
    np.save(closest_file, closest.numpy())
    print(json.dumps({"words": [int(w) for w in words.numpy()]}))
    """
)


def _fresh_process_queries(tmp_path, path: str, expected: np.ndarray) -> dict:
    """Load ``path`` in a fresh interpreter, query the mesh through the loaded handle field there."""
    script = tmp_path / "child.py"  # a file: Warp reads the child's kernel source from it
    script.write_text(_CHILD)
    np.save(tmp_path / "points.npy", POINTS)
    result = fork_server.run(
        [sys.executable, str(script), path, str(tmp_path / "points.npy"), str(tmp_path / "closest.npy"), str(N)],
        cwd=tmp_path, env=child_env(), capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr}"
    assert same_bits(np.load(tmp_path / "closest.npy"), expected)
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_only_the_typed_views_of_overlapping_bindings_are_remapped(tmp_path):
    """Upstream's test_save_numpy_handle_alias_preserves_integers: every word holds the id; the slots that
    some handle-typed view reaches change, the rest of the uint64 view keeps the number."""
    from handle_kernels import MeshHandleField

    mesh = _cube()
    backing = np.zeros((2, 4), dtype=MeshHandleField.numpy_dtype())
    backing["mesh_id"] = mesh.id
    handles = wp.array(backing, dtype=MeshHandleField, copy=False, device=CPU)
    flat = handles.flatten()
    integers = wp.array(backing.view(np.uint64), dtype=wp.uint64, copy=False, device=CPU)
    with wp.ScopedCapture(device=CPU, apic=True) as capture:
        pass
    for name, views, typed in (
        ("short_slice", (handles[:1, :1],), [0]),
        ("overlapping_strides", (handles[:, ::2], handles[:1, 1:3]), [0, 1, 2, 4, 6]),
        ("three_overlapping_views", (flat[:3:2], flat[4:6], flat[1:6:2]), [0, 1, 2, 3, 4, 5]),
        ("slice_and_transpose", (handles[:, 1:3], handles.transpose()[:, :1]), [0, 1, 2, 3, 5, 6]),
    ):
        for integers_first in (False, True):
            outputs = {str(i): view for i, view in enumerate(views)}
            outputs = {"integers": integers, **outputs} if integers_first else {**outputs, "integers": integers}
            path = str(tmp_path / f"{name}_{integers_first}")
            wp.capture_save(capture.graph, path, outputs=outputs)
            loaded = wp.capture_load(path)
            restored = wp.zeros(integers.shape, dtype=wp.uint64, device=CPU)
            loaded.get_param("integers", restored)
            expected = np.full(backing.size, mesh.id, dtype=np.uint64)
            expected[typed] = loaded.recording.handles[0].obj.id
            assert restored.numpy().reshape(-1).tolist() == expected.tolist(), (name, integers_first)


def test_a_handle_array_binding_with_a_bvh_a_zero_and_a_number(tmp_path):
    """An array of ``wp.handle``: a live Bvh's id is remapped (a query through it meets eager's); 0 and a
    number that is no live object's id are saved as they are, as upstream does."""
    from handle_kernels import query_bvh_handles

    lowers = np.array([[0, 0, 0], [1, 1, 1], [3, 0, 0]], dtype=np.float32)
    bvh = wp.Bvh(wp.array(lowers, dtype=wp.vec3, device=CPU), wp.array(lowers + 0.5, dtype=wp.vec3, device=CPU))
    ids = wp.array(np.array([bvh.id, 0, 12345], dtype=np.uint64), dtype=wp.handle, device=CPU)
    box = (wp.vec3(0.2, 0.2, 0.2), wp.vec3(1.2, 1.2, 1.2))
    expected = wp.zeros((1, 2), dtype=wp.int32, device=CPU)
    wp.launch(query_bvh_handles, dim=1, inputs=[ids, *box, expected], device=CPU)
    with wp.ScopedCapture(device=CPU, apic=True) as capture:
        pass
    wp.capture_save(capture.graph, str(tmp_path / "bvh"), inputs={"ids": ids})
    loaded = wp.capture_load(str(tmp_path / "bvh"))
    assert [h.kind for h in loaded.recording.handles] == ["Bvh"]
    restored = wp.zeros(3, dtype=wp.handle, device=CPU)
    loaded.get_param("ids", restored)
    assert restored.numpy().tolist() == [loaded.recording.handles[0].obj.id, 0, 12345]
    hits = wp.zeros((1, 2), dtype=wp.int32, device=CPU)
    wp.launch(query_bvh_handles, dim=1, inputs=[restored, *box, hits], device=CPU)
    assert same_bits(hits.numpy(), expected.numpy()) and expected.numpy()[0, 0] == 2


def test_a_plain_word_holding_an_unsaved_objects_id_is_still_refused(tmp_path):
    """Only a handle-typed field makes the save record an object: a uint64 word holding the id of a live
    mesh no typed field reaches is refused, as before (its address is only valid in this process)."""
    from handle_kernels import MeshHandleOutput

    typed_mesh, plain_mesh = _cube(), _cube()
    backing = np.zeros(1, dtype=MeshHandleOutput.numpy_dtype())
    backing["tag"] = plain_mesh.id
    backing["nested"]["mesh_id"] = typed_mesh.id
    handles = wp.array(backing, dtype=MeshHandleOutput, copy=False, device=CPU)
    with wp.ScopedCapture(device=CPU, apic=True) as capture:
        pass
    with pytest.raises(apic.UnsupportedOperationError, match="holds the id of a native object it does not use"):
        wp.capture_save(capture.graph, str(tmp_path / "g"), outputs={"handles": handles})
    assert not (tmp_path / "g.wrp").exists()
    backing["tag"] = typed_mesh.id  # the typed field's own object: a plain word may hold its number
    wp.capture_save(capture.graph, str(tmp_path / "g"), outputs={"handles": handles})


def test_a_loaded_graph_saved_again_keeps_the_typed_slots(tmp_path):
    """A loaded graph holds the rebuilt mesh as one of its handles: saved again and loaded, the typed field
    holds the newest mesh's id and still queries as eager. (Saved again, a loaded graph's memory goes by the
    untyped rule, as its file keeps no binding's struct type: the tag here is a number no address equals.)"""
    from handle_kernels import MeshHandleOutput

    mesh, backing, handles, _, out, graph = _mesh_scene()
    backing["tag"] = 7
    expected = _closest(handles)
    wp.capture_save(graph, str(tmp_path / "first"), outputs={"handles": handles, "out": out})
    first = wp.capture_load(str(tmp_path / "first"))
    wp.capture_save(first, str(tmp_path / "second"))
    second = wp.capture_load(str(tmp_path / "second"))
    newest = second.recording.handles[0].obj.id
    assert newest not in (mesh.id, first.recording.handles[0].obj.id)
    restored = wp.zeros(N, dtype=MeshHandleOutput, device=CPU)
    second.get_param("handles", restored)
    assert (restored.numpy()["nested"]["mesh_id"] == newest).all()
    assert (restored.numpy()["tag"] == 7).all()
    assert same_bits(_closest(restored), expected)
