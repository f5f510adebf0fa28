"""The parallel replay's portable wait (``APIC_WAIT=portable``: spin, then ``nanosleep`` naps), the one a
system without Linux futexes uses, forced here on Linux as a user sets it.

Each side runs in a fresh interpreter (the pool chooses its wait once, when it starts): a graph of several
launches that the pool splits (two independent integrations cut together into one row, then a dependent one)
replayed serially and on 2, 3 and 4 threads, each replay compared bit for bit with the same launches run
eagerly in that process, until pooled workers, not only the replaying thread, have run chunks. The child with
the futex also saves the graph with its source; the child with the portable wait loads it too and replays it
threaded. Both children's results are then compared bit for bit with each other, and neither pool's idle
workers may keep a CPU busy.
"""

from __future__ import annotations

import json
import sys
import textwrap

import numpy as np
import pytest

import fork_server
from persist_helpers import TESTS, child_env

pytestmark = [pytest.mark.warp_version, pytest.mark.interpreter, pytest.mark.install, pytest.mark.serial]

_CHILD = textwrap.dedent(
    """
    import json, sys, time
    import numpy as np
    import warp as wp
    wp.config.quiet = True
    import apic
    import persist_kernels as P
    from apic.replay.parallel import split_pool

    N, MIN_TASKS, DEADLINE = 1 << 15, 1024, 120
    NAMES = ("ax", "av", "af", "bx", "bv", "bf")
    job = json.loads(sys.argv[1])

    def state():
        rng = np.random.default_rng(7)
        return [wp.array(rng.standard_normal((N, 3)).astype(np.float32), dtype=wp.vec3, device="cpu")
                for _ in NAMES]

    def step(s):  # several launches: two independent ones (one split row), then one reading both
        wp.launch(P.integrate, dim=N, inputs=[*s[0:3], 0.01], device="cpu")
        wp.launch(P.integrate, dim=N, inputs=[*s[3:6], 0.02], device="cpu")
        wp.launch(P.integrate, dim=N, inputs=[s[0], s[1], s[3], 0.03], device="cpu")

    def same(xs, ys):
        return all(np.array_equal(x.view(np.uint8), y.view(np.uint8)) for x, y in zip(xs, ys))

    def replays(graph, read, eager, tag):
        # replay on each thread count in turn, eager once per replay, until pooled workers ran chunks; the
        # state after the first round is kept (both children run that round the same)
        done, deadline = [], time.monotonic() + DEADLINE
        helped = split_pool.chunks_run_by_workers()
        while True:
            for threads in (1, 2, 3, 4):
                wp.capture_launch(graph, threads=threads)
                step(eager)
                done.append([threads, same(read(), [a.numpy() for a in eager])])
            if len(done) == 4:
                np.save(job["out"] + tag + ".npy", np.stack(read()))
            if split_pool.chunks_run_by_workers() > helped or time.monotonic() > deadline:
                return done, split_pool.chunks_run_by_workers() - helped

    live, eager = state(), state()
    with wp.ScopedCapture(device="cpu", apic=True) as capture:
        step(live)
    graph = capture.graph
    graph.min_tasks_per_thread = MIN_TASKS
    out = {"wait": split_pool.pool().wait, "split": [e["chunks"] for e in graph.parallel_report(2) if e["tasks"]]}
    if job.get("save"):  # as captured: the loading child replays it from the first state
        wp.capture_save(graph, job["save"], outputs=dict(zip(NAMES, live)), source_fallback=True)
    out["live"], out["live_helped"] = replays(graph, lambda: [a.numpy() for a in live], eager, "live")
    if job.get("load"):
        loaded = wp.capture_load(job["load"], device="cpu")
        loaded.min_tasks_per_thread = MIN_TASKS
        out["loaded_split"] = [e["chunks"] for e in loaded.parallel_report(2) if e["tasks"]]

        def read():
            got = []
            for name in NAMES:
                arr = wp.empty(N, dtype=wp.vec3, device="cpu")
                loaded.get_param(name, arr)
                got.append(arr.numpy())
            return got

        out["loaded"], out["loaded_helped"] = replays(loaded, read, state(), "loaded")
    time.sleep(0.2)  # idle: the workers spin a little, then sleep (nap)
    cpu = time.process_time()
    time.sleep(1.0)
    out["idle_cpu"] = time.process_time() - cpu  # the workers' CPU time in a second of idling
    print(json.dumps(out))
    """
)


