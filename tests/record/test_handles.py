"""Native handles in a CPU capture: wp.Mesh, wp.Bvh, wp.HashGrid and wp.Volume.

Each program passes a handle's id to kernels (as a ``wp.uint64`` argument, inside a ``@wp.struct``,
or stored in a ``uint64`` array), moves the geometry with a kernel and refits, rebuilds or builds
the handle inside the capture, then queries it. The same program runs eagerly (the oracle) and
captured: replayed live, and saved right after the capture then loaded and replayed in a fresh
process, where apic builds every handle again over the loaded memory and remaps its id. Outputs
are compared bit for bit after every step.
"""

from __future__ import annotations

import ctypes
import hashlib
import inspect
import os
import subprocess
import sys
import textwrap

import msgpack
import numpy as np
import pytest
import warp as wp

import apic
from apic.format import reader, schema
from apic.record import ops as rec
from wrp_helpers import body_of, unpack_body
from conftest import CPU
from persist_helpers import child_env, run_child, same_bits

pytestmark = [pytest.mark.warp_version, pytest.mark.interpreter]

STEPS = 3
HAS_HANDLE_TYPE = hasattr(wp, "handle")  # warp 1.19: a uint64 that names a handle


# --- kernels ------------------------------------------------------------------------------------------
@wp.struct
class Scene:
    mesh: wp.uint64
    scale: float


@wp.kernel
def drift(points: wp.array(dtype=wp.vec3), step: float):
    i = wp.tid()
    p = points[i]
    points[i] = p + wp.vec3(0.01 * step, 0.02 * wp.sin(p[0] + step), 0.005 * float(i % 3))


@wp.kernel
def mesh_distance(mesh: wp.uint64, queries: wp.array(dtype=wp.vec3), out: wp.array(dtype=float)):
    i = wp.tid()
    q = wp.mesh_query_point(mesh, queries[i], 100.0)
    if q.result:
        out[i] = wp.length(wp.mesh_eval_position(mesh, q.face, q.u, q.v) - queries[i])
    else:
        out[i] = -1.0


@wp.kernel
def mesh_ray_struct(scene: Scene, queries: wp.array(dtype=wp.vec3), out: wp.array(dtype=float)):
    i = wp.tid()
    q = wp.mesh_query_ray(scene.mesh, queries[i] + wp.vec3(0.0, 0.0, 5.0), wp.vec3(0.0, 0.0, -1.0), 100.0)
    out[i] = wp.where(q.result, q.t * scene.scale, -1.0)


@wp.kernel
def mesh_ids_in_memory(meshes: wp.array(dtype=wp.uint64), queries: wp.array(dtype=wp.vec3),
                       out: wp.array2d(dtype=float)):
    m, i = wp.tid()
    q = wp.mesh_query_point_no_sign(meshes[m], queries[i], 100.0)
    out[m, i] = wp.where(q.result, float(q.face) + q.u, -1.0)


@wp.kernel
def bvh_overlaps(bvh: wp.uint64, lowers: wp.array(dtype=wp.vec3), uppers: wp.array(dtype=wp.vec3),
                 out: wp.array(dtype=int)):
    i = wp.tid()
    query = wp.bvh_query_aabb(bvh, lowers[i] - wp.vec3(0.3), uppers[i] + wp.vec3(0.3))
    found = int(0)
    index = int(0)
    while wp.bvh_query_next(query, index):
        found += index + 1
    out[i] = found


@wp.kernel
def grid_neighbours(grid: wp.uint64, points: wp.array(dtype=wp.vec3), radius: float, out: wp.array(dtype=int)):
    i = wp.tid()
    p = points[i]
    query = wp.hash_grid_query(grid, p, radius)
    index = int(0)
    total = int(0)
    while wp.hash_grid_query_next(query, index):
        if wp.length(points[index] - p) <= radius:
            total += index + 1
    out[i] = total


@wp.kernel
def regroup(groups: wp.array(dtype=wp.int32), step: int):
    i = wp.tid()
    groups[i] = (i + step) % 3


