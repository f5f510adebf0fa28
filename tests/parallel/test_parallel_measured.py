"""Launches split by their measured time (``split_planner.MIN_NS_PER_THREAD``), bit for bit against eager Warp.

``min_tasks_per_thread`` counts tasks, blind to their work: a launch of a few heavy tasks (one per world
of a batched simulation) stays serial under the default 4,096. When a plan keeps such a launch serial,
the graph's next replay on more threads runs serially through the profiled interpreter and keeps each
row's time; the plans made after it also split a launch whose time pays for it (at least
``MIN_NS_PER_THREAD`` per thread), whatever its tasks. Results are the serial replay's either way.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import warp as wp

from apic.replay.split_planner import MIN_NS_PER_THREAD
from apic.replay.split_pool import unavailable
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


def test_a_few_heavy_tasks_split_after_one_measured_replay():
    rounds = 400_000  # about a millisecond per task: far over MIN_NS_PER_THREAD
    graph, eager, replayed = _graph(rounds)
    if not _native():
        pytest.skip(f"APIC_REPLAY={os.environ.get('APIC_REPLAY')!r}: replays are not measured (test below)")
    before = graph.parallel_report(2)
    assert [e["chunks"] for e in before[:2]] == [0, 0]
    assert all("the next replay on 2 threads runs serially and times it" in e["why"] for e in before[:2]), before
    _replay_both(graph, eager, replayed, rounds, "the measured replay (serial)")
    assert graph._row_ns is not None
    after = graph.parallel_report(2)
    assert all(e["chunks"] >= 2 for e in after[:2]), after
    for k in range(3):
        _replay_both(graph, eager, replayed, rounds, f"split replay {k + 1}")


def test_a_few_cheap_tasks_stay_serial_and_say_their_time():
    graph, eager, replayed = _graph(1)
    if not _native():
        pytest.skip(f"APIC_REPLAY={os.environ.get('APIC_REPLAY')!r}: replays are not measured (test below)")
    for k in range(3):
        _replay_both(graph, eager, replayed, 1, f"replay {k + 1}")
    report = graph.parallel_report(2)
    measured = [max(int(graph._row_ns[row]) for row in split.rows) for split in graph.program.splits]
    assert min(measured) < 2 * MIN_NS_PER_THREAD, measured  # one round over 8 tasks: microseconds
    # each launch is judged on its own time (a busy machine may stop the timed replay inside a row)
    for entry, ns in zip(report[:2], measured):
        if ns < 2 * MIN_NS_PER_THREAD:
            assert entry["chunks"] == 0, entry
            assert f"us in a serial replay, under 2 x {MIN_NS_PER_THREAD // 1000} us" in entry["why"], entry
        else:
            assert entry["chunks"] >= 2, entry


def test_a_graph_that_splits_by_its_tasks_is_never_measured():
    graph, eager, replayed = _graph(1)
    graph.min_tasks_per_thread = 1
    for k in range(2):
        _replay_both(graph, eager, replayed, 1, f"replay {k + 1}")
    assert graph._row_ns is None
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
    for _ in range(2):
        T._step(eager, 400_000)
        wp.capture_launch(graph, threads=2)
    same = all(np.array_equal(eager[k].numpy(), replayed[k].numpy()) for k in eager)
    print(json.dumps({"measured": graph._row_ns is not None, "same": same,
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
