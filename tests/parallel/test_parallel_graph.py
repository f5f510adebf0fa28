"""Parallel graph replay (``wp.capture_launch(graph, threads=N)``), bit for bit against eager Warp.

Every kernel shape of the suite (``kernels.py``, ``persist_kernels.py``) is captured, launched twice
per replay (the second launch reads what the first wrote), and replayed split over 2 threads and over
more threads than the launch has tasks, by the Numba interpreter (the native splitter) and by the
reference interpreter (the same ``OP_SPLIT`` rows, ranges run last first). Each case also states
whether its launches must split: kernels with atomics, cross-task writes, 64-bit integer arguments,
aliased or strided written arrays stay serial, and are checked to. ``min_tasks_per_thread``
is 1 here so that small launches split; the default keeps them serial (tested too).
"""

from __future__ import annotations

import json
import os
import sys
import textwrap

import numpy as np
import pytest
import warp as wp

import apic
import kernels as K
import fork_server
import persist_kernels as P
import test_control_flow as cf
from apic.replay.cpu import reference
from apic.replay.cpu import table as tbl
from wrp_helpers import read_doc
from conftest import CPU, assert_same, snapshot
from persist_helpers import child_env

pytestmark = [pytest.mark.warp_version, pytest.mark.interpreter]

_RNG = np.random.default_rng(1515)


def _values(dtype, shape, rng):
    """Random contents for an array (or one value, ``shape == ()``) of a Warp dtype."""
    scalar = getattr(dtype, "_wp_scalar_type_", dtype)
    full = tuple(shape) + tuple(getattr(dtype, "_shape_", ()))
    np_type = wp.dtype_to_numpy(scalar)
    if scalar is wp.bool:
        return rng.integers(0, 2, size=full).astype(np.bool_)
    if np.issubdtype(np_type, np.integer):
        low = 0 if np.issubdtype(np_type, np.unsignedinteger) else -50
        return rng.integers(low, 50, size=full).astype(np_type)
    return rng.standard_normal(full).astype(np_type)


def _generic(kernel, shape):
    """Inputs for a kernel of plain arrays (all of the launch's shape) and values, from its signature."""

    def make(seed):
        rng = np.random.default_rng(seed)
        inputs = []
        for arg in kernel.adj.args:
            if wp.types.is_array(arg.type):
                inputs.append(wp.array(_values(arg.type.dtype, shape, rng), dtype=arg.type.dtype, device=CPU))
            else:
                value = _values(arg.type, (), rng)
                inputs.append(arg.type(*value.reshape(-1).tolist()) if value.shape else arg.type(value.item()))
        return inputs

    return make


def _indexed_2d(seed):
    rng = np.random.default_rng(seed)
    data = wp.array(rng.standard_normal((6, 5)).astype(np.float32), device=CPU)
    rows = wp.array(np.array([5, 0, 3, 1], dtype=np.int32), device=CPU)
    src = wp.indexedarray2d(data, [rows, None])
    return [src, wp.array(rng.standard_normal((4, 5)).astype(np.float32), device=CPU)]


def _indexed_1d(seed):
    rng = np.random.default_rng(seed)
    data = wp.array(rng.standard_normal(12).astype(np.float32), device=CPU)
    idx = wp.array(np.array([3, 1, 4, 0, 9, 2, 6, 5], dtype=np.int32), device=CPU)
    out = wp.array(rng.standard_normal(12).astype(np.float32), device=CPU)
    return [wp.indexedarray(data, [idx]), wp.indexedarray(out, [idx])]


def _struct_args(seed):
    rng = np.random.default_rng(seed)
    s = P.Scaled()
    s.data, s.scale = wp.array(rng.standard_normal(37).astype(np.float32), device=CPU), 0.5
    return [s, wp.array(rng.standard_normal(37).astype(np.float32), device=CPU)]


def _pod(seed):
    rng = np.random.default_rng(seed)

    def pod():
        p = K.Pod()
        p.a, p.b, p.v = float(rng.standard_normal()), int(rng.integers(-9, 9)), wp.vec2(*rng.standard_normal(2))
        return p

    return [wp.array([pod() for _ in range(37)], dtype=K.Pod, device=CPU),
            wp.array([pod() for _ in range(37)], dtype=K.Pod, device=CPU), pod()]


def _aliased(seed):
    a = wp.array(np.random.default_rng(seed).standard_normal(37).astype(np.float32), device=CPU)
    return [a, a]


