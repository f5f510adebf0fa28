"""``wp.capture_launch``'s fast path: after a plain replay a graph keeps one bound native call for the
next ones. Whatever can change between two launches must still take effect once it is kept: the graph's
``threads``, a ``threads`` argument, a capture recording on this thread, a parameter's value, another
thread launching it. Each test launches the graph a few times first, then changes one of these and
checks against the eager run, bit for bit.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest
import warp as wp

import apic
from conftest import CPU, assert_same, snapshot
from persist_helpers import TESTS, child_env

pytestmark = [pytest.mark.warp_version, pytest.mark.interpreter, pytest.mark.serial]

N = 64


@wp.kernel
def relax(x: wp.array(dtype=float), y: wp.array(dtype=float), a: float):
    i = wp.tid()
    y[i] = y[i] * 0.5 + a * x[i]


def _state() -> dict:
    return {"x": wp.array(np.linspace(1, 2, N, dtype=np.float32), device=CPU),
            "y": wp.array(np.linspace(-1, 3, N, dtype=np.float32), device=CPU)}


def _step(state: dict, a) -> None:
    wp.launch(relax, dim=N, inputs=[state["x"], state["y"], a], device=CPU)


def _graph_and_states(a=0.25):
    eager, replayed = _state(), _state()
    with wp.ScopedCapture(device=CPU) as capture:
        _step(replayed, a)
    return capture.graph, eager, replayed


def _launch_both(graph, eager, replayed, times: int, a=0.25) -> None:
    for _ in range(times):
        _step(eager, a)
        wp.capture_launch(graph)
    assert_same(snapshot(eager), snapshot(replayed), f"after {times} launches")


def test_a_capture_after_fast_launches_records_the_launch():
    graph, eager, replayed = _graph_and_states()
    _launch_both(graph, eager, replayed, 3)
    before = snapshot(replayed)
    with wp.ScopedCapture(device=CPU) as outer:
        wp.capture_launch(graph)
    assert_same(before, snapshot(replayed), "a launch inside a capture only records")
    for _ in range(2):
        _step(eager, 0.25)
        wp.capture_launch(outer.graph)
    assert_same(snapshot(eager), snapshot(replayed), "the outer graph replays the recorded launch")
    _launch_both(graph, eager, replayed, 2)  # and the graph itself runs again after the capture


def test_a_scalar_parameter_set_after_fast_launches_takes_effect():
    a = apic.param("fast_launch_a", wp.float32, 0.25)
    graph, eager, replayed = _graph_and_states(a)
    _launch_both(graph, eager, replayed, 3)
    for value in (-1.5, 3.0):
        graph.set_param("fast_launch_a", value)
        _launch_both(graph, eager, replayed, 2, a=value)


def test_another_thread_launches_after_fast_launches_on_this_one():
    graph, eager, replayed = _graph_and_states()
    _launch_both(graph, eager, replayed, 3)
    errors = []

    def launch_twice():
        try:
            for _ in range(2):
                wp.capture_launch(graph)
        except BaseException as error:  # noqa: BLE001 - reported by the main thread
            errors.append(error)

    worker = threading.Thread(target=launch_twice)
    worker.start()
    worker.join()
    assert not errors
    for _ in range(2):
        _step(eager, 0.25)
    assert_same(snapshot(eager), snapshot(replayed), "two launches on another thread")
    _launch_both(graph, eager, replayed, 2)


@pytest.mark.parametrize("bad", [0, 1.5, "2"])
def test_a_threads_argument_is_still_checked_after_fast_launches(bad):
    graph, eager, replayed = _graph_and_states()
    _launch_both(graph, eager, replayed, 3)
    with pytest.raises(ValueError, match="threads"):
        wp.capture_launch(graph, threads=bad)
    assert_same(snapshot(eager), snapshot(replayed), "a refused launch runs nothing")


_THREADS_CHILD = textwrap.dedent(
    """
    import json, threading
    import numpy as np
    import warp as wp
    import apic
    import persist_kernels as P

    n = 3 * 4096
    def state():
        rng = np.random.default_rng(5)
        return [wp.array(rng.standard_normal((n, 3), dtype=np.float32), dtype=wp.vec3, device="cpu")
                for _ in range(3)]
    eager, replayed = state(), state()
    with wp.ScopedCapture(device="cpu") as capture:
        wp.launch(P.integrate, dim=n, inputs=[*replayed, 0.01], device="cpu")
    graph = capture.graph

    def launch(times):
        for _ in range(times):
            wp.launch(P.integrate, dim=n, inputs=[*eager, 0.01], device="cpu")
            wp.capture_launch(graph)

    def pool_threads():
        return sum(t.name.startswith("apic-split-") for t in threading.enumerate())

    launch(3)
    serial_pool = pool_threads()
    graph.threads = 2
    chunks = graph.parallel_report()[0]["chunks"]
    launch(2)
    split_pool = pool_threads()
    graph.threads = 1
    launch(2)
    same = all(np.array_equal(a.numpy(), b.numpy()) for a, b in zip(eager, replayed))
    print(json.dumps({"serial_pool": serial_pool, "chunks": chunks, "split_pool": split_pool, "same": same}))
    """
)


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2 if hasattr(os, "sched_getaffinity") else False,
                    reason="a split replay needs at least two usable CPUs to start a pooled worker")
def test_setting_threads_after_fast_launches_takes_effect():
    """Serial launches start no split worker; ``graph.threads = 2`` then splits the next launch (its
    pooled worker starts), and ``threads = 1`` goes back to the serial replay, as eager throughout. A
    fresh process: the pool starts once per process."""
    env = child_env()
    env["APIC_REPLAY"] = "numba"  # the fast path is the native interpreter's
    done = subprocess.run([sys.executable, "-c", _THREADS_CHILD], cwd=TESTS, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["chunks"] > 0, "the launch was not proved splittable"
    assert found["serial_pool"] == 0 and found["split_pool"] >= 1
    assert found["same"]


def test_a_capture_on_another_thread_leaves_this_threads_launches_running():
    """While another thread captures, a launch here still runs (eagerly, as a launch of that graph on
    this thread), and the other thread's capture records nothing of it."""
    graph, eager, replayed = _graph_and_states()
    _launch_both(graph, eager, replayed, 3)
    capturing, release, errors, captured = threading.Event(), threading.Event(), [], []

    def capture_on_worker():
        try:
            with wp.ScopedCapture(device=CPU) as capture:
                capturing.set()
                release.wait(60)
            captured.append(capture.graph)
        except BaseException as error:  # noqa: BLE001 - reported by the main thread
            errors.append(error)
            capturing.set()

    worker = threading.Thread(target=capture_on_worker)
    worker.start()
    capturing.wait(60)
    try:
        _launch_both(graph, eager, replayed, 2)
    finally:
        release.set()
        worker.join()
    assert not errors
    assert len(captured[0].recording.ops) == 0, "the other thread's capture recorded this thread's launches"
    _launch_both(graph, eager, replayed, 2)  # and once it ended, the fast path again


