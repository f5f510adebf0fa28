"""``wp.utils`` host utilities inside a CPU capture: recorded as native calls, run at replay time.

``array_scan``, ``radix_sort_pairs``, ``segmented_sort_pairs``, ``runlength_encode``, ``array_sum``
and ``array_inner``: each program below makes new inputs with a kernel, then calls the utility, so
every replay works on different data; replay must equal the eager run bit for bit, live and after
a save and a load in a fresh process. Forms a warp-lang version lacks (1.12 scans only int32 and
float32 contiguous arrays, and sorts with int32 values) are tested where the installed one has them.
"""

from __future__ import annotations

import ctypes
import re

import numpy as np
import pytest
import warp as wp

import apic
import fork_server
from apic import _compat
from apic.format import reader, schema, writer
from apic.record import natives
from apic.record import ops as rec
from conftest import CPU, eager_vs_replay
from persist_helpers import run_child, same_bits
from wrp_helpers import body_of, read_doc

pytestmark = [pytest.mark.warp_version, pytest.mark.interpreter]

N = 24
COUNT = 10  # elements sorted (sort buffers hold 2 * COUNT)

# What the installed warp-lang's natives take (probed, as apic itself does).
MODERN_SCAN = natives.host_arity("array_scan_float_host") == 7  # strided, vector, 64-bit scans
MODERN_SORT = natives.host_arity("radix_sort_pairs_int_host") == 6  # more key types, 8-byte values, bit range


@wp.kernel
def bump(t: wp.array(dtype=wp.int32)):
    t[0] = t[0] + 1


@wp.kernel
def drop(t: wp.array(dtype=wp.int32)):
    t[0] = t[0] - 1


@wp.kernel
def gen_i32(t: wp.array(dtype=wp.int32), out: wp.array(dtype=wp.int32), modulus: wp.int32):
    i = wp.tid()
    out[i] = (t[0] * 7919 + i * 104729 + 13) % modulus - modulus / 2


@wp.kernel
def gen_i64(t: wp.array(dtype=wp.int32), out: wp.array(dtype=wp.int64)):
    i = wp.tid()
    out[i] = wp.int64((t[0] * 7919 + i * 104729 + 13) % 1000 - 500) * wp.int64(4000000000)


@wp.kernel
def gen_u32(t: wp.array(dtype=wp.int32), out: wp.array(dtype=wp.uint32)):
    i = wp.tid()
    out[i] = wp.uint32((t[0] * 7919 + i * 104729 + 13) % 1000) * wp.uint32(3000000)


@wp.kernel
def gen_u64(t: wp.array(dtype=wp.int32), out: wp.array(dtype=wp.uint64)):
    i = wp.tid()
    out[i] = wp.uint64((t[0] * 7919 + i * 104729 + 13) % 1000) * wp.uint64(9000000000000)


@wp.kernel
def gen_f32(t: wp.array(dtype=wp.int32), out: wp.array(dtype=wp.float32)):
    i = wp.tid()
    out[i] = wp.sin(float(t[0]) * 1.7 + float(i) * 0.37) * 10.0


@wp.kernel
def gen_f64(t: wp.array(dtype=wp.int32), out: wp.array(dtype=wp.float64)):
    i = wp.tid()
    out[i] = wp.float64(wp.sin(float(t[0]) * 1.3 + float(i) * 0.29)) * wp.float64(7.0)


@wp.kernel
def gen_v3(t: wp.array(dtype=wp.int32), out: wp.array(dtype=wp.vec3)):
    i = wp.tid()
    s = float(t[0]) + float(i) * 0.5
    out[i] = wp.vec3(wp.sin(s), wp.cos(s), s * 0.1)


@wp.kernel
def gen_f32_2d(t: wp.array(dtype=wp.int32), out: wp.array2d(dtype=wp.float32)):
    i, j = wp.tid()
    out[i, j] = wp.cos(float(t[0]) * 0.7 + float(i) * 0.37 + float(j) * 1.1)


@wp.kernel
def gen_runs(t: wp.array(dtype=wp.int32), out: wp.array(dtype=wp.int32)):
    i = wp.tid()
    out[i] = ((i + t[0]) / 3) % 4


