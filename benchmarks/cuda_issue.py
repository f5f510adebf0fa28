"""What issuing a loaded CUDA graph's replay costs on the host, measured without a GPU against a stand-in driver.

    python -m benchmarks.cuda_issue [--calls 20000] [--rounds 7] [--launches 1000] [--json PATH]

The driver is the stand-in library of ``benchmarks/cuda_standin.py`` (compiled at run time; its calls only
count), so what is timed is apic's own path to the driver: Python, ctypes and the native interpreter. Each
is reported per call (minimum and median over rounds) and as a ratio to a prebuilt ctypes call of a C
function that does nothing (``ctypes no-op``), the least any Python caller of the driver pays:

* ``ctypes no-op``: the floor;
* ``three ctypes calls``: what a replay cost before the op-table rows (cuCtxPushCurrent, cuGraphLaunch,
  cuCtxPopCurrent through ctypes, as ``apic.replay.cuda.driver`` made them);
* ``rows``: the graph-mode op table run by the native interpreter (one prebuilt ctypes call);
* ``graph.launch()`` and ``wp.capture_launch(graph)``: the whole path a user's replay takes.

Then, per node, op-by-op replay of ``--launches`` kernel launches (``mode="launch"``: the rows calling
``cuLaunchKernel`` by address) against the floor of ``benchmarks/cuda_floor.py`` (a C loop making the same
calls): ``launch_vs_floor``, the medians' ratio. Against the stand-in a call costs next to nothing, so this is
apic's dispatch per node against a bare loop's; on a GPU the driver's own cost comes on top of both
(``benchmarks/cuda_replay.py`` reports that ratio there).

The graph is a ``LoadedCudaGraph`` whose load is skipped (no GPU to load onto): its replay state is set as a
load sets it, with made-up handles the stand-in accepts. On a GPU, ``benchmarks/cuda_replay.py`` reports the
issue time of a loaded graph beside Warp's own graph (``issue_vs_warp_graph``), which is the figure that
counts; this one says how much of it is apic's.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import statistics
import sys
import tempfile
import time

CONTEXT, STREAM, EXEC = 0x100, 0x5000, 0x6000  # made-up handles: the stand-in only records them
WARMUP = 1000  # calls of each method before the timed rounds
# the driver calls each method makes per replay (the stand-in's context stack is empty: the rows push and pop)
DRIVER_CALLS = {"ctypes no-op": 0, "three ctypes calls": 3, "rows": 4, "graph.launch()": 4,
                "wp.capture_launch(graph)": 4}


class _Device:
    """What a replay reads of the graph's Warp device: its captures (none)."""

    captures: dict = {}


def loaded_graph(standin, plan=None):
    """A ``LoadedCudaGraph`` set up for replay as a load leaves it (see the module docstring); its steps
    ``plan`` (``apic.replay.cuda.lowering.lower``'s; default one memset)."""
    from apic.replay.cuda import loaded_graph as cuda_loaded_graph, rows as cuda_rows
    from apic.replay.cuda.resources import Resources

    graph = cuda_loaded_graph.LoadedCudaGraph.__new__(cuda_loaded_graph.LoadedCudaGraph)
    graph.mode = "graph"
    graph.device = _Device()
    graph._plan = plan or [("memset", 0x7000, 0, 1, 64)]
    graph._resources = res = Resources.__new__(Resources)
    res.context, res.stream, res.exec = CONTEXT, STREAM, EXEC
    entries = cuda_rows.driver_entries(None, library=standin.path)
    graph._rows = cuda_rows.CudaRows(graph._plan, entries, CONTEXT, STREAM, EXEC)
    return graph


def _three_calls(path: str):
    """The replay before the rows: push, cuGraphLaunch, pop, each a ctypes call (errors checked)."""
    lib = ctypes.CDLL(path)
    push, launch, pop = lib.cuCtxPushCurrent_v2, lib.cuGraphLaunch, lib.cuCtxPopCurrent_v2
    push.argtypes, launch.argtypes = [ctypes.c_void_p], [ctypes.c_void_p, ctypes.c_void_p]
    pop.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
    push.restype = launch.restype = pop.restype = ctypes.c_int
    ctx, exec_, on = ctypes.c_void_p(CONTEXT), ctypes.c_void_p(EXEC), ctypes.c_void_p(STREAM)
    popped = ctypes.c_void_p()
    popped_ref = ctypes.byref(popped)

    def replay() -> None:
        if push(ctx):
            raise RuntimeError("cuCtxPushCurrent failed")
        try:
            err = launch(exec_, on)
        finally:
            pop(popped_ref)
        if err:
            raise RuntimeError("cuGraphLaunch failed")

    return replay


