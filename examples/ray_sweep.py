"""A parameter sweep of the demo scene across Ray workers: one captured step, shipped once, replayed by each.

    pip install "apic-warp[ray]"
    python examples/ray_sweep.py [--actors 2] [--frames 120] [--sweep 8] [--address ADDRESS]

The demo scene (a mass-spring chain falling onto the ground) is captured once with its time step a
named scalar parameter. ``apic.ray.GraphPool`` puts the graph's bytes into Ray's object store once;
each actor loads them once; ``pool.map`` runs every time step of the sweep from the saved state and
returns the final positions, in input order. The script then replays the first item locally and checks
that it is the same, bit for bit. Without ``--address`` it starts a Ray cluster on this machine, on the
loopback address only; with one (``ray start --head`` elsewhere) it joins that cluster.
"""

from __future__ import annotations

import argparse
import os

import numpy as np
import warp as wp

import apic  # CPU capture and wp.capture_save_to_bytes on every supported warp-lang
from apic.demo import Chain


def capture_step():
    """The demo chain's step, captured with ``dt`` a named scalar parameter; returns (graph, positions)."""
    chain = Chain(particles=64, substeps=8)
    chain.dt = apic.param("dt", wp.float32, chain.dt)  # eagerly, its value; in the graph, a named scalar
    with wp.ScopedCapture(device="cpu", apic=True) as capture:
        chain.step()
    return capture.graph, chain.x


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--actors", type=int, default=2)
    parser.add_argument("--frames", type=int, default=120, help="steps each item replays (60 per second)")
    parser.add_argument("--sweep", type=int, default=8, help="how many time steps to try")
    parser.add_argument("--address", default=None, help="a running Ray cluster to join (default: start one here)")
    args = parser.parse_args()

    # read by Ray when it is imported: no usage statistics sent, and a cluster started here listens on
    # the loopback address only (Ray's single-machine mode)
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    if not args.address:
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    import ray

    import apic.ray

    graph, x = capture_step()
    if args.address:
        ray.init(address=args.address, log_to_driver=False)
    else:
        ray.init(num_cpus=args.actors, include_dashboard=False, object_store_memory=200 * 1024 * 1024,
                 log_to_driver=False)
    sweep = [{"dt": float(dt)} for dt in np.linspace(1 / 960, 1 / 240, args.sweep)]
    try:
        with apic.ray.GraphPool(graph, actors=args.actors, outputs={"x": x}) as pool:  # ray.put once
            results = pool.map(sweep, steps=args.frames)
            workers = pool.workers()
        local = apic.ray.Replayer(*apic.capture_save_to_bytes(graph, outputs={"x": x}))
        same = np.array_equal(local.run(sweep[0], args.frames)["x"].view(np.uint8), results[0]["x"].view(np.uint8))
    finally:
        ray.shutdown()
    print(f"{len(sweep)} time steps x {args.frames} frames on {len(workers)} Ray actors "
          f"(pids {', '.join(str(w['pid']) for w in workers)})")
    for item, result in zip(sweep, results):
        tip = result["x"][-1]
        print(f"  substep dt = {item['dt'] * 1000:6.3f} ms   "
              f"chain tip at ({tip[0]: .4f}, {tip[1]: .4f}, {tip[2]: .4f})")
    print(f"first item replayed locally: identical (bit for bit): {'yes' if same else 'NO'}")


if __name__ == "__main__":
    main()
