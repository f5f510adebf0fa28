"""Measure one part of the suite: verify every method bit for bit against eager, then time interleaved rounds.

The machine this runs on may be shared and noisy, so every method is timed once per round, the rounds
interleave the methods (in a rotating order), and each result keeps the minimum and the median over
rounds.
"""

from __future__ import annotations

import gc
import math
import os
import statistics
import tempfile
import time
from typing import Callable

import warp as wp

import apic
from apic.bench import methods as m
from apic.bench import workloads as w
from apic.bench.config import Config


class MismatchError(AssertionError):
    """A method's result differs from eager Warp's: the benchmark must not report its time."""


Progress = Callable[[int, int, str], None]


def no_progress(done: int, total: int, label: str) -> None:
    """A progress callback that shows nothing."""
    pass


class Steps:
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


def measure_workload(spec: w.WorkloadSpec, config: Config, rounds: int, step: Steps) -> dict:
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


def measure_capture(config: Config, step: Steps) -> dict:
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


def measure_persistence(config: Config, step: Steps, distinct: bool = False) -> dict:
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
    saves, loads, reads = [], [], []
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
            reads.append(m.read_and_hash(os.path.join(directory, "graph.wrp")) * 1e3)
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
        read_ms=_stats(reads),  # the reference: reading the .wrp and its SHA-256, the least a checked load does
        graph_file_bytes=graph_bytes,
        module_bytes=module_bytes,
        bytes_per_op=graph_bytes / spec.ops,
    )
    return out
