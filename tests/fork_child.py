"""``os.fork()`` while other threads replay split: run as a script by ``test_thread_pools.py``.

Two threads keep the parallel replay's two pools busy: one replays a graph with ``threads=2`` (the
splitter's pool, ``apic.replay.parallel.split_pool``), one runs
``apic.replay.parallel.threaded_launch.launch(threads=2)`` (the range-entry pool,
``apic.replay.parallel.range_entry``). The main thread forks while both pools' locks are held (``FORKS``
times, or until a child hangs). Each child first notes which of the inherited locks were held, then
replays another graph with ``threads=2`` and runs a split ``threaded_launch.launch``, each three times,
compared bit for bit with the same launches run eagerly in the child; it reports on a pipe and leaves with
``os._exit``. A child that does not finish within ``CHILD_SECONDS`` is killed
and reported as hung. The last line of stdout is a JSON report.

With ``--from-thread`` the fork is taken from a non-main thread instead (nothing else running), and
the child reports whether a replay on its (new) main thread polls for Ctrl-C. With ``--during-build``
it is taken while another thread builds a module's range object (the build's lock held): the child
builds it again for a split launch of its own, compared with eager.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time

import numpy as np
import warp as wp

import apic  # noqa: E402,F401  (installs the shims)
from apic._compat import quiet_warp  # noqa: E402

quiet_warp()
import persist_kernels as P  # noqa: E402
from apic.replay.parallel import range_entry, split_pool, threaded_launch  # noqa: E402
from apic.replay import program as program_module  # noqa: E402

CPU = "cpu"
N = 1 << 16
MIN_TASKS = 1024
FORKS = 4
CHILD_SECONDS = 120  # a child takes seconds (one that builds a range object, up to 15 on a busy machine)
DT = 0.01


def make_state(seed: int) -> list:
    rng = np.random.default_rng(seed)
    arrays = [wp.array(rng.standard_normal((N, 3)).astype(np.float32), dtype=wp.vec3, device=CPU) for _ in range(3)]
    return [*arrays, DT]


def clone(state: list) -> list:
    return [wp.clone(a) for a in state[:3]] + state[3:]


def same(a: list, b: list) -> bool:
    return all(np.array_equal(x.numpy().view(np.uint8), y.numpy().view(np.uint8)) for x, y in zip(a[:3], b[:3]))


def captured(state: list):
    with wp.ScopedCapture(device=CPU) as capture:
        wp.launch(P.integrate, dim=N, inputs=state, device=CPU)
    capture.graph.min_tasks_per_thread = MIN_TASKS
    return capture.graph


def child_work(graph, graph_state: list, launch_state: list) -> dict:
    """In the child: split replays and split launches, each against eager on copies of its state."""
    eager_graph, eager_launch = clone(graph_state), clone(launch_state)
    report = {"graph": True, "launch": True, "split": True}
    for _ in range(3):
        wp.capture_launch(graph, threads=2)
        wp.launch(P.integrate, dim=N, inputs=eager_graph, device=CPU)
        report["graph"] &= same(eager_graph, graph_state)
        report["split"] &= threaded_launch.launch(P.integrate, N, launch_state, threads=2,
                                                  min_tasks_per_thread=MIN_TASKS)
        wp.launch(P.integrate, dim=N, inputs=eager_launch, device=CPU)
        report["launch"] &= same(eager_launch, launch_state)
    return report


def fork_child(work) -> dict:
    """Fork; the child runs ``work()`` (a dict) and sends it back; the parent waits ``CHILD_SECONDS``."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.close(read)
            try:
                result = work()
                code = 0
            except BaseException as error:  # noqa: BLE001 - reported to the parent, which fails the test
                result = {"error": repr(error)}
            os.write(write, json.dumps(result).encode())
        finally:
            os._exit(code)
    os.close(write)
    start = time.monotonic()
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > start + CHILD_SECONDS:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            os.close(read)
            return {"hung": True}
        time.sleep(0.01)
    with os.fdopen(read, "rb") as pipe:
        sent = pipe.read()
    result = json.loads(sent) if sent else {}
    result.update(hung=False, exit=os.waitstatus_to_exitcode(status), seconds=round(time.monotonic() - start, 2))
    return result


def while_replaying() -> list:
    busy_graph = captured(make_state(1))
    busy_launch = make_state(2)
    child_state, launch_state = make_state(3), make_state(4)
    child_graph = captured(child_state)
    # built and compiled before the threads start: the children find the range entries loaded
    for graph in (busy_graph, child_graph):
        graph.parallel_program(2)
    wp.capture_launch(busy_graph, threads=2)
    threaded_launch.launch(P.integrate, N, busy_launch, threads=2, min_tasks_per_thread=MIN_TASKS)
    stop = threading.Event()

    def replay():
        while not stop.is_set():
            wp.capture_launch(busy_graph, threads=2)

    def launch():
        while not stop.is_set():
            threaded_launch.launch(P.integrate, N, busy_launch, threads=2, min_tasks_per_thread=MIN_TASKS)

    busy = [threading.Thread(target=replay, daemon=True), threading.Thread(target=launch, daemon=True)]
    for t in busy:
        t.start()
    reports = []
    try:
        for _ in range(FORKS):
            deadline = time.monotonic() + 10
            while not (split_pool.lock.locked() and range_entry._pool_lock.locked()) and time.monotonic() < deadline:
                pass  # both replays in flight (they hold their pool's lock for most of each call)
            inherited = (split_pool.lock, range_entry._pool_lock)

            def work(inherited=inherited):
                held = {"split_lock_held": inherited[0].locked(), "range_lock_held": inherited[1].locked()}
                return {**held, **child_work(child_graph, child_state, launch_state)}

            reports.append(fork_child(work))
            if reports[-1]["hung"]:
                break
    finally:
        stop.set()
        for t in busy:
            t.join(60)
    return reports


def from_thread() -> list:
    """Fork from a non-main thread: in the child that thread is the main one, and its replays poll Ctrl-C."""
    reports = []

    def fork():
        reports.append(fork_child(lambda: {"polls": program_module.replay_limits() is program_module._LIMITS_MAIN}))

    t = threading.Thread(target=fork)
    t.start()
    t.join(CHILD_SECONDS + 30)
    return reports


def during_build() -> list:
    """Fork while another thread compiles the range object of ``integrate``'s module (this process has
    not built it yet)."""
    busy, state = make_state(5), make_state(6)
    wp.launch(P.integrate, dim=N, inputs=busy, device=CPU)  # Warp's own module, loaded before the build
    builder = threading.Thread(target=threaded_launch.launch, args=(P.integrate, N, busy),
                               kwargs={"threads": 2, "min_tasks_per_thread": MIN_TASKS})
    builder.start()
    deadline = time.monotonic() + 60
    while not range_entry._lock.locked() and time.monotonic() < deadline:
        pass
    inherited = range_entry._lock

    def work():
        eager = clone(state)
        split_launch = threaded_launch.launch(P.integrate, N, state, threads=2, min_tasks_per_thread=MIN_TASKS)
        wp.launch(P.integrate, dim=N, inputs=eager, device=CPU)
        return {"build_lock_held": inherited.locked(), "split": split_launch, "launch": same(eager, state)}

    reports = [fork_child(work)]
    builder.join(120)
    return reports


if __name__ == "__main__":
    scenarios = {"--from-thread": from_thread, "--during-build": during_build}
    found = next((run for flag, run in scenarios.items() if flag in sys.argv), while_replaying)()
    print(json.dumps(found))
