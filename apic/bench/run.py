"""Run the suite: verify every method bit for bit against eager, then time in interleaved rounds.

``run_suite(config, progress)`` returns one plain ``dict`` (what ``--json`` writes);
``format_report`` renders it as text and ``plot`` draws it. The machine this runs on may be
shared and noisy, so every method is timed once per round, the rounds interleave the methods
(in a rotating order), and the report gives the minimum and the median over rounds.
"""

from __future__ import annotations

import datetime
import gc
import math
import os
import platform
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass
from typing import Callable

import warp as wp

import apic
from apic import _compat
from apic.bench import methods as m
from apic.bench import workloads as w

SCHEMA = "apic-bench/1"


@dataclass(frozen=True)
class Config:
    quick: bool
    rounds: int  # timing rounds per workload
    batch_s: float  # aim for batches (k repetitions) of about this long
    verify_reps: int  # repetitions run by each method for the bit-for-bit check
    tiny_ops: int  # W1
    tiny_dims: tuple[int, ...]
    compute_ops: int  # W2
    compute_dim: int
    compute_rounds: int  # W2 batches are long and the machine noisy: more rounds
    branch_count: int  # W4: independent chains of compute-bound launches
    branch_ops: int
    branch_dim: int
    demo_particles: int  # W3
    demo_substeps: int
    ladder: tuple[int, ...]  # graph sizes (ops) for the plot
    ladder_rounds: int
    capture_rounds: int
    persist_ops: int  # graph size for save/load and bytes per op
    persist_rounds: int


FULL = Config(
    quick=False, rounds=15, batch_s=0.025, verify_reps=3,
    tiny_ops=1000, tiny_dims=(1, 16),
    compute_ops=100, compute_dim=100_000, compute_rounds=31,
    branch_count=4, branch_ops=100, branch_dim=25_000,
    demo_particles=64, demo_substeps=8,
    ladder=(10, 100, 1000, 10_000, 100_000), ladder_rounds=5,
    capture_rounds=15, persist_ops=10_000, persist_rounds=9,
)

QUICK = Config(
    quick=True, rounds=2, batch_s=0.002, verify_reps=2,
    tiny_ops=1000, tiny_dims=(1, 16),
    compute_ops=10, compute_dim=10_000, compute_rounds=2,
    branch_count=2, branch_ops=4, branch_dim=10_000,
    demo_particles=64, demo_substeps=8,
    ladder=(10, 100), ladder_rounds=2,
    capture_rounds=2, persist_ops=1000, persist_rounds=2,
)


class MismatchError(AssertionError):
    """A method's result differs from eager Warp's: the benchmark must not report its time."""


Progress = Callable[[int, int, str], None]


def _no_progress(done: int, total: int, label: str) -> None:
    pass


class _Steps:
    """Counts progress steps and reports each to the caller's callback."""

    def __init__(self, total: int, progress: Progress) -> None:
        self.total, self.done, self.progress = total, 0, progress

    def __call__(self, label: str) -> None:
        self.progress(self.done, self.total, label)
        self.done += 1


def _stats(samples: list[float]) -> dict:
    return {"min": min(samples), "median": statistics.median(samples), "rounds": samples}


def _compare(reference: dict[str, bytes], got: dict[str, bytes], what: str) -> None:
    if reference.keys() != got.keys():
        raise MismatchError(f"{what}: state arrays {sorted(got)} differ from eager's {sorted(reference)}")
    for name, expected in reference.items():
        actual = got[name]
        if actual != expected:
            at = next((i for i, (a, b) in enumerate(zip(actual, expected)) if a != b), min(len(actual), len(expected)))
            raise MismatchError(
                f"{what}: array '{name}' differs from eager wp.launch at byte {at} "
                f"({len(actual)} vs {len(expected)} bytes); refusing to time a wrong result"
            )


