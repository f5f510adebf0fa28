"""``python -m apic demo``: the built-in simulation, eager and captured, checked and timed."""

from __future__ import annotations

import time

from apic.cli import int_option


def add_parser(subparsers):
    parser = subparsers.add_parser("demo", help="run the built-in simulation eagerly and captured, and compare")
    # bounded: a chain needs two particles (one spring), a frame one substep; the upper bounds keep a typo
    # from asking for gigabytes or hours
    parser.add_argument("--frames", type=int_option(1, 1_000_000), default=200,
                        help="frames to simulate, 1 to 1000000 (default 200)")
    parser.add_argument("--particles", type=int_option(2, 1_000_000), default=64,
                        help="particles in the chain, 2 to 1000000 (default 64)")
    parser.add_argument("--substeps", type=int_option(1, 1000), default=8,
                        help="substeps per frame, 1 to 1000 (default 8)")
    return parser


def _time_per_frame(run_frame, frames: int) -> float:
    start = time.perf_counter()
    for _ in range(frames):
        run_frame()
    return (time.perf_counter() - start) / frames


def run(args) -> int:
    # lazy, as every import of NumPy, Warp or apic in the CLI: `python -m apic --help` stays quick
    import numpy as np  # lazy (above)
    import warp as wp  # lazy (above)

    import apic  # noqa: F401  (lazy, above; installs the CPU capture shims)
    from apic._compat import quiet_warp  # lazy (above)
    from apic.demo import Chain  # lazy (above)

    quiet_warp()

    eager = Chain(args.particles, args.substeps)
    captured = Chain(args.particles, args.substeps)
    with wp.ScopedCapture(device="cpu") as capture:
        captured.step()
    graph = capture.graph

    # one untimed frame each: compiles the kernels and loads the replay interpreter
    eager.step()
    wp.capture_launch(graph)
    eager_s = _time_per_frame(eager.step, args.frames)
    replay_s = _time_per_frame(lambda: wp.capture_launch(graph), args.frames)

    a, b = eager.state(), captured.state()
    identical = all(np.array_equal(a[k].view(np.uint32), b[k].view(np.uint32)) for k in a)
    ops = captured.ops_per_step()
    print(f"mass-spring chain: {args.particles} particles, {ops} ops per frame, {args.frames + 1} frames")
    print(f"  eager wp.launch loop : {eager_s * 1e6:10.1f} us/frame  ({eager_s * 1e6 / ops:6.2f} us/op)")
    print(f"  apic captured replay : {replay_s * 1e6:10.1f} us/frame  ({replay_s * 1e6 / ops:6.2f} us/op)")
    print(f"  speed-up             : {eager_s / replay_s:10.1f}x")
    print(f"  final state identical (bit for bit): {'yes' if identical else 'NO'}")
    print(f"  lowest particle height: {a['x'][:, 1].min():.4f}")
    return 0 if identical else 1
