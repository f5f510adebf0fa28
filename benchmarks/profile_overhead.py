"""What ``apic.profile`` costs per op: profiled vs plain replay of the same graph, in the same run.

    python -m benchmarks.profile_overhead [--rounds 9] [--replays 200]

Graphs: the demo chain (64 particles, 8 substeps: 49 ops) and 200 launches of an empty kernel (the
cost of the loop itself). Each round replays each graph ``--replays`` times plainly
(``graph.launch``, as ``wp.capture_launch``) and profiled (``apic.profile``, its wall time), in
alternating order; the report gives min / median ns per op of each and their difference.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time

import warp as wp

wp.config.quiet = True

import apic  # noqa: E402
from apic.demo import Chain  # noqa: E402
from apic.replay.cpu import profile as _profile  # noqa: E402


@wp.kernel
def nothing(x: wp.array(dtype=float)):
    pass


def _graphs() -> dict:
    chain = Chain(64, 8)
    with wp.ScopedCapture(device="cpu") as demo:
        chain.step()
    x = wp.zeros(1, dtype=float, device="cpu")
    wp.launch(nothing, dim=1, inputs=[x], device="cpu")
    with wp.ScopedCapture(device="cpu") as empty:
        for _ in range(200):
            wp.launch(nothing, dim=1, inputs=[x], device="cpu")
    return {"demo chain (49 ops)": (demo.graph, chain), "200 empty launches": (empty.graph, x)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--replays", type=int, default=200)
    args = parser.parse_args(argv)
    wp.init()
    graphs = _graphs()
    for graph, _ in graphs.values():  # compile both loops outside the timing
        graph.launch(1)
        apic.profile(graph, replays=1)
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {platform.system()} {platform.machine()}; "
          f"Python {platform.python_version()}, warp-lang {wp.config.version}; `python -m benchmarks.profile_overhead "
          f"--rounds {args.rounds} --replays {args.replays}`; one clock read: {_profile.clock_cost_ns():.1f} ns")
    print()
    print("| graph | plain ns/op (min / median) | profiled ns/op (min / median) | profiling cost ns/op (median) |")
    print("|---|---|---|---|")
    for name, (graph, _) in graphs.items():
        ops = len(graph.program.table) * args.replays
        plain, profiled = [], []
        for r in range(args.rounds):
            for which in ((0, 1) if r % 2 == 0 else (1, 0)):
                if which == 0:
                    start = time.perf_counter_ns()
                    graph.launch(args.replays)
                    plain.append((time.perf_counter_ns() - start) / ops)
                else:
                    profiled.append(apic.profile(graph, replays=args.replays).wall_ns / ops)
        pm, pd = min(plain), statistics.median(plain)
        qm, qd = min(profiled), statistics.median(profiled)
        print(f"| {name} | {pm:.1f} / {pd:.1f} | {qm:.1f} / {qd:.1f} | {qd - pd:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
