"""Cost of the replay guards (loop iteration cap and Ctrl-C poll), as a ratio in one run.

Two graphs: ``straight`` (1000 tiny launches, no control flow) and ``loop`` (a ``capture_while`` of
2000 iterations, each a tiny launch and a condition kernel). Each is replayed by the same jitted
interpreter with the guards (``Program.run``, as ``wp.capture_launch`` does, main thread: cap and
poll) and without (``run_table(table, repeats)``, the unguarded form), interleaved, over ``ROUNDS``
rounds; the figure is the ratio of the minimum times.

    python -m benchmarks.loop_guard
"""

from __future__ import annotations

import time

import warp as wp

import apic  # noqa: F401  (installs the capture)
from apic.replay.cpu.interpreter import run_table

ROUNDS = 31


@wp.kernel
def nudge(x: wp.array(dtype=float)):
    i = wp.tid()
    x[i] = x[i] * 0.5 + 1.0


@wp.kernel
def count_down(n: wp.array(dtype=wp.int32), flag: wp.array(dtype=wp.int32)):
    n[0] = n[0] - 1
    flag[0] = wp.where(n[0] > 0, 1, 0)


@wp.kernel
def reset(n: wp.array(dtype=wp.int32), flag: wp.array(dtype=wp.int32), start: int):
    n[0] = start
    flag[0] = 1


def graphs():
    x = wp.zeros(16, dtype=float, device="cpu")
    n = wp.zeros(1, dtype=wp.int32, device="cpu")
    flag = wp.zeros(1, dtype=wp.int32, device="cpu")
    with wp.ScopedCapture(device="cpu") as straight:
        for _ in range(1000):
            wp.launch(nudge, dim=16, inputs=[x], device="cpu")
    with wp.ScopedCapture(device="cpu") as loop:
        wp.launch(reset, dim=1, inputs=[n, flag, 2000], device="cpu")
        wp.capture_while(flag, lambda: (wp.launch(nudge, dim=16, inputs=[x], device="cpu"),
                                        wp.launch(count_down, dim=1, inputs=[n, flag], device="cpu")))
    return {"straight": straight.graph, "loop": loop.graph}


def main() -> None:
    for name, graph in graphs().items():
        program = graph.program
        program.run()
        run_table(program.table, 1)  # compile both forms before timing
        guarded, bare = [], []
        for _ in range(ROUNDS):
            t = time.perf_counter()
            program.run()
            guarded.append(time.perf_counter() - t)
            t = time.perf_counter()
            run_table(program.table, 1)
            bare.append(time.perf_counter() - t)
        g, b = min(guarded), min(bare)
        print(f"{name:9s} guarded {g * 1e6:9.1f} us  unguarded {b * 1e6:9.1f} us  ratio {g / b:.4f}")


if __name__ == "__main__":
    main()