def _strided(seed):
    rng = np.random.default_rng(seed)
    dst = wp.array(rng.standard_normal(74).astype(np.float32), device=CPU)
    return [wp.array(rng.standard_normal(37).astype(np.float32), device=CPU), dst[::2]]


def _two_views(seed):
    """Reads one half of an allocation, writes the other: disjoint, so it splits."""
    a = wp.array(np.random.default_rng(seed).standard_normal(74).astype(np.float32), device=CPU)
    return [a[:37], a[37:]]


def _overlapping_views(seed):
    a = wp.array(np.random.default_rng(seed).standard_normal(74).astype(np.float32), device=CPU)
    return [a[:37], a[1:38]]


@wp.func
def _smooth(x: wp.vec3, k: float):
    return wp.normalize(x + wp.vec3(k, 0.0, 0.0)) * wp.sin(k)


def _make_closure_kernel():
    """A kernel and a @wp.func made in a function (as mujoco-warp builds its kernels)."""

    @wp.func
    def weigh(a: wp.array(dtype=wp.vec3), i: int, k: float):
        return _smooth(a[i], k) * float(i % 7)

    @wp.kernel
    def closure_weigh(a: wp.array(dtype=wp.vec3), k: float, out: wp.array(dtype=wp.vec3)):
        i = wp.tid()
        out[i] = out[i] * 0.5 + weigh(a, (i * 13) % a.shape[0], k)

    return closure_weigh


CLOSURE_WEIGH = _make_closure_kernel()
F32 = K.ARRAY_ACCUM[wp.float32]
# (id, kernel, launch dim, make(seed) -> inputs, whether its launches split)
CASES = [(f"array_accum-{t.__name__}", k, 37, _generic(k, (37,)), True) for t, k in K.ARRAY_ACCUM.items()]
CASES += [(f"scalar_accum-{t.__name__}", k, 37, _generic(k, (37,)), t not in (wp.int64, wp.uint64))
          for t, k in K.SCALAR_ACCUM.items()]  # a 64-bit integer argument may be a handle id: serial
CASES += [(f"accum_{n}d-{t.__name__}", k, (5, 4, 3, 2)[:n], _generic(k, (5, 4, 3, 2)[:n]), True)
          for n in (2, 3, 4) for t, k in K.ACCUM_ND[n].items()]
CASES += [(f"stamp_{n}d", k, (6, 5, 4, 3)[:n], _generic(k, (6, 5, 4, 3)[:n]), True) for n, k in K.STAMP.items()]
CASES += [(k.key, k, 37, _generic(k, (37,)), True) for k in (
    K.bool_toggle, K.bool_xor, K.transform_compose, K.mad_u32, K.square_scale, P.gravity, P.integrate, P.square)]
CASES += [
    ("diffuse", P.diffuse, (9, 7), _generic(P.diffuse, (9, 7)), True),  # a stencil over a read-only array
    ("indexed_accum_2d", K.indexed_accum_2d, (4, 5), _indexed_2d, True),  # an indexed read, a plain write
    ("two_views", F32, 37, _two_views, True),
    ("user_funcs_in_closure", CLOSURE_WEIGH, 37, _generic(CLOSURE_WEIGH, (37,)), True),  # pure @wp.func calls
    # a struct argument: split by world, its array fields proved and checked as arrays (docs/PARALLEL.md)
    ("apply_scaled-struct", P.apply_scaled, 37, _struct_args, True),
    # stay serial
    ("kinetic-atomic", P.kinetic, 37, lambda s: [_generic(P.kinetic, (37,))(s)[0], wp.zeros(1, device=CPU)], False),
    ("tick", K.tick, 5, _generic(K.tick, (1,)), False),
    ("values_kernel", K.values_kernel, 1, _generic(K.values_kernel, (K.VALUES_OUT,)), False),
    ("indexed_accum", K.indexed_accum, 8, _indexed_1d, False),
    ("pod_accum", K.pod_accum, 37, _pod, False),
    ("aliased", F32, 37, _aliased, False),
    ("strided-write", F32, 37, _strided, False),
    ("overlapping-views", F32, 37, _overlapping_views, False),
]


def _arrays(inputs) -> dict:
    found = {}
    for i, value in enumerate(inputs):
        if isinstance(value, wp.indexedarray):
            found[f"arg{i}"] = value.data
        elif isinstance(value, wp.array):
            found[f"arg{i}"] = value
        elif hasattr(type(value), "_constructors"):  # a struct: its arrays
            for name, _ in type(value)._constructors:
                if isinstance(getattr(value, name), wp.array):
                    found[f"arg{i}.{name}"] = getattr(value, name)
    return found