@wp.kernel
def gen_segments(t: wp.array(dtype=wp.int32), starts: wp.array(dtype=wp.int32), ends: wp.array(dtype=wp.int32)):
    # three segments covering [0, COUNT) in a pattern that changes with t
    cut = 2 + t[0] % 5
    starts[0] = 0
    ends[0] = cut
    starts[1] = cut
    ends[1] = cut + 3
    starts[2] = cut + 3
    ends[2] = 10


GEN = {wp.int32: (gen_i32, (1000,)), wp.int64: (gen_i64, ()), wp.uint32: (gen_u32, ()), wp.uint64: (gen_u64, ()),
       wp.float32: (gen_f32, ()), wp.float64: (gen_f64, ()), wp.vec3: (gen_v3, ())}


def generate(t, out, dim=None):
    kernel, extra = GEN[out.dtype]
    wp.launch(kernel, dim=dim or out.shape[0], inputs=[t, out, *extra], device=CPU)


def zeros(shape, dtype):
    return wp.zeros(shape, dtype=dtype, device=CPU)


def counter():
    return wp.zeros(1, dtype=wp.int32, device=CPU)


def recorded_calls(graph) -> set[str]:
    return {op.name for op in graph.recording.ops if isinstance(op, rec.NativeCall)}


# --- array_scan ------------------------------------------------------------------------------------
SCAN_DTYPES = [wp.int32, wp.float32] + ([wp.int64, wp.float64, wp.vec3] if MODERN_SCAN else [])


@pytest.mark.parametrize("inclusive", [True, False], ids=["inclusive", "exclusive"])
@pytest.mark.parametrize("dtype", SCAN_DTYPES, ids=[t.__name__ for t in SCAN_DTYPES])
def test_array_scan(dtype, inclusive):
    def program(s):
        wp.launch(bump, dim=1, inputs=[s["t"]], device=CPU)
        generate(s["t"], s["a"])
        wp.utils.array_scan(s["a"], s["out"], inclusive=inclusive)

    graph, _ = eager_vs_replay(program, lambda: {"t": counter(), "a": zeros(N, dtype), "out": zeros(N, dtype)})
    assert len(recorded_calls(graph)) == 1


@pytest.mark.skipif(not MODERN_SCAN, reason="this warp-lang scans contiguous arrays only")
def test_array_scan_strided_views():
    def program(s):
        wp.launch(bump, dim=1, inputs=[s["t"]], device=CPU)
        generate(s["t"], s["a"])
        wp.utils.array_scan(s["a"][1::2], s["out"][::3])

    eager_vs_replay(program, lambda: {"t": counter(), "a": zeros(2 * N, wp.float32), "out": zeros(3 * N, wp.float32)})


# --- sorting ----------------------------------------------------------------------------------------
SORT_KEYS = [wp.int32, wp.float32, wp.int64] + ([wp.uint32, wp.uint64, wp.float64] if MODERN_SORT else [])


@pytest.mark.parametrize("key", SORT_KEYS, ids=[t.__name__ for t in SORT_KEYS])
def test_radix_sort_pairs(key):
    def program(s):
        wp.launch(bump, dim=1, inputs=[s["t"]], device=CPU)
        generate(s["t"], s["keys"], dim=COUNT)
        wp.launch(gen_i32, dim=COUNT, inputs=[s["t"], s["values"], 100], device=CPU)
        wp.utils.radix_sort_pairs(s["keys"], s["values"], COUNT)

    _, state = eager_vs_replay(
        program, lambda: {"t": counter(), "keys": zeros(2 * COUNT, key), "values": zeros(2 * COUNT, wp.int32)}
    )
    keys = state["keys"].numpy()[:COUNT]
    assert len(set(keys.tolist())) > 1
    if MODERN_SORT:  # warp-lang 1.12 orders signed integer keys by their unsigned bits
        assert (np.diff(keys) >= 0).all()


