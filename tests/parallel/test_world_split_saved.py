"""Graphs split by world, saved and loaded (docs/PARALLEL.md, "Saved graphs"; docs/FORMAT.md 2.6).

A kernel proved splittable by world is saved with its ``split_world`` key (the offsets of the arrays it
writes and of those it accesses only at the world's row, and whether it uses tiles). Each world form
below (float atomics and computed columns, whose sums depend on the order of a world's tasks, and a
tile Cholesky kernel, whose threads each need their own loaded copy of the range object) is captured,
saved with its source, loaded in a fresh process and replayed split over 2 threads by both
interpreters: it must split by world and equal eager Warp bit for bit. Hostile ``split_world`` values
are refused naming the field; a file without the key replays serially.
"""

from __future__ import annotations

import copy
import json
import sys
import textwrap

import numpy as np
import pytest
import warp as wp

import apic
import fork_server
import tile_kernels as tk
import world_kernels as wk
from apic.format import schema
from wrp_helpers import body_of, read_doc
from persist_helpers import TESTS, child_env, rewrite_wrp

pytestmark = [pytest.mark.warp_version, pytest.mark.interpreter]


_CHILD = textwrap.dedent(
    """
    import ctypes, json, sys
    import numpy as np
    import warp as wp
    wp.config.quiet = True
    import apic
    from apic.replay.cpu import table as tbl
    from world_kernels import replay

    job = json.loads(sys.argv[1])
    graph = wp.capture_load(job["path"])
    graph.min_tasks_per_thread = 1
    (info,) = graph.recording.kernels
    for _ in range(job["iters"]):
        replay(graph, 2, job["interpreter"])
    table = graph.parallel_program(2).table
    entries = []
    for row in table[table[:, 0] == tbl.OP_SPLIT]:  # a tile kernel's row: its entry in each slot's copy
        slots = int(row[tbl.OPCODES[tbl.OP_SPLIT].column("slots")])
        item = (ctypes.c_int64 * tbl.ITEM_WORDS).from_address(int(row[tbl.OPCODES[tbl.OP_SPLIT].column("items")]))
        if item[tbl.ITEM_PER_THREAD]:
            entries = (ctypes.c_int64 * slots).from_address(item[tbl.ITEM_PER_THREAD])[:]
    for name in graph.params:
        p = graph.params[name]
        arr = wp.empty(shape=p["shape"], dtype=getattr(wp, p["dtype"]), device="cpu")
        graph.get_param(name, arr)
        np.save(job["out"] + name + ".npy", arr.numpy())
    print(json.dumps({"report": graph.parallel_report(2), "world": info.split_world is not None,
                      "tiles": info.split_tiles, "entries": entries}))
    """
)


def _world_case(name: str):
    kernel, dim, make, _ = wk.CASES[name]
    return (lambda inputs: wp.launch(kernel, dim=dim, inputs=inputs, device=wk.CPU)), lambda: make(
        np.random.default_rng(21))


def _tile_case(name: str):
    kernel, make, _ = tk.CASES[name]
    return (lambda inputs: wp.launch_tiled(kernel, dim=(tk.WORLDS,), inputs=inputs, block_dim=1, device=tk.CPU)), \
        lambda: make(np.random.default_rng(21), tk.WORLDS)


CASES = {"float_atomics": _world_case("float_atomics"), "computed_columns": _world_case("computed_columns"),
         "cholesky_rows": _tile_case("cholesky_rows")}


def _save(name: str, folder, source_fallback: bool = True):
    """Capture case ``name``, save it to ``folder/g``; return the launch function and the inputs made
    again (the state the saved file holds)."""
    launch, make = CASES[name]
    inputs = make()
    with wp.ScopedCapture(device="cpu", apic=True) as capture:
        launch(inputs)
    outputs = {f"a{i}": a for i, a in enumerate(inputs) if isinstance(a, wp.array)}
    wp.capture_save(capture.graph, str(folder / "g"), outputs=outputs, source_fallback=source_fallback)
    return launch, make()


def _load_and_replay(folder, interpreter: str, iters: int) -> dict:
    job = {"path": str(folder / "g"), "iters": iters, "interpreter": interpreter, "out": str(folder / "out-")}
    done = fork_server.run([sys.executable, "-c", _CHILD, json.dumps(job)], env=child_env(), capture_output=True,
                           text=True, timeout=600, cwd=TESTS)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("interpreter", ["numba", "reference"])
@pytest.mark.parametrize("name", list(CASES))
def test_loaded_graph_splits_by_world_as_eager_in_fresh_process(tmp_path, name, interpreter):
    launch, eager = _save(name, tmp_path)
    iters = 3
    result = _load_and_replay(tmp_path, interpreter, iters)
    (entry,) = result["report"]
    assert result["world"] and entry["chunks"] > 1 and not entry["why"], result
    assert result["tiles"] == (name == "cholesky_rows"), result
    if result["tiles"]:  # the loaded module's range object, one loaded copy per thread slot
        assert len(result["entries"]) >= 2 and len(set(result["entries"])) == len(result["entries"]), result
    for _ in range(iters):
        launch(eager)
    for i, arr in enumerate(a for a in eager if isinstance(a, wp.array)):
        got = np.load(str(tmp_path / f"out-a{i}.npy"))
        assert np.array_equal(arr.numpy().view(np.uint8), got.view(np.uint8)), (name, i)


