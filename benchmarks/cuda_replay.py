"""Replaying a graph of 1,000 tiny CUDA launches: Warp's own replays and apic's, side by side on one card, in one run.

    python -m benchmarks.cuda_replay [--launches 1000] [--replays 100] [--rounds 7] [--json PATH] [--dry-run]

Methods, each with its own memory (a one-element int32 counter that every launch increments):

* ``warp graph``: Warp's own CUDA graph of the launches (``wp.ScopedCapture`` without ``apic``), replayed with
  Warp's own ``wp.capture_launch``: the floor;
* ``warp APIC loaded``: Warp's native APIC (warp-lang 1.13+), reached with apic's shims off
  (``apic.uninstall()``): ``wp.ScopedCapture(apic=True)``, Warp's ``wp.capture_save`` and ``wp.capture_load``,
  replayed with Warp's ``wp.capture_launch``; ``apic.install()`` afterwards;
* ``apic loaded, graph``: apic's ``wp.capture_save`` / ``wp.capture_load`` of an ``apic=True`` capture, replayed
  as one CUDA graph (one ``cuGraphLaunch`` per replay);
* ``apic loaded, launch``: the same file, replayed op by op (``graph.mode = "launch"``: one ``cuLaunchKernel``
  per node, called by address from apic's native interpreter, ``apic.replay.cuda.rows``);
* ``C floor``: the floor of op-by-op replay (``benchmarks/cuda_floor.py``): a C loop (compiled at run time with
  the system's C compiler; where there is none, the same loop in LLVM IR through llvmlite) making the same
  ``cuLaunchKernel`` calls as ``apic loaded, launch`` on a third load of the file, in one ctypes call per
  replay. The target is op-by-op replay within 1.2x of it per node (``launch_vs_floor``).

Two ratios of medians close the report: ``launch_vs_floor`` (apic's op-by-op replay per node over the C floor's)
and ``issue_vs_warp_graph`` (the time ``wp.capture_launch`` of apic's loaded graph takes to issue a replay over
Warp's own graph's: the target is at most 1).

Each round times every method once, in an order that rotates from round to round: ``--replays`` replays
back to back (``issue``: until the last launch call returns), then one device synchronize (``total``). The
report gives the minimum and the median over rounds, per replay and per node (per replay / launches). Every
method's counter must then equal launches x replays (exact integers): a method that computed anything else
is reported as wrong, and the run exits 1.

Without a GPU it says so and exits 3 (writing ``{"status": "no-gpu"}`` to ``--json``); ``--dry-run`` prints what
it would run and exits 0, touching no GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time

from benchmarks.cuda_methods import Method, read_counter

NO_GPU_EXIT = 3
IDLE_SAMPLES = 3  # single replays timed per method and round, each after the GPU has finished everything

METHODS = ("warp graph", "warp APIC loaded", "apic loaded, graph", "apic loaded, launch", "C floor",
           "apic exec, ctypes", "apic exec, ctypes, Warp's stream", "apic plan, captured exec")


def parse_args(argv=None) -> argparse.Namespace:
    """The command line (``--help`` lists it)."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.cuda_replay", description=__doc__.splitlines()[0])
    parser.add_argument("--launches", type=_positive, default=1000, help="launches in the graph (default 1000)")
    parser.add_argument("--replays", type=_positive, default=100, help="replays per timed batch (default 100)")
    parser.add_argument("--rounds", type=_positive, default=7, help="timed rounds (default 7)")
    parser.add_argument("--device", default="cuda:0", help="the CUDA device (default cuda:0)")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    parser.add_argument("--dry-run", action="store_true", help="print what would run and exit, touching no GPU")
    return parser.parse_args(argv)


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def plan(args: argparse.Namespace) -> str:
    """What a run with ``args`` does, in a few lines."""
    return "\n".join([
        f"a graph of {args.launches:,} launches of a one-thread kernel on {args.device}, "
        f"{args.rounds} rounds of {args.replays} replays per method, interleaved:",
        *(f"  - {name}" for name in METHODS),
        "needs a CUDA GPU, warp-lang 1.19 (Warp's APIC needs 1.13+) and cuda-python",
    ])


def summarise(samples: list[float], launches: int) -> dict:
    """Minimum and median of per-replay seconds, as microseconds per replay and per node."""
    per_replay = {"min": min(samples) * 1e6, "median": statistics.median(samples) * 1e6}
    return {"per_replay_us": per_replay, "per_node_us": {k: v / launches for k, v in per_replay.items()}}


