"""Warp's native host utilities called outside ``wp.utils``, and ``import apic`` after Warp's submodules.

Libraries call ``runtime.core.wp_*_host`` themselves (a solver writing dot products to
``out.ptr + k * stride``), and bind ``wp.utils`` functions at their own import, often before
``import apic``. Upstream Warp records such calls at the native layer; so must apic. Each program
below makes new inputs with a kernel, then calls every utility apic records, straight through
``runtime.core``: replay must equal the eager run of the same calls and of the ``wp.utils`` calls,
bit for bit, live and after a save and a load in a fresh process. Import order runs in subprocesses.
"""

from __future__ import annotations

import ctypes
import importlib.util
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import warp as wp

import apic
from apic import _compat
from apic.record import natives
from conftest import CPU, eager_vs_replay
from persist_helpers import TESTS, child_env, run_child, same_bits
from test_utils_ops import (
    COUNT,
    MODERN_SCAN,
    MODERN_SORT,
    N,
    bump,
    everything,
    everything_state,
    gen_i32,
    gen_runs,
    gen_segments,
    generate,
    recorded_calls,
)

pytestmark = [pytest.mark.warp_version, pytest.mark.interpreter]

ALL_CALLS = {
    "array_scan_float_host", "radix_sort_pairs_int_host", "segmented_sort_pairs_float_host",
    "runlength_encode_int_host", "array_sum_float_host", "array_inner_float_host",
}


def _core():
    return _compat.runtime().core


def direct(s):
    """``test_utils_ops.everything``, each utility called as a library would: its native, by address."""
    core = _core()
    wp.launch(bump, dim=1, inputs=[s["t"]], device=CPU)
    generate(s["t"], s["f"])
    if MODERN_SCAN:
        core.wp_array_scan_float_host(s["f"].ptr, s["scan"].ptr, N, 4, 4, 1, True)
    else:
        core.wp_array_scan_float_host(s["f"].ptr, s["scan"].ptr, N, True)
    generate(s["t"], s["keys"], dim=COUNT)
    wp.launch(gen_i32, dim=COUNT, inputs=[s["t"], s["values"], 64], device=CPU)
    if MODERN_SORT:
        core.wp_radix_sort_pairs_int_host(s["keys"].ptr, s["values"].ptr, COUNT, 0, 32, 4)
    else:
        core.wp_radix_sort_pairs_int_host(s["keys"].ptr, s["values"].ptr, COUNT)
    wp.launch(gen_segments, dim=1, inputs=[s["t"], s["starts"], s["ends"]], device=CPU)
    generate(s["t"], s["seg_keys"], dim=COUNT)
    core.wp_segmented_sort_pairs_float_host(s["seg_keys"].ptr, s["values"].ptr, COUNT, s["starts"].ptr,
                                            s["ends"].ptr, 3)
    wp.launch(gen_runs, dim=N, inputs=[s["t"], s["runs"]], device=CPU)
    core.wp_runlength_encode_int_host(s["runs"].ptr, s["run_values"].ptr, s["run_lengths"].ptr,
                                      s["run_count"].ptr, N)
    core.wp_array_sum_float_host(s["scan"].ptr, s["sum"].ptr, N, 4, 1)
    core.wp_array_inner_float_host(s["scan"].ptr, s["f"].ptr, s["inner"].ptr, N, 4, 4, 1)


def test_direct_native_calls_replay_as_eager():
    graph, _ = eager_vs_replay(direct, everything_state)
    assert recorded_calls(graph) == ALL_CALLS


def test_direct_calls_equal_the_wp_utils_calls():
    """Eager wp.utils (the documented path) vs the captured direct natives: the same bits."""
    through_utils, replayed = everything_state(), everything_state()
    with wp.ScopedCapture(device=CPU) as capture:
        direct(replayed)
    for _ in range(3):
        everything(through_utils)
        wp.capture_launch(capture.graph)
        for name, value in through_utils.items():
            assert same_bits(replayed[name].numpy(), value.numpy()), name


