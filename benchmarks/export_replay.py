"""The exported C library's replay against apic's Python-hosted replay and the native floor, in one run.

    python benchmarks/export_replay.py [--steps 20] [--particles 16] [--repeats 200] [--json]

The graph: the demo scene (``apic.demo.Chain``) stepped ``--steps`` times in one capture (tens of tiny ops per
step: dispatch dominates). It is saved, exported (``apic.c_library.library.export``) and replayed three ways on the
same file, each ``--repeats`` replays per timed call, the minimum of 9 rounds (the three interleaved in each):

* ``interpreter``: ``wp.capture_launch`` of the loaded graph (apic's native serial interpreter, or Numba's);
* ``export``: ``<name>_replay(instance, repeats)`` of the exported library (called once through ctypes);
* ``floor``: ``apic.bench.floor``'s C loop over the same kernel pointers and arguments, nothing in between.

Reported: ns per op of each and their ratios to the floor. Then the time from process start to the end of the
first replay (the minimum of 5 processes): a C program (dlopen, open, one replay) against a Python one
(``import apic``, ``capture_load``, one ``wp.capture_launch``), both with warm caches. The exported replay's
bindings are checked bit for bit against the Python replay's first.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np
import warp as wp

import apic
from apic.bench.floor import Floor, floor_rows
from apic.demo import Chain
from apic.c_library.from_graph import python_replay
from apic.c_library.library import export
from apic.c_library.toolchain import compiler

_FIRST_REPLAY_C = r"""
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
int main(int argc, char** argv) {
    void* lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!lib) { fprintf(stderr, "%s\n", dlerror()); return 1; }
    int (*open_)(int, void**) = (int (*)(int, void**))dlsym(lib, "bench_open");
    int (*replay)(void*, int64_t) = (int (*)(void*, int64_t))dlsym(lib, "bench_replay");
    void* g = 0;
    if (!open_ || !replay || open_(1, &g) || replay(g, 1)) return 1;
    return 0;
}
"""

_FIRST_REPLAY_PY = "import sys, warp as wp, apic; wp.capture_launch(apic.capture_load(sys.argv[1]))"


def best(runs: dict, rounds: int = 9) -> dict:
    """The minimum wall time (seconds) of each of ``runs`` (name -> callable) over ``rounds`` rounds, the methods
    interleaved within each round so that a slower stretch of a shared machine weighs on all of them alike."""
    times = {name: [] for name in runs}
    for _ in range(rounds):
        for name, run in runs.items():
            start = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - start)
    return {name: min(found) for name, found in times.items()}


def process_time(command: list[str], runs: int = 5) -> float:
    """The minimum wall time of ``command`` as a process, start to exit (seconds)."""
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(command, check=True, capture_output=True, timeout=600)
        times.append(time.perf_counter() - start)
    return min(times)


def main(argv=None) -> dict:
    folder = tempfile.mkdtemp(prefix="apic-export-bench-")
    try:
        return _measure(argv, folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)  # the library stays mapped while this process lives


def _measure(argv, folder: str) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--particles", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    wp.config.quiet = True
    wp.init()
    path = os.path.join(folder, "bench.wrp")
    chain = Chain(particles=args.particles, substeps=8)
    with wp.ScopedCapture(device="cpu", apic=True) as capture:
        for _ in range(args.steps):
            chain.step()
    apic.capture_save(capture.graph, path, inputs={"x": chain.x, "v": chain.v})
    start = time.perf_counter()
    written = export(path, os.path.join(folder, "out"), name="bench")
    export_s = time.perf_counter() - start

    graph = apic.capture_load(path)
    rows = floor_rows(graph.program.table, False)
    ops = len(rows)
    lib = ctypes.CDLL(written["library"])
    lib.bench_open.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_void_p)]
    lib.bench_replay.argtypes = [ctypes.c_void_p, ctypes.c_int64]
    lib.bench_read.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p, ctypes.c_size_t]
    instance = ctypes.c_void_p()
    assert lib.bench_open(1, ctypes.byref(instance)) == 0

    # bit for bit first: three replays of each, from the saved state
    x = np.zeros(args.particles * 3, np.float32)
    assert lib.bench_replay(instance, 3) == 0 and lib.bench_read(instance, b"x", x.ctypes.data, x.nbytes) == 0
    assert x.tobytes() == python_replay(apic.capture_load(path), {}, {}, 3)["x"], "export and Python differ"

    repeats = args.repeats
    floor = Floor(rows, keepalive=graph)
    seconds = best({
        "interpreter": lambda: [wp.capture_launch(graph) for _ in range(repeats)],
        "export": lambda: lib.bench_replay(instance, repeats),
        "floor": lambda: floor.run(repeats),
    })
    ns = {k: 1e9 * s / (repeats * ops) for k, s in seconds.items()}

    starter = os.path.join(folder, "first_replay")
    source = starter + ".c"
    with open(source, "w") as f:
        f.write(_FIRST_REPLAY_C)
    subprocess.run([*compiler(), "-O2", "-o", starter, source, "-ldl"], check=True, timeout=300)
    first = {"c": process_time([starter, written["library"]]),
             "python": process_time([sys.executable, "-c", _FIRST_REPLAY_PY, path])}
    result = {
        "graph": f"demo scene, {args.steps} steps x 8 substeps, {args.particles} particles: {ops} ops",
        "floor": floor.label, "export_seconds": round(export_s, 2),
        "ns_per_op": {k: round(v, 1) for k, v in ns.items()},
        "ratio_to_floor": {k: round(v / ns["floor"], 2) for k, v in ns.items()},
        "export_vs_interpreter": round(ns["export"] / ns["interpreter"], 2),
        "first_replay_ms": {k: round(1e3 * v, 1) for k, v in first.items()},
        "first_replay_ratio_python_to_c": round(first["python"] / first["c"], 1),
    }
    if args.json:
        print(json.dumps(result))
    else:
        print(result["graph"], f"({floor.label}; export took {result['export_seconds']} s)")
        for key in ("floor", "export", "interpreter"):
            print(f"  {key:12s} {ns[key]:8.1f} ns/op   {ns[key] / ns['floor']:5.2f}x the floor")
        print(f"  first replay from process start: C {result['first_replay_ms']['c']} ms, Python "
              f"{result['first_replay_ms']['python']} ms ({result['first_replay_ratio_python_to_c']}x)")
    return result


if __name__ == "__main__":
    main()
