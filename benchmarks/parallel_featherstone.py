"""Parallel CPU replay of newton's Featherstone solver: launches split by footprint, against serial.

    python -m benchmarks.parallel_featherstone [--worlds 256] [--links 4] [--threads 2] [--rounds 7]
                                               [--steps 3] [--min-tasks 4096]

The scene is the Featherstone layer of newton's own ``basic_multi_solver_overlay`` example: the example's
``num_links``-link pendulum chain, built by the example's own ``_build_pendulum_model``, replicated over
``--worlds`` worlds (``ModelBuilder.replicate``), stepped by ``SolverFeatherstone`` at the example's 100 fps
and 10 substeps, contacts off. Every Featherstone launch runs one task per articulation (or joint) and
writes flat arrays through index data (``articulation_start``, ``joint_child``, ``articulation_M_start``...),
which only the footprint rule splits (docs/PARALLEL.md, "Splitting by footprint").

Two graphs are captured from identical states; both replay the timed replays and a few more, one serially
and one on ``--threads`` threads, and every state array must then be the same bit for bit. Then
interleaved rounds time both; the ratio of minimums is the figure. Needs newton; no GPU.
"""

from __future__ import annotations

import argparse
import collections
import os
import statistics
import sys
import time

import numpy as np
import warp as wp

import apic

from apic._compat import quiet_warp
from apic.replay.plan_costs import TIMED_REPLAYS

from benchmarks.parallel import interleaved

FPS, SUBSTEPS = 100, 10  # the example's


class Scene:
    """The example's pendulum chain in ``worlds`` worlds, with Featherstone and two states."""

    def __init__(self, worlds: int, links: int = 4):
        import newton
        from newton.examples.basic import example_basic_multi_solver_overlay as overlay

        built = []  # the example builds and finalizes its model; its builder is kept to replicate
        overlay._build_pendulum_model(links, register_solver_attributes=built.append)
        scene = newton.ModelBuilder()
        scene.replicate(built[0], worlds)
        self.model = scene.finalize(device="cpu")
        self.solver = newton.solvers.SolverFeatherstone(self.model)
        self.states = [self.model.state(), self.model.state()]
        self.control = self.model.control()
        newton.eval_fk(self.model, self.model.joint_q, self.model.joint_qd, self.states[0])

    def simulate(self):
        """One frame: the example's substeps, an even number of state swaps."""
        for _ in range(SUBSTEPS):
            self.states[0].clear_forces()
            self.solver.step(self.states[0], self.states[1], self.control, None, 1.0 / FPS / SUBSTEPS)
            self.states.reverse()

    def capture(self):
        with wp.ScopedCapture(device="cpu") as capture:
            self.simulate()
        return capture.graph

    def arrays(self) -> dict:
        return {f"state_{k}.{name}": value.numpy() for k, state in enumerate(self.states)
                for name, value in vars(state).items() if isinstance(value, wp.array)}


def differing(first: Scene, second: Scene) -> list[str]:
    """The state arrays that differ, bit for bit."""
    a, b = first.arrays(), second.arrays()
    return [name for name in a if not np.array_equal(a[name].view(np.uint8), b[name].view(np.uint8))]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worlds", type=int, default=256)
    parser.add_argument("--links", type=int, default=4)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=3, help="frames per timed sample")
    parser.add_argument("--min-tasks", type=int, default=4096, help="min_tasks_per_thread (4096: the default)")
    args = parser.parse_args(argv)
    quiet_warp()
    wp.init()
    wp.set_device("cpu")

    serial_scene, split_scene = Scene(args.worlds, args.links), Scene(args.worlds, args.links)
    serial_scene.simulate()  # compile every module before capturing
    split_scene.simulate()
    serial, split = serial_scene.capture(), split_scene.capture()
    split.min_tasks_per_thread = args.min_tasks
    started = time.perf_counter()
    split.parallel_report(args.threads)  # lowering: the footprint evaluation, and the range entries' build
    lowered = time.perf_counter() - started
    for _ in range(TIMED_REPLAYS + 2):
        wp.capture_launch(serial)
        wp.capture_launch(split, threads=args.threads)
    differ = differing(serial_scene, split_scene)
    if differ:
        print(f"split replay differs from serial replay in {differ}")
        return 1
    times = interleaved(split, [1, args.threads], args.rounds, args.steps)
    report = split.parallel_report(args.threads)
    ran = collections.Counter(e["kernel"] for e in report for _ in range(e["count"]) if e["chunks"])
    launches = sum(1 for op in split.recording.ops if type(op).__name__ == "Launch")
    (s_min, s_med), (p_min, p_med) = ((min(t), statistics.median(t)) for t in times.values())
    print(f"newton Featherstone ({args.links}-link chains), {args.worlds} worlds, warp-lang {wp.config.version}, "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; {args.rounds} interleaved rounds of "
          f"{args.steps} frames, ms per frame (min / median)")
    print(f"serial {s_min:.2f} / {s_med:.2f}, threads={args.threads} {p_min:.2f} / {p_med:.2f}: ratio "
          f"{p_min / s_min:.2f} (medians {p_med / s_med:.2f}); bit-identical to serial")
    print(f"{sum(ran.values())} of {launches} launches on several threads: "
          f"{', '.join(f'{k} x{n}' for k, n in ran.items()) or 'none'}")
    shares = {row.name: row.share for row in apic.profile(serial, replays=args.steps).rows if row.kind == "launch"}
    coverage = sum(shares.get(kernel, 0.0) for kernel in ran)
    print(f"split coverage: {coverage:.1%} of a serial frame's time in kernels whose launches ran split (ideal "
          f"ratio on {args.threads} threads: {1 - coverage + coverage / args.threads:.2f})")
    kept = {e["kernel"]: e["why"] for e in report if not e["chunks"]}
    print("serial: " + "; ".join(f"{k} {shares.get(k, 0.0):.1%} ({why[:100]})" for k, why in kept.items()))
    print(f"lowering (footprint evaluation and range entries) {lowered:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
