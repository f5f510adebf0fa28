"""Capture one frame of a 2-D wave simulation on the CPU and save it as a graph (``wave.wrp``).

    python examples/wave_capture.py [--out wave] [--size 128] [--substeps 6]

The saved graph is self-contained: ``examples/wave_view.py`` replays it frame by frame in a
process that has never seen this file, and ``python -m apic replay wave.wrp`` runs it too.
Everything the frame needs lives in the graph: the height fields, the simulation clock, and the
rain drops, which a kernel places from the clock, so each replay advances the simulation.
"""

from __future__ import annotations

import argparse

import warp as wp

import apic  # noqa: F401  (CPU capture and wp.capture_save on every supported warp-lang)


@wp.kernel
def wave_step(prev: wp.array2d(dtype=float), cur: wp.array2d(dtype=float), nxt: wp.array2d(dtype=float),
              k: float, damping: float):
    """Leapfrog step of the damped wave equation with fixed (zero) borders."""
    i, j = wp.tid()
    n = cur.shape[0]
    m = cur.shape[1]
    if i == 0 or j == 0 or i == n - 1 or j == m - 1:
        nxt[i, j] = 0.0
        return
    lap = cur[i - 1, j] + cur[i + 1, j] + cur[i, j - 1] + cur[i, j + 1] - 4.0 * cur[i, j]
    nxt[i, j] = (2.0 * cur[i, j] - prev[i, j] + k * lap) * damping


@wp.kernel
def rain(cur: wp.array2d(dtype=float), clock: wp.array(dtype=int), period: int, radius: float, depth: float):
    """Every ``period`` frames, a drop falls at a place chosen from the clock."""
    i, j = wp.tid()
    frame = clock[0]
    if frame % period != 0:
        return
    state = wp.rand_init(1234, frame)
    n = float(cur.shape[0])
    m = float(cur.shape[1])
    cx = wp.randf(state, 0.15 * n, 0.85 * n)
    cy = wp.randf(state, 0.15 * m, 0.85 * m)
    d2 = (float(i) - cx) * (float(i) - cx) + (float(j) - cy) * (float(j) - cy)
    cur[i, j] = cur[i, j] - depth * wp.exp(-d2 / (radius * radius))


@wp.kernel
def tick(clock: wp.array(dtype=int)):
    clock[0] = clock[0] + 1


def capture(size: int, substeps: int):
    """Allocate the state and capture one frame; returns the graph and the arrays to bind."""
    shape = (size, size)
    prev = wp.zeros(shape, dtype=float, device="cpu")
    cur = wp.zeros(shape, dtype=float, device="cpu")
    nxt = wp.zeros(shape, dtype=float, device="cpu")
    clock = wp.zeros(1, dtype=int, device="cpu")
    with wp.ScopedCapture(device="cpu", apic=True) as cap:
        wp.launch(rain, dim=shape, inputs=[cur, clock, 12, size / 30.0, 0.5], device="cpu")
        for _ in range(substeps):
            wp.launch(wave_step, dim=shape, inputs=[prev, cur, nxt, 0.2, 0.996], device="cpu")
            wp.copy(prev, cur)
            wp.copy(cur, nxt)
        wp.launch(tick, dim=1, inputs=[clock], device="cpu")
    return cap.graph, {"height": cur, "clock": clock}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="wave", help="output path (.wrp is added)")
    parser.add_argument("--size", type=int, default=128, help="grid size (cells per side)")
    parser.add_argument("--substeps", type=int, default=6, help="wave steps per frame")
    args = parser.parse_args(argv)
    graph, arrays = capture(args.size, args.substeps)
    wp.capture_save(graph, args.out, inputs={"clock": arrays["clock"]}, outputs={"height": arrays["height"]})
    print(f"saved {args.out if args.out.endswith('.wrp') else args.out + '.wrp'}: "
          f"{graph.op_count} ops per frame on a {args.size}x{args.size} grid")


if __name__ == "__main__":
    main()