def test_a_file_that_clears_a_tile_kernels_tiles_flag_is_refused(tmp_path):
    """A damaged or hostile file saying ``tiles: false`` for a tile kernel: two threads in one loaded object
    would share its tile memory (wrong results, or a crash). The flag is sealed in the module's kernel
    manifest (``apic.format.sealed_claims``): a file saying otherwise is refused."""
    _save("cholesky_rows", tmp_path)
    body = _body(tmp_path)
    body["kernels"][0]["split_world"]["tiles"] = False
    rewrite_wrp(str(tmp_path / "g"), body)
    load = "import apic, sys; apic.capture_load(sys.argv[1])"
    done = fork_server.run([sys.executable, "-c", load, str(tmp_path / "g")],
                           env=child_env(), capture_output=True, text=True, timeout=600, cwd=TESTS)
    assert done.returncode == 1 and "FormatError" in done.stderr, done.stderr
    assert "sealed in its module's kernel manifest" in done.stderr, done.stderr


def test_loaded_graph_without_source_replays_serially_as_eager(tmp_path):
    launch, eager = _save("float_atomics", tmp_path, source_fallback=False)
    result = _load_and_replay(tmp_path, "numba", 2)
    (entry,) = result["report"]
    assert result["world"] and entry["chunks"] == 0 and "source_fallback" in entry["why"], result
    for _ in range(2):
        launch(eager)
    for i, arr in enumerate(a for a in eager if isinstance(a, wp.array)):
        assert np.array_equal(arr.numpy(), np.load(str(tmp_path / f"out-a{i}.npy"))), i


# --- the optional kernels[].split_world key of the file ----------------------------------------------
def _body(folder) -> dict:
    return body_of(folder / "g.wrp")


@pytest.fixture(scope="module")
def saved_docs(tmp_path_factory):
    docs = {}
    for name in ("float_atomics", "cholesky_rows"):
        folder = tmp_path_factory.mktemp(name)
        _save(name, folder, source_fallback=False)
        docs[name] = _body(folder)
    return docs


def _read(doc):
    return read_doc(doc)


def test_file_carries_split_world_not_split_writes(saved_docs):
    for name, doc in saved_docs.items():
        (kernel,) = doc["kernels"]
        assert "split_writes" not in kernel, kernel  # a reader knowing only split_writes would split by task
        world = kernel["split_world"]
        assert world["writes"] and set(world["writes"]) <= set(world["rows"]), world
        assert world["tiles"] == (name == "cholesky_rows"), world
        (info,) = _read(doc).recording.kernels
        assert (info.split_writes, info.split_world, info.split_tiles) == (
            tuple(world["writes"]), tuple(world["rows"]), world["tiles"]), info


def _edited(doc: dict, edit) -> dict:
    doc = copy.deepcopy(doc)
    edit(doc["kernels"][0])
    return doc


def _world(**fields):
    return lambda kernel: kernel["split_world"].update(fields)


def _backward(kernel):
    kernel.update(adjoint=True, symbol=kernel["symbol"].replace("_cpu_forward", "_cpu_backward"))


@pytest.mark.parametrize("edit, message", [
    (lambda k: k.update(split_world=[0, 8]), r"split_world: expected a map"),
    (lambda k: k["split_world"].pop("rows"), r"split_world: missing field\(s\) rows"),
    (_world(writes=7), r"split_world\.writes: expected a list"),
    (_world(rows=["x"]), r"split_world\.rows\[0\]: expected an integer"),
    (_world(writes=[-8], rows=[-8]), r"split_world\.writes\[0\]: .* is outside"),
    (_world(rows=[1 << 30]), r"split_world\.rows\[0\]: .* is outside"),
    (_world(rows=[64, 0]), r"split_world\.rows: offsets must be strictly increasing"),
    (_world(writes=[8, 8]), r"split_world\.writes: offsets must be strictly increasing"),
    (_world(writes=[0], rows=[8]), r"split_world\.writes: offset 0 is not in rows"),
    (_world(rows=list(range(0, 8 * (schema.MAX_SPLIT_WRITES + 1), 8))), r"split_world\.rows: .* at most"),
    (_world(writes=[], rows=[1 << 20]), r"split_world\.rows: offset 1048576 leaves no array descriptor"),
    (_world(tiles=1), r"split_world\.tiles: expected a boolean"),
    (lambda k: k.update(split_writes=k["split_world"]["writes"]), r"split_writes and split_world"),
    (_backward, r"split_world: only a CPU forward"),
])
def test_invalid_split_world_refused(saved_docs, edit, message):
    with pytest.raises(apic.FormatError, match=message):
        _read(_edited(saved_docs["float_atomics"], edit))


def test_a_file_without_split_world_reads_as_serial(saved_docs):
    (info,) = _read(_edited(saved_docs["cholesky_rows"], lambda k: k.pop("split_world"))).recording.kernels
    assert (info.split_writes, info.split_world, info.split_tiles) == (None, None, False)


def test_split_world_at_the_array_limit_reads(saved_docs):
    """A list of MAX_SPLIT_WRITES offsets reads (one more is refused above; split_writes' cases of the
    limit are in test_format_limits). Without args_size, offsets past the arguments are not refused."""
    offsets = list(range(0, 8 * schema.MAX_SPLIT_WRITES, 8))
    doc = _edited(saved_docs["float_atomics"], lambda k: (k.pop("args_size"), _world(rows=offsets)(k)))
    (info,) = _read(doc).recording.kernels
    assert len(info.split_world) == schema.MAX_SPLIT_WRITES
