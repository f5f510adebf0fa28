"""Run the suite: every workload, the ladder, capture cost, save/load, then the bar.

``run_suite(config, progress)`` returns one plain ``dict`` (what ``--json`` writes). The parts: ``config``
(what a run measures), ``measure`` (verify bit for bit against eager, then time interleaved rounds),
``bar`` (the targets), ``report`` (``format_report`` renders the results as text and ``plot`` draws
them); this module re-exports what ``python -m apic bench`` uses.
"""

from __future__ import annotations

import datetime
import os
import platform
import time
from dataclasses import asdict

import numba
import numpy
import warp as wp

import apic
from apic import _compat
from apic.bench import methods as m
from apic.bench import workloads as w
from apic.bench.bar import evaluate_bar
from apic.bench.client_load import measure_mujoco_load
from apic.bench.config import FULL, QUICK, Config
from apic.bench.fixed_costs import measure_call_overhead, measure_first_replay
from apic.bench.measure import (
    MismatchError, Progress, Steps, measure_capture, measure_persistence, measure_workload,
    no_progress,
)
from apic.bench.report import format_report, plot

__all__ = ["FULL", "QUICK", "SCHEMA", "Config", "MismatchError", "format_report", "plot", "run_suite"]

SCHEMA = "apic-bench/1"


def workload_specs(config: Config) -> list[w.WorkloadSpec]:
    """The workloads a run times (W1 at each tiny dim, W2, W3, W4), in report order."""
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


def run_suite(config: Config = FULL, progress: Progress = no_progress) -> dict:
    """Run everything in ``config``; raise ``MismatchError`` if any method disagrees with eager."""
    _compat.quiet_warp()
    wp.init()
    w.load_kernels()
    specs = workload_specs(config)
    total = (
        sum(1 + (config.compute_rounds if spec.kind == "compute" else config.rounds) for spec in specs)
        + sum(1 + config.ladder_rounds for _ in config.ladder)
        + config.capture_rounds + 2
        + (config.persist_rounds + max(2, config.persist_rounds // 3) if m.persistence_available() is None else 0)
        + 1
    )
    step = Steps(total, progress)
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
    step("first replay in fresh processes")
    results["first_replay"] = measure_first_replay(config)
    results["persistence"] = measure_persistence(config, step)
    results["persistence_distinct"] = measure_persistence(config, step, distinct=True)
    step("load of a saved mujoco-warp step")
    results["mujoco_load"] = measure_mujoco_load(config)
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