@pytest.mark.skipif(not MODERN_SORT, reason="this warp-lang sorts int32 values over the whole key")
def test_radix_sort_pairs_wide_values_and_bit_range():
    def program(s):
        wp.launch(bump, dim=1, inputs=[s["t"]], device=CPU)
        generate(s["t"], s["keys"], dim=COUNT)
        generate(s["t"], s["values"], dim=COUNT)
        wp.utils.radix_sort_pairs(s["keys"], s["values"], COUNT, begin_bit=2, end_bit=20)

    eager_vs_replay(program, lambda: {"t": counter(), "keys": zeros(2 * COUNT, wp.uint32),
                                      "values": zeros(2 * COUNT, wp.float64)})


@pytest.mark.parametrize("explicit_ends", [True, False], ids=["start_end", "starts_only"])
@pytest.mark.parametrize("key", [wp.int32, wp.float32], ids=["int32", "float32"])
def test_segmented_sort_pairs(key, explicit_ends):
    def program(s):
        wp.launch(bump, dim=1, inputs=[s["t"]], device=CPU)
        generate(s["t"], s["keys"], dim=COUNT)
        wp.launch(gen_i32, dim=COUNT, inputs=[s["t"], s["values"], 50], device=CPU)
        if explicit_ends:
            wp.launch(gen_segments, dim=1, inputs=[s["t"], s["starts"], s["ends"]], device=CPU)
            wp.utils.segmented_sort_pairs(s["keys"], s["values"], COUNT, s["starts"], s["ends"])
        else:
            wp.launch(gen_segments, dim=1, inputs=[s["t"], s["bounds"][:3], s["bounds"][1:]], device=CPU)
            wp.utils.segmented_sort_pairs(s["keys"], s["values"], COUNT, s["bounds"])

    eager_vs_replay(program, lambda: {
        "t": counter(), "keys": zeros(2 * COUNT, key), "values": zeros(2 * COUNT, wp.int32),
        "starts": zeros(3, wp.int32), "ends": zeros(3, wp.int32), "bounds": zeros(4, wp.int32),
    })


# --- segmented-sort ranges: checked at replay, as upstream Warp 1.19 -------------------------------
# Warp 1.19's host sort checks every range (eagerly: ValueError; its CPU replay: RuntimeError); 1.12's
# does not (an invalid range is undefined behaviour eagerly, so it is never run eagerly there).
EAGER_CHECKS_SEGMENTS = _compat.runtime().core.wp_segmented_sort_pairs_int_host.restype is ctypes.c_bool
BAD_STEP = 3  # the step whose ranges are invalid

# each: how the second range goes wrong at BAD_STEP, and the [start, end) it then has
BAD_RANGES = {"end_past_count": (0, (5, COUNT + 1)), "negative_start": (1, (-1, 8)), "end_before_start": (2, (6, 4))}


@wp.kernel
def gen_bad_segments(t: wp.array(dtype=wp.int32), how: int, bad_step: int, starts: wp.array(dtype=wp.int32),
                     ends: wp.array(dtype=wp.int32)):
    starts[0] = 0
    ends[0] = 5
    starts[1] = 5
    ends[1] = COUNT
    if t[0] == bad_step:
        if how == 0:
            ends[1] = COUNT + 1
        if how == 1:
            starts[1] = -1
            ends[1] = 8
        if how == 2:
            starts[1] = 6
            ends[1] = 4


def _before_sort(s, how):
    wp.launch(bump, dim=1, inputs=[s["t"]], device=CPU)
    generate(s["t"], s["keys"], dim=COUNT)
    wp.launch(gen_i32, dim=COUNT, inputs=[s["t"], s["values"], 50], device=CPU)
    wp.launch(gen_bad_segments, dim=1, inputs=[s["t"], how, BAD_STEP, s["starts"], s["ends"]], device=CPU)


def _sort_then_more(s):
    wp.utils.segmented_sort_pairs(s["keys"], s["values"], COUNT, s["starts"], s["ends"])
    wp.launch(gen_i32, dim=COUNT, inputs=[s["t"], s["after"], 7], device=CPU)  # must not run after a bad sort