if hasattr(wp, "handle"):  # warp 1.19's grouped query (the kernel is never built where the builtin is missing)
    @wp.kernel
    def grid_group_neighbours(grid: wp.uint64, points: wp.array(dtype=wp.vec3), radius: float,
                              groups: wp.array(dtype=wp.int32), out: wp.array(dtype=int)):
        i = wp.tid()
        query = wp.hash_grid_query(grid, points[i], radius, groups[i])
        index = int(0)
        count = int(0)
        while wp.hash_grid_query_next(query, index):
            count += index + 1
        out[i] = count


@wp.kernel
def volume_sample(volume: wp.uint64, points: wp.array(dtype=wp.vec3), out: wp.array(dtype=float)):
    i = wp.tid()
    uvw = wp.volume_world_to_index(volume, points[i])
    out[i] = wp.volume_sample_f(volume, uvw, wp.Volume.LINEAR)


# --- scenes -------------------------------------------------------------------------------------------
def _grid_mesh(n: int = 5, seed: int = 0):
    rng = np.random.default_rng(seed)
    xs, ys = np.meshgrid(np.linspace(0, 1, n), np.linspace(0, 1, n))
    points = np.stack([xs.ravel(), ys.ravel(), 0.1 * rng.random(n * n)], axis=1).astype(np.float32)
    tris = []
    for y in range(n - 1):
        for x in range(n - 1):
            a = y * n + x
            tris += [a, a + 1, a + n, a + 1, a + n + 1, a + n]
    return points, np.array(tris, dtype=np.int32)


def _queries(count: int = 24, seed: int = 1) -> np.ndarray:
    return (np.random.default_rng(seed).random((count, 3)) * [1.0, 1.0, 0.5]).astype(np.float32)


def vec3s(values):
    return wp.array(values, dtype=wp.vec3, device=CPU)


def mesh_state():
    points, tris = _grid_mesh()
    pts = vec3s(points)
    mesh = wp.Mesh(points=pts, indices=wp.array(tris, dtype=wp.int32, device=CPU))
    points2, tris2 = _grid_mesh(4, seed=3)
    mesh2 = wp.Mesh(points=vec3s(points2 + 0.25), indices=wp.array(tris2, dtype=wp.int32, device=CPU))
    scene = Scene()
    scene.mesh = mesh.id
    scene.scale = 2.0
    return {
        "mesh": mesh, "mesh2": mesh2, "points": pts, "scene": scene, "queries": vec3s(_queries()),
        "ids": wp.array([mesh.id, mesh2.id], dtype=wp.uint64, device=CPU),
        "dist": wp.zeros(24, dtype=float, device=CPU), "ray": wp.zeros(24, dtype=float, device=CPU),
        "faces": wp.zeros((2, 24), dtype=float, device=CPU), "step": wp.zeros(1, dtype=float, device=CPU),
    }


def mesh_program(s, step: int):
    wp.launch(drift, dim=s["points"].shape[0], inputs=[s["points"], float(step)], device=CPU)
    s["mesh"].refit()
    wp.launch(mesh_distance, dim=24, inputs=[s["mesh"].id, s["queries"], s["dist"]], device=CPU)
    wp.launch(mesh_ray_struct, dim=24, inputs=[s["scene"], s["queries"], s["ray"]], device=CPU)
    wp.launch(mesh_ids_in_memory, dim=(2, 24), inputs=[s["ids"], s["queries"], s["faces"]], device=CPU)


def bvh_state():
    rng = np.random.default_rng(5)
    centers = rng.random((32, 3)).astype(np.float32) * 3.0
    lowers, uppers = vec3s(centers - 0.2), vec3s(centers + 0.2)
    return {"bvh": wp.Bvh(lowers, uppers), "lowers": lowers, "uppers": uppers,
            "hits": wp.zeros(32, dtype=int, device=CPU)}


def bvh_program(s, step: int):
    for arr in (s["lowers"], s["uppers"]):
        wp.launch(drift, dim=32, inputs=[arr, float(step)], device=CPU)
    if step % 2:
        s["bvh"].rebuild()
    else:
        s["bvh"].refit()
    wp.launch(bvh_overlaps, dim=32, inputs=[s["bvh"].id, s["lowers"], s["uppers"], s["hits"]], device=CPU)