def table(results: dict) -> str:
    """A small Markdown table of ``results`` (the JSON this module writes)."""
    lines = [f"{results['launches']:,} launches per replay on {results.get('device', '?')} "
             f"(warp-lang {results.get('warp', '?')}; {results['rounds']} rounds of {results['replays']} replays)", "",
             "| method | us per replay (min / median) | us per node (min / median) | issue us per replay (median) "
             "| issue us, GPU idle (median) | vs warp graph (medians) | correct |",
             "|---|---|---|---|---|---|---|"]
    floor = results["methods"].get("warp graph", {}).get("total", {}).get("per_replay_us", {}).get("median")
    for name, m in results["methods"].items():
        if m.get("error"):
            lines.append(f"| {name} | not run: {m['error']} | | | | | |")
            continue
        total, issue = m["total"], m["issue"]
        ratio = f"{total['per_replay_us']['median'] / floor:.2f}x" if floor else "-"
        lines.append(f"| {name} | {total['per_replay_us']['min']:.1f} / {total['per_replay_us']['median']:.1f} | "
                     f"{total['per_node_us']['min']:.3f} / {total['per_node_us']['median']:.3f} | "
                     f"{issue['per_replay_us']['median']:.1f} | {m['issue_idle']['per_replay_us']['median']:.1f} | "
                     f"{ratio} | {'yes' if m['correct'] else 'NO'} |")
    for key, target in (("launch_vs_floor", 1.2), ("issue_vs_warp_graph", 1.0), ("issue_idle_vs_warp_graph", 1.0)):
        if key in results:
            verdict = "met" if results[key] <= target else "NOT met"
            lines.append(f"\n{key}: {results[key]:.3f} (target at most {target}: {verdict})")
    return "\n".join(lines)


def write_json(path: str | None, results: dict) -> None:
    """Write ``results`` to ``path`` (atomically), if given."""
    if not path:
        return
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        json.dump(results, f, indent=2, sort_keys=True)
    os.replace(tmp, path)


def gpu_reason(device: str) -> str | None:
    """Why this machine cannot run the benchmark on ``device`` (no GPU, no cuda-python), or None."""
    import warp as wp

    if wp.get_cuda_device_count() == 0:
        return "no CUDA device visible to Warp on this machine"
    try:
        wp.get_device(device)
    except Exception as error:  # noqa: BLE001  (Warp raises ValueError or RuntimeError for a bad name)
        return f"no device {device!r}: {error}"
    from apic.replay.cuda import loaded_graph as cuda_replay

    return cuda_replay.unavailable_reason()


# --- the methods ----------------------------------------------------------------------------------------------
def _kernel():
    """The one-thread kernel every launch runs (its Warp module is this file's)."""
    global wp  # Warp resolves the annotation (a string: this module's annotations are postponed) in its globals
    import warp as wp

    @wp.kernel
    def tick(x: wp.array(dtype=wp.int32)):
        x[0] = x[0] + 1

    return tick


def _launches(kernel, x, device: str, count: int) -> None:
    import warp as wp

    for _ in range(count):
        wp.launch(kernel, dim=1, inputs=[x], device=device)


def warp_methods(kernel, device: str, launches: int, folder: str) -> tuple[list[Method], dict]:
    """Warp's own graph and Warp's native APIC loaded graph, with apic's shims off meanwhile; errors by method."""
    import warp as wp

    import apic

    found, errors = [], {}
    apic.uninstall()
    try:
        warp_launch = wp.capture_launch  # Warp's own, kept for the timing (apic's is back afterwards)
        x = wp.zeros(1, dtype=wp.int32, device=device)
        with wp.ScopedCapture(device=device) as cap:
            _launches(kernel, x, device, launches)
        graph = cap.graph
        found.append(Method("warp graph", lambda: warp_launch(graph), lambda: int(x.numpy()[0])))
        try:
            found.append(_warp_apic(kernel, device, launches, folder, warp_launch))
        except Exception as error:  # noqa: BLE001  (reported in the results: the other methods still run)
            errors["warp APIC loaded"] = f"{type(error).__name__}: {error}"
    finally:
        apic.install()
    return found, errors


def _warp_apic(kernel, device: str, launches: int, folder: str, warp_launch) -> Method:
    import warp as wp

    if not hasattr(wp, "capture_load"):
        raise RuntimeError(f"warp-lang {wp.config.version} has no native APIC (1.13+)")
    x = wp.zeros(1, dtype=wp.int32, device=device)
    with wp.ScopedCapture(device=device, apic=True) as cap:
        _launches(kernel, x, device, launches)
    stem = os.path.join(folder, "warp_apic")
    wp.capture_save(cap.graph, stem, inputs={"x": x})
    graph = wp.capture_load(stem, device=device)  # its counter starts at 0, as x was when saved
    return Method("warp APIC loaded", lambda: warp_launch(graph), lambda: read_counter(graph, "x", x))


