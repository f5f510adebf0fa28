"""The replay engine: no Python per op, graph lifetime, repeats, and thread isolation."""

from __future__ import annotations

import gc
import os
import sys
import threading

import numpy as np
import pytest
import warp as wp

import apic
import kernels as K
import fork_server
from conftest import CPU, churn

pytestmark = [pytest.mark.warp_version, pytest.mark.interpreter]

F32 = K.ARRAY_ACCUM[wp.float32]


# --- no Python per op ------------------------------------------------------------------------------
def _tick_graph(ops: int):
    counter = wp.zeros(1, dtype=wp.int64, device=CPU)
    cmd = wp.launch(K.tick, dim=1, inputs=[counter], device=CPU, record_cmd=True)
    with wp.ScopedCapture(device=CPU) as capture:
        for _ in range(ops):
            cmd.launch()
    return capture.graph, counter


def _profile_events(fn) -> list:
    """Every Python-level call and C call (as seen by sys.setprofile) made while running ``fn``."""
    events = []

    def profiler(frame, event, arg):
        if event in ("call", "c_call"):
            events.append((event, frame.f_code.co_name if event == "call" else getattr(arg, "__qualname__", str(arg))))

    sys.setprofile(profiler)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return events


# The reference interpreter (APIC_REPLAY=reference) calls Python per op by design: these two tests are
# about the Numba one, and say so instead of failing when the suite runs under the reference.
numba_interpreter_only = pytest.mark.skipif(
    os.environ.get("APIC_REPLAY", "numba") != "numba", reason="checks the Numba interpreter, not APIC_REPLAY's"
)


@numba_interpreter_only
def test_replay_makes_no_python_call_per_op():
    small, small_counter = _tick_graph(100)
    large, large_counter = _tick_graph(10_000)
    assert len(large.program.table) == 10_000
    for graph in (small, large):  # warm-up: compiles or loads the interpreter
        wp.capture_launch(graph)
    small_events = _profile_events(lambda: wp.capture_launch(small))
    large_events = _profile_events(lambda: wp.capture_launch(large))
    assert small_events, "the profiler saw nothing: the measurement is broken"
    assert len(large_events) == len(small_events), (
        f"replaying 10,000 ops made {len(large_events)} Python-level calls, 100 ops made {len(small_events)}"
    )
    assert small_counter.numpy()[0] == 2 * 100
    assert large_counter.numpy()[0] == 2 * 10_000


def test_graph_launch_repeats_in_one_call():
    graph, counter = _tick_graph(7)
    graph.launch(repeats=5)
    assert counter.numpy()[0] == 35
    if os.environ.get("APIC_REPLAY", "numba") != "numba":
        return  # the reference interpreter's Python calls grow with repeats by design (counted above)
    # the same Python calls for 2 repeats as for 50 (a single replay has a shorter path of its own)
    events = _profile_events(lambda: graph.launch(repeats=50))
    assert len(events) == len(_profile_events(lambda: graph.launch(repeats=2)))
    assert counter.numpy()[0] == 35 + 50 * 7 + 2 * 7


def test_empty_graph_replays():
    with wp.ScopedCapture(device=CPU) as capture:
        pass
    assert capture.graph.op_count == 0
    wp.capture_launch(capture.graph)


# --- the capture API in its forms ------------------------------------------------------------------
def _accumulate_twice(a, out, device=CPU):
    wp.launch(F32, dim=8, inputs=[a, out], device=device)
    wp.launch(F32, dim=8, inputs=[a, out])  # no device: the default device (the CPU here)


def _capture_in_form(form: str):
    """``_accumulate_twice`` captured in one of the capture API's forms, replayed once; the graph and the output."""
    a = wp.array(np.arange(8, dtype=np.float32), device=CPU)
    out = wp.zeros(8, dtype=wp.float32, device=CPU)
    if form == "scoped_default_device":
        with wp.ScopedCapture() as capture:
            _accumulate_twice(a, out)
        graph = capture.graph
    else:
        kwargs = {} if form == "begin_end_default" else {"device": CPU}
        wp.capture_begin(force_module_load=form == "force_module_load", **kwargs)
        try:
            _accumulate_twice(a, out)
        finally:
            graph = wp.capture_end(**kwargs)
    untouched = not out.numpy().any()
    wp.capture_launch(graph)
    return graph, untouched, out.numpy()


# force_module_load=True loads every module the process imported, as Warp's does: in a child that imported only the
# suite's kernels, since in the suite's worker it compiled every module earlier test files had imported and not
# loaded (about 5 minutes of warp-lang 1.12.1's compiler, depending on which files ran before)
_FORCE_LOAD_CHILD = """
import json, sys
import warp as wp
wp.config.quiet = True
import apic
import test_replay_engine as engine
graph, untouched, out = engine._capture_in_form("force_module_load")
print(json.dumps({"apic_graph": isinstance(graph, apic.Graph), "op_count": graph.op_count, "untouched": untouched,
                  "out": out.tolist()}))
"""


