"""What a kernel expects comes from the modules folder, not from the ``.wrp``; index values are checked.

Fuzz findings #15-#17 (docs/RELIABILITY.md): with honest modules, a ``.wrp`` that names another kernel
of the same module, hands a Mesh argument a HashGrid's id, or moves an array onto a Mesh's triangle
indices or an index buffer onto float data must not load and crash at replay. So:

* ``capture_save`` appends a kernel manifest to each module's object (and source) file
  (``apic.format.manifest``) and every launch is checked at load against the one carried by the file
  whose code runs; a file of 2026-11-22 to -25 (a ``.kernels`` file beside the binary, kept in
  ``tests/data/golden``) that omits it while the folder holds one is refused, and a file from before
  manifests (no manifest in the file or the folder) loads as before;
* a loaded graph checks each index buffer before the op that reads it, and a Mesh's indices after
  each op that may write them (``apic.ReplayIndexError``), in the Numba and the reference interpreter.
"""

from __future__ import annotations

import hashlib
import os
import shutil

import msgpack
import numpy as np
import pytest
import warp as wp

import apic
import fuzz_wrp
from apic.format import manifest, schema, writer
from apic.replay import program
from apic.replay.cpu import reference
from apic.replay.cpu import table as tbl
from wrp_helpers import body_of, unpack_body
from persist_helpers import TESTS

pytestmark = [pytest.mark.warp_version, pytest.mark.interpreter]


@pytest.fixture(scope="module")
def seeds(tmp_path_factory):
    return fuzz_wrp.make_seeds(str(tmp_path_factory.mktemp("manifest_seeds")))


def edited(seeds, name, tmp_path, edit, keep_manifests=True):
    """The seed ``name`` with ``edit(doc)`` applied, saved beside a copy of its modules folder."""
    with open(seeds[name], "rb") as f:
        doc = unpack_body(f.read())
    edit(doc)
    shutil.copytree(seeds[name][: -len(".wrp")] + "_modules", tmp_path / "g_modules")
    if not keep_manifests:
        for file in os.listdir(tmp_path / "g_modules"):
            if file.endswith(".kernels"):
                os.unlink(tmp_path / "g_modules" / file)
    (tmp_path / "g.wrp").write_bytes(writer.encode(doc))
    return str(tmp_path / "g.wrp")


def launch_of(doc, kernel_key):
    k = next(i for i, entry in enumerate(doc["kernels"]) if entry["key"] == kernel_key)
    return next(op for op in doc["ops"] if op["kind"] == schema.WireOp.LAUNCH and op["kernel"] == k)


def test_save_writes_one_file_per_module_carrying_its_manifest(seeds):
    """Upstream's layout: ``<stem>_modules/`` holds one file per module (the manifest travels inside it)."""
    with open(seeds["sim"], "rb") as f:
        doc = unpack_body(f.read())
    folder = seeds["sim"][: -len(".wrp")] + "_modules"
    assert sorted(os.listdir(folder)) == sorted(module["file"] for module in doc["modules"])
    for module in doc["modules"]:
        assert "manifest" not in module
        data = (open(os.path.join(folder, module["file"]), "rb")).read()
        bare, carried = manifest.carried(data, module["file"])
        assert carried and msgpack.unpackb(carried)["module_sha256"] == hashlib.sha256(bare).hexdigest()


def test_the_module_binaries_alone_load_from_bytes_and_are_checked(seeds, tmp_path):
    """``capture_load_from_bytes(data, modules={"m.o": ...})`` with the module binaries alone, as code written
    for upstream's layout passes them: it loads, and a forged launch is still refused."""
    path = edited(seeds, "sim", tmp_path, lambda doc: None)
    modules = {p: (tmp_path / "g_modules" / p).read_bytes() for p in os.listdir(tmp_path / "g_modules")}
    assert all(name.endswith(".o") for name in modules)
    wp.capture_launch(wp.capture_load_from_bytes(open(path, "rb").read(), modules))

    def edit(doc):
        doc["kernels"][0]["symbol"] = "apic_never_launched_cpu_forward"
    forged = edited(seeds, "sim", tmp_path / "forged", edit)
    with pytest.raises(apic.FormatError, match="is not a kernel the module's manifest lists"):
        wp.capture_load_from_bytes(open(forged, "rb").read(), modules)


