"""A parameter sweep on Ray actors (``apic.ray.GraphPool``) against the same sweep replayed locally.

    python -m benchmarks.ray_sweep [--items 16] [--rounds 3] [--calls 200] [--quick]

The graph is the demo scene's step (``apic.demo.Chain``, 64 particles, 8 substeps, 49 ops) with its time
step a named scalar (``apic.param("dt")``), shipped as ``wp.capture_save_to_bytes``' bytes. The
sweep is ``--items`` parameter sets (distinct ``dt``), each replayed ``steps`` times from the saved
state and returning the positions, for item lengths from 1 to 10,000 steps. It runs:

* **local**: in this process, ``apic.sweep.Replayer`` (what each actor runs), one item after another;
* **1 actor** and **2 actors**: ``GraphPool(..., actors=k).map(items, steps)`` on a local Ray cluster
  (``--cpus``, default 2, loopback only).

Reported: the fixed cost of one remote call (``pool.run(steps=0)`` against ``Replayer.run(steps=0)``,
median of ``--calls``), items per second for each way and item length (best of ``--rounds``), and the
item length from which two actors beat one local process (at that length and every longer one). The
three ways are timed in turn within each round (best of ``--rounds``), so that a busy machine weighs on
all three alike. Every remote result is checked bit for bit against the local one.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time

import numpy as np
import warp as wp

from apic._compat import quiet_warp

quiet_warp()

# before Ray is imported: every Ray server on loopback (Ray's single-machine mode), no usage statistics
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

import ray  # noqa: E402

import apic  # noqa: E402
import apic.ray  # noqa: E402
from apic.demo import Chain  # noqa: E402
from apic.sweep import Replayer  # noqa: E402

STEP_COUNTS = (1, 10, 100, 300, 1000, 3000, 10000)
CHUNK = 4  # items per remote call in the chunked column


def _bundle() -> tuple:
    chain = Chain(64, 8)
    chain.dt = apic.param("dt", wp.float32, chain.dt)  # the step's launches receive it
    chain.step()  # compile outside the capture
    chain = Chain(64, 8)
    chain.dt = apic.param("dt", wp.float32, chain.dt)
    with wp.ScopedCapture(device="cpu", apic=True) as capture:
        chain.step()
    return apic.capture_save_to_bytes(capture.graph, outputs={"x": chain.x})


def _items(count: int) -> list[dict]:
    return [{"dt": 1.0 / 480.0 * (1.0 + 0.01 * i)} for i in range(count)]


def _per_call_us(call, calls: int) -> float:
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e6


def _best(run, rounds: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return best


def _same(a: list[dict], b: list[dict]) -> bool:
    return all(np.array_equal(x["x"].view(np.uint8), y["x"].view(np.uint8)) for x, y in zip(a, b))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--cpus", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="fewer items, rounds and calls (a smoke run)")
    args = parser.parse_args(argv)
    if args.quick:
        args.items, args.rounds, args.calls = 4, 1, 20
    steps_list = STEP_COUNTS[:3] if args.quick else STEP_COUNTS
    if args.quick:
        args.items = max(args.items, 2 * CHUNK)

    bundle = _bundle()
    items = _items(args.items)
    local = Replayer(*bundle)
    local.run(items[0], 10)  # the first replay of a process readies the replay loop
    step_us = _best(lambda: local.run(items[0], 1000), args.rounds) / 1000 * 1e6
    local_call_us = _per_call_us(lambda: local.run(items[0], 0), args.calls)
    expected = {steps: [local.run(item, steps) for item in items] for steps in steps_list}

    ray.init(num_cpus=args.cpus, include_dashboard=False, object_store_memory=200 * 1024 * 1024,
             log_to_driver=False, configure_logging=False)
    try:
        ref = apic.ray.put_graph(bundle)  # once, for both pools
        # Both pools live at once, so that each round times the three ways one after the other (the load of
        # the machine then weighs on all three alike); an idle actor takes no CPU, so each asks Ray for a
        # third of the cluster's and all three fit.
        share = {"num_cpus": args.cpus / 3}
        with apic.ray.GraphPool(ref, actors=1, actor_options=share) as one, \
                apic.ray.GraphPool(ref, actors=2, actor_options=share) as two:
            ways = {"local": lambda s: [local.run(item, s) for item in items],
                    "1 actor": lambda s: one.map(items, s), "2 actors": lambda s: two.map(items, s),
                    f"2x chunk {CHUNK}": lambda s: two.map(items, s, chunk=CHUNK)}
            for name, run in ways.items():
                run(10)  # every actor's first replay
                for steps in steps_list:
                    if not _same(run(steps), expected[steps]):
                        raise SystemExit(f"{name}, {steps} steps: a result differs from the local replay")
            remote_call_us = _per_call_us(lambda: one.run(items[0], 0), args.calls)
            best = {name: dict.fromkeys(steps_list, float("inf")) for name in ways}
            for _ in range(args.rounds):
                for steps in steps_list:
                    for name, run in ways.items():
                        start = time.perf_counter()
                        run(steps)
                        best[name][steps] = min(best[name][steps], time.perf_counter() - start)
    finally:
        ray.shutdown()
    rates = {name: {steps: args.items / t for steps, t in found.items()} for name, found in best.items()}

    print(f"Ray sweep: demo scene (49 ops per step, dt a named scalar), {args.items} items; Ray {ray.__version__}, "
          f"warp-lang {wp.config.version}, Python {platform.python_version()}, {os.cpu_count()} CPUs, "
          f"cluster of {args.cpus} CPUs")
    print(f"  one step, local replay      : {step_us:9.2f} us  (timed over 1,000 steps)")
    print(f"  one item of 0 steps, local  : {local_call_us:9.1f} us  (reset, set dt, read x)")
    print(f"  one remote call of 0 steps  : {remote_call_us:9.1f} us  (pool.run: the fixed cost of a remote call, "
          f"{remote_call_us - local_call_us:.0f} us over local)")
    # an item's length is what it takes locally in this run (the local column), not steps x one step's time
    header = "  steps/item  item (ms)" + "".join(f"  {name:>11} /s" for name in rates)
    print(header)
    crossover = None
    for steps in steps_list:
        item_ms = 1000.0 / rates["local"][steps]
        line = f"  {steps:>10}  {item_ms:9.3f}" + "".join(f"  {rates[name][steps]:13.1f}" for name in rates)
        print(line)
        wins = rates["2 actors"][steps] > rates["local"][steps]
        # the shortest item length from which two actors win at every longer one
        crossover = (crossover or (steps, item_ms)) if wins else None
    if crossover is None:
        print("  two actors did not beat the local replay at any item length measured")
    else:
        print(f"  two actors beat one local process from {crossover[0]} steps per item "
              f"(an item of {crossover[1]:.2f} ms locally) in this run")
    print("  every remote result equal bit for bit to the local replay: yes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