def _batch(runner: m.Runner, k: int) -> tuple[float, float]:
    """Seconds for ``k`` repetitions from the initial state: (wall clock, this thread's CPU time).

    The CPU time is blind to time lost to other tenants of the machine (not to their cache use).
    """
    runner.reset()
    gc.disable()
    try:
        cpu = time.thread_time()
        start = time.perf_counter()
        runner.run(k)
        return time.perf_counter() - start, time.thread_time() - cpu
    finally:
        gc.enable()


def _calibrate(runner: m.Runner, batch_s: float, most: int = 10_000_000) -> int:
    """Repetitions per batch for a batch of about ``batch_s`` (a single cold repetition overstates)."""
    k = 1
    while True:
        elapsed, _ = _batch(runner, k)
        if elapsed >= batch_s / 4 or k >= most:
            return max(1, min(most, math.ceil(k * batch_s / max(elapsed, 1e-9))))
        k = min(most, k * 8)


def measure_workload(spec: w.WorkloadSpec, config: Config, rounds: int, step: _Steps) -> dict:
    """Prepare every method on ``spec``, verify each against eager, then time interleaved rounds."""
    begun = time.perf_counter()
    step(f"{spec.key}: preparing methods")
    runners: dict[str, m.Runner] = {}
    result: dict[str, dict] = {}
    for method in m.ALL_METHODS:
        entry = {"label": method.label, "available": False, "reason": None, "verified": False}
        result[method.key] = entry
        started = time.perf_counter()
        try:
            runners[method.key] = method.prepare(spec, runners)
            entry["available"] = True
        except m.Unavailable as reason:
            entry["reason"] = str(reason)
        entry["prepare_s"] = time.perf_counter() - started
    if "floor" in runners:
        result["floor"]["label"] = runners["floor"].floor.label

    # eager wp.launch is the oracle; every other method must reproduce its bytes exactly
    eager = runners["warp_launch"]
    eager.reset()
    eager.run(config.verify_reps)
    reference = eager.snapshot()
    for key, runner in runners.items():
        runner.reset()
        runner.run(config.verify_reps)
        _compare(reference, runner.snapshot(), f"{spec.key} / {result[key]['label']}")
        result[key]["verified"] = True

    # k repetitions per batch, so that a batch lasts about config.batch_s
    reps = {key: _calibrate(runner, config.batch_s) for key, runner in runners.items()}

    samples: dict[str, list[float]] = {key: [] for key in runners}
    cpu_samples: dict[str, list[float]] = {key: [] for key in runners}
    order = list(runners)
    for r in range(rounds):
        step(f"{spec.key}: round {r + 1}/{rounds}")
        rotated = order[r % len(order):] + order[: r % len(order)]
        gc.collect()  # once per round: a full collection takes milliseconds
        for key in rotated:
            elapsed, cpu = _batch(runners[key], reps[key])
            samples[key].append(elapsed / (reps[key] * spec.ops) * 1e6)
            cpu_samples[key].append(cpu / (reps[key] * spec.ops) * 1e6)
    for key in runners:
        result[key]["reps_per_batch"] = reps[key]
        result[key]["us_per_op"] = _stats(samples[key])
        result[key]["cpu_us_per_op"] = _stats(cpu_samples[key])
    return {
        "key": spec.key, "title": spec.title, "ops": spec.ops, "kind": spec.kind, "methods": result,
        "elapsed_s": time.perf_counter() - begun,
    }