@pytest.mark.parametrize("form", ["scoped_default_device", "begin_end", "begin_end_default", "force_module_load"])
def test_capture_api_forms(form):
    if wp.get_device().is_cuda:
        pytest.skip("the default device is a CUDA device: the default-device forms would capture on it")
    if form == "force_module_load":
        import json

        from persist_helpers import TESTS, child_env

        env = child_env()
        env["PYTHONPATH"] = os.pathsep.join([os.path.dirname(os.path.abspath(__file__)), TESTS, env["PYTHONPATH"]])
        done = fork_server.run([sys.executable, "-c", _FORCE_LOAD_CHILD], env=env, capture_output=True, text=True,
                               timeout=600)
        assert done.returncode == 0, done.stderr
        report = json.loads(done.stdout.strip().splitlines()[-1])
        assert report["apic_graph"] and report["op_count"] == 2 and report["untouched"]
        np.testing.assert_array_equal(np.array(report["out"], dtype=np.float32), 2 * np.arange(8, dtype=np.float32))
        return
    graph, untouched, out = _capture_in_form(form)
    assert isinstance(graph, apic.Graph) and graph.op_count == 2
    assert untouched
    np.testing.assert_array_equal(out, 2 * np.arange(8, dtype=np.float32))


def test_apic_flag_is_kept_on_the_graph():
    with wp.ScopedCapture(device=CPU, apic=True) as with_flag:
        pass
    with wp.ScopedCapture(device=CPU) as without_flag:
        pass
    assert with_flag.graph.apic is True and without_flag.graph.apic is False


def test_module_loaded_during_capture():
    """The first launch of a kernel whose module is not loaded loads it during the capture."""
    wp.get_module(K.__name__).unload()
    a = wp.array(np.arange(8, dtype=np.float32), device=CPU)
    out = wp.zeros(8, dtype=wp.float32, device=CPU)
    with wp.ScopedCapture(device=CPU) as capture:
        wp.launch(F32, dim=8, inputs=[a, out], device=CPU)
    assert not out.numpy().any()
    wp.capture_launch(capture.graph)
    np.testing.assert_array_equal(out.numpy(), np.arange(8, dtype=np.float32))


# --- lifetime --------------------------------------------------------------------------------------
def test_replay_after_user_deleted_the_inputs():
    a = wp.array(np.arange(8, dtype=np.float32), device=CPU)
    b = wp.array(np.ones(8, dtype=np.float32), device=CPU)
    out = wp.zeros(8, dtype=wp.float32, device=CPU)
    with wp.ScopedCapture(device=CPU) as capture:
        wp.launch(F32, dim=8, inputs=[a, b], device=CPU)  # b += a
        wp.copy(out, b)
        a.fill_(2.0)
    graph = capture.graph
    del a, b, capture
    gc.collect()
    churn()
    expected = []
    bb, aa = np.ones(8, np.float32), np.arange(8, dtype=np.float32)
    for _ in range(3):
        bb = bb + aa
        aa = np.full(8, 2.0, np.float32)
        expected.append(bb.copy())
    for run in range(3):
        wp.capture_launch(graph)
        np.testing.assert_array_equal(out.numpy(), expected[run])


def test_replay_after_user_deleted_views_and_bases():
    base = wp.array(np.arange(16, dtype=np.float32), device=CPU)
    out = wp.zeros(8, dtype=wp.float32, device=CPU)
    with wp.ScopedCapture(device=CPU) as capture:
        wp.launch(F32, dim=8, inputs=[base[::2], out], device=CPU)
    del base
    gc.collect()
    churn()
    wp.capture_launch(capture.graph)
    np.testing.assert_array_equal(out.numpy(), np.arange(0, 16, 2, dtype=np.float32))