def grid_state(build_before: bool = True):
    points = vec3s(np.random.default_rng(7).random((64, 3)).astype(np.float32) * 2.0)
    grid = wp.HashGrid(8, 8, 8, device=CPU)
    if build_before:
        grid.build(points, 0.3)
    return {"grid": grid, "points": points, "near": wp.zeros(64, dtype=int, device=CPU)}


def grid_program(s, step: int):
    wp.launch(drift, dim=64, inputs=[s["points"], float(step)], device=CPU)
    s["grid"].build(s["points"], 0.3)
    wp.launch(grid_neighbours, dim=64, inputs=[s["grid"].id, s["points"], 0.3, s["near"]], device=CPU)


def grid_query_only(s, step: int):
    """A grid built once before the capture and only queried in it: its build must be redone on load."""
    wp.launch(grid_neighbours, dim=64, inputs=[s["grid"].id, s["points"], 0.3, s["near"]], device=CPU)


_VOLUME = {}


def volume_state():
    import warp.examples

    if "bytes" not in _VOLUME:
        with open(os.path.join(warp.examples.get_asset_directory(), "rocks.nvdb"), "rb") as f:
            _VOLUME["bytes"] = f.read()
    import io

    volume = wp.Volume.load_from_nvdb(io.BytesIO(_VOLUME["bytes"]), device=CPU)
    lo, hi = np.array([-20.0, -2.0, -20.0]), np.array([20.0, 10.0, 20.0])
    points = (lo + np.random.default_rng(9).random((48, 3)) * (hi - lo)).astype(np.float32)
    return {"volume": volume, "points": vec3s(points), "value": wp.zeros(48, dtype=float, device=CPU)}


def volume_program(s, step: int):
    wp.launch(drift, dim=48, inputs=[s["points"], float(step)], device=CPU)
    wp.launch(volume_sample, dim=48, inputs=[s["volume"].id, s["points"], s["value"]], device=CPU)


# --- the same methods' natives called directly, as a library would (upstream records them at the native layer)
def _core():
    from apic import _compat

    return _compat.runtime().core


def mesh_direct_program(s, step: int):
    wp.launch(drift, dim=s["points"].shape[0], inputs=[s["points"], float(step)], device=CPU)
    _core().wp_mesh_refit_host(s["mesh"].id)
    wp.launch(mesh_distance, dim=24, inputs=[s["mesh"].id, s["queries"], s["dist"]], device=CPU)


def bvh_direct_program(s, step: int):
    for arr in (s["lowers"], s["uppers"]):
        wp.launch(drift, dim=32, inputs=[arr, float(step)], device=CPU)
    if step % 2:
        _core().wp_bvh_rebuild_host(s["bvh"].id, 0)  # the SAH constructor, the CPU default
    else:
        _core().wp_bvh_refit_host(s["bvh"].id)
    wp.launch(bvh_overlaps, dim=32, inputs=[s["bvh"].id, s["lowers"], s["uppers"], s["hits"]], device=CPU)


def grid_direct_program(s, step: int):
    wp.launch(drift, dim=64, inputs=[s["points"], float(step)], device=CPU)
    grid, points = s["grid"], s["points"]
    update = _core().wp_hash_grid_update_host
    extra = (None,) * (len(getattr(update, "__wrapped__", update).argtypes) - 4)  # warp 1.19 adds the groups
    update(grid.id, grid._type_id, 0.3, ctypes.byref(points.__ctype__()), *extra)
    wp.launch(grid_neighbours, dim=64, inputs=[grid.id, points, 0.3, s["near"]], device=CPU)


HAS_GROUPS = "groups" in inspect.signature(wp.HashGrid.build).parameters  # warp 1.19: grouped hash grids


def grouped_state():
    s = grid_state(build_before=False)
    s["groups"] = wp.array(np.arange(64, dtype=np.int32) % 3, dtype=wp.int32, device=CPU)
    s["grid"].build(s["points"], 0.3, s["groups"])  # eagerly first: what a load builds the grid from
    return s


