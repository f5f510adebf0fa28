"""The fixed costs around a replay: the first replay in a fresh process, and one ``wp.capture_launch``
against one ctypes call of a C no-op, each measured against its reference in the same run.

* ``first_replay()``: fresh processes with warm caches (one warm-up process first) time their first
  ``wp.capture_launch`` of a 10-launch graph, and ``capture_load`` + first launch of the same graph
  saved; each reports whether it imported Numba or llvmlite. Target: 100 ms.
* ``launch_overhead()``: in this process, a 1-launch graph's ``wp.capture_launch`` and a ctypes call of a
  C function that does nothing (Warp's ``wp_is_cuda_enabled``), alternating rounds of the same loop.
  Target: 3 times the ctypes call.

``python -m apic.bench.fixed_costs`` prints both as JSON.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import warp as wp

import apic
from apic import _compat

FIRST_REPLAY_TARGET_MS = 100.0
LAUNCH_TARGET_RATIO = 3.0


@wp.kernel
def _scale(a: wp.array(dtype=float), k: float):
    i = wp.tid()
    a[i] = a[i] * k


def _ten_launch_graph(a):
    with wp.ScopedCapture(device="cpu", apic=True) as capture:
        for n in range(10):
            wp.launch(_scale, dim=a.shape[0], inputs=[a, 1.0 + 0.001 * n], device="cpu")
    return capture.graph


def _child(mode: str, path: str) -> dict:
    """In a fresh process: the first launch (``launch``), or load + first launch (``load``), or save."""
    a = wp.zeros(64, dtype=float, device="cpu")
    graph = _ten_launch_graph(a)
    if mode == "save":
        apic.capture_save(graph, path)
        return {}
    start = time.perf_counter()
    if mode == "load":
        graph = apic.capture_load(path)
    wp.capture_launch(graph)
    ms = (time.perf_counter() - start) * 1e3
    return {"ms": ms, "numba": "numba" in sys.modules, "llvmlite": "llvmlite" in sys.modules}


def _run_child(mode: str, path: str, python: str) -> dict:
    done = subprocess.run([python, "-m", "apic.bench.fixed_costs", "--child", mode, path], capture_output=True,
                          text=True, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"the first-replay child ({mode}) failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def first_replay(rounds: int = 5, python: str = sys.executable) -> dict:
    """Milliseconds of a fresh process's first ``wp.capture_launch`` (10 launches) and of its
    ``capture_load`` + first launch, best and median of ``rounds`` processes, caches warm."""
    with tempfile.TemporaryDirectory(prefix="apic-first-") as folder:
        stem = os.path.join(folder, "ten")
        _run_child("save", stem, python)
        _run_child("launch", stem, python)  # warms the caches (builds the native interpreter if needed)
        out = {}
        for mode in ("launch", "load"):
            runs = [_run_child(mode, stem, python) for _ in range(rounds)]
            ms = [r["ms"] for r in runs]
            out[mode] = {"min_ms": min(ms), "median_ms": statistics.median(ms), "rounds_ms": ms,
                         "imports_numba": any(r["numba"] for r in runs),
                         "imports_llvmlite": any(r["llvmlite"] for r in runs),
                         "bar": "PASS" if statistics.median(ms) <= FIRST_REPLAY_TARGET_MS else "MISS"}
        return out


def launch_overhead(calls: int = 20000, rounds: int = 7) -> dict:
    """Microseconds per ``wp.capture_launch`` of a 1-launch graph and per ctypes call of a C no-op
    (best of ``rounds`` alternating rounds of ``calls`` each), and their ratio."""
    a = wp.zeros(1, dtype=float, device="cpu")
    with wp.ScopedCapture(device="cpu", apic=True) as capture:
        wp.launch(_scale, dim=1, inputs=[a, 1.0], device="cpu")
    graph = capture.graph
    noop = _compat.runtime().core.wp_is_cuda_enabled  # returns a constant: a C call and nothing else
    launch = wp.capture_launch
    launch(graph)
    launches, noops = [], []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(calls):
            launch(graph)
        launches.append((time.perf_counter() - start) / calls * 1e6)
        start = time.perf_counter()
        for _ in range(calls):
            noop()
        noops.append((time.perf_counter() - start) / calls * 1e6)
    ratio = min(launches) / min(noops)
    return {"launch_us": min(launches), "ctypes_noop_us": min(noops), "ratio": ratio,
            "launch_rounds_us": launches, "ctypes_rounds_us": noops,
            "bar": "PASS" if ratio <= LAUNCH_TARGET_RATIO else "MISS"}


def main(argv: list[str]) -> None:
    wp.config.quiet = True
    if argv[:1] == ["--child"]:
        print(json.dumps(_child(argv[1], argv[2])))
        return
    print(json.dumps({"first_replay": first_replay(), "launch_overhead": launch_overhead()}, indent=1))


if __name__ == "__main__":
    main(sys.argv[1:])
