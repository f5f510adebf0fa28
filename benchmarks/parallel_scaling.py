"""Parallel CPU replay's scaling: one mujoco-warp step replayed on 1, 2, 4, 8, 16 threads, in one run.

    python -m benchmarks.parallel_scaling [--model humanoid] [--worlds 1024] [--threads 1 2 4 8 16]
                                          [--rounds 5] [--steps 2] [--json PATH]

Captures one ``mjw.step`` (the scenes of ``benchmarks.parallel``, default settings: the plan of each
thread count is the one users get, after the timed replays of ``apic.replay.parallel.plan_costs``) in two graphs
from identical states. The first replays serially, the second on each thread count in turn, as many
replays; every ``Data`` array must then be the same bit for bit. Then the rounds interleave the thread
counts (the order reversed every other round) and the minimum per step of each gives its speed-up
over one thread and its parallel efficiency (speed-up / threads). Needs mujoco-warp; no GPU: the
16-core machine of the GPU check runs it as its ``cpu-scaling (optional)`` job.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

import warp as wp

from apic._compat import quiet_warp
from apic.replay.parallel.plan_costs import TIMED_REPLAYS

from benchmarks.parallel import _capture, _scene, differing, interleaved


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=("scene", "humanoid"), default="humanoid")
    parser.add_argument("--worlds", type=int, default=1024)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=2, help="replays per timed sample")
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args(argv)
    quiet_warp()
    wp.init()
    wp.set_device("cpu")  # the step runs on the CPU even where a GPU is the default device

    model, fresh, step = _scene(args.worlds, args.model)
    step(model, fresh())  # compile every module before capturing
    serial_data, again_data, split_data = fresh(), fresh(), fresh()
    serial, again = _capture(step, model, serial_data), _capture(step, model, again_data)
    split = _capture(step, model, split_data)
    replays = 0
    for threads in args.threads:  # each count's timed replays, then some on its plan
        for _ in range(TIMED_REPLAYS + 1):
            wp.capture_launch(split, threads=threads)
            replays += 1
    for _ in range(replays):
        wp.capture_launch(serial)
        wp.capture_launch(again)
    unset, differ = differing(serial_data, again_data, split_data)
    print(f"mujoco-warp step ({args.model}), {args.worlds} worlds, warp-lang {wp.config.version}, {os.cpu_count()} "
          f"CPUs, load average {os.getloadavg()[0]:.1f}; {args.rounds} interleaved rounds of {args.steps} steps")
    print(f"after {replays} replays over threads {args.threads}: "
          + (f"differ from serial in {differ}" if differ else "every Data array equals the serial replay's"))
    times = interleaved(split, args.threads, args.rounds, args.steps)
    base = min(times[args.threads[0]])
    rows = []
    for threads, samples in times.items():
        speedup = base / min(samples)
        rows.append({"threads": threads, "min_ms": min(samples), "median_ms": statistics.median(samples),
                     "speedup": speedup, "efficiency": speedup / threads * args.threads[0],
                     "split_launches": sum(e["count"] for e in split.parallel_report(threads) if e["chunks"])})
        print(f"threads {threads:>2}: {min(samples):8.1f} ms min, {statistics.median(samples):8.1f} median; "
              f"speed-up {speedup:5.2f}, efficiency {rows[-1]['efficiency']:.0%}, "
              f"{rows[-1]['split_launches']} launches on several threads")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"model": args.model, "worlds": args.worlds, "cpus": os.cpu_count(),
                       "load": os.getloadavg()[0], "bit_identical": not differ, "differ": differ,
                       "left_out_uninitialised": unset, "rows": rows}, f,
                      indent=2)
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
