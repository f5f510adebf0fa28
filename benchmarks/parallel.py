"""Parallel CPU launches (issue 15): split vs serial, ratios measured in one run.

    python -m benchmarks.parallel [--threads 2] [--rounds 7]

W2: 100 launches of dim 100,000 of the compute-bound ``heavy`` kernel (benchmarks/workloads.py),
ping-ponging two buffers. Serial: Warp's own recorded launches (``Launch.launch``: one call of Warp's
entry point per op, the single-thread native floor plus a ctypes call). Split: the same launches
prepared by ``apic.replay.parallel.prepare`` with ``--threads`` threads. W1-dim16: 1,000 tiny launches
(the three ``tiny_*`` kernels), which the split mode must not fan out. Each timing is the minimum over
``--rounds`` rounds; after timing, the split buffers must equal the serial ones bit for bit.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import warp as wp

import apic  # noqa: F401  (quiet Warp, install the capture API)
from apic.replay import parallel
from apic.bench.workloads import heavy, tiny_blend, tiny_max, tiny_norm


def _w2(threads):
    rng = np.random.default_rng(2)
    init = [rng.standard_normal(100_000).astype(np.float32) for _ in range(2)]
    out = {}
    for mode in ("serial", "split"):
        bufs = [wp.array(a, device="cpu") for a in init]
        ops = []
        for i in range(100):
            src, dst = bufs[i % 2], bufs[(i + 1) % 2]
            if mode == "serial":
                ops.append(wp.launch(heavy, dim=100_000, inputs=[src, dst], device="cpu", record_cmd=True).launch)
            else:
                run, split = parallel.prepare(heavy, 100_000, [src, dst], threads=threads)
                assert split, "W2's heavy kernel should split"
                ops.append(run)
        out[mode] = (ops, bufs)
    return out


def _w1(threads):
    kernels = (tiny_blend, tiny_max, tiny_norm)
    init = [np.linspace(0, 1, 16, dtype=np.float32) + k for k in range(4)]
    out = {}
    for mode in ("serial", "split"):
        bufs = [wp.array(a, device="cpu") for a in init]
        ops = []
        for i in range(1000):
            args = [bufs[i % 4], bufs[(i + 1) % 4], 0.5]
            if mode == "serial":
                ops.append(wp.launch(kernels[i % 3], dim=16, inputs=args, device="cpu", record_cmd=True).launch)
            else:
                run, split = parallel.prepare(kernels[i % 3], 16, args, threads=threads)
                assert not split, "a 16-task launch must not fan out"
                ops.append(run)
        out[mode] = (ops, bufs)
    return out


def _time(ops, rounds):
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        for op in ops:
            op()
        best = min(best, time.perf_counter() - t0)
    return best / len(ops)


def main(argv=None):
    """Time serial vs split launches and print per-op times and ratios."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=7)
    opts = parser.parse_args(argv)
    for name, build in (("W2", _w2), ("W1-dim16", _w1)):
        modes = build(opts.threads)
        # Interleave the modes round by round so machine noise hits both alike.
        times = {m: float("inf") for m in modes}
        for _ in range(opts.rounds):
            for m, (ops, _) in modes.items():
                times[m] = min(times[m], _time(ops, 1))
        same = all(
            np.array_equal(a.numpy().view(np.uint32), b.numpy().view(np.uint32))
            for a, b in zip(modes["serial"][1], modes["split"][1])
        )
        print(
            f"{name}: serial {times['serial'] * 1e6:9.1f} us/op"
            f"  split({opts.threads}) {times['split'] * 1e6:9.1f} us/op"
            f"  ratio {times['split'] / times['serial']:.3f}  bit-identical {same}"
        )
        if not same:
            raise SystemExit(1)


if __name__ == "__main__":
    main()