def test_another_kernel_of_the_module_is_refused(seeds, tmp_path):
    """#16: kernels[0].symbol set to another kernel of the same honest module."""
    def edit(doc):
        others = [k["symbol"] for k in doc["kernels"] if k["module"] == doc["kernels"][0]["module"]
                  and k["symbol"] != doc["kernels"][0]["symbol"] and not k["adjoint"]]
        doc["kernels"][0]["symbol"] = others[0]
        doc["kernels"][0].pop("args_size", None)  # a forger edits the .wrp's own size record too
    with pytest.raises(apic.FormatError, match="manifest"):
        wp.capture_load(edited(seeds, "sim", tmp_path, edit))


def test_a_symbol_the_graph_never_launched_is_refused(seeds, tmp_path):
    def edit(doc):
        doc["kernels"][0]["symbol"] = "apic_never_launched_cpu_forward"
    with pytest.raises(apic.FormatError, match="is not a kernel the module's manifest lists"):
        wp.capture_load(edited(seeds, "sim", tmp_path, edit))


def _golden(tmp_path, edit, keep_manifests=True) -> str:
    """A copy of this warp-lang's format 1 golden file, written when manifests were files of their own
    (``.kernels``), with ``edit(doc)`` applied."""
    folder = os.path.join(TESTS, "data", "golden", f"v1-warp{wp.config.version}")
    with open(os.path.join(folder, "graph.wrp"), "rb") as f:
        doc = unpack_body(f.read())
    assert all("manifest" in module for module in doc["modules"])
    edit(doc)
    shutil.copytree(os.path.join(folder, "graph_modules"), tmp_path / "g_modules")
    if not keep_manifests:
        for file in os.listdir(tmp_path / "g_modules"):
            if file.endswith(".kernels"):
                os.unlink(tmp_path / "g_modules" / file)
    (tmp_path / "g.wrp").write_bytes(writer.encode(doc))
    return str(tmp_path / "g.wrp")


def _without_manifest_entries(doc):
    for module in doc["modules"]:
        module.pop("manifest")


def test_omitting_a_manifest_file_is_refused_when_the_folder_holds_it(tmp_path):
    path = _golden(tmp_path, _without_manifest_entries)
    with pytest.raises(apic.FormatError, match="holds the kernel manifest"):
        wp.capture_load(path)
    data = open(tmp_path / "g.wrp", "rb").read()
    modules = {p: open(tmp_path / "g_modules" / p, "rb").read() for p in os.listdir(tmp_path / "g_modules")}
    with pytest.raises(apic.FormatError, match="holds the kernel manifest"):
        wp.capture_load_from_bytes(data, modules)


def test_a_file_from_before_manifests_loads_only_when_allowed(tmp_path, monkeypatch):
    """No manifest in the file nor in the folder: the shape of a file saved before manifests existed, and of
    one whose manifests were cut off. Refused, unless the caller allows such files (then loaded unchecked)."""
    path = _golden(tmp_path, _without_manifest_entries, keep_manifests=False)
    with pytest.raises(apic.FormatError, match="carries no kernel manifest"):
        wp.capture_load(path)
    monkeypatch.setattr("apic.loading.allow_files_without_manifests", True)
    graph = wp.capture_load(path)
    wp.capture_launch(graph)


