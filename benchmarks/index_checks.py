"""Cost of a loaded graph's index checks (``OP_CHECK_INDICES`` rows), as a ratio in one run.

A graph of indexed launches (a gather through an ``indexedarray`` of ``N`` indices) and an indexed
copy and fill, saved and loaded: ``wp.capture_launch`` runs its program with a check of every index
buffer before the op that reads it. The same loaded graph is lowered again without the checks
(``lowering.lower(..., checked=False)``) and both tables are replayed by the same jitted interpreter,
interleaved, over ``ROUNDS`` rounds; the figure is the ratio of the minimum times, per ``N``.

    python -m benchmarks.index_checks
"""

from __future__ import annotations

import os
import tempfile
import time

import numpy as np
import warp as wp

import apic  # noqa: F401  (installs the capture)
from apic.replay import lowering, program

ROUNDS = 31
SIZES = (1 << 10, 1 << 16, 1 << 20)


@wp.kernel
def gather(src: wp.indexedarray(dtype=float), dst: wp.array(dtype=float)):
    i = wp.tid()
    dst[i] = src[i] * 0.5 + dst[i]


def loaded_graph(n: int, folder: str):
    rng = np.random.default_rng(0)
    src = wp.array(rng.random(n, dtype=np.float32), device="cpu")
    idx = wp.array(rng.integers(0, n, n, dtype=np.int32), device="cpu")
    dst = wp.zeros(n, dtype=float, device="cpu")
    other = wp.zeros(n, dtype=float, device="cpu")
    with wp.ScopedCapture(device="cpu", apic=True) as cap:
        view = wp.indexedarray(src, [idx])
        for _ in range(4):
            wp.launch(gather, dim=n, inputs=[view, dst], device="cpu")
        wp.copy(wp.indexedarray(other, [idx]), view)
        wp.indexedarray(other, [idx]).fill_(0.5)
    path = os.path.join(folder, f"g{n}")
    wp.capture_save(cap.graph, path, inputs={"src": src}, outputs={"dst": dst})
    return wp.capture_load(path)


def main() -> None:
    from apic.replay.cpu.interpreter import run_table

    limits = program.replay_limits()
    with tempfile.TemporaryDirectory() as folder:
        for n in SIZES:
            graph = loaded_graph(n, folder)
            checked = graph.program
            bare = lowering.lower(graph.recording, graph.address_of, [k.address for k in graph.recording.kernels])
            run_table(checked.table, 1, limits, checked.loops)  # compile before timing
            times = {"checked": [], "unchecked": []}
            pair = [("checked", checked), ("unchecked", bare)]
            for r in range(ROUNDS):
                for name, prog in pair[:: 1 if r % 2 else -1]:  # alternate which runs first
                    t = time.perf_counter()
                    run_table(prog.table, 1, limits, prog.loops)
                    times[name].append(time.perf_counter() - t)
            c, u = min(times["checked"]), min(times["unchecked"])
            rows = int(np.sum(checked.table[:, 0] == 20))  # OP_CHECK_INDICES rows
            print(f"N={n:8d}  {rows} check rows  checked {c * 1e6:10.1f} us  unchecked {u * 1e6:10.1f} us  "
                  f"ratio {c / u:.4f}")


if __name__ == "__main__":
    main()
