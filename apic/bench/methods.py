"""The ways of running a workload that the suite compares.

A ``Method`` turns a ``WorkloadSpec`` into a ``Runner`` on a fresh workload instance (its own
memory): ``reset()`` restores the initial state, ``run(k)`` executes k repetitions the way a user
of that method would, and ``snapshot()`` returns the state's bytes for the bit-for-bit check. A
method that the installed software cannot offer raises ``Unavailable`` with the reason.

The floor is the exception: it runs over apic's live graph, on the same memory, so that the two
differ in nothing but the dispatch loop (with its own copy of the state, at other addresses, one
run had the floor's dim-16 tiny kernels 30% slower than apic's, in CPU time too).
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import time

import warp as wp

import apic
from apic import _compat
from apic.bench import floor as floor_mod
from apic.bench.workloads import DEVICE, WorkloadSpec


class Unavailable(Exception):
    """This method cannot run here; the message says why."""


class Runner:
    def __init__(self, workload) -> None:
        self.workload = workload

    def reset(self) -> None:
        self.workload.reset()

    def run(self, k: int) -> None:
        raise NotImplementedError

    def snapshot(self) -> dict[str, bytes]:
        return self.workload.snapshot()


class Method:
    key = ""
    label = ""

    def prepare(self, spec: WorkloadSpec, prepared: dict[str, Runner]) -> Runner:
        """A runner for ``spec``; ``prepared`` holds the runners of the methods prepared before."""
        raise NotImplementedError


# --- Warp, eager ------------------------------------------------------------------------------------
class _EagerRunner(Runner):
    def run(self, k: int) -> None:
        issue = self.workload.issue
        for _ in range(k):
            issue()


class WarpLaunch(Method):
    key = "warp_launch"
    label = "wp.launch loop"

    def prepare(self, spec, prepared):
        return _EagerRunner(spec.make())


class _CommandsRunner(Runner):
    def __init__(self, workload) -> None:
        super().__init__(workload)
        self.commands = workload.commands()

    def run(self, k: int) -> None:
        commands = self.commands
        for _ in range(k):
            for command in commands:
                command()


class LaunchObjects(Method):
    key = "launch_objects"
    label = "Launch.launch loop"

    def prepare(self, spec, prepared):
        return _CommandsRunner(spec.make())


# --- apic -------------------------------------------------------------------------------------------
def apic_capture(workload, apic_flag: bool = False):
    """Capture one repetition of ``workload`` with apic (record-only) and return the graph."""
    with wp.ScopedCapture(device=DEVICE, apic=apic_flag) as capture:
        workload.issue()
    return capture.graph


class _GraphRunner(Runner):
    def __init__(self, workload, graph) -> None:
        super().__init__(workload)
        self.graph = graph

    def run(self, k: int) -> None:
        graph, launch = self.graph, wp.capture_launch
        for _ in range(k):
            launch(graph)


class ApicLive(Method):
    key = "apic_live"
    label = "apic replay (live)"

    def prepare(self, spec, prepared):
        workload = spec.make()
        return _GraphRunner(workload, apic_capture(workload))


class _ParallelRunner(_GraphRunner):
    def run(self, k: int) -> None:
        graph, launch, threads = self.graph, wp.capture_launch, PARALLEL_THREADS
        for _ in range(k):
            launch(graph, threads=threads)


PARALLEL_THREADS = 2


class ApicParallel(Method):
    key = "apic_parallel"
    label = f"apic replay (live), threads={PARALLEL_THREADS}"

    def prepare(self, spec, prepared):
        workload = spec.make()
        return _ParallelRunner(workload, apic_capture(workload))


def persistence_available() -> str | None:
    """None when this apic can save and load graphs, else the reason it cannot."""
    if hasattr(apic, "capture_save") and hasattr(apic, "capture_load"):
        return None
    return "not available: this apic does not export capture_save/capture_load yet"


def directory_bytes(directory: str) -> tuple[int, int]:
    """(bytes of the files directly in ``directory``, bytes of everything in its subfolders)."""
    top = sub = 0
    for root, _, files in os.walk(directory):
        size = sum(os.path.getsize(os.path.join(root, f)) for f in files)
        if os.path.samefile(root, directory):
            top += size
        else:
            sub += size
    return top, sub


def read_and_hash(path: str) -> float:
    """Seconds to read the file at ``path`` and take its SHA-256 (what a load's header check costs at least)."""
    t0 = time.perf_counter()
    with open(path, "rb") as f:
        hashlib.sha256(f.read()).digest()
    return time.perf_counter() - t0


def save_and_load(graph, inputs: dict, directory: str):
    """Save ``graph`` under ``directory`` and load it back: (loaded graph, save s, load s)."""
    path = os.path.join(directory, "graph")
    t0 = time.perf_counter()
    apic.capture_save(graph, path, inputs=inputs)
    t1 = time.perf_counter()
    loaded = apic.capture_load(path, device=DEVICE)
    t2 = time.perf_counter()
    return loaded, t1 - t0, t2 - t1


class _LoadedRunner(_GraphRunner):
    """A loaded graph owns its memory: reset and read it through its named parameters."""

    def __init__(self, workload, graph, tempdir) -> None:
        super().__init__(workload, graph)
        self._tempdir = tempdir  # the files stay until the runner is dropped
        self._scratch = {name: wp.empty_like(arr) for name, arr in workload.arrays.items()}

    def reset(self) -> None:
        for name, initial in self.workload._initial.items():
            self.graph.set_param(name, initial)

    def snapshot(self):
        out = {}
        for name, scratch in self._scratch.items():
            self.graph.get_param(name, scratch)
            out[name] = scratch.numpy().tobytes()
        return out


class ApicLoaded(Method):
    key = "apic_loaded"
    label = "apic replay (saved+loaded)"

    def prepare(self, spec, prepared):
        reason = persistence_available()
        if reason:
            raise Unavailable(reason)
        workload = spec.make()
        graph = apic_capture(workload, apic_flag=True)
        tempdir = tempfile.TemporaryDirectory(prefix="apic-bench-")
        loaded, _, _ = save_and_load(graph, dict(workload.arrays), tempdir.name)
        del graph
        return _LoadedRunner(workload, loaded, tempdir)


# --- Warp's own CPU graph replay (warp-lang 1.13 and later) ------------------------------------------
_native_reason: list[str | None] = []


def native_capture(workload):
    """Capture one repetition with Warp's own CPU capture, apic's shims removed meanwhile."""
    apic.uninstall()
    try:
        with wp.ScopedCapture(device=DEVICE) as capture:
            workload.issue()
    finally:
        apic.install()
    return capture.graph


def native_capture_available() -> str | None:
    """None when the installed warp-lang captures on the CPU itself, else why not (probed once)."""
    if not _native_reason:
        apic.uninstall()
        try:
            with wp.ScopedCapture(device=DEVICE):
                pass
            _native_reason.append(None)
        except Exception as error:  # 1.12: "Must be a CUDA device"; 1.9-1.10 fail differently
            message = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            _native_reason.append(f"warp-lang {_compat.WARP_VERSION} has no native CPU capture ({message})")
        finally:
            apic.install()
    return _native_reason[0]


class WarpNative(Method):
    key = "warp_native"
    label = "Warp native CPU replay"

    def prepare(self, spec, prepared):
        reason = native_capture_available()
        if reason:
            raise Unavailable(reason)
        workload = spec.make()
        return _GraphRunner(workload, native_capture(workload))


# --- the floor --------------------------------------------------------------------------------------
class _FloorRunner(Runner):
    def __init__(self, workload, floor) -> None:
        super().__init__(workload)
        self.floor = floor

    def run(self, k: int) -> None:
        self.floor.run(k)


class NativeFloor(Method):
    key = "floor"
    label = "native floor"

    def prepare(self, spec, prepared):
        live = prepared.get("apic_live")
        if isinstance(live, _GraphRunner):
            workload, graph = live.workload, live.graph  # the same graph and memory as apic live
        else:
            workload = spec.make()
            graph = apic_capture(workload)
        by_value_trick = _compat.BOUNDS_BY_VALUE and _compat.SYSV_X86_64
        rows = floor_mod.floor_rows(graph.program.table, by_value_trick)
        return _FloorRunner(workload, floor_mod.Floor(rows, keepalive=graph))


def floor_label() -> str:
    return "native floor (C)" if floor_mod.library() is not None else "native floor (Numba)"


ALL_METHODS: tuple[Method, ...] = (
    WarpLaunch(), LaunchObjects(), ApicLive(), ApicParallel(), ApicLoaded(), WarpNative(), NativeFloor()
)
METHOD_KEYS = tuple(m.key for m in ALL_METHODS)
