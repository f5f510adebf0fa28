"""Plans for 4, 8 and 16 threads, bit for bit against eager Warp (docs/PARALLEL.md).

This machine may have two cores: these check what the planner cuts for more threads and that each plan's
results are eager's, not speed. One graph holds each way a launch fans out: a large launch split by its
tasks, a row of independent launches, float atomics split by whole worlds (61 worlds of 37 tasks: even
cuts fall inside worlds), and a few heavy tasks split by their measured time after the timed replays.
"""

from __future__ import annotations

import numpy as np
import pytest
import warp as wp

from apic.replay.parallel.plan_costs import TIMED_REPLAYS
from apic.replay.parallel.split_planner import CHUNKS_PER_THREAD
from apic.replay.parallel.split_pool import unavailable
from conftest import CPU, assert_same, snapshot
from test_parallel_measured import heavy
from world_kernels import TASKS as WORLD_TASKS
from world_kernels import WORLDS, float_atomics

pytestmark = pytest.mark.skipif(unavailable() is not None, reason=f"no parallel replay here: {unavailable()}")
pytestmark = [pytestmark, pytest.mark.warp_version, pytest.mark.interpreter]

BIG = 1 << 16  # tasks of the launch split by its size (min_tasks_per_thread 1024 below)
HEAVY_TASKS = 8
ROUNDS = 100_000  # a heavy task's loop: about 0.3 ms


@wp.kernel
def affine(x: wp.array(dtype=float), y: wp.array(dtype=float), a: float):
    i = wp.tid()
    y[i] = x[i] * a + 1.0


def _state() -> dict:
    rng = np.random.default_rng(5)
    return {"big_x": wp.array(rng.standard_normal(BIG).astype(np.float32), device=CPU),
            "big_y": wp.zeros(BIG, dtype=float, device=CPU),
            "small": [wp.array(rng.standard_normal(3000).astype(np.float32), device=CPU) for _ in range(4)],
            "small_out": [wp.zeros(3000, dtype=float, device=CPU) for _ in range(4)],
            "wx": wp.array(rng.standard_normal((WORLDS, WORLD_TASKS)).astype(np.float32), device=CPU),
            "wacc": wp.zeros((WORLDS, 3), dtype=float, device=CPU),
            "hx": wp.array(np.linspace(1, 2, HEAVY_TASKS, dtype=np.float32), device=CPU),
            "hy": wp.zeros(HEAVY_TASKS, dtype=float, device=CPU)}


def _step(s: dict) -> None:
    wp.launch(affine, dim=BIG, inputs=[s["big_x"], s["big_y"], 0.5], device=CPU)
    for x, y in zip(s["small"], s["small_out"]):  # four independent launches: one row
        wp.launch(affine, dim=3000, inputs=[x, y, 1.5], device=CPU)
    wp.launch(float_atomics, dim=(WORLDS, WORLD_TASKS), inputs=[s["wx"], s["wacc"]], device=CPU)
    wp.launch(heavy, dim=HEAVY_TASKS, inputs=[s["hx"], s["hy"], ROUNDS], device=CPU)
    wp.launch(affine, dim=BIG, inputs=[s["big_y"], s["big_x"], 0.25], device=CPU)


def _flat(state: dict) -> dict:
    flat = {}
    for name, value in state.items():
        for k, array in enumerate(value if isinstance(value, list) else [value]):
            flat[f"{name}{k}"] = array
    return snapshot(flat)


@pytest.mark.parametrize("threads", [4, 8, 16])
def test_plans_for_more_threads_replay_as_eager(threads):
    eager, replayed = _state(), _state()
    with wp.ScopedCapture(device=CPU) as capture:
        _step(replayed)
    graph = capture.graph
    graph.min_tasks_per_thread = 1024
    for k in range(TIMED_REPLAYS + 3):  # the timed (serial) replays, then the plan made from them
        _step(eager)
        wp.capture_launch(graph, threads=threads)
        assert_same(_flat(eager), _flat(replayed), f"threads={threads}, replay {k + 1}")
    report = graph.parallel_report(threads)
    by_kernel = {}
    for entry in report:
        by_kernel.setdefault(entry["kernel"], []).append(entry)
    big = [e for e in by_kernel["affine"] if e["tasks"] == BIG]
    # 65,536 tasks hold 64 x 1,024 per thread: every thread gets CHUNKS_PER_THREAD chunks
    assert [e["chunks"] for e in big] == [CHUNKS_PER_THREAD * threads] * 2, big
    assert all(e["basis"].startswith("split by size") for e in big), big
    small = [e for e in by_kernel["affine"] if e["tasks"] == 3000]
    # independent of each other and of the launches next to them: they share one row
    assert all(e["together"] >= 4 and e["chunks"] >= 1 for e in small), small
    (world,) = by_kernel["float_atomics"]
    assert world["chunks"] >= 2, world
    (timed,) = by_kernel["heavy"]
    if graph.plans.row_ns is not None and "split by time" in timed["basis"]:
        assert 2 <= timed["chunks"] <= HEAVY_TASKS, timed  # never more chunks than tasks