def measure_capture(config: Config, step: _Steps) -> dict:
    """Capture cost per op (recording, then capture_end) against an eager wp.launch, on W1 dim 16."""
    spec = w.tiny(config.tiny_ops, max(config.tiny_dims))
    eager, recorded, native = spec.make(), spec.make(), spec.make()
    native_reason = m.native_capture_available()
    eager.issue()
    samples = {"eager_launch": [], "apic_record": [], "apic_end": [], "apic_total": [], "warp_native_total": []}
    for r in range(config.capture_rounds):
        step(f"capture cost: round {r + 1}/{config.capture_rounds}")
        gc.collect()
        t0 = time.perf_counter()
        eager.issue()
        t1 = time.perf_counter()
        wp.capture_begin(device=w.DEVICE)
        recorded.issue()
        t2 = time.perf_counter()
        graph = wp.capture_end(device=w.DEVICE)
        t3 = time.perf_counter()
        del graph
        samples["eager_launch"].append((t1 - t0) / spec.ops * 1e6)
        samples["apic_record"].append((t2 - t1) / spec.ops * 1e6)
        samples["apic_end"].append((t3 - t2) / spec.ops * 1e6)
        samples["apic_total"].append((t3 - t1) / spec.ops * 1e6)
        if native_reason is None:
            gc.collect()
            apic.uninstall()
            try:
                t4 = time.perf_counter()
                with wp.ScopedCapture(device=w.DEVICE) as capture:
                    native.issue()
                t5 = time.perf_counter()
            finally:
                apic.install()
            del capture
            samples["warp_native_total"].append((t5 - t4) / spec.ops * 1e6)
    out = {"workload": spec.title, "ops": spec.ops}
    for key, values in samples.items():
        out[key] = _stats(values) if values else None
    if native_reason is not None:
        out["warp_native_reason"] = native_reason
    return out


def measure_call_overhead(config: Config) -> dict:
    """The fixed cost of one ``wp.capture_launch`` of a one-op apic graph (Python to native and back)."""
    workload = w.TinyLaunches(1, 1)
    graph = m.apic_capture(workload)
    runner = m._GraphRunner(workload, graph)
    k = 2000 if config.quick else 20000
    samples = [_batch(runner, k)[0] / k * 1e6 for _ in range(3 if config.quick else 7)]
    return {"us_per_call": _stats(samples)}