def _integrate_graph(n: int, seed: int):
    """Two equal states for ``integrate`` over ``n`` tasks (eager, replayed) and the graph of one launch
    on the second."""
    make = _generic(P.integrate, (n,))
    eager, replayed = make(seed), make(seed)
    with wp.ScopedCapture(device=CPU) as capture:
        wp.launch(P.integrate, dim=n, inputs=replayed, device=CPU)
    return eager, replayed, capture.graph


def _launch_twice(kernel, dim, inputs):
    for _ in range(2):
        wp.launch(kernel, dim=dim, inputs=inputs, device=CPU)


def _replay(graph, threads, interpreter):
    if interpreter == "numba":
        wp.capture_launch(graph, threads=threads)
    else:
        program = graph.parallel_program(threads)
        reference.run_table(program.table, 1, None, program.loops)


@pytest.mark.parametrize("interpreter", ["numba", "reference"])
@pytest.mark.parametrize("threads", [2, 64])
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_every_kernel_shape_split_as_eager(case, threads, interpreter):
    _, kernel, dim, make, splits = case
    eager, replayed = make(7), make(7)
    with wp.ScopedCapture(device=CPU) as capture:
        _launch_twice(kernel, dim, replayed)
    graph = capture.graph
    graph.min_tasks_per_thread = 1
    tasks = int(np.prod(dim))
    split_rows = graph.parallel_program(threads).table[:, 0] == tbl.OP_SPLIT
    assert split_rows.sum() == (2 if splits and tasks > 1 else 0), graph.parallel_report(threads)
    if splits and tasks > 1:
        # the row's chunks (one launch: its own)
        chunks = graph.parallel_program(threads).table[split_rows, tbl.COL_ARG0 + 3]
        assert (chunks == min(tasks, 4 * threads)).all()  # more threads than tasks: one chunk per task
    for run in range(2):
        _launch_twice(kernel, dim, eager)
        _replay(graph, threads, interpreter)
        assert_same(snapshot(_arrays(eager)), snapshot(_arrays(replayed)), f"replay {run + 1}")


def test_atomic_kernel_reported_serial():
    v = wp.array(_RNG.standard_normal((50_000, 3)).astype(np.float32), dtype=wp.vec3, device=CPU)
    out = wp.zeros(1, device=CPU)
    with wp.ScopedCapture(device=CPU) as capture:
        wp.launch(P.kinetic, dim=50_000, inputs=[v, out], device=CPU)
        wp.launch(P.square, dim=50_000, inputs=[out, out], device=CPU)  # aliased: refused per launch
    graph = capture.graph
    assert graph.recording.kernels[0].split_writes is None  # atomics: never proved splittable
    assert (graph.parallel_program(2).table[:, 0] != tbl.OP_SPLIT).all()
    kinetic, entry = graph.parallel_report(2)
    assert entry["kernel"] == "square" and "overlaps" in entry["why"]
    # the kernel no rule proved is judged by its footprint: every task adds into one element
    assert kinetic["kernel"] == "kinetic" and kinetic["chunks"] == 0 and "two tasks touch element 0" in kinetic["why"]


def test_small_launches_stay_serial_by_default():
    """The default min_tasks_per_thread (4096) keeps a 37-task launch on one thread: the same table."""
    make = _generic(P.square, (37,))
    inputs = make(1)
    with wp.ScopedCapture(device=CPU) as capture:
        wp.launch(P.square, dim=37, inputs=inputs, device=CPU)
    graph = capture.graph
    assert graph.parallel_program(8) is graph.program
    assert graph.parallel_report(8)[0]["why"].startswith("fewer than")


def test_large_launch_splits_by_default_and_graph_threads_attribute():
    n = 3 * 4096
    eager, replayed, graph = _integrate_graph(n, 3)
    assert graph.threads == 1
    assert (graph.program.table[:, 0] != tbl.OP_SPLIT).all()  # the serial program is untouched
    graph.threads = 4
    (entry,) = graph.parallel_report()
    assert entry["chunks"] == 12 and entry["kernel"] == "integrate"  # 3 threads' worth of 4096 tasks, 4 chunks each
    for _ in range(3):
        wp.launch(P.integrate, dim=n, inputs=eager, device=CPU)
        wp.capture_launch(graph)  # graph.threads
        assert_same(snapshot(_arrays(eager)), snapshot(_arrays(replayed)), "graph.threads = 4")


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2"])
def test_threads_validated(bad):
    with wp.ScopedCapture(device=CPU) as capture:
        wp.launch(P.square, dim=4, inputs=_generic(P.square, (4,))(0), device=CPU)
    with pytest.raises(ValueError, match="threads"):
        wp.capture_launch(capture.graph, threads=bad)
    with pytest.raises(ValueError, match="threads"):
        capture.graph.threads = bad


