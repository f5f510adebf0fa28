"""The fixed costs around replay: the first replay in a fresh process, and one ``capture_launch`` against
one ctypes call of a C no-op in the same process.

The first replay pays for loading the interpreter (and whatever it imports); it is timed in fresh child
processes, after one child has warmed the caches, as a user's start-up would meet it. Its reference, from
the same children, is the second ``capture_launch`` right after it.
"""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import time

import warp as wp

import apic
from apic.bench import floor
from apic.bench import methods as m
from apic.bench import workloads as w
from apic.bench.config import Config

FIRST_REPLAY_OPS = 10

_CHILD = r"""
import json, sys, time
started = time.perf_counter()
import warp as wp
from apic._compat import quiet_warp
quiet_warp()
wp.init()
import warp as wp

import apic
from apic.bench import workloads as w
w.load_kernels()
workload = w.TinyLaunches(int(sys.argv[1]), 1)
with wp.ScopedCapture(device=w.DEVICE) as capture:
    workload.issue()
ready = time.perf_counter()
wp.capture_launch(capture.graph)
first = time.perf_counter()
wp.capture_launch(capture.graph)
second = time.perf_counter()
print(json.dumps({"first_ms": (first - ready) * 1e3, "second_ms": (second - first) * 1e3,
                  "numba_imported": "numba" in sys.modules, "process_ms": (second - started) * 1e3}))
"""


def _child_env() -> dict:
    """This process's environment, with the ``apic`` it runs importable first (checkout or installed)."""
    package_parent = os.path.dirname(os.path.dirname(os.path.abspath(apic.__file__)))
    paths = [package_parent] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return dict(os.environ, PYTHONPATH=os.pathsep.join(paths))


def _run_child(ops: int) -> dict:
    result = subprocess.run([sys.executable, "-c", _CHILD, str(ops)], env=_child_env(), capture_output=True,
                            text=True, timeout=600)
    if result.returncode != 0:
        raise RuntimeError(f"the first-replay child failed (exit {result.returncode}): {result.stderr.strip()[-2000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def measure_first_replay(config: Config) -> dict:
    """The first ``wp.capture_launch`` of a ``FIRST_REPLAY_OPS``-op graph in fresh processes, caches warm."""
    _run_child(FIRST_REPLAY_OPS)  # warms Warp's kernel cache and the interpreter's
    runs = [_run_child(FIRST_REPLAY_OPS) for _ in range(1 if config.quick else 5)]
    return {
        "ops": FIRST_REPLAY_OPS,
        "first_ms": _stats([r["first_ms"] for r in runs]),
        "second_ms": _stats([r["second_ms"] for r in runs]),
        "numba_imported": any(r["numba_imported"] for r in runs),
    }


def _stats(samples: list[float]) -> dict:
    ordered = sorted(samples)
    return {"min": ordered[0], "median": ordered[len(ordered) // 2], "rounds": samples}


def _timed_us(loop, k: int) -> float:
    """Microseconds per repetition of ``loop(k)``, with the garbage collector off."""
    gc.disable()
    try:
        start = time.perf_counter()
        loop(k)
        return (time.perf_counter() - start) / k * 1e6
    finally:
        gc.enable()


def measure_call_overhead(config: Config) -> dict:
    """One ``wp.capture_launch`` of a one-op apic graph, and one ctypes call of a C no-op, interleaved."""
    graph = m.apic_capture(w.TinyLaunches(1, 1))
    launch = wp.capture_launch
    library = floor.library()
    noop = library.floor_noop if library is not None else None

    def launches(k: int) -> None:
        for _ in range(k):
            launch(graph)

    def noops(k: int) -> None:
        for _ in range(k):
            noop()

    k = 2000 if config.quick else 20000
    launch_us, noop_us = [], []
    for _ in range(3 if config.quick else 7):
        launch_us.append(_timed_us(launches, k))
        if noop is not None:
            noop_us.append(_timed_us(noops, k))
    out = {"us_per_call": _stats(launch_us)}
    if noop is not None:
        out["ctypes_noop_us"] = _stats(noop_us)
    else:
        out["ctypes_noop_reason"] = floor.library_error()
    return out
