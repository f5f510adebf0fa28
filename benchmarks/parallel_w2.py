"""Parallel replay of the W2 graph (compute-bound launches), serial vs ``threads=N``, one run.

    python -m benchmarks.parallel_w2 [--threads 2] [--rounds 9] [--ops 8] [--dim 65536] [--branches B]

A quick check of issue 15's W2 target on a machine with free cores (``python -m apic bench`` is the
full suite): one capture of ``--ops`` launches of ``apic.bench.workloads.heavy`` over ``--dim`` tasks,
replayed serially and split, the two modes interleaved round by round (each round the best of 5
replays). ``--branches B`` captures W4 instead: B independent chains sharing the ``--ops`` launches,
interleaved. Before timing, a split replay and a serial replay of two graphs captured from the same state
must leave both buffers identical bit for bit. Prints min and median per replay and their ratio.
"""

from __future__ import annotations

import argparse
import statistics
import time

import warp as wp

import apic  # noqa: F401  (installs the CPU capture)
from apic._compat import quiet_warp
from apic.bench import workloads
from apic.replay.cpu.table import OP_SPLIT


def _captured(ops: int, dim: int, branches: int):
    spec = workloads.branches(branches, ops, dim) if branches else workloads.compute_bound(ops, dim)
    work = spec.make()
    with wp.ScopedCapture(device="cpu") as capture:
        work.issue()
    return work, capture.graph


def _best_of(graph, threads: int, replays: int = 5) -> float:
    best = float("inf")
    for _ in range(replays):
        start = time.perf_counter()
        wp.capture_launch(graph, threads=threads)
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    """Time serial and split replays of W2, after checking that they agree bit for bit."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--ops", type=int, default=8)
    parser.add_argument("--dim", type=int, default=1 << 16)
    parser.add_argument("--branches", type=int, default=0, help="W4: this many independent chains (0: W2)")
    args = parser.parse_args()
    quiet_warp()
    wp.init()
    serial_work, serial_graph = _captured(args.ops, args.dim, args.branches)
    split_work, split_graph = _captured(args.ops, args.dim, args.branches)
    wp.capture_launch(serial_graph)
    wp.capture_launch(split_graph, threads=args.threads)
    if serial_work.snapshot() != split_work.snapshot():
        raise SystemExit("split replay differs from serial replay")
    serial, split = [], []
    for _ in range(args.rounds):
        serial.append(_best_of(serial_graph, 1))
        split.append(_best_of(split_graph, args.threads))
    plan = split_graph.parallel_program(args.threads).plan
    fanned = len(plan.chunks) if plan else 0
    rows = int((plan.table[:, 0] == OP_SPLIT).sum()) if plan else 0
    name = f"W4 ({args.branches} branches)" if args.branches else "W2"
    print(f"warp-lang {wp.config.version}, {name}: {args.ops} launches x {args.dim} tasks, {fanned} launches "
          f"on {args.threads} threads in {rows} rows")
    print(f"  serial replay     : min {min(serial) * 1e3:.2f} ms, median {statistics.median(serial) * 1e3:.2f} ms")
    print(f"  threads={args.threads} replay : min {min(split) * 1e3:.2f} ms, "
          f"median {statistics.median(split) * 1e3:.2f} ms")
    print(f"  ratio split/serial: min {min(split) / min(serial):.2f}, median "
          f"{statistics.median(split) / statistics.median(serial):.2f}")


if __name__ == "__main__":
    main()