def measure_persistence(config: Config, step: _Steps, distinct: bool = False) -> dict:
    """Save and load time of a ``persist_ops``-op graph, and its size on disk; the load is verified.

    ``distinct``: every launch gets its own scalar argument, so no two ops are equal (the default
    graph cycles through 12 distinct launches, as a simulation step repeats the same few).
    """
    reason = m.persistence_available()
    rounds = max(2, config.persist_rounds // 3) if distinct else config.persist_rounds
    out: dict = {"ops": config.persist_ops, "distinct_ops": distinct, "available": reason is None}
    if reason is not None:
        out["reason"] = reason
        return out
    spec = w.tiny(config.persist_ops, 1, distinct=distinct)
    source, eager = spec.make(), spec.make()
    graph = m.apic_capture(source, apic_flag=True)
    inputs = dict(source.arrays)
    saves, loads = [], []
    loaded = None
    what = "all ops distinct" if distinct else "12 distinct ops"
    with tempfile.TemporaryDirectory(prefix="apic-bench-") as root:
        for r in range(rounds):
            step(f"save/load {config.persist_ops:,} ops ({what}): round {r + 1}/{rounds}")
            directory = os.path.join(root, f"r{r}")
            os.mkdir(directory)
            gc.collect()
            loaded, save_s, load_s = m.save_and_load(graph, inputs, directory)
            saves.append(save_s * 1e3)
            loads.append(load_s * 1e3)
        graph_bytes, module_bytes = m.directory_bytes(os.path.join(root, "r0"))
        # the loaded graph must replay exactly what eager does
        runner = m._LoadedRunner(source, loaded, None)
        runner.reset()
        runner.run(config.verify_reps)
        eager.reset()
        for _ in range(config.verify_reps):
            eager.issue()
        _compare(eager.snapshot(), runner.snapshot(), f"save/load {spec.key} ({what})")
    out.update(
        verified=True,
        save_ms=_stats(saves),
        load_ms=_stats(loads),
        graph_file_bytes=graph_bytes,
        module_bytes=module_bytes,
        bytes_per_op=graph_bytes / spec.ops,
    )
    return out


# --- the bar ----------------------------------------------------------------------------------------
def _ratio(workload: dict, a: str, b: str, stat: str = "us_per_op") -> float | None:
    """min(a) / min(b) over the rounds, or None if either method did not run."""
    ma, mb = workload["methods"][a], workload["methods"][b]
    if not (ma.get("available") and mb.get("available")):
        return None
    return ma[stat]["min"] / mb[stat]["min"]


def _ratios(workload: dict, a: str, b: str, stat: str = "us_per_op") -> tuple[float, float] | None:
    """(min(a) / min(b), median(a) / median(b)) per op over the rounds, or None if either did not run."""
    ma, mb = workload["methods"][a], workload["methods"][b]
    if not (ma.get("available") and mb.get("available")):
        return None
    sa, sb = ma[stat], mb[stat]
    return sa["min"] / sb["min"], sa["median"] / sb["median"]


def _parallel_bar(results: dict) -> list[dict]:
    """Parallel replay (docs/PARALLEL.md): the targets of its issue, as min and median ratios of one run."""
    by_key = {wl["key"]: wl for wl in results["workloads"]}
    threads = m.PARALLEL_THREADS
    items = []
    for key, against, target, limit in (
        ("W2", "floor", f"W2 with {threads} threads: at most 0.6x the single-thread native floor", 0.6),
        ("W4", "apic_live", f"independent compute-bound branches (W4), {threads} threads: at most 0.6x serial replay",
         0.6),
        *((wl["key"], "apic_live", f"{wl['key']} (tiny ops), {threads} threads: at most 1.1x serial replay", 1.1)
          for wl in results["workloads"] if wl["kind"] == "tiny"),
    ):
        found = _ratios(by_key[key], "apic_parallel", against) if key in by_key else None
        # The replaying thread's CPU time shows how much of the work moved to the workers even where the
        # machine had no free core for them (then the wall time cannot drop).
        cpu = _ratios(by_key[key], "apic_parallel", against, "cpu_us_per_op") if key in by_key else None
        measured = "n/a"
        if found:
            measured = f"{found[0]:.2f}x (medians: {found[1]:.2f}x; replaying thread's CPU time: {cpu[0]:.2f}x)"
        items.append({"key": f"parallel:{key}", "target": target, "measured": measured,
                      "pass": (found[0] <= limit) if found else None})
    return items


def evaluate_bar(results: dict) -> list[dict]:
    """The targets of the issue, each with the measured value and pass (True/False) or None (n/a)."""
    tiny = [wl for wl in results["workloads"] if wl["kind"] == "tiny"]
    compute = [wl for wl in results["workloads"] if wl["kind"] == "compute"]
    bar = []

    ratios = {wl["key"]: r for wl in tiny if (r := _ratio(wl, "apic_live", "floor")) is not None}
    bar.append({
        "key": "tiny_vs_floor", "target": "apic replay per tiny op within 2.5x of the native floor (W1)",
        "measured": ", ".join(f"{k}: {r:.2f}x" for k, r in ratios.items()) or "n/a",
        "pass": (max(ratios.values()) <= 2.5) if ratios else None,
    })

    # One item per W1 variant: with dim 16 the kernels' own work is a large part of each op, and
    # no replay can beat the floor, so the floor's own speed-up is reported beside apic's.
    for wl in tiny:
        speedup = _ratio(wl, "warp_native", "apic_live")
        reason = wl["methods"]["warp_native"]["reason"]
        measured = f"n/a: {reason}"
        if speedup:
            floor_speedup = _ratio(wl, "warp_native", "floor")
            measured = f"{speedup:.1f}x (the floor itself: {floor_speedup:.1f}x"
            mins = {k: wl["methods"][k]["us_per_op"]["min"] for k in ("warp_native", "apic_live", "floor")}
            if mins["apic_live"] > mins["floor"]:
                overhead = (mins["warp_native"] - mins["floor"]) / (mins["apic_live"] - mins["floor"])
                measured += f"; time above the floor {overhead:.0f}x less"
            measured += ")"
        bar.append({
            "key": f"tiny_vs_warp_native:{wl['key']}",
            "target": f"apic replay at least 10x faster than Warp's native CPU replay ({wl['key']})",
            "measured": measured,
            "pass": (speedup >= 10.0) if speedup else None,
        })

    wall = [r - 1.0 for wl in compute if (r := _ratio(wl, "apic_live", "floor")) is not None]
    cpu = [r - 1.0 for wl in compute if (r := _ratio(wl, "apic_live", "floor", "cpu_us_per_op")) is not None]
    bar.append({
        "key": "compute_vs_floor", "target": "apic replay within 3% of the floor when compute-bound (W2)",
        "measured": f"{wall[0] * 100:+.1f}% (thread CPU time: {cpu[0] * 100:+.1f}%)" if wall else "n/a",
        "pass": (wall[0] <= 0.03) if wall else None,
    })

    bar += _parallel_bar(results)

    cap = results["capture"]
    capture_ratio = cap["apic_total"]["min"] / cap["eager_launch"]["min"]
    bar.append({
        "key": "capture_vs_eager", "target": "capture per op no slower than an eager wp.launch",
        "measured": f"{cap['apic_total']['min']:.2f} us/op vs {cap['eager_launch']['min']:.2f} us/op "
                    f"({capture_ratio:.2f}x)",
        "pass": capture_ratio <= 1.0,
    })

    persist = results["persistence"]
    if persist.get("available"):
        load_ms = persist["load_ms"]["min"]
        target_ok = persist["ops"] >= 10_000
        bar.append({
            "key": "load_10k", "target": "loading a 10,000-op graph under 50 ms",
            "measured": f"{load_ms:.1f} ms ({persist['ops']:,} ops, 12 distinct; every op distinct: "
                        f"{results['persistence_distinct']['load_ms']['min']:.1f} ms)",
            "pass": (load_ms < 50.0) if target_ok else None,
        })
    else:
        bar.append({
            "key": "load_10k", "target": "loading a 10,000-op graph under 50 ms",
            "measured": f"saved+loaded: {persist.get('reason', 'not available')}", "pass": None,
        })
    return bar


# --- the whole suite --------------------------------------------------------------------------------
def workload_specs(config: Config) -> list[w.WorkloadSpec]:
    specs = [w.tiny(config.tiny_ops, dim, key=f"W1-dim{dim}") for dim in config.tiny_dims]
    specs.append(w.compute_bound(config.compute_ops, config.compute_dim))
    specs.append(w.demo_step(config.demo_particles, config.demo_substeps))
    specs.append(w.branches(config.branch_count, config.branch_ops, config.branch_dim))
    return specs


def _load_average() -> float | None:
    """The 1-minute load average (None where the OS has none): how busy the machine's cores were."""
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        return None


def _environment(config: Config) -> dict:
    import numba
    import numpy

    return {
        "apic": apic.__version__,
        "warp": _compat.WARP_VERSION,
        "kernel_abi": _compat.KERNEL_ABI,
        "python": platform.python_version(),
        "numpy": numpy.__version__,
        "numba": numba.__version__,
        "platform": f"{platform.system()} {platform.machine()}",
        "processor": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(),
        "load_average": _load_average(),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "floor": m.floor_label(),
        "floor_compiler_error": m.floor_mod.library_error(),
        "config": asdict(config),
    }


def run_suite(config: Config = FULL, progress: Progress = _no_progress) -> dict:
    """Run everything in ``config``; raise ``MismatchError`` if any method disagrees with eager."""
    _compat.quiet_warp()
    wp.init()
    w.load_kernels()
    specs = workload_specs(config)
    total = (
        sum(1 + (config.compute_rounds if spec.kind == "compute" else config.rounds) for spec in specs)
        + sum(1 + config.ladder_rounds for _ in config.ladder)
        + config.capture_rounds
        + (config.persist_rounds + max(2, config.persist_rounds // 3) if m.persistence_available() is None else 0)
        + 1
    )
    step = _Steps(total, progress)
    started = time.perf_counter()
    results: dict = {"schema": SCHEMA, "environment": _environment(config)}
    results["methods"] = {method.key: method.label for method in m.ALL_METHODS}
    results["workloads"] = [
        measure_workload(spec, config, config.compute_rounds if spec.kind == "compute" else config.rounds, step)
        for spec in specs
    ]
    results["ladder"] = [
        measure_workload(w.tiny(n, 1, key=f"ladder-{n}"), config, config.ladder_rounds, step) for n in config.ladder
    ]
    results["capture"] = measure_capture(config, step)
    step("replay call overhead")
    results["call_overhead"] = measure_call_overhead(config)
    results["persistence"] = measure_persistence(config, step)
    results["persistence_distinct"] = measure_persistence(config, step, distinct=True)
    results["bar"] = evaluate_bar(results)
    results["checks"] = {
        "verified": [
            f"{wl['key']}/{key}"
            for wl in results["workloads"] + results["ladder"]
            for key, entry in wl["methods"].items()
            if entry["verified"]
        ],
        "all_available_verified": all(
            entry["verified"] or not entry["available"]
            for wl in results["workloads"] + results["ladder"]
            for entry in wl["methods"].values()
        ),
    }
    results["elapsed_s"] = time.perf_counter() - started
    results["load_average_end"] = _load_average()
    progress(total, total, "done")
    return results


# --- rendering --------------------------------------------------------------------------------------
def _cell(entry: dict) -> str:
    if not entry.get("available"):
        return "n/a"
    s = entry["us_per_op"]
    return f"{s['min']:.4g} / {s['median']:.4g}"


SHORT_LABELS = {
    "warp_launch": "wp.launch", "launch_objects": "Launch.launch", "apic_live": "apic live",
    "apic_parallel": f"apic {m.PARALLEL_THREADS} threads",
    "apic_loaded": "apic saved+loaded", "warp_native": "Warp native replay", "floor": "floor",
}


def format_report(results: dict) -> str:
    env = results["environment"]
    cfg = env["config"]
    keys = list(results["methods"])
    labels = [results["methods"][k] for k in keys]
    lines = [
        f"apic {env['apic']} bench: warp-lang {env['warp']} ({env['kernel_abi']}), Python {env['python']}, "
        f"numba {env['numba']}, {env['platform']}, {env['cpus']} CPUs, {env['date']}"
        + (f", load average {env['load_average']} at start, {results.get('load_average_end')} at end"
           if env.get("load_average") is not None else ""),
        f"{'quick smoke run (timings meaningless)' if cfg['quick'] else 'full run'}: min / median over "
        f"{cfg['rounds']} interleaved rounds (W2: {cfg['compute_rounds']}, ladder: {cfg['ladder_rounds']}); "
        "every method verified bit for bit against eager first",
        "",
    ]

    short = {key: SHORT_LABELS.get(key, key) for key in keys}
    short["floor"] = "floor (C)" if env["floor"].endswith("(C)") else "floor (Numba)"

    def table(workloads: list[dict], title: str, describe: bool) -> None:
        widths = [max(len(short[k]), 19) for k in keys]
        lines.append(title)
        if describe:
            lines.extend(f"  {wl['key']:<14}{wl['title']}" for wl in workloads)
        lines.append(f"  {'':<14}" + "".join(f" {short[k]:>{wd}}" for k, wd in zip(keys, widths)))
        for wl in workloads:
            cells = "".join(f" {_cell(wl['methods'][k]):>{wd}}" for k, wd in zip(keys, widths))
            lines.append(f"  {wl['key']:<14}{cells}")
        lines.append("")

    table(results["workloads"], "Workloads (us per op, min / median)", True)
    table(results["ladder"], "Ladder: graphs of 10 to 100,000 tiny launches, dim 1 (us per op, min / median)", False)
    unavailable = {
        results["methods"][k]: e["reason"]
        for wl in results["workloads"] for k, e in wl["methods"].items() if not e["available"]
    }
    for label, reason in unavailable.items():
        lines.append(f"  {label}: {reason}")
    if unavailable:
        lines.append("")

    cap = results["capture"]
    lines.append(f"Capture cost ({cap['workload']}), us per op, min / median")
    for key, label in (
        ("eager_launch", "eager wp.launch"), ("apic_record", "apic: recording"), ("apic_end", "apic: capture_end"),
        ("apic_total", "apic: capture total"), ("warp_native_total", "Warp native capture"),
    ):
        s = cap.get(key)
        value = f"{s['min']:8.3f} / {s['median']:8.3f}" if s else f"n/a ({cap.get('warp_native_reason', '')})"
        lines.append(f"  {label:<24} {value}")
    co = results["call_overhead"]["us_per_call"]
    lines.append(f"  one wp.capture_launch call of a 1-op apic graph: {co['min']:.3f} / {co['median']:.3f} us")
    lines.append("")

    p = results["persistence"]
    if p.get("available"):
        lines.append(f"Save/load of a {p['ops']:,}-op graph of tiny launches, ms (min / median)")
        for key, what in (("persistence", "12 distinct ops"), ("persistence_distinct", "every op distinct")):
            p = results[key]
            lines.append(
                f"  {what:<18} save {p['save_ms']['min']:7.1f} / {p['save_ms']['median']:7.1f}, "
                f"load {p['load_ms']['min']:7.1f} / {p['load_ms']['median']:7.1f}; file {p['graph_file_bytes']:,} "
                f"bytes = {p['bytes_per_op']:.1f} bytes/op (+ modules {p['module_bytes']:,} bytes)"
            )
    else:
        lines.append(f"Save/load: saved+loaded: {p['reason']}")
    lines.append("")

    lines.append("The bar")
    for item in results["bar"]:
        verdict = {True: "PASS", False: "MISS", None: "n/a "}[item["pass"]]
        lines.append(f"  [{verdict}] {item['target']}: {item['measured']}")
    lines.append("")
    lines.append(f"{len(results['checks']['verified'])} method/workload pairs verified bit for bit; "
                 f"total time {results['elapsed_s']:.1f} s")
    return "\n".join(lines)


def plot(results: dict, path: str) -> None:
    """Per-op time against graph size (the ladder) and per workload; needs matplotlib."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = list(results["methods"])
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 5.6))
    colors = {key: f"C{i}" for i, key in enumerate(keys)}  # the same colour for a method in both panels
    for key in keys:
        points = [(wl["ops"], wl["methods"][key]) for wl in results["ladder"] if wl["methods"][key]["available"]]
        if not points:
            continue
        xs = [n for n, _ in points]
        mins = [e["us_per_op"]["min"] for _, e in points]
        medians = [e["us_per_op"]["median"] for _, e in points]
        left.plot(xs, mins, marker="o", color=colors[key], label=results["methods"][key])
        left.fill_between(xs, mins, medians, color=colors[key], alpha=0.2)
    left.set_xscale("log")
    left.set_yscale("log")
    left.set_xlabel("ops in the graph (tiny launches, dim 1)")
    left.set_ylabel("µs per op (line: min, band: to median)")
    left.set_title("Dispatch cost against graph size")
    left.grid(True, which="both", alpha=0.3)

    workloads = results["workloads"]
    width = 0.8 / len(keys)
    for i, key in enumerate(keys):
        xs, ys = [], []
        for j, wl in enumerate(workloads):
            entry = wl["methods"][key]
            if entry["available"]:
                xs.append(j + (i - (len(keys) - 1) / 2) * width)
                ys.append(entry["us_per_op"]["min"])
        right.bar(xs, ys, width=width, color=colors[key], label=results["methods"][key])
    right.set_xticks(range(len(workloads)))
    right.set_xticklabels([wl["key"] for wl in workloads])
    right.set_yscale("log")
    right.set_ylabel("µs per op (min over rounds)")
    right.set_title("Workloads")
    right.grid(True, axis="y", which="both", alpha=0.3)
    env = results["environment"]
    fig.suptitle(f"apic {env['apic']} on warp-lang {env['warp']}, {env['platform']}, {env['cpus']} CPUs")
    handles = [plt.Rectangle((0, 0), 1, 1, color=colors[k]) for k in keys]
    fig.legend(handles, [results["methods"][k] for k in keys], loc="lower center", ncol=len(keys), fontsize=8)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)