def test_strided_output_pointer_inside_an_array():
    """The solver form: dot products written to ``out.ptr + k * stride``, lengths varying with k."""
    a = wp.array(np.linspace(-1, 1, N, dtype=np.float32), device=CPU)
    b = wp.array(np.linspace(2, -3, N, dtype=np.float32), device=CPU)
    t = wp.zeros(1, dtype=wp.int32, device=CPU)

    def dots(s):
        wp.launch(bump, dim=1, inputs=[s["t"]], device=CPU)
        generate(s["t"], s["a"])
        for k in range(4):
            _core().wp_array_inner_float_host(s["a"].ptr, s["b"].ptr, s["out"].ptr + 4 * k, N - 3 * k, 4, 4, 1)

    def state():
        return {"t": wp.clone(t), "a": wp.clone(a), "b": wp.clone(b), "out": wp.zeros(4, dtype=wp.float32, device=CPU)}

    eager_vs_replay(dots, state)


def test_saved_direct_calls_replay_in_a_fresh_process(tmp_path):
    state = everything_state()
    with wp.ScopedCapture(device=CPU, apic=True) as capture:
        direct(state)
    wp.capture_save(capture.graph, str(tmp_path / "direct"), outputs=dict(state))
    expected = everything_state()
    for _ in range(3):
        everything(expected)  # the wp.utils path, eagerly: the oracle
    job = {"mode": "file", "path": str(tmp_path / "direct"), "iters": 3,
           "get": {n: str(tmp_path / f"{n}.npy") for n in state}}
    run_child(job, cwd=tmp_path)
    for name in state:
        assert same_bits(np.load(tmp_path / f"{name}.npy"), expected[name].numpy()), name


def _refused(call, match):
    with pytest.raises(apic.UnsupportedOperationError, match=match) as caught:
        with wp.ScopedCapture(device=CPU) as capture:
            call()
    assert isinstance(caught.value, NotImplementedError)
    assert capture.graph is None
    return caught.value


def test_pointer_outside_warp_memory_is_refused():
    host = np.zeros(8, dtype=np.float32)  # NumPy memory: no Warp array the graph could keep alive
    out = wp.zeros(1, dtype=wp.float32, device=CPU)
    error = _refused(lambda: _core().wp_array_sum_float_host(host.ctypes.data, out.ptr, 8, 4, 1),
                     "wp_array_sum_float_host.*argument 0.*not inside the memory of a live Warp CPU array")
    assert error.operation.startswith("wp_array_sum_float_host")


def test_reach_past_the_array_is_refused():
    a = wp.zeros(8, dtype=wp.float32, device=CPU)
    out = wp.zeros(1, dtype=wp.float32, device=CPU)
    _refused(lambda: _core().wp_array_sum_float_host(a.ptr, out.ptr, 9, 4, 1), "argument 0.*reaching 36 bytes")
    _refused(lambda: _core().wp_array_sum_float_host(a.ptr, out.ptr + 4, 8, 4, 1), "argument 1")


def test_direct_call_with_invalid_integers_is_refused():
    a = wp.zeros(8, dtype=wp.float32, device=CPU)
    out = wp.zeros(1, dtype=wp.float32, device=CPU)
    _refused(lambda: _core().wp_array_sum_float_host(a.ptr, out.ptr, 8, 4, 0), "wp_array_sum_float_host.*argument 4")