def test_capturing_threads_are_forgotten_when_their_captures_end():
    from apic.record.cpu.active_recorder import recording_threads

    def abandoned():
        with wp.ScopedCapture(device=CPU):
            raise RuntimeError("abandon the capture")

    with pytest.raises(RuntimeError, match="abandon"):
        abandoned()
    with wp.ScopedCapture(device=CPU):
        paused = wp.capture_pause()
        assert not recording_threads, "a paused capture records nothing"
        wp.capture_resume(paused)
        assert recording_threads
    assert not recording_threads


@wp.kernel
def spin(x: wp.array(dtype=float), rounds: int):
    i = wp.tid()
    s = x[i]
    for _k in range(rounds):
        s = s * 0.999999 + 1.0e-7
    x[i] = s


def _other_thread_progress(graph) -> int:
    """How often another Python thread ran while one ``wp.capture_launch(graph)`` ran on this one.

    A long switch interval keeps this thread from being made to hand the GIL over meanwhile: the other
    thread runs only if the launch lets it go."""
    ticks, go, stop = [0], threading.Event(), threading.Event()

    def count():
        go.wait(60)
        while not stop.is_set():
            ticks[0] += 1

    interval = sys.getswitchinterval()
    counter = threading.Thread(target=count)
    counter.start()
    sys.setswitchinterval(5.0)
    try:
        go.set()  # the counter now waits for the GIL, which this thread holds
        before = ticks[0]
        wp.capture_launch(graph)
        return ticks[0] - before
    finally:
        stop.set()
        sys.setswitchinterval(interval)
        counter.join()