@pytest.mark.parametrize("program", cf.PROGRAMS, ids=lambda p: p.__name__)
@pytest.mark.parametrize("interpreter", ["numba", "reference"])
def test_control_flow_bodies_split_as_eager(program, interpreter):
    eager, replayed = cf.make_state(), cf.make_state()
    with wp.ScopedCapture(device=CPU) as capture:
        program(replayed)
    graph = capture.graph
    graph.min_tasks_per_thread = 1
    table = graph.parallel_program(3).table
    assert (table[:, 0] == tbl.OP_SPLIT).any() or program in (cf.only_false, cf.nested)
    assert (table[:, 0] == tbl.OP_BRANCH_IF_ZERO).any()
    for run in range(4):
        program(eager)
        _replay(graph, 3, interpreter)
        assert_same(snapshot(eager), snapshot(replayed), f"replay {run + 1}")


# --- loaded graphs, replayed split in a fresh process ----------------------------------------------
_CHILD = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    import warp as wp
    wp.config.quiet = True
    import apic
    from apic.replay.cpu import table as tbl

    job = json.loads(sys.argv[1])
    graph = wp.capture_load(job["path"])
    graph.min_tasks_per_thread = 1
    program = graph.parallel_program(job["threads"])
    rows = int((program.table[:, 0] == tbl.OP_SPLIT).sum())
    splits = len(program.plan.chunks) if program.plan else 0  # launches run on several threads
    for _ in range(job["iters"]):
        wp.capture_launch(graph, threads=job["threads"])
    out = {}
    for name in graph.params:
        p = graph.params[name]
        arr = wp.empty(shape=p["shape"], dtype=getattr(wp, p["dtype"]), device="cpu")
        graph.get_param(name, arr)
        np.save(job["out"] + name + ".npy", arr.numpy())
    print(json.dumps({"splits": splits, "rows": rows, "report": graph.parallel_report(job["threads"])}))
    """
)


def _diffuse_graph_state():
    rng = np.random.default_rng(5)
    return {"src": wp.array(rng.standard_normal((64, 33)).astype(np.float32), device=CPU),
            "dst": wp.array(rng.standard_normal((64, 33)).astype(np.float32), device=CPU),
            "x": wp.array(rng.standard_normal((1000, 3)).astype(np.float32), dtype=wp.vec3, device=CPU),
            "v": wp.array(rng.standard_normal((1000, 3)).astype(np.float32), dtype=wp.vec3, device=CPU),
            "f": wp.array(rng.standard_normal((1000, 3)).astype(np.float32), dtype=wp.vec3, device=CPU),
            "ke": wp.zeros(1, device=CPU)}


def _diffuse_program(s):
    for _ in range(3):
        wp.launch(P.diffuse, dim=(64, 33), inputs=[s["src"], s["dst"], 0.25], device=CPU)
        wp.launch(P.diffuse, dim=(64, 33), inputs=[s["dst"], s["src"], 0.25], device=CPU)
        wp.launch(P.integrate, dim=1000, inputs=[s["x"], s["v"], s["f"], 0.01], device=CPU)
        wp.launch(P.kinetic, dim=1000, inputs=[s["v"], s["ke"]], device=CPU)  # atomics: serial


@pytest.mark.parametrize("source_fallback", [True, False])
def test_loaded_graph_splits_as_eager_in_fresh_process(tmp_path, source_fallback):
    eager, replayed = _diffuse_graph_state(), _diffuse_graph_state()
    with wp.ScopedCapture(device=CPU, apic=True) as capture:
        _diffuse_program(replayed)
    path = str(tmp_path / "g")
    wp.capture_save(capture.graph, path, outputs=dict(replayed), source_fallback=source_fallback)
    iters = 2
    for _ in range(iters):
        _diffuse_program(eager)
    job = {"path": path, "threads": 2, "iters": iters, "out": str(tmp_path / "out-")}
    done = fork_server.run([sys.executable, "-c", _CHILD, json.dumps(job)], env=child_env(), capture_output=True,
                           text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    # with its source saved, the loaded graph builds its range entries: 6 diffuse + 3 integrate launches split;
    # without, it has none and runs serially (and says why). The second diffuse and the integrate after it
    # touch different arrays: they share one OP_SPLIT row, so 6 rows run the 9 launches.
    assert result["splits"] == (9 if source_fallback else 0), result["report"]
    assert result["rows"] == (6 if source_fallback else 0), result["report"]
    if not source_fallback:
        split = [entry for entry in result["report"] if entry["kernel"] != "kinetic"]
        assert split and all("source_fallback" in entry["why"] for entry in split), result["report"]
    (kinetic,) = [entry for entry in result["report"] if entry["kernel"] == "kinetic"]  # its atomics: serial
    assert kinetic["chunks"] == 0 and kinetic["why"], result["report"]
    for name, arr in eager.items():
        got = np.load(job["out"] + name + ".npy")
        assert np.array_equal(arr.numpy().view(np.uint8), got.view(np.uint8)), name


def test_pooled_workers_run_chunks():
    """The workers, not only the replaying thread, run chunks (on a busy machine, eventually)."""
    import time

    from apic.replay.parallel import split_pool

    n = 1 << 16
    eager, replayed, graph = _integrate_graph(n, 9)
    from apic.replay.cpu.interpreter import run_table  # the Numba loop, whatever APIC_REPLAY selects

    program = graph.parallel_program(2)
    before = split_pool.chunks_run_by_workers()
    deadline, replays = time.monotonic() + 60, 0
    while split_pool.chunks_run_by_workers() == before and time.monotonic() < deadline:
        with split_pool.workers(2):
            run_table(program.table, 1, None, program.loops)
        replays += 1
    assert split_pool.chunks_run_by_workers() > before, "no worker ran a chunk in 60 s"
    for _ in range(replays):
        wp.launch(P.integrate, dim=n, inputs=eager, device=CPU)
    assert_same(snapshot(_arrays(eager)), snapshot(_arrays(replayed)), f"{replays} replays")


def test_concurrent_parallel_replays_from_two_threads():
    """Two Python threads replaying split graphs at once share one pool: both stay bit for bit as eager."""
    import threading

    n = 1 << 14
    make = _generic(P.integrate, (n,))
    states = [(make(s), make(s)) for s in (21, 22)]
    graphs = []
    for _, replayed in states:
        with wp.ScopedCapture(device=CPU) as capture:
            wp.launch(P.integrate, dim=n, inputs=replayed, device=CPU)
        capture.graph.min_tasks_per_thread = 512
        graphs.append(capture.graph)
    errors = []

    def replay(graph):
        try:
            for _ in range(20):
                wp.capture_launch(graph, threads=3)
        except BaseException as error:  # reported below
            errors.append(error)

    workers = [threading.Thread(target=replay, args=(g,)) for g in graphs]
    for t in workers:
        t.start()
    for t in workers:
        t.join(120)
    assert not errors and not any(t.is_alive() for t in workers)
    for eager, replayed in states:
        for _ in range(20):
            wp.launch(P.integrate, dim=n, inputs=eager, device=CPU)
        assert_same(snapshot(_arrays(eager)), snapshot(_arrays(replayed)), "20 concurrent replays")


def test_capture_launch_threads_is_for_apic_graphs_only():
    with pytest.raises(ValueError, match="apic CPU graphs"):
        wp.capture_launch(object(), threads=2)


# --- the optional kernels[].split_writes key of the file ------------------------------------------
@pytest.fixture(scope="module")
def saved_doc(tmp_path_factory):
    import msgpack

    from apic.format import schema

    folder = tmp_path_factory.mktemp("split-doc")
    state = _diffuse_graph_state()
    with wp.ScopedCapture(device=CPU, apic=True) as capture:
        _diffuse_program(state)
    wp.capture_save(capture.graph, str(folder / "g"), outputs=dict(state))
    body = (folder / "g.wrp").read_bytes()[schema.HEADER.size :]
    return msgpack.unpackb(body, raw=False)


def _read(doc):

    return read_doc(doc)


def test_file_carries_split_writes_of_proved_kernels_only(saved_doc):
    kernels = {k["key"]: k.get("split_writes") for k in saved_doc["kernels"]}
    assert kernels["kinetic"] is None  # atomics
    assert len(kernels["diffuse"]) == 1  # writes dst only
    assert kernels["integrate"] and len(kernels["integrate"]) == 2  # writes x and v
    read_back = {k.key: k.split_writes for k in _read(saved_doc).recording.kernels}
    assert read_back["integrate"] == tuple(kernels["integrate"]) and read_back["kinetic"] is None


@pytest.mark.parametrize("value, message", [
    ([64, 0], "strictly increasing"), ([8, 8], "strictly increasing"), (["x"], "expected an integer"),
    ([-8], "outside"), ([1 << 30], "outside"), (7, "expected a list"),
])
def test_invalid_split_writes_refused(saved_doc, value, message):
    import copy

    doc = copy.deepcopy(saved_doc)
    index = next(i for i, k in enumerate(doc["kernels"]) if k.get("split_writes"))
    doc["kernels"][index]["split_writes"] = value
    with pytest.raises(apic.FormatError, match=message):
        _read(doc)


def test_split_writes_on_a_backward_kernel_refused(saved_doc):
    import copy

    doc = copy.deepcopy(saved_doc)
    doc["kernels"][0]["adjoint"] = True  # a backward entry point: its symbol must say so too
    doc["kernels"][0]["symbol"] = doc["kernels"][0]["symbol"].replace("_cpu_forward", "_cpu_backward")
    doc["kernels"][0]["split_writes"] = [0]
    with pytest.raises(apic.FormatError, match="split_writes"):
        _read(doc)


def test_a_file_without_split_writes_reads_as_serial(saved_doc):
    import copy

    doc = copy.deepcopy(saved_doc)
    for kernel in doc["kernels"]:
        kernel.pop("split_writes", None)
    assert all(k.split_writes is None for k in _read(doc).recording.kernels)


def test_split_writes_naming_no_array_slot_keeps_the_launch_serial():
    """A kernel's offsets that are not a plain array of a launch: that launch runs serially, said why."""
    import dataclasses

    from apic.replay.lowering import lower

    make = _generic(P.integrate, (50_000,))
    inputs = make(4)
    with wp.ScopedCapture(device=CPU) as capture:
        wp.launch(P.integrate, dim=50_000, inputs=inputs, device=CPU)
    graph = capture.graph
    bad = dataclasses.replace(graph.recording.kernels[0], split_writes=(4,))
    recording = dataclasses.replace(graph.recording, kernels=(bad,))
    program = lower(recording, graph.address_of, [k.address for k in graph.recording.kernels])
    assert not program.splits and "not a plain array" in program.refusals[0][1]