def grouped_program(s, step: int):
    wp.launch(drift, dim=64, inputs=[s["points"], float(step)], device=CPU)
    wp.launch(regroup, dim=64, inputs=[s["groups"], step], device=CPU)
    s["grid"].build(s["points"], 0.3, s["groups"])
    wp.launch(grid_group_neighbours, dim=64, inputs=[s["grid"].id, s["points"], 0.3, s["groups"], s["near"]],
              device=CPU)


CASES = {
    "mesh": (mesh_state, mesh_program, ("dist", "ray", "faces")),
    "bvh": (bvh_state, bvh_program, ("hits",)),
    "hash_grid": (grid_state, grid_program, ("near",)),
    "hash_grid_built_before": (grid_state, grid_query_only, ("near",)),
    "hash_grid_built_only_in_capture": (lambda: grid_state(build_before=False), grid_program, ("near",)),
    "volume": (volume_state, volume_program, ("value",)),
    "mesh_direct": (mesh_state, mesh_direct_program, ("dist",)),
    "bvh_direct": (bvh_state, bvh_direct_program, ("hits",)),
    "hash_grid_direct": (grid_state, grid_direct_program, ("near",)),
    **({"hash_grid_groups": (grouped_state, grouped_program, ("near",))} if HAS_GROUPS else {}),
}


def _outputs(state, names) -> dict:
    return {name: state[name].numpy().copy() for name in names}


def _check(expected: dict, actual: dict, what: str) -> None:
    for name, value in expected.items():
        assert same_bits(value, actual[name]), f"{what}: '{name}' differs from eager"


def _eager(make, program, names) -> list[dict]:
    state = make()
    results = []
    for step in range(STEPS):
        program(state, step)
        results.append(_outputs(state, names))
    return results


def _captured(make, program):
    """A fresh state and a graph of ``STEPS`` steps (each step records its own step number)."""
    state = make()
    with wp.ScopedCapture(device=CPU, apic=True) as capture:
        for step in range(STEPS):
            program(state, step)
    return state, capture.graph


# --- eager vs replay, live and after a save and a load in a fresh process ---------------------------------
@pytest.mark.parametrize("case", list(CASES))
def test_handles_replay_and_fresh_process(case, tmp_path):
    make, program, names = CASES[case]
    expected = _eager(make, program, names)[-1]
    state, graph = _captured(make, program)
    assert graph.recording.handles, "the capture recorded no handle"
    for name in names:
        assert not state[name].numpy().any(), "the capture executed work"

    path = str(tmp_path / case)
    wp.capture_save(graph, path, outputs={name: state[name] for name in names})
    wp.capture_launch(graph)
    _check(expected, _outputs(state, names), "live replay")

    job = {"path": path, "mode": "file", "iters": 1, "get": {n: str(tmp_path / f"{n}.npy") for n in names}}
    run_child(job, tmp_path)
    _check(expected, {n: np.load(tmp_path / f"{n}.npy") for n in names}, "fresh-process replay")


def test_replayed_graph_equals_eager_every_step():
    """One step per graph, replayed repeatedly: each replay equals the matching eager step."""
    make, program, names = CASES["mesh"]
    state = make()
    eager = []
    for _ in range(STEPS):
        program(state, 1)
        eager.append(_outputs(state, names))
    state = make()
    with wp.ScopedCapture(device=CPU) as capture:
        program(state, 1)
    for step in range(STEPS):
        wp.capture_launch(capture.graph)
        _check(eager[step], _outputs(state, names), f"replay {step + 1}")