def _bad_range_state():
    return {"t": counter(), "keys": zeros(2 * COUNT, wp.float32), "values": zeros(2 * COUNT, wp.int32),
            "starts": zeros(2, wp.int32), "ends": zeros(2, wp.int32), "after": zeros(COUNT, wp.int32)}


def _bytes(state):
    return {name: a.numpy().copy() for name, a in state.items()}


def _range_message(how) -> str:
    start, end = BAD_RANGES[how][1]
    return rf"Invalid segment range at index 1: \[{start}, {end}\) for count {COUNT}"


def _expected_runs(how) -> list:
    """The state after each good step and after the bad step's failed sort (eagerly, as far as Warp can)."""
    state = _bad_range_state()
    expected = []
    for step in range(1, BAD_STEP + 1):
        _before_sort(state, BAD_RANGES[how][0])
        if step < BAD_STEP:
            _sort_then_more(state)
        elif EAGER_CHECKS_SEGMENTS:  # Warp 1.19 refuses the range itself and changes nothing
            with pytest.raises(ValueError, match=_range_message(how)):
                _sort_then_more(state)
        expected.append(_bytes(state))
    return expected


@pytest.mark.parametrize("how", list(BAD_RANGES))
def test_segmented_sort_invalid_range_stops_the_replay(how):
    """A range that becomes invalid at replay (a kernel in the graph writes it) stops the replay at the sort
    with upstream's ``RuntimeError`` and message, before the sort and everything after it: as the eager
    program stops at Warp 1.19's ``ValueError``. The steps before are bit for bit eager."""
    expected = _expected_runs(how)
    state = _bad_range_state()
    with wp.ScopedCapture(device=CPU) as capture:
        _before_sort(state, BAD_RANGES[how][0])
        _sort_then_more(state)
    graph = capture.graph
    for step in range(1, BAD_STEP):
        wp.capture_launch(graph)
        for name, want in expected[step - 1].items():
            assert same_bits(state[name].numpy(), want), f"step {step}: {name}"
    with pytest.raises(RuntimeError, match=r"CPU graph replay failed: Warp sort error: " + _range_message(how)) as err:
        wp.capture_launch(graph)
    assert isinstance(err.value, apic.ReplayError)
    for name, want in expected[-1].items():
        assert same_bits(state[name].numpy(), want), f"the failed step: {name}"
    state["t"].assign([BAD_STEP - 1])  # the bad step again, through the profiled loop: it checks too
    with pytest.raises(apic.ReplayError, match=_range_message(how)):
        apic.profile(graph, replays=1)


def _bad_arguments():
    """Calls upstream 1.19's segmented_sort_pairs refuses before sorting: (arguments, error class, message)."""
    keys, values = zeros(2 * COUNT, wp.int32), zeros(2 * COUNT, wp.int32)
    starts, ends = wp.array([0, 3, 6], dtype=wp.int32, device=CPU), wp.array([3, 6], dtype=wp.int32, device=CPU)
    return [
        ((keys, values, COUNT, starts, ends), RuntimeError, r"must have the same size \(3 vs 2\)"),
        ((keys, values, -1, starts), ValueError, "count must be non-negative, got -1"),
        ((keys, values, 2**31, starts), ValueError, "count must not exceed 2147483647"),
        ((keys, values, 10.5, starts), TypeError, "count must be an integer"),
        ((keys, values, True, starts), TypeError, "count must be an integer"),
        ((keys, values, COUNT + 1, starts), RuntimeError, "2\\*count elements"),
        ((keys, values, COUNT, starts[::2]), RuntimeError, "requires a contiguous segment_start_indices"),
        ((keys, values, COUNT, wp.array([[0, 3]], dtype=wp.int32, device=CPU)), RuntimeError,
         "segment_start_indices must be one-dimensional"),
        ((keys, values, COUNT, starts, wp.array([3.0, 6.0, 9.0], dtype=wp.float32, device=CPU)), RuntimeError,
         "segment_end_indices array must be of type int32"),
        ((keys, values[::2], 4, starts), RuntimeError, "requires a contiguous values array"),
    ]


