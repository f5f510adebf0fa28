"""The fuzzer's reach into threaded replay: every loaded input that replays is replayed again with
``threads=2`` from the same starting memory, and its memory must be the serial replay's, bit for bit.

``snapshot`` keeps a loaded graph's memory as loaded (every region), ``threaded_problem`` puts it back
after the serial replays, replays as many times with ``threads=2`` (``min_tasks_per_thread=1``, so that the
fuzzer's small launches split wherever a claim lets them) and says where the two differ, or None. A graph
with native handles (a Mesh, ...) is not compared: their native state is not graph memory, and is not put
back with it (``apic.sweep.Replayer`` loads such a graph again instead).
"""

from __future__ import annotations

import ctypes
import os

import numpy as np
import warp as wp

import apic  # noqa: F401  (installs the capture shims)

THREADS = 2
N = 256


@wp.kernel
def _axpb(x: wp.array(dtype=float), y: wp.array(dtype=float), a: float, b: float):
    i = wp.tid()
    y[i] = y[i] * a + x[i] * b


def save_split(folder: str) -> str:
    """Capture and save the seed ``split``: launches a threaded replay splits (claims sealed in the manifest,
    and the module's source saved, from which a threaded replay builds its range entries)."""
    cpu = "cpu"
    x = wp.array(np.linspace(-1.0, 1.0, N, dtype=np.float32), device=cpu)
    y = wp.array(np.arange(N, dtype=np.float32), device=cpu)
    wp.launch(_axpb, dim=N, inputs=[x, y, 1.0, 0.0], device=cpu)  # compiled outside the capture
    with wp.ScopedCapture(device=cpu, apic=True) as cap:
        for i in range(4):
            wp.launch(_axpb, dim=N, inputs=[x, y, 0.5 + 0.125 * i, 0.25 * i], device=cpu)
    wp.capture_save(cap.graph, os.path.join(folder, "split"), inputs={"x": x}, outputs={"y": y},
                    source_fallback=True)
    return os.path.join(folder, "split.wrp")


def split_launches(graph) -> int:
    """How many distinct launches the last threaded replay cut into more than one chunk or ran together."""
    return sum(1 for entry in graph.parallel_report(THREADS) if entry["chunks"] > 1 or entry["together"] > 1)


def snapshot(graph) -> list[tuple[int, bytes]] | None:
    """``(address, contents)`` of each region of a loaded graph, or None where threads are not compared."""
    if graph.recording.handles or not hasattr(graph, "region_addresses"):
        return None
    return [(address, ctypes.string_at(address, region.nbytes))
            for address, region in zip(graph.region_addresses, graph.recording.regions) if region.nbytes]


def threaded_problem(graph, initial: list[tuple[int, bytes]], replays: int) -> str | None:
    """Where ``threads=2`` replays differ from the serial ones just run (from memory ``initial``), or None."""
    serial = [(address, ctypes.string_at(address, len(contents))) for address, contents in initial]
    for address, contents in initial:
        ctypes.memmove(address, contents, len(contents))
    graph.min_tasks_per_thread = 1
    try:
        graph.launch(replays, THREADS)
    except Exception as error:  # noqa: BLE001 - the serial replay passed: any failure here is a finding
        return f"the serial replay passed, threads={THREADS} raised {type(error).__name__}: {error}"
    for region, (address, contents) in enumerate(serial):
        threaded = ctypes.string_at(address, len(contents))
        if threaded != contents:
            at = next(i for i, (a, b) in enumerate(zip(threaded, contents)) if a != b)
            return (f"threads={THREADS} replay differs from the serial one in the {region}-th region with "
                    f"memory, first at byte {at} of {len(contents)}")
    return None