def test_an_edited_manifest_is_refused(seeds, tmp_path):
    path = edited(seeds, "sim", tmp_path, lambda doc: None)
    name = next(n for n in os.listdir(tmp_path / "g_modules") if n.endswith(".o"))
    data = bytearray((tmp_path / "g_modules" / name).read_bytes())
    data[-20] ^= 1  # inside the carried manifest
    (tmp_path / "g_modules" / name).write_bytes(bytes(data))
    with pytest.raises(apic.FormatError, match="does not match the SHA-256"):
        wp.capture_load(path)
    old = _golden(tmp_path / "old", lambda doc: None)
    (kernels,) = [n for n in os.listdir(tmp_path / "old" / "g_modules") if n.endswith(".kernels")]
    data = bytearray((tmp_path / "old" / "g_modules" / kernels).read_bytes())
    data[-1] ^= 1
    (tmp_path / "old" / "g_modules" / kernels).write_bytes(bytes(data))
    with pytest.raises(apic.FormatError, match="does not match the SHA-256"):
        wp.capture_load(old)


@pytest.mark.parametrize("slot", [0, 1])
def test_a_handle_of_another_kind_is_refused(seeds, tmp_path, slot):
    """#15: the Mesh argument given the HashGrid's id, or the HashGrid argument the Mesh's."""
    def edit(doc):
        op = launch_of(doc, "_mesh_and_grid")
        op["args"]["handles"][slot][1] = 1 - op["args"]["handles"][slot][1]
    with pytest.raises(apic.FormatError, match=r"holds a (HashGrid|Mesh) id; the kernel takes (Mesh|HashGrid)"):
        wp.capture_load(edited(seeds, "handles", tmp_path, edit))


def test_a_handle_word_without_a_handle_is_refused(seeds, tmp_path):
    def edit(doc):
        launch_of(doc, "_mesh_and_grid")["args"]["handles"].pop(0)  # the word stays 0: a null Mesh
    with pytest.raises(apic.FormatError, match="must hold the id of a Mesh"):
        wp.capture_load(edited(seeds, "handles", tmp_path, edit))


def test_handle_call_of_another_kind_is_refused(seeds, tmp_path):
    def edit(doc):
        refit = next(op for op in doc["ops"]
                     if op["kind"] == schema.WireOp.HANDLE_CALL and op["fn"] == "mesh_refit_host")
        refit["handle"] = 1  # the HashGrid
    with pytest.raises(apic.FormatError, match="is a Mesh method, but handles"):
        wp.capture_load(edited(seeds, "handles", tmp_path, edit))


def test_an_array_moved_onto_mesh_indices_is_refused(seeds, tmp_path):
    """#17 (launch argument): the kernel's output array moved onto the Mesh's triangle indices."""
    def edit(doc):
        mesh = next(h for h in doc["handles"] if h["kind"] == "Mesh")
        indices = next(a for a in mesh["arrays"] if a[0] == "indices")
        launch_of(doc, "_mesh_and_grid")["args"]["relocs"][1][1] = indices[1]
    with pytest.raises(apic.FormatError, match="lies in a Mesh's triangle indices"):
        wp.capture_load(edited(seeds, "handles", tmp_path, edit))


def index_buffer_on_float_data(doc):
    """The indexed fill's index pointer moved onto the float data the copy before it reads."""
    fill = next(op for op in doc["ops"] if op["kind"] == schema.WireOp.ARRAY_FILL)
    copy_op = next(op for op in doc["ops"] if op["kind"] == schema.WireOp.ARRAY_COPY)
    fill["dst"]["relocs"][1][1] = copy_op["src"]["relocs"][0][1]


def test_indices_out_of_range_stop_the_replay(seeds, tmp_path):
    """#17 (index buffer): the load passes (index values are data), the replay stops before the fill."""
    graph = wp.capture_load(edited(seeds, "indexed", tmp_path, index_buffer_on_float_data))
    with pytest.raises(apic.ReplayIndexError, match="index outside its array"):
        wp.capture_launch(graph)
    limits = program.replay_limits()
    status = reference.run_table(graph.program.table, 1, limits, graph.program.loops)
    assert status < 0 and graph.program.table[-status - 1, 0] == tbl.OP_CHECK_INDICES


