"""``apic.profile`` / ``python -m apic replay --profile``: per-op times from inside a second jitted loop.

The profiled replay must change memory exactly as the same number of plain replays (eager is the
oracle), count every executed row (loop iterations included), and map rows to kernels and op kinds.
"""

from __future__ import annotations

import gc
import sys

import numpy as np
import pytest
import warp as wp

import apic
import fork_server
from apic.demo import Chain
from viz_graphs import flow_outputs, flow_program, flow_state

pytestmark = [pytest.mark.warp_version, pytest.mark.interpreter, pytest.mark.install]


@pytest.fixture(autouse=True)
def _collect_meshes():
    """Free this test's meshes now, not in a later test's capture (Warp's Mesh.__del__ is a native call)."""
    yield
    gc.collect()



def _same(a: dict, b: dict) -> None:
    for key in a:
        assert a[key].tobytes() == b[key].tobytes(), key


def test_profile_matches_eager_demo():
    eager, captured = Chain(16, 4), Chain(16, 4)
    with wp.ScopedCapture(device="cpu") as capture:
        captured.step()
    for _ in range(7):
        eager.step()
    report = apic.profile(capture.graph, replays=7)
    _same(captured.state(), eager.state())
    by_name = {(r.kind, r.name): r for r in report.rows}
    assert by_name[("launch", "spring_forces")].ops == 4
    assert by_name[("launch", "spring_forces")].calls == 28
    assert by_name[("memcpy", "memcpy")].calls == 7
    assert sum(r.calls for r in report.rows) == 7 * len(capture.graph.program.table)
    assert abs(sum(r.share for r in report.rows) - 1.0) < 1e-9
    assert all(r.total_ns > 0 for r in report.rows)
    text = report.table()
    assert "spring_forces" in text
    assert text.splitlines()[0].split() == ["kind", "name", "ops", "calls", "total", "ms", "mean", "us", "share"]


def test_capture_launch_stays_unprofiled():
    """``wp.capture_launch`` runs the plain interpreter, also after a profile of the same graph."""
    from apic.replay.cpu import interpreter

    chain = Chain(8, 1)
    with wp.ScopedCapture(device="cpu") as capture:
        chain.step()
    apic.profile(capture.graph, replays=2)
    wp.capture_launch(capture.graph)
    run_table = capture.graph.program.backend._run_table  # the interpreter of its backend (apic.replay.backends)
    if run_table is not None and run_table.__module__ == interpreter.__name__:
        assert run_table is interpreter.run_table
    assert run_table is not interpreter.run_table_profiled


def test_profile_counts_loop_iterations_and_matches_eager():
    eager, live = flow_state(), flow_state()
    with wp.ScopedCapture(device="cpu") as capture:
        flow_program(live)
    flow_program(eager)
    live["counter"].assign(np.array([3], dtype=np.int32))
    # the capture ran nothing: reset the live state to the eager inputs, then replay once profiled
    fresh = flow_state()
    for key in ("x", "points", "out"):
        live[key].assign(fresh[key])
    report = apic.profile(capture.graph, replays=1)
    _same(flow_outputs(live), flow_outputs(eager))
    calls = {(r.kind, r.name): r.calls for r in report.rows}
    assert calls[("launch", "decrement")] == 3  # three trips round the while loop
    assert calls[("branch", "branch")] == 4 + 1  # the loop's test 4 times, the if's once
    assert calls[("handle_call", "wp_mesh_refit_host")] == 1


def test_profile_zero_replays_and_bad_arguments():
    chain = Chain(8, 1)
    with wp.ScopedCapture(device="cpu") as capture:
        chain.step()
    before = chain.state()
    report = apic.profile(capture.graph, replays=0)
    _same(chain.state(), before)
    assert all(r.calls == 0 for r in report.rows)
    with pytest.raises(ValueError, match="replays"):
        apic.profile(capture.graph, replays=-1)
    with pytest.raises(TypeError, match="apic CPU graph"):
        apic.profile(object())


def test_profile_plot(tmp_path):
    pytest.importorskip("matplotlib", reason="the plot extra is not installed")
    chain = Chain(8, 1)
    with wp.ScopedCapture(device="cpu") as capture:
        chain.step()
    path = tmp_path / "profile.png"
    apic.profile(capture.graph, replays=3).plot(str(path))
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_replay_profile(tmp_path):
    """Saved, then loaded and replayed profiled in a fresh process: the outputs are the eager ones."""
    chain, eager = Chain(8, 2), Chain(8, 2)
    with wp.ScopedCapture(device="cpu", apic=True) as capture:
        chain.step()
    path = str(tmp_path / "demo.wrp")
    wp.capture_save(capture.graph, path, outputs={"x": chain.x, "v": chain.v})
    for _ in range(5):
        eager.step()
    out_x, out_v = tmp_path / "x.npy", tmp_path / "v.npy"
    result = fork_server.run([sys.executable, "-m", "apic", "replay", path, "--iters", "5", "--profile",
                             "--output", f"x={out_x}", "--output", f"v={out_v}"],
                             capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    assert np.load(out_x).tobytes() == eager.x.numpy().tobytes()
    assert np.load(out_v).tobytes() == eager.v.numpy().tobytes()
    assert "spring_forces" in result.stdout and "5 replay(s)" in result.stdout
    line = next(x for x in result.stdout.splitlines() if x.startswith("launch") and "spring_forces" in x)
    assert line.split()[2:4] == ["2", "10"]  # 2 ops, 10 calls


def test_profile_stops_a_loop_past_the_cap_as_a_replay_does():
    """The profiled loop has the replay's guards: a capture_while past the iteration cap raises."""
    flag = wp.ones(1, dtype=wp.int32, device="cpu")  # never cleared: the loop runs until the cap
    x = wp.zeros(1, dtype=wp.float32, device="cpu")
    with wp.ScopedCapture(device="cpu") as capture:
        wp.capture_while(flag, lambda: x.fill_(1.0))
    previous = apic.max_loop_iterations()
    apic.set_max_loop_iterations(1000)
    try:
        with pytest.raises(apic.LoopLimitError, match="more than 1,000 iterations"):
            apic.profile(capture.graph, replays=1)
    finally:
        apic.set_max_loop_iterations(previous)
