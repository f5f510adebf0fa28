"""Load and launch timings that run against any apic tree since 2026-11-22 (public API only), for bisecting.

    PYTHONPATH=<apic tree> python benchmarks/load_timing.py [alike] [distinct] [launch]

Prints one JSON line: ``capture_load`` of 10,000 launches cycling through 12 distinct ones (minimum of 9),
of 10,000 launches each with its own scalar (minimum of 3), both as wall ms (thread CPU ms), and one
``wp.capture_launch`` of a one-op graph in thread CPU microseconds (minimum of 7 x 20,000 calls). The
launches are those of the bench's ladder (``apic.bench.workloads.TinyLaunches``).
"""

import gc
import json
import os
import sys
import tempfile
import time

import numpy as np
import warp as wp

import apic


@wp.kernel
def tiny_blend(src: wp.array(dtype=float), dst: wp.array(dtype=float), s: float):
    i = wp.tid()
    dst[i] = src[i] * 0.5 + dst[i] * 0.25 + s


@wp.kernel
def tiny_max(src: wp.array(dtype=float), dst: wp.array(dtype=float), s: float):
    i = wp.tid()
    dst[i] = wp.max(src[i], dst[i]) * 0.5 + s


@wp.kernel
def tiny_norm(src: wp.array(dtype=float), dst: wp.array(dtype=float), s: float):
    i = wp.tid()
    dst[i] = wp.sqrt(src[i] * src[i] + 1.0) * 0.5 + dst[i] * 0.125 + s


KERNELS = ((tiny_blend, 1.0), (tiny_max, 0.75), (tiny_norm, 0.25))


def buffers() -> list:
    return [wp.array(np.arange(16, dtype=np.float32) * 0.1 + b, dtype=float, device="cpu") for b in range(4)]


def issue(arrays: list, ops: int, distinct: bool) -> None:
    """``ops`` launches as the bench's ladder issues them; ``distinct``: each with its own scalar."""
    for i in range(ops):
        kernel, s = KERNELS[i % 3]
        if distinct:
            s += (i % 65536) * 2.0**-10
        wp.launch(kernel, dim=1, inputs=[arrays[i % 4], arrays[(i + 1) % 4], s], device="cpu")


def load_ms(ops: int, distinct: bool, repeats: int) -> str:
    """The fastest ``capture_load`` of a saved graph of ``ops`` launches: wall ms (thread CPU ms)."""
    arrays = buffers()
    issue(arrays, 3, False)  # compile outside the capture
    with wp.ScopedCapture(device="cpu", apic=True) as capture:
        issue(arrays, ops, distinct)
    wall, cpu = [], []
    with tempfile.TemporaryDirectory() as root:
        path = os.path.join(root, "graph")
        apic.capture_save(capture.graph, path, inputs={f"b{i}": a for i, a in enumerate(arrays)})
        for _ in range(repeats):
            gc.collect()
            t0, c0 = time.perf_counter(), time.thread_time()
            apic.capture_load(path, device="cpu")
            wall.append(time.perf_counter() - t0)
            cpu.append(time.thread_time() - c0)
    return f"{min(wall) * 1e3:.1f} (cpu {min(cpu) * 1e3:.1f})"


def launch_us() -> float:
    """The fastest thread CPU time of one ``wp.capture_launch`` of a one-op graph, in microseconds."""
    arrays = buffers()
    issue(arrays, 1, False)
    with wp.ScopedCapture(device="cpu") as capture:
        issue(arrays, 1, False)
    graph = capture.graph
    for _ in range(2000):
        wp.capture_launch(graph)
    samples = []
    for _ in range(7):
        gc.disable()
        t0 = time.thread_time()
        for _ in range(20000):
            wp.capture_launch(graph)
        samples.append((time.thread_time() - t0) / 20000 * 1e6)
        gc.enable()
    return min(samples)


if __name__ == "__main__":
    wp.config.quiet = True
    wp.init()
    what = sys.argv[1:] or ["alike", "distinct", "launch"]
    found = {}
    if "alike" in what:
        found["alike_ms"] = load_ms(10_000, False, 9)
    if "distinct" in what:
        found["distinct_ms"] = load_ms(10_000, True, 3)
    if "launch" in what:
        found["launch_us"] = round(launch_us(), 3)
    print(json.dumps(found))
