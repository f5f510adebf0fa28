"""Launches split by their measured time (``apic.replay.parallel.plan_costs``), bit for bit against eager Warp.

``min_tasks_per_thread`` counts tasks, blind to their work: a launch of a few heavy tasks (one per world
of a batched simulation) stays serial under the default 4,096. When a plan keeps such a launch serial,
the graph's next ``TIMED_REPLAYS`` replays on more threads run serially through the profiled interpreter
and keep each row's time; the plans made after them also split a launch whose median time pays for it
(``plan_costs.boundary``), whatever its tasks. Results are the serial replay's either way.
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

from apic.replay.parallel.plan_costs import MIN_NS_PER_THREAD, TIMED_REPLAYS, RowTimes, boundary
from apic.replay.parallel.split_pool import unavailable
from conftest import CPU, assert_same, snapshot
from persist_helpers import TESTS, child_env

pytestmark = pytest.mark.skipif(unavailable() is not None, reason=f"no parallel replay here: {unavailable()}")
pytestmark = [pytestmark, pytest.mark.warp_version, pytest.mark.interpreter, pytest.mark.serial]

TASKS = 8  # far under the default min_tasks_per_thread (4,096)


@wp.kernel
def heavy(x: wp.array(dtype=float), y: wp.array(dtype=float), rounds: int):
    i = wp.tid()
    s = x[i]
    for _k in range(rounds):
        s = s * 0.999999 + 1.0e-7
    y[i] = s


def _state() -> dict:
    return {"x": wp.array(np.linspace(1, 2, TASKS, dtype=np.float32), device=CPU),
            "y": wp.zeros(TASKS, dtype=float, device=CPU)}


def _step(state: dict, rounds: int) -> None:
    wp.launch(heavy, dim=TASKS, inputs=[state["x"], state["y"], rounds], device=CPU)
    wp.launch(heavy, dim=TASKS, inputs=[state["y"], state["x"], rounds], device=CPU)


def _graph(rounds: int):
    eager, replayed = _state(), _state()
    with wp.ScopedCapture(device=CPU) as capture:
        _step(replayed, rounds)
    return capture.graph, eager, replayed


def _replay_both(graph, eager, replayed, rounds: int, what: str) -> None:
    _step(eager, rounds)
    wp.capture_launch(graph, threads=2)
    assert_same(snapshot(eager), snapshot(replayed), what)


def _native() -> bool:
    from apic.replay.program import native_replay

    return native_replay()


def test_a_few_heavy_tasks_split_after_the_timed_replays():
    rounds = 400_000  # about a millisecond per task: far over MIN_NS_PER_THREAD
    graph, eager, replayed = _graph(rounds)
    if not _native():
        pytest.skip(f"APIC_REPLAY={os.environ.get('APIC_REPLAY')!r}: replays are not measured (test below)")
    before = graph.parallel_report(2)
    assert [e["chunks"] for e in before[:2]] == [0, 0]
    pending = f"the next {TIMED_REPLAYS} replay(s) on 2 threads run serially and time it"
    assert all(pending in e["why"] for e in before[:2]), before
    for k in range(TIMED_REPLAYS):
        assert graph.plans.row_ns is None, k  # one timing decides nothing
        _replay_both(graph, eager, replayed, rounds, f"timed replay {k + 1} (serial)")
    assert graph.plans.row_ns is not None
    after = graph.parallel_report(2)
    assert all(e["chunks"] >= 2 and e["basis"].startswith("split by time") for e in after[:2]), after
    for k in range(3):
        _replay_both(graph, eager, replayed, rounds, f"split replay {k + 1}")


def test_the_timings_are_medians():
    """A replay preempted inside a row (here: one sample made a second long) moves no median."""
    times = RowTimes(3)
    for k in range(TIMED_REPLAYS):
        slow = 10 ** 9 if k == 1 else 0
        times.add(np.array([1000 + slow, 20_000 + k, 0]), np.array([1, 2, 0]))
    assert times.needed == 0
    assert times.median().tolist() == [1000, 10_001, 0]


def test_the_boundary_lies_in_the_widest_gap():
    nominal = 2 * MIN_NS_PER_THREAD
    assert boundary([], nominal) == nominal
    assert 100 < boundary([10 ** 6, 100], nominal) < 10 ** 6  # none near it: anything between is the same plan
    # rows at 44 and 52 us straddle the nominal 50: the boundary moves into the gap under them, away from both
    cut = boundary([14_000, 25_000, 32_000, 44_000, 52_000, 90_000], nominal)
    assert 14_000 < cut < 25_000, cut
    # the same rows 15% slower or faster (a busy machine): the same side of the boundary for every row
    for scale in (0.85, 1.15):
        moved = [int(t * scale) for t in (14_000, 25_000, 32_000, 44_000, 52_000, 90_000)]
        cut = boundary(moved, nominal)
        assert moved[0] < cut < moved[1], (scale, cut)


def test_a_few_cheap_tasks_stay_serial_and_say_their_time():
    graph, eager, replayed = _graph(1)
    if not _native():
        pytest.skip(f"APIC_REPLAY={os.environ.get('APIC_REPLAY')!r}: replays are not measured (test below)")
    for k in range(TIMED_REPLAYS + 2):
        _replay_both(graph, eager, replayed, 1, f"replay {k + 1}")
    report = graph.parallel_report(2)
    measured = [max(int(graph.plans.row_ns[row]) for row in split.rows) for split in graph.program.splits]
    assert min(measured) < 2 * MIN_NS_PER_THREAD, measured  # one round over 8 tasks: microseconds
    # each launch is judged on its own time (a busy machine may stop the timed replays inside a row)
    for entry, ns in zip(report[:2], measured):
        if ns < MIN_NS_PER_THREAD // 2:  # under any boundary the gap rule may choose
            assert entry["chunks"] == 0, entry
            assert "timed serial replays), under the boundary" in entry["why"], entry
            assert entry["basis"] == entry["why"], entry


def test_a_zero_replay_call_times_nothing():
    """``launch(0, threads=2)`` (the CLI's ``--time`` warm-up) runs no replay: it must not stand for a timed
    one (it timed zero rows: no launch would ever split on its times)."""
    rounds = 400_000
    graph, eager, replayed = _graph(rounds)
    if not _native():
        pytest.skip(f"APIC_REPLAY={os.environ.get('APIC_REPLAY')!r}: replays are not measured")
    for _ in range(2):
        graph.launch(0, threads=2)
    assert graph.plans.row_ns is None  # nothing was timed
    assert_same(snapshot(eager), snapshot(replayed), "zero replays")
    for k in range(TIMED_REPLAYS):
        _replay_both(graph, eager, replayed, rounds, f"timed replay {k + 1} (serial)")
    assert all(e["chunks"] >= 2 for e in graph.parallel_report(2)[:2]), graph.parallel_report(2)
    _replay_both(graph, eager, replayed, rounds, "split replay")


def test_replays_from_two_python_threads_wait_for_the_timed_ones():
    """Two Python threads replaying one graph on 2 threads while its timed replays are due: each replay runs
    whole (one replay on several threads at a time, timed or split), so the result is that of as many
    replays one after another (every replay applies the same function: order does not matter)."""
    rounds = 100_000
    graph, eager, replayed = _graph(rounds)
    if not _native():
        pytest.skip(f"APIC_REPLAY={os.environ.get('APIC_REPLAY')!r}: replays are not measured")
    per_thread = TIMED_REPLAYS + 3
    start = threading.Barrier(2)
    errors = []

    def replays():
        try:
            start.wait()
            for _ in range(per_thread):
                wp.capture_launch(graph, threads=2)
        except Exception as error:  # noqa: BLE001 - reported by the assertion below
            errors.append(error)

    workers = [threading.Thread(target=replays) for _ in range(2)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert not errors, errors
    for _ in range(2 * per_thread):
        _step(eager, rounds)
    assert graph.plans.row_ns is not None
    assert_same(snapshot(eager), snapshot(replayed), "replays from two Python threads")


def test_a_graph_that_splits_by_its_tasks_is_never_measured():
    graph, eager, replayed = _graph(1)
    graph.min_tasks_per_thread = 1
    for k in range(2):
        _replay_both(graph, eager, replayed, 1, f"replay {k + 1}")
    assert graph.plans.row_ns is None
    assert all(e["chunks"] >= 2 for e in graph.parallel_report(2)[:2])


_REFERENCE_CHILD = textwrap.dedent(
    """
    import json
    import numpy as np
    import warp as wp
    wp.config.quiet = True
    import apic
    import test_parallel_measured as T

    graph, eager, replayed = T._graph(400_000)
    for _ in range(T.TIMED_REPLAYS + 1):
        T._step(eager, 400_000)
        wp.capture_launch(graph, threads=2)
    same = all(np.array_equal(eager[k].numpy(), replayed[k].numpy()) for k in eager)
    print(json.dumps({"measured": graph.plans.row_ns is not None, "same": same,
                      "why": graph.parallel_report(2)[0]["why"]}))
    """
)


def test_the_reference_interpreter_is_never_measured():
    """``APIC_REPLAY=reference`` checks the Numba loop with a second implementation: a replay there never
    runs through Numba's profiled loop instead."""
    env = child_env()
    env["APIC_REPLAY"] = "reference"
    env["PYTHONPATH"] = os.pathsep.join([TESTS, env["PYTHONPATH"]])
    done = subprocess.run([sys.executable, "-c", _REFERENCE_CHILD], cwd=os.path.dirname(os.path.abspath(__file__)),
                          env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report == {"measured": False, "same": True,
                      "why": "fewer than 2 x 4096 tasks, alone or with the independent launches next to it"}
