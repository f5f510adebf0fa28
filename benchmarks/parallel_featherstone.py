"""Parallel CPU replay of newton's Featherstone solver: launches split by footprint, against serial.

    python -m benchmarks.parallel_featherstone [--worlds 256] [--links 4] [--threads 2 [4 8 16]] [--rounds 7]
                                               [--steps 3] [--min-tasks 4096] [--loaded] [--json PATH]

The scene is the Featherstone layer of newton's own ``basic_multi_solver_overlay`` example: the example's
``num_links``-link pendulum chain, built by the example's own ``_build_pendulum_model``, replicated over
``--worlds`` worlds (``ModelBuilder.replicate``), stepped by ``SolverFeatherstone`` at the example's 100 fps
and 10 substeps, contacts off. Every Featherstone launch runs one task per articulation (or joint) and
writes flat arrays through index data (``articulation_start``, ``joint_child``, ``articulation_M_start``...),
which only the footprint rule splits (docs/PARALLEL.md, "Splitting by footprint").

Two graphs are captured from identical states; one replays on each ``--threads`` count in turn (its timed
replays and a few more), the other serially as often, and every state array must then be the same bit for
bit. Then interleaved rounds time serial and every count; the ratio of minimums is the figure. ``--loaded``:
both graphs are saved with their generated source and loaded back first (the footprint verdicts sealed in
the module manifests decide the split), and the state arrays are compared through bound outputs. Needs
newton; no GPU: the 16-core machine of the GPU check runs it as its ``featherstone-scaling (optional)`` job.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import sys
import tempfile
import time

import numpy as np
import warp as wp

import apic

from apic._compat import quiet_warp
from apic.replay.parallel.plan_costs import TIMED_REPLAYS

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

    def capture(self, saveable: bool = False):
        with wp.ScopedCapture(device="cpu", apic=saveable) as capture:
            self.simulate()
        return capture.graph

    def arrays(self) -> dict:
        return {f"state_{k}.{name}": value.numpy() for k, state in enumerate(self.states)
                for name, value in vars(state).items() if isinstance(value, wp.array)}


def differing(first: Scene, second: Scene) -> list[str]:
    """The state arrays that differ, bit for bit."""
    a, b = first.arrays(), second.arrays()
    return [name for name in a if not np.array_equal(a[name].view(np.uint8), b[name].view(np.uint8))]


STATE = ("body_q", "body_qd", "joint_q", "joint_qd")  # what --loaded binds and compares


def saved_and_loaded(graph, scene: Scene, folder: str, name: str):
    """``graph`` saved with its generated source (``scene``'s first state bound as outputs) and loaded back."""
    state = scene.states[0]
    path = os.path.join(folder, name)
    wp.capture_save(graph, path, outputs={n: getattr(state, n) for n in STATE}, source_fallback=True)
    return wp.capture_load(path + ".wrp")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worlds", type=int, default=256)
    parser.add_argument("--links", type=int, default=4)
    parser.add_argument("--threads", type=int, nargs="+", default=[2], help="thread counts, each against serial")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=3, help="frames per timed sample")
    parser.add_argument("--min-tasks", type=int, default=4096, help="min_tasks_per_thread (4096: the default)")
    parser.add_argument("--loaded", action="store_true", help="replay the graphs saved and loaded back")
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args(argv)
    quiet_warp()
    wp.init()
    wp.set_device("cpu")

    serial_scene, split_scene = Scene(args.worlds, args.links), Scene(args.worlds, args.links)
    serial_scene.simulate()  # compile every module before capturing
    split_scene.simulate()
    serial, split = serial_scene.capture(args.loaded), split_scene.capture(args.loaded)
    if args.loaded:
        folder = tempfile.mkdtemp(prefix="apic-featherstone-")
        serial = saved_and_loaded(serial, serial_scene, folder, "serial")
        split = saved_and_loaded(split, split_scene, folder, "split")
    split.min_tasks_per_thread = args.min_tasks
    counts = [t for t in dict.fromkeys(args.threads) if t > 1]
    started = time.perf_counter()
    split.parallel_report(counts[0])  # lowering: the footprint evaluation, and the range entries' build
    lowered = time.perf_counter() - started
    replays = 0
    for threads in counts:  # each count's timed replays, then some on its plan
        for _ in range(TIMED_REPLAYS + 2):
            wp.capture_launch(split, threads=threads)
            replays += 1
    for _ in range(replays):
        wp.capture_launch(serial)
    if args.loaded:
        differ = [n for n in STATE if not np.array_equal(serial.param_numpy(n).view(np.uint8),
                                                         split.param_numpy(n).view(np.uint8))]
    else:
        differ = differing(serial_scene, split_scene)
    if differ:
        print(f"split replay differs from serial replay in {differ}")
        return 1
    times = interleaved(split, [1, *counts], args.rounds, args.steps)
    launches = sum(1 for op in split.recording.ops if type(op).__name__ == "Launch")
    shares = {row.name: row.share for row in apic.profile(serial, replays=args.steps).rows if row.kind == "launch"}
    s_min, s_med = min(times[1]), statistics.median(times[1])
    print(f"newton Featherstone ({args.links}-link chains), {args.worlds} worlds, warp-lang {wp.config.version}, "
          f"{'saved and loaded, ' if args.loaded else ''}"
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; {args.rounds} interleaved rounds of "
          f"{args.steps} frames, ms per frame (min / median); after {replays} replays on each side, every state "
          f"array equals the serial replay's\nserial {s_min:.2f} / {s_med:.2f}")
    rows = []
    for threads in counts:
        report = split.parallel_report(threads)
        ran = collections.Counter(e["kernel"] for e in report for _ in range(e["count"]) if e["chunks"])
        coverage = sum(shares.get(kernel, 0.0) for kernel in ran)
        p_min, p_med = min(times[threads]), statistics.median(times[threads])
        rows.append({"threads": threads, "min_ms": p_min, "median_ms": p_med, "ratio": p_min / s_min,
                     "efficiency": s_min / p_min / threads, "split_launches": sum(ran.values()),
                     "coverage": coverage, "ideal_ratio": 1 - coverage + coverage / threads})
        print(f"threads={threads} {p_min:.2f} / {p_med:.2f}: ratio {p_min / s_min:.2f} (medians {p_med / s_med:.2f}), "
              f"efficiency {rows[-1]['efficiency']:.0%}; {sum(ran.values())} of {launches} launches on several "
              f"threads, {coverage:.1%} of a serial frame (ideal ratio {rows[-1]['ideal_ratio']:.2f})")
    kept = {e["kernel"]: e["why"] for e in split.parallel_report(counts[0]) if not e["chunks"]}
    print(f"serial at threads={counts[0]}: "
          + "; ".join(f"{k} {shares.get(k, 0.0):.1%} ({why[:100]})" for k, why in kept.items()))
    print(f"lowering (footprint evaluation and range entries) {lowered:.1f} s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"worlds": args.worlds, "links": args.links, "cpus": os.cpu_count(), "serial_min_ms": s_min,
                       "serial_median_ms": s_med, "lowering_s": lowered, "loaded": args.loaded, "rows": rows}, f,
                      indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