@pytest.mark.parametrize("index", range(10))
def test_segmented_sort_arguments_checked_at_capture_as_upstream(index):
    """Upstream 1.19's argument checks, with its classes and messages, at capture time on every warp-lang
    (1.12's own function reads past a shorter end array and ignores strides): nothing is recorded."""
    args, error, message = _bad_arguments()[index]
    if EAGER_CHECKS_SEGMENTS:  # Warp 1.19 eagerly: the oracle
        with pytest.raises(error, match=message):
            wp.utils.segmented_sort_pairs(*args)
    with pytest.raises(error, match=message):
        with wp.ScopedCapture(device=CPU) as capture:
            wp.utils.segmented_sort_pairs(*args)
    assert capture.graph is None


def test_segmented_sort_of_nothing_records_nothing():
    """No element (count 0) or no segment (one start offset): upstream returns before sorting; so does replay."""
    keys, values = zeros(2 * COUNT, wp.int32), zeros(2 * COUNT, wp.int32)
    three, one, none = zeros(3, wp.int32), zeros(1, wp.int32), zeros(0, wp.int32)
    with wp.ScopedCapture(device=CPU) as capture:
        wp.utils.segmented_sort_pairs(keys, values, 0, three)
        wp.utils.segmented_sort_pairs(keys, values, COUNT, one)
        wp.utils.segmented_sort_pairs(keys, values, COUNT, none, none)
    assert capture.graph.recording.ops == ()


SEGMENT_CHILD = """
import json, sys
import numpy as np
import warp as wp
wp.config.quiet = True
import apic
job = json.loads(sys.argv[1])
graph = wp.capture_load(job["path"], device="cpu")
out = {}
for step in range(1, job["steps"] + 1):
    try:
        wp.capture_launch(graph)
        error = None
    except RuntimeError as e:
        error = str(e)
    got = {}
    for name, p in graph.params.items():
        a = wp.empty(shape=p["shape"], dtype=getattr(wp, p["dtype"]), device="cpu")
        graph.get_param(name, a)
        got[name] = a.numpy().view(np.uint8).reshape(-1).tolist()
    out[step] = {"error": error, "arrays": got}
print(json.dumps(out))
"""