def methods(standin) -> dict:
    """Each way of issuing a replay, by name: a function of no arguments."""
    import warp as wp

    graph = loaded_graph(standin)
    noop = ctypes.CFUNCTYPE(ctypes.c_int)(standin.noop_address())
    return {
        "ctypes no-op": noop,
        "three ctypes calls": _three_calls(standin.path),
        "rows": lambda: graph._rows.run_own("graph"),
        "graph.launch()": graph.launch,
        "wp.capture_launch(graph)": lambda: wp.capture_launch(graph),
    }


def per_node(standin, folder: str, launches: int) -> dict:
    """Op-by-op replay of ``launches`` kernel launches and the floor's loop over the same calls, by name."""
    from benchmarks.cuda_floor import Floor

    graph = loaded_graph(standin, [("kernel", 0x8000 + k, (1, 1, 1), (256, 1, 1), 0, 0x9000) for k in range(launches)])
    graph.mode = "launch"
    from apic.replay.cuda import rows as cuda_rows

    floor = Floor(graph, folder, cuda_rows.driver_entries(None, library=standin.path))
    return {"op by op (rows)": graph.launch, f"floor ({floor.compiler})": floor.run}


def measure(found: dict, calls: int, rounds: int, warmup: int = WARMUP) -> dict:
    """Per-call seconds of each method: ``rounds`` rounds of ``calls`` calls, methods interleaved."""
    samples = {name: [] for name in found}
    for fn in found.values():
        for _ in range(warmup):
            fn()
    for r in range(rounds):
        names = list(found)
        for name in names[r % len(names):] + names[: r % len(names)]:
            fn = found[name]
            start = time.perf_counter()
            for _ in range(calls):
                fn()
            samples[name].append((time.perf_counter() - start) / calls)
    return samples


def report(samples: dict) -> dict:
    """Minimum and median per call (microseconds) and the medians' ratio to the ctypes no-op."""
    floor = statistics.median(samples["ctypes no-op"])
    return {name: {"min_us": min(s) * 1e6, "median_us": statistics.median(s) * 1e6,
                   "vs_noop": statistics.median(s) / floor} for name, s in samples.items()}


def table(results: dict) -> str:
    lines = ["| method | us per call (min / median) | vs ctypes no-op (medians) |", "|---|---|---|"]
    for name, m in results["methods"].items():
        lines.append(f"| {name} | {m['min_us']:.3f} / {m['median_us']:.3f} | {m['vs_noop']:.2f}x |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.cuda_issue", description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20000, help="calls per round (default 20000)")
    parser.add_argument("--rounds", type=int, default=7, help="rounds (default 7)")
    parser.add_argument("--launches", type=int, default=1000, help="launches of the op-by-op graph (default 1000)")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    args = parser.parse_args(argv)
    from apic._compat import quiet_warp

    quiet_warp()
    import apic  # noqa: F401  (installs wp.capture_launch)
    from benchmarks import cuda_standin

    if cuda_standin.compiler() is None:
        print("cuda_issue needs a C compiler (cc, gcc or clang) for the stand-in driver library")
        return 3
    with tempfile.TemporaryDirectory() as folder:
        standin = cuda_standin.StandIn(folder)
        standin.logging(False)  # count the calls only
        results = {"benchmark": "cuda_issue", "calls": args.calls, "rounds": args.rounds,
                   "methods": report(measure(methods(standin), args.calls, args.rounds))}
        results["driver_calls"] = standin.count
        nodes = measure(per_node(standin, folder, args.launches), max(args.calls // args.launches, 1), args.rounds, 3)
        results["per_node"] = {name: {"min_us": min(v) * 1e6 / args.launches,
                                      "median_us": statistics.median(v) * 1e6 / args.launches}
                               for name, v in nodes.items()}
        rows, floor = (statistics.median(v) for v in nodes.values())
        results["launch_vs_floor"] = rows / floor
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2, sort_keys=True)
    print(table(results))
    print(f"\nper node, {args.launches:,} launches:")
    for name, m in results["per_node"].items():
        print(f"  {name}: {m['min_us'] * 1e3:.1f} / {m['median_us'] * 1e3:.1f} ns (min / median)")
    print(f"launch_vs_floor: {results['launch_vs_floor']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