def test_loaded_graph_rebuilds_and_remaps(tmp_path):
    """In-process load: new handle objects with new ids, written into blobs and into saved memory."""
    make, program, names = CASES["mesh"]
    state, graph = _captured(make, program)
    wp.capture_save(graph, str(tmp_path / "m"))
    loaded = wp.capture_load(str(tmp_path / "m"))
    old_ids = {int(h.obj.id) for h in graph.recording.handles}
    new_ids = {int(h.obj.id) for h in loaded.recording.handles}
    assert len(new_ids) == len(old_ids) == 2 and not old_ids & new_ids
    ids_region = next(r for r in loaded.recording.regions if r.array is not None and r.array.dtype == "uint64")
    stored = np.ctypeslib.as_array((ctypes.c_uint64 * 2).from_address(loaded.region_addresses[ids_region.id]))
    assert set(stored.tolist()) == new_ids

    # the file holds no live address, and declares the version that has handles
    with open(tmp_path / "m.wrp", "rb") as f:
        data = f.read()
    assert schema.HEADER.unpack_from(data)[1] == schema.HANDLES_VERSION
    words = np.frombuffer(data[: len(data) // 8 * 8], dtype=np.uint64)
    assert not np.isin(words, np.array(sorted(old_ids), dtype=np.uint64)).any()

    # saving the loaded graph again keeps working (its handles are the rebuilt objects)
    wp.capture_save(loaded, str(tmp_path / "again"))
    again = wp.capture_load(str(tmp_path / "again"))
    assert [h.kind for h in again.recording.handles] == ["Mesh", "Mesh"]


def test_graph_without_handles_stays_version_1(tmp_path):
    a = wp.zeros(4, dtype=float, device=CPU)
    with wp.ScopedCapture(device=CPU, apic=True) as capture:
        a.fill_(2.0)
    wp.capture_save(capture.graph, str(tmp_path / "plain"))
    with open(tmp_path / "plain.wrp", "rb") as f:
        assert schema.HEADER.unpack_from(f.read())[1] == schema.BASE_VERSION


@pytest.mark.skipif(not HAS_HANDLE_TYPE, reason="wp.handle exists from warp-lang 1.19")
def test_wp_handle_typed_argument(tmp_path):
    @wp.kernel
    def by_handle(mesh: wp.handle, queries: wp.array(dtype=wp.vec3), out: wp.array(dtype=float)):
        i = wp.tid()
        q = wp.mesh_query_point_no_sign(mesh, queries[i], 100.0)
        out[i] = wp.where(q.result, float(q.face), -1.0)

    s = mesh_state()
    wp.launch(by_handle, dim=24, inputs=[s["mesh"].id, s["queries"], s["dist"]], device=CPU)
    expected = s["dist"].numpy().copy()
    s = mesh_state()
    with wp.ScopedCapture(device=CPU, apic=True) as capture:
        wp.launch(by_handle, dim=24, inputs=[s["mesh"].id, s["queries"], s["dist"]], device=CPU)
    wp.capture_save(capture.graph, str(tmp_path / "h"), outputs={"dist": s["dist"]})
    run_child({"path": str(tmp_path / "h"), "mode": "file", "iters": 1, "get": {"dist": str(tmp_path / "d.npy")}},
              tmp_path)
    assert same_bits(expected, np.load(tmp_path / "d.npy"))


# --- fail closed --------------------------------------------------------------------------------------------
def test_building_a_mesh_inside_a_capture_is_refused():
    points, tris = _grid_mesh()
    pts, idx = vec3s(points), wp.array(tris, dtype=wp.int32, device=CPU)
    with pytest.raises(apic.UnsupportedOperationError, match=r"wp\.Mesh\(\.\.\.\) inside a CPU capture"):
        with wp.ScopedCapture(device=CPU):
            wp.Mesh(points=pts, indices=idx)


def test_direct_handle_call_outside_warp_memory_or_on_no_object_is_refused():
    """A direct hash grid build whose points are NumPy memory (nothing the graph could keep alive), or a refit
    of an id that is no live object, is refused naming the native."""
    grid = wp.HashGrid(4, 4, 4, device=CPU)
    host = np.zeros((8, 3), dtype=np.float32)
    desc = wp.array(host, dtype=wp.vec3, device=CPU, copy=False).__ctype__()  # a view of the NumPy memory
    update = _core().wp_hash_grid_update_host
    extra = (None,) * (len(getattr(update, "__wrapped__", update).argtypes) - 4)
    with pytest.raises(apic.UnsupportedOperationError, match="wp_hash_grid_update_host.*argument 3.*not inside"):
        with wp.ScopedCapture(device=CPU):
            update(grid.id, grid._type_id, 0.3, ctypes.byref(desc), *extra)
    with pytest.raises(apic.CaptureError, match="wp_bvh_refit_host: 0x1 is not the id of a live Warp object"):
        with wp.ScopedCapture(device=CPU):
            _core().wp_bvh_refit_host(1)


def _saved_doc(tmp_path, case="mesh"):
    make, program, _ = CASES[case]
    _, graph = _captured(make, program)
    wp.capture_save(graph, str(tmp_path / case))
    with open(tmp_path / f"{case}.wrp", "rb") as f:
        data = f.read()
    return unpack_body(data)


def _encode(doc) -> bytes:
    from apic.format import writer

    return writer.encode(doc)


def _handle_over_array(doc) -> None:
    """Move a kernel argument's handle id onto one of its array descriptors."""
    args = next(op["args"] for op in doc["ops"] if op["kind"] == int(rec.OpKind.LAUNCH) and op["args"].get("handles"))
    args["handles"][0][0] = args["arrays"][0][0]


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda d: d["handles"][0].update(kind="Teapot"), "is not one of"),
        (lambda d: d["handles"][0]["arrays"][0].__setitem__(4, 1 << 30), "outside region"),
        (lambda d: d["handles"][0]["arrays"][0].__setitem__(3, "float64"), "unknown handle array dtype"),
        (lambda d: d["handles"][0]["options"].update(bvh_constructor="magic"), "invalid value"),
        (lambda d: d["handles"][0].update(arrays=[]), "without points, indices"),
        (lambda d: d["handle_slots"].append([0, 1 << 40, 0]), "outside region"),
        (lambda d: next(op for op in d["ops"] if op["kind"] == int(rec.OpKind.HANDLE_CALL)).update(handle=99),
         "outside"),
        (lambda d: next(op for op in d["ops"]
                        if op["kind"] == int(rec.OpKind.HANDLE_CALL)).update(fn="mesh_destroy_host"),
         "not a native handle method"),
        (lambda d: _handle_over_array(d), "overlaps an array descriptor"),
    ],
    ids=["kind", "array-length", "dtype", "option", "arrays", "slot", "call-handle", "call-fn", "blob-handle"],
)
def test_corrupt_handle_fields_are_refused(tmp_path, edit, message):
    doc = _saved_doc(tmp_path)
    edit(doc)
    with pytest.raises(apic.FormatError, match=message):
        reader.read(_encode(doc))