def test_struct_fields_changed_during_capture_are_all_kept():
    """The same struct instance, launched twice with different arrays in it."""
    out = wp.zeros(4, dtype=wp.float32, device=CPU)
    s = K.Outer()
    s.inner = K.Inner()
    s.inner.scale = 1.0
    s.idx = wp.array(np.arange(4, dtype=np.int32), device=CPU)
    s.offset = wp.vec3(0.0, 0.0, 0.0)
    s.count = 0
    first = wp.array(np.full(4, 10.0, np.float32), device=CPU)
    second = wp.array(np.full(4, 100.0, np.float32), device=CPU)
    with wp.ScopedCapture(device=CPU) as capture:
        s.inner.arr = first
        wp.launch(K.struct_kernel, dim=4, inputs=[s, out], device=CPU)
        s.inner.arr = second
        wp.launch(K.struct_kernel, dim=4, inputs=[s, out], device=CPU)
    del s, first, second
    gc.collect()
    churn()
    wp.capture_launch(capture.graph)
    # the kernel adds arr and then increments arr: first replay adds 10 + 100
    np.testing.assert_array_equal(out.numpy(), np.full(4, 110.0, np.float32))
    wp.capture_launch(capture.graph)
    np.testing.assert_array_equal(out.numpy(), np.full(4, 110.0 + 112.0, np.float32))


def test_graph_survives_module_unload():
    """The graph holds the compiled module it calls: unloading the Warp module does not break it."""
    a = wp.array(np.arange(8, dtype=np.float32), device=CPU)
    out = wp.zeros(8, dtype=wp.float32, device=CPU)
    with wp.ScopedCapture(device=CPU) as capture:
        wp.launch(F32, dim=8, inputs=[a, out], device=CPU)
    wp.get_module(K.__name__).unload()
    gc.collect()
    wp.capture_launch(capture.graph)
    wp.launch(F32, dim=8, inputs=[a, a], device=CPU)  # loads the module again (a new ModuleExec)
    wp.capture_launch(capture.graph)
    np.testing.assert_array_equal(out.numpy(), np.arange(8, dtype=np.float32) * 3)


# --- threads ---------------------------------------------------------------------------------------
def test_other_threads_run_eagerly_during_a_capture():
    captured_in = wp.array(np.arange(8, dtype=np.float32), device=CPU)
    captured_out = wp.zeros(8, dtype=wp.float32, device=CPU)
    eager_in = wp.array(np.full(8, 5.0, np.float32), device=CPU)
    eager_out = wp.zeros(8, dtype=wp.float32, device=CPU)
    capture_started, eager_done = threading.Event(), threading.Event()
    seen = {}

    def eager_worker():
        capture_started.wait(timeout=60)
        try:
            assert apic.record.cpu.recorder.active() is None
            wp.launch(F32, dim=8, inputs=[eager_in, eager_out], device=CPU)
            wp.copy(eager_in, eager_out)
            eager_out.fill_(1.0)
            seen["values"] = (eager_in.numpy().copy(), eager_out.numpy().copy())  # readable: not captured
        except BaseException as error:  # noqa: BLE001 - reported by the main thread
            seen["error"] = error
        finally:
            eager_done.set()

    worker = threading.Thread(target=eager_worker)
    worker.start()
    with wp.ScopedCapture(device=CPU) as capture:
        wp.launch(F32, dim=8, inputs=[captured_in, captured_out], device=CPU)
        capture_started.set()
        assert eager_done.wait(timeout=60)
        wp.launch(F32, dim=8, inputs=[captured_in, captured_out], device=CPU)
    worker.join()
    assert "error" not in seen, seen.get("error")
    np.testing.assert_array_equal(seen["values"][0], np.full(8, 5.0, np.float32))  # ran at once
    np.testing.assert_array_equal(seen["values"][1], np.ones(8, np.float32))
    assert capture.graph.op_count == 2  # only this thread's two launches
    assert not captured_out.numpy().any()  # and those did not run during capture
    wp.capture_launch(capture.graph)
    np.testing.assert_array_equal(captured_out.numpy(), 2 * np.arange(8, dtype=np.float32))
    np.testing.assert_array_equal(eager_out.numpy(), np.ones(8, np.float32))  # untouched by replay


def test_captures_on_two_threads_are_independent():
    results = {}

    def capture_on_thread(name, value):
        try:
            out = wp.zeros(4, dtype=wp.float32, device=CPU)
            src = wp.array(np.full(4, value, np.float32), device=CPU)
            barrier.wait(timeout=60)
            with wp.ScopedCapture(device=CPU) as capture:
                wp.launch(F32, dim=4, inputs=[src, out], device=CPU)
                barrier.wait(timeout=60)  # both captures are open at once
            results[name] = (capture.graph, out)
        except BaseException as error:  # noqa: BLE001
            results[name] = error

    barrier = threading.Barrier(2)
    threads = [threading.Thread(target=capture_on_thread, args=(n, v)) for n, v in (("a", 1.0), ("b", 2.0))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for name, value in (("a", 1.0), ("b", 2.0)):
        assert not isinstance(results[name], BaseException), results[name]
        graph, out = results[name]
        assert graph.op_count == 1
        wp.capture_launch(graph)
        np.testing.assert_array_equal(out.numpy(), np.full(4, value, np.float32))
