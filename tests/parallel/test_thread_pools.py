"""Thread counts and pools of the parallel replay, attacked (issue 22).

* **Huge thread counts.** ``threads=10**6`` through every public entry (``wp.capture_launch``,
  ``graph.threads``, ``graph.launch``, the reference interpreter, ``parallel_report``,
  ``apic.replay.parallel.threaded_launch.launch``, ``python -m apic replay --threads``) must not start that many OS
  threads: the pools start no more than the usable CPUs (``apic.replay.parallel.thread_count.running``), the
  plans are cut for at most ``MAX_THREADS``, and the results stay eager's, bit for bit. Each entry is
  first asked for a few threads more than can run (what an unbounded pool would start at once), then
  for a million.
* **Nonsense thread counts** are refused with a ``ValueError`` naming the argument.
* **fork.** A child forked while other threads replay split (both pools' locks held) replays split
  itself, as eager, without hanging; so does one forked while another thread builds a range object;
  a child forked from a non-main thread polls Ctrl-C there (``fork_child.py``, run in a fresh
  interpreter with a deadline per child: a hang there cannot wedge this one).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import numpy as np
import pytest
import warp as wp

import apic  # noqa: F401  (installs the shims)
import persist_kernels as P
from apic.replay.parallel import range_cache, thread_count, threaded_launch
from conftest import CPU, assert_same, snapshot
from persist_helpers import TESTS, child_env, run_cli, same_bits

pytestmark = [pytest.mark.warp_version, pytest.mark.interpreter, pytest.mark.serial]

N = 1 << 15  # 32 ranges of MIN_TASKS: enough to split on any machine's CPU count
MIN_TASKS = 1024
HUGE = 10**6
BOUND = thread_count.running(HUGE)  # the OS threads a replay runs on here (the caller included)
HERE = TESTS  # tests/: fork_child.py and the kernels


def _state(seed: int) -> list:
    rng = np.random.default_rng(seed)
    arrays = [wp.array(rng.standard_normal((N, 3)).astype(np.float32), dtype=wp.vec3, device=CPU) for _ in range(3)]
    return [*arrays, 0.01]


def _named(state: list) -> dict:
    return {f"arg{i}": a for i, a in enumerate(state[:3])}


def _graph(state: list):
    with wp.ScopedCapture(device=CPU) as capture:
        wp.launch(P.integrate, dim=N, inputs=state, device=CPU)
    capture.graph.min_tasks_per_thread = MIN_TASKS
    return capture.graph


def _workers(prefix: str) -> list[str]:
    """Names of the live pool threads of one pool (``apic-split-``: the splitter's, ``apic-range-``:
    ``threaded_launch.launch``'s)."""
    return [t.name for t in threading.enumerate() if t.name.startswith(prefix)]


def _replay_with_reference(graph, threads: int) -> None:
    """``APIC_REPLAY=reference`` as a user sets it: chosen by the programs' next replay, then put back."""
    kept = graph.program.backend
    chosen = os.environ.get("APIC_REPLAY")  # put back as found: CI runs the whole suite with it set
    os.environ["APIC_REPLAY"] = "reference"
    try:
        for program in (graph.program, *graph.plans.parallel.values()):
            program.backend = None  # chosen again at its next replay (apic.replay.backends.cpu_backend)
        wp.capture_launch(graph, threads=threads)
    finally:
        if chosen is None:
            del os.environ["APIC_REPLAY"]
        else:
            os.environ["APIC_REPLAY"] = chosen
        for program in (graph.program, *graph.plans.parallel.values()):
            program.backend = kept


def _set_and_launch(graph, threads: int) -> None:
    graph.threads = threads
    wp.capture_launch(graph)


ENTRIES = {
    "capture_launch": lambda graph, threads: wp.capture_launch(graph, threads=threads),
    "graph.threads": _set_and_launch,
    "graph.launch": lambda graph, threads: graph.launch(threads=threads),
    "reference": _replay_with_reference,
}


def test_bound_is_what_can_run():
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    assert BOUND == min(max(2, cpus), thread_count.MAX_THREADS)
    assert thread_count.running(1) == 1 and thread_count.running(2) == 2
    assert thread_count.planned(HUGE) == thread_count.MAX_THREADS and thread_count.planned(3) == 3


# CI runs the whole suite again with APIC_REPLAY=reference, whose interpreter starts no pool workers
NUMBA_POOL = pytest.mark.skipif(os.environ.get("APIC_REPLAY", "numba") != "numba",
                                reason="counts the Numba interpreter's pool workers; APIC_REPLAY selects another")


@NUMBA_POOL
@pytest.mark.parametrize("entry", ENTRIES)
def test_huge_thread_count_replays_on_the_usable_cpus(entry):
    eager, replayed = _state(11), _state(11)
    graph = _graph(replayed)
    split_before = len(_workers("apic-split-"))
    for threads in (BOUND + 3, HUGE):
        ENTRIES[entry](graph, threads)
        wp.launch(P.integrate, dim=N, inputs=eager, device=CPU)
        assert_same(snapshot(_named(eager)), snapshot(_named(replayed)), f"{entry}, threads={threads}")
        started = _workers("apic-split-")
        assert len(started) <= BOUND - 1, f"{entry}, threads={threads}: {len(started)} workers on {BOUND} CPUs"
        if entry == "reference":  # it runs the chunks itself: no worker to start
            assert len(started) == split_before, f"the reference interpreter started {len(started) - split_before}"
        else:
            assert len(started) >= 1  # bounded, still parallel
    assert graph.threads == (HUGE if entry == "graph.threads" else 1)  # the request is kept as given


def test_huge_thread_count_plans_as_the_cap():
    graph = _graph(_state(12))
    cap = thread_count.MAX_THREADS
    assert graph.parallel_program(HUGE) is graph.parallel_program(cap)  # one plan, not one per count
    assert graph.parallel_report(HUGE) == graph.parallel_report(cap)
    (entry,) = graph.parallel_report(HUGE)
    assert entry["chunks"] == 4 * (N // MIN_TASKS)  # as many ranges as MIN_TASKS allow (32 < cap), 4 chunks each


def test_huge_thread_count_in_a_split_launch():
    eager, split_in = _state(13), _state(13)
    for threads in (BOUND + 3, HUGE):
        assert threaded_launch.launch(P.integrate, N, split_in, threads=threads, min_tasks_per_thread=MIN_TASKS)
        wp.launch(P.integrate, dim=N, inputs=eager, device=CPU)
        assert_same(snapshot(_named(eager)), snapshot(_named(split_in)), f"threads={threads}")
        started = _workers("apic-range-")
        assert 1 <= len(started) <= BOUND - 1, f"threads={threads}: {len(started)} workers on {BOUND} CPUs"


def test_huge_thread_count_on_the_command_line(tmp_path):
    eager, replayed = _state(14), _state(14)
    with wp.ScopedCapture(device=CPU, apic=True) as capture:
        wp.launch(P.integrate, dim=N, inputs=replayed, device=CPU)
    path = str(tmp_path / "g")
    wp.capture_save(capture.graph, path, outputs=_named(replayed), source_fallback=True)
    iters = 2
    for _ in range(iters):
        wp.launch(P.integrate, dim=N, inputs=eager, device=CPU)
    args = ["replay", path + ".wrp", "--iters", str(iters), "--threads", str(HUGE)]
    for name in _named(eager):
        args += ["--output", f"{name}={tmp_path / name}.npy"]
    done = run_cli(args, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    for name, arr in _named(eager).items():
        assert same_bits(np.load(tmp_path / f"{name}.npy"), arr.numpy()), name


BAD = [0, -1, -HUGE, 1.5, 2.0, True, False, "2", None, np.int64(2)]


def _entries_with_bad(graph, state):
    return {
        "capture_launch": lambda bad: wp.capture_launch(graph, threads=bad) if bad is not None else None,
        "graph.threads": lambda bad: setattr(graph, "threads", bad),
        "graph.launch": lambda bad: graph.launch(threads=bad) if bad is not None else None,
        "parallel_program": lambda bad: graph.parallel_program(bad),
        "parallel_report": lambda bad: graph.parallel_report(bad) if bad is not None else None,
        "threaded_launch.launch": lambda bad: threaded_launch.launch(P.integrate, N, state, threads=bad),
        "threaded_launch.prepare": lambda bad: threaded_launch.prepare(P.integrate, N, state, threads=bad),
    }


@pytest.mark.parametrize("bad", BAD, ids=repr)
def test_nonsense_thread_counts_refused(bad):
    state = _state(15)
    graph = _graph(state)
    before = snapshot(_named(state))
    for name, call in _entries_with_bad(graph, state).items():
        if bad is None and name in ("capture_launch", "graph.launch", "parallel_report"):
            continue  # None is their default (graph.threads)
        with pytest.raises(ValueError, match=r"threads must be an int >= 1, got") as error:
            call(bad)
        assert repr(bad) in str(error.value) or str(bad) in str(error.value), (name, str(error.value))
    assert graph.threads == 1
    assert_same(before, snapshot(_named(state)), "a refused call ran nothing")


@pytest.mark.parametrize("bad, message", [("0", "--threads: must be 1 or more"), ("-3", "--threads: must be 1 or more"),
                                          ("1.5", "--threads: expected an integer")])
def test_nonsense_thread_counts_refused_on_the_command_line(tmp_path, bad, message):
    done = run_cli(["replay", str(tmp_path / "missing.wrp"), f"--threads={bad}"], cwd=tmp_path)
    assert done.returncode != 0 and message in done.stderr, done.stderr


def _fork_child(*args: str) -> list:
    # a range object kept by an earlier process would load too fast to fork while it is built
    env = {**child_env(), range_cache.VARIABLE: "0"}
    done = subprocess.run([sys.executable, os.path.join(HERE, "fork_child.py"), *args], cwd=HERE, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@NUMBA_POOL
@pytest.mark.skipif(not hasattr(os, "fork") or not sys.platform.startswith("linux"), reason="os.fork on Linux")
def test_fork_while_other_threads_replay_split():
    reports = _fork_child()
    assert not any(r["hung"] for r in reports), f"a forked child's split replay never returned: {reports}"
    assert all(r["exit"] == 0 and r["graph"] and r["launch"] and r["split"] for r in reports), reports
    # the attack happened: a child inherited each pool's lock held by a replay in flight
    assert any(r["split_lock_held"] for r in reports) and any(r["range_lock_held"] for r in reports), reports


@pytest.mark.skipif(not hasattr(os, "fork") or not sys.platform.startswith("linux"), reason="os.fork on Linux")
def test_fork_while_another_thread_builds_a_range_object():
    (report,) = _fork_child("--during-build")
    assert not report["hung"], "the forked child waited for ever on the build lock"
    # the child builds nothing (the compiler's locks may be held): it launches serially, as eager
    assert report["exit"] == 0 and report["build_lock_held"] and not report["split"] and report["launch"], report


@pytest.mark.skipif(not hasattr(os, "fork") or not sys.platform.startswith("linux"), reason="os.fork on Linux")
def test_child_forked_from_a_thread_polls_ctrl_c():
    (report,) = _fork_child("--from-thread")
    assert not report["hung"] and report["exit"] == 0 and report["polls"], report