def apic_methods(kernel, device: str, launches: int, folder: str) -> tuple[list[Method], dict]:
    """apic's loaded graph, replayed as one CUDA graph and op by op, and the C floor of the latter (three loads:
    each owns its memory); errors by method."""
    import warp as wp

    x = wp.zeros(1, dtype=wp.int32, device=device)
    with wp.ScopedCapture(device=device, apic=True) as cap:
        _launches(kernel, x, device, launches)
    stem = os.path.join(folder, "apic")
    wp.capture_save(cap.graph, stem, inputs={"x": x})
    found = []
    for mode in ("graph", "launch"):
        graph = wp.capture_load(stem, device=device)
        graph.mode = mode
        found.append(Method(f"apic loaded, {mode}", lambda g=graph: wp.capture_launch(g),
                            lambda g=graph: read_counter(g, "x", x)))
    from benchmarks.cuda_floor import Floor

    graph = wp.capture_load(stem, device=device)
    try:
        floor = Floor(graph, folder)
    except Exception as error:  # noqa: BLE001 - no entry points or no build: reported, the other methods still run
        return found, {"C floor": str(error)}
    found.append(Method("C floor", floor.run, lambda g=graph: read_counter(g, "x", x)))
    from benchmarks.cuda_issue_paths import issue_path_methods

    try:
        found += issue_path_methods(stem, device, x)
    except Exception as error:  # noqa: BLE001 - reported, the other methods still run
        return found, {"apic exec, ctypes": f"{type(error).__name__}: {error}"}
    return found, {}


def time_rounds(methods: list[Method], replays: int, rounds: int, synchronize) -> None:
    """Warm every method up, then time ``rounds`` rounds, each method once per round (rotating order)."""
    for m in methods:
        for _ in range(3):
            m.launch()
        m.replays += 3
    synchronize()
    for r in range(rounds):
        for m in methods[r % len(methods):] + methods[: r % len(methods)]:
            start = time.perf_counter()
            for _ in range(replays):
                m.launch()
            issued = time.perf_counter()
            synchronize()
            done = time.perf_counter()
            m.replays += replays
            m.issue.append((issued - start) / replays)
            m.total.append((done - start) / replays)
            for _ in range(IDLE_SAMPLES):  # what a replay costs to issue when the queue is empty
                start = time.perf_counter()
                m.launch()
                m.issue_idle.append(time.perf_counter() - start)
                m.replays += 1
                synchronize()


def run(args: argparse.Namespace) -> dict:
    """Build every method, time them, check them; the results (see ``table``)."""
    import warp as wp

    import apic

    wp.init()
    dev = wp.get_device(args.device)
    results = {"benchmark": "cuda_replay", "status": "ok", "device": dev.name, "arch": dev.arch,
               "warp": wp.config.version, "apic": apic.__version__, "python": platform.python_version(),
               "launches": args.launches, "replays": args.replays, "rounds": args.rounds, "methods": {}}
    kernel = _kernel()
    x = wp.zeros(1, dtype=wp.int32, device=args.device)
    wp.launch(kernel, dim=1, inputs=[x], device=args.device)  # loads the module outside any capture
    with tempfile.TemporaryDirectory() as folder:
        methods, errors = warp_methods(kernel, args.device, args.launches, folder)
        found, more = apic_methods(kernel, args.device, args.launches, folder)
        methods += found
        errors.update(more)
        time_rounds(methods, args.replays, args.rounds, lambda: wp.synchronize_device(args.device))
        for m in methods:
            value, expected = m.counter(), args.launches * m.replays
            results["methods"][m.name] = {"total": summarise(m.total, args.launches),
                                          "issue": summarise(m.issue, args.launches),
                                          "issue_idle": summarise(m.issue_idle, args.launches),
                                          "correct": value == expected,
                                          "counter": value, "expected": expected,
                                          "rounds_us": [t * 1e6 for t in m.total]}
    for name, error in errors.items():
        results["methods"][name] = {"error": error}
    results["methods"] = {n: results["methods"][n] for n in METHODS if n in results["methods"]}
    results.update(ratios(results["methods"]))
    if not all(m.get("correct", True) for m in results["methods"].values()):
        results["status"] = "wrong"
    return results


def ratios(methods: dict) -> dict:
    """``launch_vs_floor`` (apic's op-by-op replay per node over the C floor's, medians; target at most 1.2) and
    ``issue_vs_warp_graph`` (issue time of apic's loaded graph over Warp's own graph's, medians; target at
    most 1), where both methods of each ran."""

    def median(name: str, what: str):
        m = methods.get(name, {})
        return None if m.get("error") or what not in m else m[what]["per_replay_us"]["median"]

    found = {}
    pairs = {"launch_vs_floor": ("apic loaded, launch", "C floor", "total"),
             "issue_vs_warp_graph": ("apic loaded, graph", "warp graph", "issue"),
             "issue_idle_vs_warp_graph": ("apic loaded, graph", "warp graph", "issue_idle")}
    for key, (name, base, what) in pairs.items():
        a, b = median(name, what), median(base, what)
        if a is not None and b:
            found[key] = a / b
    return found


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.dry_run:
        print(plan(args))
        return 0
    from apic._compat import quiet_warp

    quiet_warp()
    reason = gpu_reason(args.device)
    if reason:
        print(f"cuda_replay needs a GPU: {reason}")
        write_json(args.json, {"benchmark": "cuda_replay", "status": "no-gpu", "reason": reason})
        return NO_GPU_EXIT
    results = run(args)
    write_json(args.json, results)
    print(table(results))
    return 0 if results["status"] == "ok" else 1


if __name__ == "__main__":
    sys.exit(main())