def test_an_honest_indexed_graph_replays_as_eagerly(seeds, tmp_path):
    path = edited(seeds, "indexed", tmp_path, lambda doc: None)
    graph = wp.capture_load(path)
    checks = int(np.sum(graph.program.table[:, 0] == tbl.OP_CHECK_INDICES))
    assert checks == 1  # one buffer, checked before the launch; the copy and the fill read it unchanged
    wp.capture_launch(graph)
    out = graph.param_numpy("dst")
    src = np.arange(16, dtype=np.float32)
    np.testing.assert_array_equal(out, src[[3, 1, 4, 1, 5, 9]] * 2.0)


def test_mesh_indices_written_out_of_range_stop_the_replay(tmp_path):
    """An op that writes a Mesh's indices (here a copy from a bound input) is followed by a check of
    their values in a loaded graph: bad indices stop the replay before the refit reads them."""
    points = wp.array(np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0], [1, 1, 0]], np.float32), dtype=wp.vec3)
    indices = wp.array(np.array([0, 1, 2, 1, 3, 2], np.int32), dtype=wp.int32)
    mesh = wp.Mesh(points=points, indices=indices)
    new = wp.array(np.array([0, 1, 2, 1, 3, 2], np.int32), dtype=wp.int32)
    with wp.ScopedCapture(device="cpu", apic=True) as cap:
        wp.copy(indices, new)
        mesh.refit()
    wp.capture_save(cap.graph, str(tmp_path / "m"), inputs={"new": new})
    graph = wp.capture_load(str(tmp_path / "m"))
    wp.capture_launch(graph)  # honest indices pass
    graph.set_param("new", np.array([0, 1, 2, 1, 3, 1 << 28], np.int32))
    with pytest.raises(apic.ReplayIndexError):
        wp.capture_launch(graph)


def test_source_fallback_is_bound_to_the_manifest(tmp_path):
    """Saved with source_fallback, the source file carries the manifest too: a load that compiles it
    (here: the object file is missing) still checks every launch against it."""
    import persist_kernels as pk

    sim = pk.Sim(0)
    wp.capture_save(pk.capture(sim), str(tmp_path / "s"), inputs=sim.inputs(), outputs=sim.outputs(),
                    source_fallback=True)
    folder = tmp_path / "s_modules"
    for name in os.listdir(folder):
        if name.endswith(".o"):
            os.unlink(folder / name)
    wp.capture_launch(wp.capture_load(str(tmp_path / "s")))  # compiled from the source, checked
    doc = body_of(tmp_path / "s.wrp")
    doc["kernels"][0]["symbol"] = "apic_never_launched_cpu_forward"
    (tmp_path / "s.wrp").write_bytes(writer.encode(doc))
    with pytest.raises(apic.FormatError, match="is not a kernel the module's manifest lists"):
        wp.capture_load(str(tmp_path / "s"))


def test_inspect_predicts_the_manifest_refusal(seeds, tmp_path):
    from apic.cli import inspect_wrp

    def edit(doc):
        launch_of(doc, "_mesh_and_grid")["args"]["handles"][0][1] = 1
    info = inspect_wrp.describe(edited(seeds, "handles", tmp_path, edit))
    assert not info["loads_here"]["ok"] and "holds a HashGrid id" in info["loads_here"]["reason"]


@wp.kernel
def _gather(src: wp.indexedarray(dtype=float), dst: wp.array(dtype=float)):
    i = wp.tid()
    dst[i] = src[i]


