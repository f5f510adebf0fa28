"""Replay a saved wave graph frame by frame and write the water height as PNG images.

    python examples/wave_view.py wave.wrp [--frames 120] [--every 10] [--out frames]

This script knows nothing of the simulation: it has no kernels and never imports the program that
captured the graph (``examples/wave_capture.py``). It loads ``wave.wrp`` with its compiled modules,
replays one frame per ``wp.capture_launch``, reads the ``height`` parameter, and draws it with
matplotlib. The counterpart of Warp's standalone visualization examples, on a saved CPU graph.
"""

from __future__ import annotations

import argparse
import os

import numpy as np
import warp as wp

import apic  # noqa: F401  (wp.capture_load on every supported warp-lang)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", help="the saved graph (.wrp), with its _modules folder beside it")
    parser.add_argument("--frames", type=int, default=120, help="frames to simulate")
    parser.add_argument("--every", type=int, default=10, help="write an image every N frames")
    parser.add_argument("--out", default="frames", help="folder for the PNG images")
    args = parser.parse_args(argv)

    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    graph = wp.capture_load(args.path, device="cpu")
    height = graph.params["height"]
    frame = wp.empty(shape=height["shape"], dtype=wp.float32, device="cpu")
    os.makedirs(args.out, exist_ok=True)

    written = []
    for i in range(1, args.frames + 1):
        wp.capture_launch(graph)  # one frame: every substep, in one native call
        if i % args.every and i != args.frames:
            continue
        graph.get_param("height", frame)
        fig, ax = plt.subplots(figsize=(4, 4), dpi=100)
        ax.imshow(frame.numpy(), cmap="RdBu_r", vmin=-0.3, vmax=0.3, interpolation="bilinear")
        ax.set_title(f"frame {i}")
        ax.set_axis_off()
        name = os.path.join(args.out, f"frame_{i:04d}.png")
        fig.savefig(name, bbox_inches="tight")
        plt.close(fig)
        written.append(name)
    values = frame.numpy()
    print(f"wrote {len(written)} images to {args.out}/ (height range {np.min(values):.3f} .. {np.max(values):.3f})")


if __name__ == "__main__":
    main()