def test_a_short_replay_keeps_the_gil_and_a_long_one_lets_other_threads_run():
    """A graph of a few small ops keeps the GIL through its native call (``program.short_replay``); any
    other releases it, as Warp's own launches do. One task spinning for a while tells them apart."""
    from apic.replay.program import SHORT_REPLAY_TASKS, short_replay

    x = wp.zeros(SHORT_REPLAY_TASKS + 1, dtype=float, device=CPU)
    rounds = 4_000_000  # some milliseconds
    with wp.ScopedCapture(device=CPU) as short:
        wp.launch(spin, dim=1, inputs=[x, rounds], device=CPU)
    with wp.ScopedCapture(device=CPU) as long:
        # ten times as long: the other thread must get scheduled within it, on a busy machine too
        wp.launch(spin, dim=SHORT_REPLAY_TASKS + 1, inputs=[x, 10 * rounds // SHORT_REPLAY_TASKS], device=CPU)
    assert short_replay(short.graph.recording.ops) and not short_replay(long.graph.recording.ops)
    for graph in (short.graph, long.graph):
        wp.capture_launch(graph)  # the first launch makes the fast path
    if short.graph.fast_replays.get(None) is None:
        pytest.skip(f"no fast path with APIC_REPLAY={os.environ.get('APIC_REPLAY')!r}: the Python interpreters")
    assert _other_thread_progress(short.graph) == 0
    assert _other_thread_progress(long.graph) > 0


def test_what_counts_as_a_short_replay():
    from apic.replay import program

    x = wp.zeros(1 << 16, dtype=float, device=CPU)
    y = wp.zeros(1 << 16, dtype=float, device=CPU)

    def ops(body):
        with wp.ScopedCapture(device=CPU) as capture:
            body()
        return capture.graph.recording.ops

    def launches(count, dim):
        return lambda: [wp.launch(relax, dim=dim, inputs=[x, y, 0.5], device=CPU) for _ in range(count)]

    assert program.short_replay(ops(launches(program.SHORT_REPLAY_OPS, 1)))
    assert not program.short_replay(ops(launches(program.SHORT_REPLAY_OPS + 1, 1)))
    assert program.short_replay(ops(launches(2, program.SHORT_REPLAY_TASKS // 2)))
    assert not program.short_replay(ops(launches(2, program.SHORT_REPLAY_TASKS // 2 + 1)))
    quarter = program.SHORT_REPLAY_BYTES // 4 // 4  # floats in a quarter of the byte budget
    assert program.short_replay(ops(lambda: [wp.copy(y, x, count=quarter) for _ in range(4)]))
    assert not program.short_replay(ops(lambda: [wp.copy(y, x, count=quarter + 1) for _ in range(4)]))
    assert not program.short_replay(ops(lambda: x.fill_(1.0)))  # other kinds: released, whatever their size


def test_a_thread_count_whose_plan_splits_nothing_takes_the_fast_path_and_still_checks():
    """``threads=2`` on a graph too small to split runs the serial program: after one launch it takes the
    fast path too; 2.0 and True are still refused, and a lower ``min_tasks_per_thread``, which makes
    the launch split, takes effect."""
    graph, eager, replayed = _graph_and_states()
    for _ in range(3):
        _step(eager, 0.25)
        wp.capture_launch(graph, threads=2)
    assert_same(snapshot(eager), snapshot(replayed), "three launches with threads=2")
    if graph.fast_replays.get(2) is None:
        pytest.skip(f"no fast path with APIC_REPLAY={os.environ.get('APIC_REPLAY')!r}: the Python interpreters")
    for bad in (2.0, True):
        with pytest.raises(ValueError, match="threads"):
            wp.capture_launch(graph, threads=bad)
    graph.min_tasks_per_thread = 1
    assert not graph.fast_replays, "the plans may change with the threshold"
    for _ in range(2):
        _step(eager, 0.25)
        wp.capture_launch(graph, threads=2)
    assert_same(snapshot(eager), snapshot(replayed), "launches split after min_tasks_per_thread = 1")
    if not split_pool_unavailable():
        assert graph.parallel_report(2)[0]["chunks"] > 1
        assert 2 not in graph.fast_replays, "a plan that splits runs through the pool, not the serial call"


def split_pool_unavailable():
    from apic.replay.parallel.split_pool import unavailable

    return unavailable()