def test_scalar_parameter_set_reaches_split_launches():
    """set_param writes the arena the split rows point into: the next parallel replay uses the new value."""
    n = 1 << 13
    dt = apic.param("dt_split", wp.float32, 0.01)
    make = _generic(P.integrate, (n,))
    eager, replayed = make(31), make(31)
    with wp.ScopedCapture(device=CPU) as capture:
        wp.launch(P.integrate, dim=n, inputs=[*replayed[:3], dt], device=CPU)
    graph = capture.graph
    graph.min_tasks_per_thread = 512
    assert (graph.parallel_program(2).table[:, 0] == tbl.OP_SPLIT).any()
    for value in (0.01, -0.5, 2.0):
        graph.set_param("dt_split", value)
        wp.launch(P.integrate, dim=n, inputs=[*eager[:3], value], device=CPU)
        wp.capture_launch(graph, threads=2)
        assert_same(snapshot(_arrays(eager)), snapshot(_arrays(replayed)), f"dt = {value}")


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork is POSIX only")
def test_forked_child_replays_split():
    """A child forked after the pool started (its workers not copied) replays split, as eager, without hanging."""
    n = 1 << 14
    eager, replayed, graph = _integrate_graph(n, 41)
    graph.min_tasks_per_thread = 512
    wp.capture_launch(graph, threads=2)  # the parent's pool is running now
    wp.launch(P.integrate, dim=n, inputs=eager, device=CPU)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: replay once more, split, and report the bytes
        try:
            wp.capture_launch(graph, threads=2)
            os.write(write, b"".join(a.numpy().tobytes() for a in _arrays(replayed).values()))
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        got = pipe.read()
    os.waitpid(pid, 0)
    wp.launch(P.integrate, dim=n, inputs=eager, device=CPU)
    assert got == b"".join(a.numpy().tobytes() for a in _arrays(eager).values())
