"""Threads: a CPU capture records only the capturing thread's operations; every other thread keeps
running eagerly (launches, copies, fills, allocations, reads, replays of other graphs), as with
Warp's thread-local CUDA capture. ``test_replay_engine.py`` has the two basic cases; these press
harder: several busy threads for the whole length of a capture, graphs replayed from other threads,
and a capture that another thread cannot end.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
import warp as wp

import apic
import kernels as K
from conftest import CPU

pytestmark = [pytest.mark.warp_version, pytest.mark.interpreter]

F32 = K.ARRAY_ACCUM[wp.float32]  # out[i] += a[i]
N = 64


def _run_threads(targets) -> list:
    errors = []

    def guard(fn):
        def run():
            try:
                fn()
            except BaseException as error:  # noqa: BLE001 - reported by the main thread
                errors.append(error)

        return run

    threads = [threading.Thread(target=guard(fn)) for fn in targets]
    for t in threads:
        t.start()
    return threads, errors


def test_busy_threads_stay_eager_for_a_whole_capture():
    stop = threading.Event()
    started = threading.Barrier(4)
    iterations = [0, 0, 0]

    def eager_worker(k: int):
        def work():
            ones = wp.array(np.ones(N, np.float32), device=CPU)
            acc = wp.zeros(N, dtype=wp.float32, device=CPU)
            cmd = wp.launch(F32, dim=N, inputs=[ones, acc], device=CPU, record_cmd=True)
            started.wait(timeout=60)
            total = 0.0
            while not stop.is_set() or iterations[k] < 20:
                assert apic.record.cpu.recorder.active() is None
                assert not wp.get_device(CPU).is_capturing
                wp.launch(F32, dim=N, inputs=[ones, acc], device=CPU)
                cmd.launch()  # a recorded command, launched again
                total += 2.0
                tmp = wp.zeros(N, dtype=wp.float32, device=CPU)  # allocated now, owned by no graph
                wp.copy(tmp, acc)
                tmp.fill_(float(k))
                scratch = wp.empty(N, dtype=wp.float32, device=CPU)
                scratch.zero_()
                # each result is there at once: this thread is not recording
                assert np.all(acc.numpy() == total), (k, acc.numpy()[:4], total)
                assert np.all(tmp.numpy() == float(k)) and not scratch.numpy().any()
                iterations[k] += 1

        return work

    x = wp.array(np.arange(N, dtype=np.float32), device=CPU)
    out = wp.zeros(N, dtype=wp.float32, device=CPU)

    def capture_work(busy: bool):
        with wp.ScopedCapture(device=CPU) as capture:
            at_start = list(iterations)
            for i in range(200):
                wp.launch(F32, dim=N, inputs=[x, out], device=CPU)
                if busy and i == 100:  # every worker makes progress while this capture is open
                    deadline = time.monotonic() + 60
                    while min(n - m for n, m in zip(iterations, at_start)) < 5 and time.monotonic() < deadline:
                        time.sleep(0.001)
            mine = wp.zeros(N, dtype=wp.float32, device=CPU)  # graph-owned: allocated by this thread
            wp.copy(mine, out)
            out.fill_(0.5)
            wp.launch(F32, dim=N, inputs=[mine, out], device=CPU)
        return capture.graph

    alone = capture_work(busy=False)  # the same capture with no other thread running
    threads, errors = _run_threads([eager_worker(k) for k in range(3)])
    try:
        started.wait(timeout=60)
        graph = capture_work(busy=True)
        during = list(iterations)
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=120)
    assert not errors, errors[0]
    assert min(during) >= 5 and min(iterations) >= 20, iterations
    assert graph.op_count == alone.op_count > 200, "the graph holds exactly the capturing thread's operations"
    assert not out.numpy().any(), "the capture ran work"
    wp.capture_launch(graph)
    np.testing.assert_array_equal(out.numpy(), 0.5 + 200 * np.arange(N, dtype=np.float32))


def test_other_threads_replay_graphs_during_a_capture():
    """Replaying a graph on another thread runs it at once, and it is not recorded here."""
    a = wp.array(np.full(N, 3.0, np.float32), device=CPU)
    b = wp.zeros(N, dtype=wp.float32, device=CPU)
    with wp.ScopedCapture(device=CPU) as other:
        wp.launch(F32, dim=N, inputs=[a, b], device=CPU)
    other_graph = other.graph

    inside, replayed = threading.Event(), threading.Event()

    def replayer():
        inside.wait(timeout=60)
        for _ in range(5):
            wp.capture_launch(other_graph)
        replayed.set()

    threads, errors = _run_threads([replayer])
    x = wp.array(np.ones(N, np.float32), device=CPU)
    out = wp.zeros(N, dtype=wp.float32, device=CPU)
    with wp.ScopedCapture(device=CPU) as capture:
        wp.launch(F32, dim=N, inputs=[x, out], device=CPU)
        inside.set()
        assert replayed.wait(timeout=60)
        np.testing.assert_array_equal(b.numpy(), np.full(N, 15.0, np.float32))  # b is not used by this capture
    threads[0].join()
    assert not errors, errors[0]
    assert capture.graph.op_count == 1
    wp.capture_launch(capture.graph)
    np.testing.assert_array_equal(out.numpy(), np.ones(N, np.float32))
    np.testing.assert_array_equal(b.numpy(), np.full(N, 15.0, np.float32))


def test_another_thread_cannot_end_or_join_a_capture():
    x = wp.array(np.ones(N, np.float32), device=CPU)
    out = wp.zeros(N, dtype=wp.float32, device=CPU)
    results = {}

    def intruder():
        try:
            wp.capture_end(device=CPU)
        except apic.CaptureError as error:
            results["end"] = error
        with wp.ScopedCapture(device=CPU) as own:  # a capture of its own, independent of the main one
            wp.launch(F32, dim=N, inputs=[x, out], device=CPU)
        results["graph"] = own.graph

    wp.capture_begin(device=CPU)
    try:
        wp.launch(F32, dim=N, inputs=[x, out], device=CPU)
        threads, errors = _run_threads([intruder])
        threads[0].join(timeout=60)
        wp.launch(F32, dim=N, inputs=[x, out], device=CPU)
    finally:
        graph = wp.capture_end(device=CPU)
    assert not errors, errors[0]
    assert "no CPU graph capture is in progress on this thread" in str(results["end"])
    assert graph.op_count == 2 and results["graph"].op_count == 1
    assert not out.numpy().any()
    wp.capture_launch(graph)
    wp.capture_launch(results["graph"])
    np.testing.assert_array_equal(out.numpy(), np.full(N, 3.0, np.float32))