@pytest.mark.skipif(not HAS_GROUPS, reason="this warp-lang's HashGrid.build takes no groups")
def test_corrupt_hash_grid_groups_are_refused(tmp_path):
    """A build's groups are an int32 array descriptor with as many entries as points, inside a region."""
    import copy
    import struct

    doc = _saved_doc(tmp_path, "hash_grid_groups")
    at = next(i for i, op in enumerate(doc["ops"]) if op["kind"] == int(rec.OpKind.HANDLE_CALL) and op["groups"])
    reader.read(_encode(doc))  # the file itself is valid
    for edit, message in [
        (lambda op: op.update(groups=[0, 0]), "groups"),  # a ref, as an older apic wrote it
        (lambda op: op["groups"].update(data=op["groups"]["data"][:16] + struct.pack("<i", 63)
                                        + op["groups"]["data"][20:]), "as many int32 as points"),
        (lambda op: op["groups"].update(data=op["groups"]["data"][:32] + struct.pack("<i", 1 << 20)
                                        + op["groups"]["data"][36:]), "reaches bytes"),
    ]:
        bad = copy.deepcopy(doc)
        edit(bad["ops"][at])
        with pytest.raises(apic.FormatError, match=message):
            reader.read(_encode(bad))


def test_version_1_file_with_handles_is_refused(tmp_path):
    doc = _saved_doc(tmp_path)
    doc["format_version"] = 1
    body = msgpack.packb(doc, use_bin_type=True)
    data = schema.HEADER.pack(schema.MAGIC, 1, 0, len(body), hashlib.sha256(body).digest()) + body
    with pytest.raises(apic.FormatError, match="native handles in a format version 1 file"):
        reader.read(data)


