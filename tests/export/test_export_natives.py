"""Warp's native host utilities (``wp.utils``: radix and segmented sort, scan, run-length encode, sum, inner
product) in an exported library: a graph of such calls on edge-case data (equal keys, which a stable sort keeps
in order; negative zero, infinities and NaNs with payloads among float keys; counts of 0, 1 and thousands; bit
ranges of one and of two radix passes; integer scans that wrap), exported, built into a C program, run with no
Python, and every binding compared bit for bit, scratch halves of sort buffers included, with apic's Python
replay of the same file and with eager Warp. A Warp whose utility the port does not follow (warp-lang
1.12's sorts and scans) is refused at export, naming the utility."""

from __future__ import annotations

import numpy as np
import pytest
import warp as wp

import apic
from apic import _compat
from apic.c_library.from_graph import python_replay
from apic.c_library.relocatable import ExportError, utilities
from apic.record import natives
from conftest import CPU
from export_helpers import build, dumped, exported, run

pytestmark = [pytest.mark.warp_version, pytest.mark.interpreter, pytest.mark.install]

RNG = np.random.default_rng(41)
BIG = 5000
# What the installed warp-lang's natives take (warp-lang 1.12: fewer key and value types, contiguous scans)
MODERN_SCAN = natives.host_arity("array_scan_float_host") == 7
MODERN_SORT = natives.host_arity("radix_sort_pairs_int_host") == 6


def _f32_specials() -> np.ndarray:
    """Float keys a radix sort must order by bits: signed zeros, infinities, NaNs of both signs with payloads,
    denormals, and repeats."""
    bits = np.array([0x7FC00001, 0xFFC00002, 0x7F800001, 0x80000000, 0x00000000, 0x00000001, 0x80000001],
                    dtype=np.uint32).view(np.float32)
    plain = np.array([np.inf, -np.inf, 1.5, -1.5, 1.5, -2.0, 3.25, -0.0, 0.0, 1.5], dtype=np.float32)
    return np.concatenate([bits, plain, bits[:3]])


def _keys(dtype, n: int) -> np.ndarray:
    """``n`` keys of ``dtype`` with many repeats (stability) and both signs and extremes."""
    if dtype == np.float32:
        special = _f32_specials()
        rest = RNG.integers(-4, 4, size=max(n - len(special), 0)).astype(np.float32) * 0.5
        return np.concatenate([special, rest])[:n]
    if dtype == np.float64:
        special = np.array([np.nan, -np.inf, np.inf, -0.0, 0.0, 5e-324, -1.0, 1.0, 1.0], dtype=np.float64)
        rest = RNG.integers(-4, 4, size=max(n - len(special), 0)).astype(np.float64) * 0.25
        return np.concatenate([special, rest])[:n]
    info = np.iinfo(dtype)
    special = np.array([info.min, info.max, 0, 1, info.max, info.min], dtype=dtype)
    rest = RNG.integers(0, 8, size=max(n - len(special), 0)).astype(dtype)
    rest = rest * dtype(3) if info.min == 0 else rest - dtype(4)
    return np.concatenate([special, rest])[:n]


def _sort_buffers(dtype, n: int, value_dtype=np.int32) -> dict:
    """keys and values of 2n elements (Warp's scratch half after the first n), the scratch half noisy."""
    keys = np.concatenate([_keys(dtype, n), _keys(dtype, n)[::-1]]) if n else _keys(dtype, 2)
    values = np.arange(len(keys), dtype=np.int64).astype(value_dtype)
    return {"keys": keys, "values": values}


def _case_radix(data: dict, key, value_dtype, n: int, bits=None):
    name = f"{np.dtype(key).name}_{np.dtype(value_dtype).name}_{n}_{bits}"
    for part, array in _sort_buffers(key, n, value_dtype).items():
        data[f"{part}_{name}"] = array

    def call(a):
        kwargs = {} if bits is None else {"begin_bit": bits[0], "end_bit": bits[1]}
        wp.utils.radix_sort_pairs(a[f"keys_{name}"], a[f"values_{name}"], n, **kwargs)
    return call