# --- import order ----------------------------------------------------------------------------------
IMPORT_ORDER_CHILD = textwrap.dedent(
    """
    import importlib, json, sys
    import numpy as np
    import warp as wp
    wp.config.quiet = True
    order, submodule = sys.argv[1], sys.argv[2]
    if order == "before":
        importlib.import_module(submodule)
        import apic
    else:
        import apic
        importlib.import_module(submodule)
    from warp._src import utils as wu
    names = ("array_scan", "radix_sort_pairs", "segmented_sort_pairs", "runlength_encode", "array_sum", "array_inner")
    originals = {n: getattr(vars(wu)[n], "__wrapped__", None) for n in names}
    assert all(originals.values()), "wp.utils functions are not apic's"
    stale = [f"{key}.{n}" for key, m in list(sys.modules.items()) if key.startswith("warp") and m is not None
             for n in names if vars(m).get(n) is originals[n]]
    assert not stale, f"Warp modules still hold the original functions: {stale}"
    bound = [key for key, m in list(sys.modules.items()) if key.startswith("warp._src.") and m is not None
             and key != "warp._src.utils" and vars(m).get("array_scan") is vars(wu)["array_scan"]]
    # the function a submodule bound at its import, or wp.utils where it binds none
    scan = vars(sys.modules[bound[0]])["array_scan"] if bound else wp.utils.array_scan

    @wp.kernel
    def gen(t: wp.array(dtype=wp.int32), out: wp.array(dtype=wp.float32)):
        i = wp.tid()
        t0 = t[0]
        out[i] = wp.float32((t0 * 7919 + i * 104729 + 13) % 1000) * 0.37 - 11.0

    @wp.kernel
    def bump(t: wp.array(dtype=wp.int32)):
        t[0] = t[0] + 1

    def step(s):
        wp.launch(bump, dim=1, inputs=[s[0]], device="cpu")
        wp.launch(gen, dim=16, inputs=[s[0], s[1]], device="cpu")
        scan(s[1], s[2])
        wp.utils.array_inner(s[1], s[2], out=s[3])

    def state():
        return [wp.zeros(1, dtype=wp.int32, device="cpu"), wp.zeros(16, dtype=wp.float32, device="cpu"),
                wp.zeros(16, dtype=wp.float32, device="cpu"), wp.zeros(1, dtype=wp.float32, device="cpu")]

    eager, replayed = state(), state()
    with wp.ScopedCapture(device="cpu") as capture:
        step(replayed)
    for _ in range(3):
        step(eager)
        wp.capture_launch(capture.graph)
        for e, r in zip(eager, replayed):
            assert np.array_equal(e.numpy().view(np.uint8), r.numpy().view(np.uint8))
    # a form apic refuses through wp.utils is refused the same way through the bound name
    rle = next((vars(m)["runlength_encode"] for key, m in list(sys.modules.items())
                if key.startswith("warp._src.") and key != "warp._src.utils" and m is not None
                and "runlength_encode" in vars(m)), wp.utils.runlength_encode)
    try:
        with wp.ScopedCapture(device="cpu"):
            rle(*[wp.zeros(4, dtype=wp.int32, device="cpu") for _ in range(3)])
    except apic.UnsupportedOperationError as error:
        refused = str(error)
    else:
        refused = None
    print(json.dumps({"bound": bound, "refused": refused}))
    """
)


@pytest.mark.parametrize("order", ["before", "after"])
@pytest.mark.parametrize("submodule", ["warp.fem", "warp.sparse", "warp.optim", "warp.geometry", "warp.render"])
def test_import_apic_after_a_warp_submodule(submodule, order, tmp_path):
    if importlib.util.find_spec(submodule) is None:
        pytest.skip(f"this warp-lang has no {submodule}")
    script = tmp_path / "import_order_child.py"  # a file: Warp reads kernels' source from it
    script.write_text(IMPORT_ORDER_CHILD)
    result = subprocess.run([sys.executable, str(script), order, submodule], cwd=tmp_path,
                            env=child_env(), capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr}"
    report = json.loads(result.stdout.strip().splitlines()[-1])
    if submodule == "warp.fem":
        assert report["bound"], "warp.fem binds array_scan at its import: that binding must have been used"
    assert report["refused"] and "without run_count" in report["refused"]


# --- the matrix: every recorded native, both ways, apic imported before and after Warp's submodules ----
def _natives_here() -> list:
    """Every native host utility apic records that this warp-lang exports (a signature for its arity)."""
    found = []
    for name in natives.NAMES:
        arity = natives.host_arity(name)
        if arity is not None and natives.signature(name, arity) is not None:
            found.append(name)
    return sorted(found)


@pytest.mark.parametrize("order", ["before", "after"])
@pytest.mark.parametrize("submodule", ["warp.fem", "warp.sparse", "warp.optim"])
def test_every_native_both_ways_in_either_import_order(submodule, order, tmp_path):
    """Each native apic records here, called through its Python function (as the submodule bound it, or
    wp.utils / warp.sparse) and directly, with apic imported before or after the submodule: both captures
    replay bit for bit as the eager wp.utils program (tests/native_matrix_child.py) and record every one."""
    if importlib.util.find_spec(submodule) is None:
        pytest.skip(f"this warp-lang has no {submodule}")
    child = os.path.join(TESTS, "native_matrix_child.py")
    result = subprocess.run([sys.executable, child, order, submodule], cwd=tmp_path, env=child_env(),
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr}"
    report = json.loads(result.stdout.strip().splitlines()[-1])
    expected = _natives_here()
    assert report["recorded"]["functions"] == expected
    assert report["recorded"]["direct"] == expected
    if submodule == "warp.fem":  # it binds these at its import: those bindings were the ones called
        assert {"array_scan", "radix_sort_pairs", "runlength_encode"} <= set(report["bound_in"])