def test_saved_segmented_sort_invalid_range_stops_the_replay_in_a_fresh_process(tmp_path):
    import json
    import sys

    from persist_helpers import child_env

    how = "end_past_count"
    expected = _expected_runs(how)
    state = _bad_range_state()
    with wp.ScopedCapture(device=CPU, apic=True) as capture:
        _before_sort(state, BAD_RANGES[how][0])
        _sort_then_more(state)
    wp.capture_save(capture.graph, str(tmp_path / "segments"), outputs=state)
    job = {"path": str(tmp_path / "segments"), "steps": BAD_STEP}
    result = fork_server.run([sys.executable, "-c", SEGMENT_CHILD, json.dumps(job)], cwd=tmp_path, env=child_env(),
                             capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    for step in range(1, BAD_STEP + 1):
        got = report[str(step)]
        if step < BAD_STEP:
            assert got["error"] is None, got["error"]
        else:
            assert got["error"] is not None and re.search(_range_message(how), got["error"]), got["error"]
        for name, want in expected[step - 1].items():
            assert np.array_equal(np.array(got["arrays"][name], dtype=np.uint8), want.view(np.uint8).reshape(-1)), \
                f"step {step}: {name}"


# --- run-length encoding, reductions ---------------------------------------------------------------
def test_runlength_encode():
    def program(s):
        wp.launch(bump, dim=1, inputs=[s["t"]], device=CPU)
        wp.launch(gen_runs, dim=N, inputs=[s["t"], s["values"]], device=CPU)
        wp.utils.runlength_encode(s["values"], s["run_values"], s["run_lengths"], run_count=s["count"])
        wp.utils.runlength_encode(s["values"], s["run_values2"], s["run_lengths2"], run_count=s["count2"],
                                  value_count=N // 2)

    _, state = eager_vs_replay(program, lambda: {
        "t": counter(), "values": zeros(N, wp.int32), "run_values": zeros(N, wp.int32),
        "run_lengths": zeros(N, wp.int32), "count": zeros(1, wp.int32), "run_values2": zeros(N, wp.int32),
        "run_lengths2": zeros(N, wp.int32), "count2": zeros(1, wp.int32),
    })
    assert state["run_lengths"].numpy()[: state["count"].numpy()[0]].sum() == N


@pytest.mark.parametrize("dtype", [wp.float32, wp.float64, wp.vec3], ids=["float32", "float64", "vec3f"])
def test_array_sum_and_inner(dtype):
    scalar = wp.float32 if dtype is wp.vec3 else dtype

    def program(s):
        wp.launch(bump, dim=1, inputs=[s["t"]], device=CPU)
        generate(s["t"], s["a"])
        wp.launch(bump, dim=1, inputs=[s["t"]], device=CPU)
        generate(s["t"], s["b"])
        wp.utils.array_sum(s["a"], out=s["sum"])
        wp.utils.array_sum(s["a"], out=s["partial"], value_count=N // 3)
        wp.utils.array_inner(s["a"], s["b"], out=s["inner"])
        wp.utils.array_inner(s["a"], s["b"], out=s["inner_partial"], count=5)

    graph, _ = eager_vs_replay(program, lambda: {
        "t": counter(), "a": zeros(N, dtype), "b": zeros(N, dtype), "sum": zeros(1, dtype),
        "partial": zeros(1, dtype), "inner": zeros(1, scalar), "inner_partial": zeros(1, scalar),
    })
    assert len(recorded_calls(graph)) == 2


def test_axis_reductions():
    def program(s):
        wp.launch(bump, dim=1, inputs=[s["t"]], device=CPU)
        wp.launch(gen_f32_2d, dim=(4, 6), inputs=[s["t"], s["a"]], device=CPU)
        wp.launch(gen_f32_2d, dim=(4, 6), inputs=[s["t"], s["b"]], device=CPU)
        wp.utils.array_sum(s["a"], out=s["rows"], axis=1)
        wp.utils.array_sum(s["a"], out=s["cols"], axis=0)
        wp.utils.array_inner(s["a"], s["b"], out=s["inner_rows"], axis=1)

    eager_vs_replay(program, lambda: {
        "t": counter(), "a": zeros((4, 6), wp.float32), "b": zeros((4, 6), wp.float32),
        "rows": zeros((4, 1), wp.float32), "cols": zeros((1, 6), wp.float32),
        "inner_rows": zeros((4, 1), wp.float32),
    })


def test_utilities_in_a_loop():
    """A utility inside ``capture_while``: recorded once, run as many times as the condition says."""
    def program(s):
        wp.launch(bump, dim=1, inputs=[s["t"]], device=CPU)
        wp.launch(gen_runs, dim=1, inputs=[s["t"], s["loops"]], device=CPU)  # 0 to 3 loops

        def body():
            wp.utils.array_scan(s["a"], s["a"])
            wp.launch(drop, dim=1, inputs=[s["loops"]], device=CPU)

        wp.capture_while(s["loops"], body)

    def state():
        return {"t": counter(), "loops": counter(), "a": wp.array(np.arange(N, dtype=np.float32) * 0.001, device=CPU)}

    eager_vs_replay(program, state, repeats=5)


# --- save, load, fresh process -----------------------------------------------------------------------
def everything(s):
    wp.launch(bump, dim=1, inputs=[s["t"]], device=CPU)
    generate(s["t"], s["f"])
    wp.utils.array_scan(s["f"], s["scan"])
    generate(s["t"], s["keys"], dim=COUNT)
    wp.launch(gen_i32, dim=COUNT, inputs=[s["t"], s["values"], 64], device=CPU)
    wp.utils.radix_sort_pairs(s["keys"], s["values"], COUNT)
    wp.launch(gen_segments, dim=1, inputs=[s["t"], s["starts"], s["ends"]], device=CPU)
    generate(s["t"], s["seg_keys"], dim=COUNT)
    wp.utils.segmented_sort_pairs(s["seg_keys"], s["values"], COUNT, s["starts"], s["ends"])
    wp.launch(gen_runs, dim=N, inputs=[s["t"], s["runs"]], device=CPU)
    wp.utils.runlength_encode(s["runs"], s["run_values"], s["run_lengths"], run_count=s["run_count"])
    wp.utils.array_sum(s["scan"], out=s["sum"])
    wp.utils.array_inner(s["scan"], s["f"], out=s["inner"])


def everything_state():
    return {
        "t": counter(), "f": zeros(N, wp.float32), "scan": zeros(N, wp.float32), "keys": zeros(2 * COUNT, wp.int32),
        "values": zeros(2 * COUNT, wp.int32), "starts": zeros(3, wp.int32), "ends": zeros(3, wp.int32),
        "seg_keys": zeros(2 * COUNT, wp.float32), "runs": zeros(N, wp.int32), "run_values": zeros(N, wp.int32),
        "run_lengths": zeros(N, wp.int32), "run_count": zeros(1, wp.int32), "sum": zeros(1, wp.float32),
        "inner": zeros(1, wp.float32),
    }


ITERS = 3


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    folder = tmp_path_factory.mktemp("utils")
    state = everything_state()
    with wp.ScopedCapture(device=CPU, apic=True) as capture:
        everything(state)
    assert len(recorded_calls(capture.graph)) == 6
    wp.capture_save(capture.graph, str(folder / "utils"), outputs=dict(state))
    return folder / "utils", list(state)


def test_fresh_process_replay_equals_eager(saved, tmp_path):
    path, names = saved
    expected = everything_state()
    for _ in range(ITERS):
        everything(expected)
    job = {"mode": "file", "path": str(path), "iters": ITERS, "get": {n: str(tmp_path / f"{n}.npy") for n in names}}
    run_child(job, cwd=tmp_path)
    for name in names:
        assert same_bits(np.load(tmp_path / f"{name}.npy"), expected[name].numpy()), name


# --- validation of saved native calls ---------------------------------------------------------------
@pytest.fixture(scope="module")
def doc(saved) -> dict:
    path, _ = saved
    return body_of(path.with_suffix(".wrp"))


def _call(doc, prefix: str) -> int:
    return next(i for i, op in enumerate(doc["ops"])
                if op["kind"] == schema.WireOp.NATIVE_CALL and op["fn"].startswith(prefix))


def _edited(doc, index: int, **fields) -> dict:
    import copy

    doc = copy.deepcopy(doc)
    doc["ops"][index].update(fields)
    return doc


def test_saved_calls_are_checked(doc):
    i = _call(doc, "runlength_encode")
    op = doc["ops"][i]
    region_bytes = doc["regions"][op["args"][0][0]]["nbytes"]
    cases = {
        "is not a native call apic makes": dict(fn="mesh_refit_host"),
        "not a native call": dict(args=op["args"][:4]),
        "outside region": dict(args=[*op["args"][:4], region_bytes]),  # n elements reach past the values
        "outside \\[0, 2147483647\\]": dict(args=[*op["args"][:4], -1]),
        "expected an integer": dict(args=[*op["args"][:4], [0, 0]]),
        "expected a list": dict(args=[0, *op["args"][1:]]),
    }
    for message, fields in cases.items():
        with pytest.raises(apic.FormatError, match=message):
            read_doc(_edited(doc, i, **fields))
    read_doc(doc)  # and the file itself is valid


def test_call_with_another_warp_lang_signature_is_refused(saved, doc):
    """A call saved by a warp-lang whose native takes other arguments is refused at load, saying why."""
    i = _call(doc, "array_scan_float_host")
    args = doc["ops"][i]["args"]
    other = [*args[:3], 1] if len(args) == 7 else [*args[:3], 4, 4, 1, 1]  # the other version's form
    data = writer.encode(_edited(doc, i, args=other))
    reader.read(data)  # a valid file: both forms are known
    path, _ = saved
    folder = path.parent / (path.name + "_modules")
    modules = {f.name: f.read_bytes() for f in folder.iterdir()}
    with pytest.raises(apic.IncompatibleGraphError, match=f"wp_array_scan_float_host with {len(other)} arguments"):
        wp.capture_load_from_bytes(data, modules)