def _child(wait: str, job: dict) -> dict:
    # the Numba interpreter's pool, whatever APIC_REPLAY the suite runs with (the reference interpreter runs
    # every chunk itself, with no pool to wait in)
    env = dict(child_env(), APIC_WAIT=wait, APIC_REPLAY="numba")
    done = fork_server.run([sys.executable, "-c", _CHILD, json.dumps(job)], env=env, cwd=TESTS, capture_output=True,
                           text=True, timeout=600)
    assert done.returncode == 0, f"child ({wait}) failed:\n{done.stdout}\n{done.stderr}"
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_portable_wait_replays_as_eager_and_as_the_futex(tmp_path):
    futex = _child("futex", {"out": str(tmp_path / "futex-"), "save": str(tmp_path / "g")})
    portable = _child("portable", {"out": str(tmp_path / "portable-"), "load": str(tmp_path / "g")})
    assert (futex["wait"], portable["wait"]) == ("futex", "portable")
    for result in (futex, portable):
        # three launches, each cut into chunks (two of them in one row)
        assert len(result["split"]) == 3 and all(chunks > 1 for chunks in result["split"]), result
        assert result["live_helped"] > 0, "no pooled worker ran a chunk in the time allowed"
        assert {threads for threads, _ in result["live"]} == {1, 2, 3, 4}
        assert all(ok for _, ok in result["live"]), result["live"]
    assert len(portable["loaded_split"]) == 3 and all(c > 1 for c in portable["loaded_split"]), portable
    assert portable["loaded_helped"] > 0 and all(ok for _, ok in portable["loaded"]), portable["loaded"]
    # an idle worker sleeps, whichever the wait: it does not spin (a spinning worker costs 1 s of CPU a second)
    assert futex["idle_cpu"] < 0.1 and portable["idle_cpu"] < 0.1, (futex["idle_cpu"], portable["idle_cpu"])
    # one round of replays (serial, then 2, 3 and 4 threads) gives the same bits on either wait, live and loaded
    kept = np.load(tmp_path / "futex-live.npy").view(np.uint8)
    assert np.array_equal(kept, np.load(tmp_path / "portable-live.npy").view(np.uint8))
    assert np.array_equal(kept, np.load(tmp_path / "portable-loaded.npy").view(np.uint8))


_BAD_SETTING = textwrap.dedent(
    """
    import warp as wp
    wp.config.quiet = True
    import apic
    import persist_kernels as P
    x, v, f = (wp.zeros(1 << 15, dtype=wp.vec3, device="cpu") for _ in range(3))
    with wp.ScopedCapture(device="cpu", apic=True) as capture:
        wp.launch(P.integrate, dim=1 << 15, inputs=[x, v, f, 0.01], device="cpu")
    capture.graph.min_tasks_per_thread = 1024
    try:
        wp.capture_launch(capture.graph, threads=2)
    except ValueError as error:
        print("refused:", error)
    """
)


def test_misspelt_wait_setting_is_refused():
    """A misspelt APIC_WAIT is refused at the first threaded replay, naming the variable and the choices, not
    turned into a silent serial replay."""
    env = dict(child_env(), APIC_WAIT="sleepy", APIC_REPLAY="numba")
    done = fork_server.run([sys.executable, "-c", _BAD_SETTING], env=env, cwd=TESTS, capture_output=True, text=True,
                           timeout=600)
    assert done.returncode == 0, done.stderr
    assert "refused: APIC_WAIT='sleepy' names no wait" in done.stdout and "futex, portable" in done.stdout, done.stdout