# --- host memory functions called directly (upstream records them at the native layer too) ----------
def memory_direct(s):
    core = _core()
    wp.launch(bump, dim=1, inputs=[s["t"]], device=CPU)
    generate(s["t"], s["f"])
    core.wp_memcpy_h2h(ctypes.c_void_p(s["copy"].ptr + 8), ctypes.c_void_p(s["f"].ptr), ctypes.c_size_t(4 * (N - 4)))
    core.wp_memset_host(ctypes.c_void_p(s["f"].ptr + 4), ctypes.c_int(0x3F), ctypes.c_size_t(12))
    value = (ctypes.c_float * 2)(1.5, -2.25)
    core.wp_memtile_host(ctypes.c_void_p(s["tiled"].ptr), value, ctypes.c_size_t(8), ctypes.c_size_t(N // 2))


def memory_state():
    return {"t": wp.zeros(1, dtype=wp.int32, device=CPU), "f": wp.zeros(N, dtype=wp.float32, device=CPU),
            "copy": wp.zeros(N, dtype=wp.float32, device=CPU), "tiled": wp.zeros(N, dtype=wp.float32, device=CPU)}


def test_direct_memory_calls_replay_as_eager():
    eager_vs_replay(memory_direct, memory_state)


def test_saved_direct_memory_calls_replay_in_a_fresh_process(tmp_path):
    state = memory_state()
    with wp.ScopedCapture(device=CPU, apic=True) as capture:
        memory_direct(state)
    wp.capture_save(capture.graph, str(tmp_path / "memory"), outputs=dict(state))
    expected = memory_state()
    for _ in range(3):
        memory_direct(expected)
    job = {"mode": "file", "path": str(tmp_path / "memory"), "iters": 3,
           "get": {n: str(tmp_path / f"{n}.npy") for n in state}}
    run_child(job, cwd=tmp_path)
    for name in state:
        assert same_bits(np.load(tmp_path / f"{name}.npy"), expected[name].numpy()), name


def test_direct_memory_call_outside_warp_memory_is_refused():
    core = _core()
    raw = core.wp_alloc_host(ctypes.c_size_t(64), None)  # memory no Warp array owns: nothing could keep it alive
    out = wp.zeros(16, dtype=wp.uint8, device=CPU)
    try:
        _refused(lambda: core.wp_memset_host(ctypes.c_void_p(raw), ctypes.c_int(0), ctypes.c_size_t(32)),
                 "wp_memset_host.*argument 0.*not inside the memory of a live Warp CPU array")
        _refused(lambda: core.wp_memcpy_h2h(ctypes.c_void_p(out.ptr), ctypes.c_void_p(out.ptr), ctypes.c_size_t(17)),
                 "wp_memcpy_h2h.*argument 0.*reaching 17 bytes")
    finally:
        core.wp_free_host(ctypes.c_void_p(raw))


def test_arrays_found_by_address_are_kept_and_no_others():
    """The graph keeps the arrays a direct call reaches (replay after the caller dropped them), and only those."""
    import gc
    import weakref

    bystander = wp.zeros(8, dtype=wp.float32, device=CPU)  # seen by the scan for addresses, used by nothing
    gone = weakref.ref(bystander)
    a = wp.array(np.arange(8, dtype=np.float32), device=CPU)
    out = wp.zeros(1, dtype=wp.float32, device=CPU)
    kept = weakref.ref(a)
    with wp.ScopedCapture(device=CPU) as capture:
        _core().wp_array_sum_float_host(a.ptr, out.ptr, 8, 4, 1)
    del a, bystander
    gc.collect()
    assert gone() is None, "a bystander array was kept alive by the capture"
    assert kept() is not None, "the array the call reads was not kept alive by the graph"
    churn_arrays = [wp.full(8, -1.0, dtype=wp.float32, device=CPU) for _ in range(16)]
    wp.capture_launch(capture.graph)
    assert out.numpy()[0] == 28.0 and len(churn_arrays) == 16