def _radix(data: dict) -> list:
    calls = []
    if not MODERN_SORT:  # warp-lang 1.12: int32 values, these keys (its export is refused: the test checks that)
        return [_case_radix(data, key, np.int32, 23) for key in (np.int32, np.float32, np.int64)]
    for key in (np.int32, np.uint32, np.float32, np.int64, np.uint64, np.float64):
        calls.append(_case_radix(data, key, np.int32, 23))
        calls.append(_case_radix(data, key, np.float64, 23))
    calls.append(_case_radix(data, np.float32, np.int32, BIG))
    calls.append(_case_radix(data, np.int32, np.int32, 1))
    calls.append(_case_radix(data, np.int32, np.int32, 0))
    calls.append(_case_radix(data, np.uint32, np.int32, 40, bits=(2, 12)))  # one pass: the scratch copied back
    calls.append(_case_radix(data, np.uint64, np.float64, 40, bits=(3, 37)))  # three passes
    return calls


def _segmented(data: dict) -> list:
    calls = []
    for key in (np.int32, np.float32):
        name = np.dtype(key).name
        n = 30
        bufs = _sort_buffers(key, n)
        data[f"keys_{name}"], data[f"values_{name}"] = bufs["keys"], bufs["values"]
        # an empty segment, a one-element one, overlapping none, the tail left out
        data[f"starts_{name}"] = np.array([0, 4, 4, 5, 17], dtype=np.int32)
        data[f"ends_{name}"] = np.array([4, 4, 5, 17, 26], dtype=np.int32)
        data[f"bounds_{name}"] = np.array([0, 9, 9, 21, 30], dtype=np.int32)  # starts only: ends inferred
        bufs2 = _sort_buffers(key, n)
        data[f"keys2_{name}"], data[f"values2_{name}"] = bufs2["keys"], bufs2["values"]

        def call(a, name=name):
            wp.utils.segmented_sort_pairs(a[f"keys_{name}"], a[f"values_{name}"], 30, a[f"starts_{name}"],
                                          a[f"ends_{name}"])
            wp.utils.segmented_sort_pairs(a[f"keys2_{name}"], a[f"values2_{name}"], 30, a[f"bounds_{name}"])
        calls.append(call)
    return calls


def _scan(data: dict) -> list:
    calls = []
    big = np.iinfo(np.int32).max
    inputs = {
        "int32": np.array([big, 1, -5, big, 7, 0] * 40, dtype=np.int32),  # wraps, as Warp's build does
        "int64": (RNG.integers(-(1 << 62), 1 << 62, size=200)).astype(np.int64),
        "float32": np.concatenate([RNG.standard_normal(BIG).astype(np.float32) * 1e3,
                                   np.array([1e30, -1e30, 1e-30, np.inf], dtype=np.float32)]),
        "float64": RNG.standard_normal(300) * 1e6,
    }
    if not MODERN_SCAN:
        inputs = {name: inputs[name] for name in ("int32", "float32")}
    for name, values in inputs.items():
        for inclusive in (True, False):
            key = f"{name}_{inclusive}"
            data[f"in_{key}"] = values
            data[f"out_{key}"] = np.full_like(values, 7)

            def call(a, key=key, inclusive=inclusive):
                wp.utils.array_scan(a[f"in_{key}"], a[f"out_{key}"], inclusive=inclusive)
            calls.append(call)
    data["in_one"] = np.array([2.5], dtype=np.float32)
    data["out_one"] = np.zeros(1, dtype=np.float32)
    data["in_vec"] = RNG.standard_normal((50, 3)).astype(np.float32)
    data["out_vec"] = np.zeros((50, 3), dtype=np.float32)
    data["in_strided"] = RNG.standard_normal(60).astype(np.float32)
    data["out_strided"] = np.zeros(90, dtype=np.float32)

    def more(a):
        wp.utils.array_scan(a["in_one"], a["out_one"], inclusive=False)
        if MODERN_SCAN:
            wp.utils.array_scan(a["in_vec"], a["out_vec"])
            wp.utils.array_scan(a["in_strided"][1::2], a["out_strided"][::3])
    return [*calls, more]


def _rle(data: dict) -> list:
    cases = {"mixed": np.array([3, 3, -1, -1, -1, 0, 7, 7, 3, 3, 3, 3], dtype=np.int32),
             "same": np.full(BIG, -9, dtype=np.int32), "one": np.array([5], dtype=np.int32),
             "alternating": np.tile(np.array([1, 2], dtype=np.int32), 500),
             "empty": np.array([4, 4], dtype=np.int32)}
    calls = []
    for name, values in cases.items():
        data[f"v_{name}"] = values
        data[f"rv_{name}"] = np.full_like(values, 99)
        data[f"rl_{name}"] = np.full_like(values, 99)
        data[f"rc_{name}"] = np.full(1, 99, dtype=np.int32)

        def call(a, name=name, count=0 if name == "empty" else None):
            wp.utils.runlength_encode(a[f"v_{name}"], a[f"rv_{name}"], a[f"rl_{name}"], run_count=a[f"rc_{name}"],
                                      value_count=count)
        calls.append(call)
    return calls