def test_indices_written_between_two_readers_are_checked_again(tmp_path):
    """The second launch over the same indexed array is checked again: a copy wrote its indices."""
    src = wp.array(np.arange(8, dtype=np.float32))
    idx = wp.array(np.array([7, 6, 5, 4], np.int32))
    new = wp.array(np.array([0, 1, 2, 3], np.int32))
    dst = wp.zeros(4, dtype=float)
    with wp.ScopedCapture(device="cpu", apic=True) as cap:
        wp.launch(_gather, dim=4, inputs=[wp.indexedarray(src, [idx]), dst])
        wp.copy(idx, new)
        wp.launch(_gather, dim=4, inputs=[wp.indexedarray(src, [idx]), dst])
    wp.capture_save(cap.graph, str(tmp_path / "g"), inputs={"new": new}, outputs={"dst": dst})
    graph = wp.capture_load(str(tmp_path / "g"))
    assert int(np.sum(graph.program.table[:, 0] == tbl.OP_CHECK_INDICES)) == 2
    wp.capture_launch(graph)
    np.testing.assert_array_equal(graph.param_numpy("dst"), [0, 1, 2, 3])
    graph.set_param("new", np.array([0, 1, 2, 1 << 30], np.int32))
    with pytest.raises(apic.ReplayIndexError):
        wp.capture_launch(graph)


@wp.kernel
def _query_meshes(meshes: wp.array(dtype=wp.uint64), grid: wp.uint64, points: wp.array(dtype=wp.vec3),
                  out: wp.array(dtype=float)):
    i = wp.tid()
    q = wp.mesh_query_point_no_sign(meshes[i % 2], points[i], 10.0)
    out[i] = q.u + float(i)


def _ids_graph(folder):
    """A kernel reading Mesh ids from graph memory (an array of uint64), beside a HashGrid."""
    points = wp.array(np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0], [1, 1, 0]], np.float32), dtype=wp.vec3)
    indices = wp.array(np.array([0, 1, 2, 1, 3, 2], np.int32), dtype=wp.int32)
    meshes = [wp.Mesh(points=points, indices=indices), wp.Mesh(points=points, indices=indices)]
    grid = wp.HashGrid(4, 4, 4)
    ids = wp.array(np.array([m.id for m in meshes], np.uint64), dtype=wp.uint64)
    out = wp.zeros(4, dtype=float)
    with wp.ScopedCapture(device="cpu", apic=True) as cap:
        grid.build(points, 0.5)
        wp.launch(_query_meshes, dim=4, inputs=[ids, grid.id, points, out])
    wp.capture_save(cap.graph, str(folder / "ids"), outputs={"out": out})
    eager = wp.zeros(4, dtype=float)
    wp.launch(_query_meshes, dim=4, inputs=[ids, grid.id, points, eager])
    return str(folder / "ids"), eager.numpy(), (meshes, grid)


def test_an_array_of_handle_ids_is_checked_at_replay(tmp_path):
    """#15, ids in graph memory: the manifest records that the kernel's uint64 array held Mesh ids; a
    file whose handle_slots give it the HashGrid's id is stopped before the launch."""
    path, eager, keep = _ids_graph(tmp_path)
    graph = wp.capture_load(path)
    assert int(np.sum(graph.program.table[:, 0] == tbl.OP_CHECK_IDS)) == 1
    wp.capture_launch(graph)
    np.testing.assert_array_equal(graph.param_numpy("out"), eager)
    doc = body_of(path + ".wrp")
    grid = next(i for i, h in enumerate(doc["handles"]) if h["kind"] == "HashGrid")
    doc["handle_slots"][0][2] = grid
    open(path + ".wrp", "wb").write(writer.encode(doc))
    graph = wp.capture_load(path)
    with pytest.raises(apic.ReplayIndexError, match="handle id"):
        wp.capture_launch(graph)
    status = reference.run_table(graph.program.table, 1, program.replay_limits(), graph.program.loops)
    assert status < 0 and graph.program.table[-status - 1, 0] == tbl.OP_CHECK_IDS
    doc["handle_slots"].pop(0)  # the word stays 0: no handle at all
    open(path + ".wrp", "wb").write(writer.encode(doc))
    with pytest.raises(apic.ReplayIndexError):
        wp.capture_launch(wp.capture_load(path))