def test_mesh_indices_out_of_range_are_refused_before_the_build(tmp_path):
    make, program, _ = CASES["mesh"]
    _, graph = _captured(make, program)
    wp.capture_save(graph, str(tmp_path / "m"))
    saved = reader.read(open(tmp_path / "m.wrp", "rb").read())
    mesh = saved.recording.handles[0]
    indices = dict(mesh.arrays)["indices"]
    contents = list(saved.contents)
    region = bytearray(contents[indices.start.region])
    region[indices.start.offset : indices.start.offset + 4] = (10_000).to_bytes(4, "little", signed=True)
    doc = body_of(tmp_path / "m.wrp")
    doc["regions"][indices.start.region]["contents"] = bytes(region)
    with pytest.raises(apic.FormatError, match="mesh triangle indices"):
        wp.capture_load_from_bytes(_encode(doc), _modules(tmp_path / "m_modules"))


def test_volume_buffer_must_be_nanovdb(tmp_path):
    doc = _saved_doc(tmp_path, "volume")
    doc["handles"][0]["data"] = b"NotAVDB!" + bytes(64)
    with pytest.raises(apic.FormatError, match="not a NanoVDB grid buffer"):
        reader.read(_encode(doc))


def _modules(folder) -> dict:
    return {name: open(os.path.join(folder, name), "rb").read() for name in os.listdir(folder)}



def test_handles_made_before_import_apic(tmp_path):
    """Objects made before ``import apic`` are found (once) by a sweep of the garbage collector."""
    script = tmp_path / "before.py"
    script.write_text(
        textwrap.dedent(
            """
            import sys
            import numpy as np
            import warp as wp
            wp.config.quiet = True

            points = wp.array(np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0]], np.float32), dtype=wp.vec3, device="cpu")
            mesh = wp.Mesh(points=points, indices=wp.array([0, 1, 2], dtype=wp.int32, device="cpu"))
            import apic

            @wp.kernel
            def face_u(mesh: wp.uint64, q: wp.array(dtype=wp.vec3), out: wp.array(dtype=float)):
                i = wp.tid()
                hit = wp.mesh_query_point_no_sign(mesh, q[i], 10.0)
                out[i] = hit.u + hit.v

            q = wp.array(np.array([[0.2, 0.3, 1.0], [0.6, 0.1, -1.0]], np.float32), dtype=wp.vec3, device="cpu")
            out = wp.zeros(2, dtype=float, device="cpu")
            wp.launch(face_u, dim=2, inputs=[mesh.id, q, out], device="cpu")
            expected = out.numpy().copy()
            out.zero_()
            with wp.ScopedCapture(device="cpu", apic=True) as capture:
                wp.launch(face_u, dim=2, inputs=[mesh.id, q, out], device="cpu")
            wp.capture_save(capture.graph, sys.argv[1], outputs={"out": out})
            loaded = wp.capture_load(sys.argv[1])
            wp.capture_launch(loaded)
            result = wp.zeros(2, dtype=float, device="cpu")
            loaded.get_param("out", result)
            assert np.array_equal(expected.view(np.uint32), result.numpy().view(np.uint32)), (expected, result)
            assert loaded.recording.handles[0].obj.id != mesh.id
            print("ok")
            """
        )
    )
    result = subprocess.run([sys.executable, str(script), str(tmp_path / "g")], env=child_env(),
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0 and result.stdout.strip().endswith("ok"), result.stderr


def test_a_handle_warp_cannot_build_is_a_format_error(tmp_path):
    """What Warp's own constructor refuses (a Mesh BVH leaf size of 0 with the SAH builder) is a FormatError."""
    make, program, _ = CASES["mesh"]
    _, graph = _captured(make, program)
    wp.capture_save(graph, str(tmp_path / "m"))
    doc = body_of(tmp_path / "m.wrp")
    doc["handles"][0]["options"].update(bvh_constructor="sah", bvh_leaf_size=0)
    with pytest.raises(apic.FormatError, match=r"handles\[0\]: Warp could not build the wp\.Mesh"):
        wp.capture_load_from_bytes(_encode(doc), _modules(tmp_path / "m_modules"))