def _reduce(data: dict) -> list:
    data["s32"] = RNG.standard_normal(BIG).astype(np.float32) * 1e4
    data["s64"] = RNG.standard_normal(400) * 1e8
    data["sv"] = RNG.standard_normal((100, 3)).astype(np.float32)
    data["sm"] = RNG.standard_normal((40, 7)).astype(np.float64)  # a length Warp sums without a fixed unroll
    data["i32b"] = RNG.standard_normal(BIG).astype(np.float32)
    data["i64b"] = RNG.standard_normal(400)
    data["ivb"] = RNG.standard_normal((100, 3)).astype(np.float32)
    data["smb"] = RNG.standard_normal((40, 7)).astype(np.float64)
    for name, shape, dtype in (("o_s32", 1, np.float32), ("o_s64", 1, np.float64), ("o_i32", 1, np.float32),
                               ("o_i64", 1, np.float64), ("o_iv", 1, np.float32), ("o_im", 1, np.float64)):
        data[name] = np.full(shape, 3, dtype=dtype)
    data["o_sv"] = np.zeros((1, 3), dtype=np.float32)

    def call(a):
        wp.utils.array_sum(a["s32"], out=a["o_s32"])
        wp.utils.array_sum(a["s64"], out=a["o_s64"])
        wp.utils.array_sum(a["sv"], out=a["o_sv"])
        wp.utils.array_inner(a["s32"], a["i32b"], out=a["o_i32"])
        wp.utils.array_inner(a["s64"], a["i64b"], out=a["o_i64"])
        wp.utils.array_inner(a["sv"], a["ivb"], out=a["o_iv"])
        wp.utils.array_inner(a["sm"], a["smb"], out=a["o_im"])
    return [call]


def _warp_arrays(data: dict) -> dict:
    out = {}
    for name, values in data.items():
        dtype = wp.vec3 if values.ndim == 2 and values.shape[1] == 3 and values.dtype == np.float32 else None
        out[name] = wp.array(values, dtype=dtype, device=CPU) if dtype else wp.array(values, device=CPU)
    return out


FAMILIES = {"radix_sort": _radix, "segmented_sort": _segmented, "scan": _scan, "runlength_encode": _rle,
            "reduce": _reduce}


def _refused(graph) -> set:
    """The utilities of ``graph`` the export does not run in this Warp (another argument list)."""
    ported = {name for name, _ in utilities()}
    return {op.name for op in graph.recording.ops if getattr(op, "name", None) and op.name not in ported}


@pytest.mark.parametrize("family", list(FAMILIES))
def test_native_utility_in_c_matches_python_replay_and_eager(family, tmp_path):
    data = {}
    calls = FAMILIES[family](data)
    captured = _warp_arrays(data)
    with wp.ScopedCapture(device="cpu", apic=True) as capture:
        for call in calls:
            call(captured)
    assert capture.graph.recording.ops, "nothing was recorded"
    apic.capture_save(capture.graph, tmp_path / "g.wrp", inputs=captured)
    refused = _refused(capture.graph)
    assert not refused or not _compat.WARP_VERSION.startswith("1.19"), refused  # the Warp the ports follow
    if refused:
        with pytest.raises(ExportError, match="NativeCall"):
            exported(tmp_path / "g.wrp", tmp_path / "out", "g")
        return
    exported(tmp_path / "g.wrp", tmp_path / "out", "g")
    runner = build("runner.c", tmp_path / "out", "g", tmp_path / "runner")
    (tmp_path / "d").mkdir()
    done = run(runner, ["m", "r:2", f"d:{tmp_path / 'd'}"], tmp_path)
    assert done.returncode == 0, done.stderr
    got = dumped(tmp_path / "d", list(data))
    assert got == python_replay(apic.capture_load(tmp_path / "g.wrp"), {}, {}, 2)
    eager = _warp_arrays(data)
    for _ in range(2):
        for call in calls:
            call(eager)
    for name, array in eager.items():
        assert got[name] == array.numpy().tobytes(), name
    changed = [name for name in data if got[name] != data[name].tobytes()]
    assert len(changed) >= len(calls), changed


def test_bad_segment_range_stops_the_c_replay_before_the_sort(tmp_path):
    """A segment range written from C that is outside the keys stops the replay at the sort, naming it, as
    apic's Python replay stops (Warp 1.19's check); memory is as before the sort."""
    keys = wp.array(np.arange(20, 0, -1, dtype=np.int32), device=CPU)
    values = wp.array(np.arange(20, dtype=np.int32), device=CPU)
    starts = wp.array(np.array([0, 5], dtype=np.int32), device=CPU)
    with wp.ScopedCapture(device="cpu", apic=True) as capture:
        wp.utils.segmented_sort_pairs(keys, values, 10, starts)
    apic.capture_save(capture.graph, tmp_path / "g.wrp", inputs={"keys": keys, "values": values, "starts": starts})
    if _refused(capture.graph):  # warp-lang 1.12's segmented sort orders signed keys otherwise: refused
        with pytest.raises(ExportError, match="wp_segmented_sort_pairs_int_host"):
            exported(tmp_path / "g.wrp", tmp_path / "out", "g")
        return
    exported(tmp_path / "g.wrp", tmp_path / "out", "g")
    runner = build("runner.c", tmp_path / "out", "g", tmp_path / "runner")
    (tmp_path / "bad.in").write_bytes(np.array([0, 12], dtype=np.int32).tobytes())
    (tmp_path / "d").mkdir()
    done = run(runner, [f"w:starts={tmp_path / 'bad.in'}", "x:1", f"d:{tmp_path / 'd'}", "r:0"], tmp_path)
    assert done.returncode == 0, done.stderr
    assert "Invalid segment range at index 0: [0, 12) for count 10" in done.stdout, done.stdout
    got = dumped(tmp_path / "d", ["keys", "values"])
    assert got == {"keys": keys.numpy().tobytes(), "values": values.numpy().tobytes()}
    graph = apic.capture_load(tmp_path / "g.wrp")
    graph.param_numpy("starts")[:] = [0, 12]
    with pytest.raises(RuntimeError, match="Invalid segment range at index 0"):
        wp.capture_launch(graph)


def test_sort_and_scan_of_inputs_written_from_c(tmp_path):
    """Keys written from C (another order, other NaNs than the saved ones) are sorted and scanned as the Python
    replay and eager Warp do with the same keys: the runtime reads graph memory at replay, not the capture's."""
    n = 300
    keys = wp.array(np.concatenate([_keys(np.float32, n), np.zeros(n, np.float32)]), device=CPU)
    values = wp.array(np.arange(2 * n, dtype=np.int32), device=CPU)
    counts = wp.array(np.arange(n, dtype=np.int32), device=CPU)
    sums = wp.zeros(n, dtype=wp.int32, device=CPU)

    def program(a):
        wp.utils.radix_sort_pairs(a["keys"], a["values"], n)
        wp.utils.array_scan(a["counts"], a["sums"], inclusive=False)

    with wp.ScopedCapture(device="cpu", apic=True) as capture:
        program({"keys": keys, "values": values, "counts": counts, "sums": sums})
    bound = {"keys": keys, "values": values, "counts": counts, "sums": sums}
    apic.capture_save(capture.graph, tmp_path / "g.wrp", inputs=bound)
    if _refused(capture.graph):
        with pytest.raises(ExportError, match="NativeCall"):
            exported(tmp_path / "g.wrp", tmp_path / "out", "g")
        return
    exported(tmp_path / "g.wrp", tmp_path / "out", "g")
    runner = build("runner.c", tmp_path / "out", "g", tmp_path / "runner")
    scratch = RNG.standard_normal(n).astype(np.float32)
    written = {"keys": np.concatenate([RNG.permutation(_keys(np.float32, n)), scratch]),
               "counts": RNG.integers(-1000, 1000, size=n).astype(np.int32)}
    for name, array in written.items():
        (tmp_path / f"{name}.in").write_bytes(array.tobytes())
    (tmp_path / "d").mkdir()
    steps = [f"w:{name}={tmp_path / f'{name}.in'}" for name in written]
    done = run(runner, [*steps, "r:1", f"d:{tmp_path / 'd'}"], tmp_path)
    assert done.returncode == 0, done.stderr
    got = dumped(tmp_path / "d", list(bound))
    python = python_replay(apic.capture_load(tmp_path / "g.wrp"), {k: v.tobytes() for k, v in written.items()}, {}, 1)
    assert got == python
    eager = {"keys": wp.array(written["keys"], device=CPU), "values": wp.array(values.numpy(), device=CPU),
             "counts": wp.array(written["counts"], device=CPU), "sums": wp.zeros(n, dtype=wp.int32, device=CPU)}
    program(eager)
    assert got == {name: array.numpy().tobytes() for name, array in eager.items()}
    assert got["keys"] != keys.numpy().tobytes()
