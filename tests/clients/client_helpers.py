"""Shared by the client tier: every Warp array a client object holds, compared bit for bit; a fresh
process that replays a saved graph and cannot import the client's packages.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import warp as wp

from apic.record.effects import control_of

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def warp_arrays(obj, prefix: str = "", depth: int = 3, seen=None) -> dict[str, wp.array]:
    """Every ``wp.array`` reachable from ``obj`` through dataclass fields / attributes (``depth`` levels)."""
    seen = set() if seen is None else seen
    found: dict[str, wp.array] = {}
    if id(obj) in seen or depth < 0:
        return found
    seen.add(id(obj))
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        items = [(f.name, getattr(obj, f.name, None)) for f in dataclasses.fields(obj)]
    elif hasattr(obj, "__dict__") and not isinstance(obj, type):
        items = list(vars(obj).items())
    else:
        return found
    for name, value in items:
        key = f"{prefix}{name}"
        if isinstance(value, wp.array):
            found[key] = value
        elif isinstance(value, (list, tuple)):
            for i, item in enumerate(value):
                if isinstance(item, wp.array):
                    found[f"{key}[{i}]"] = item
        elif value is not None and not isinstance(value, (int, float, str, bytes, np.ndarray)):
            found.update(warp_arrays(value, f"{key}.", depth - 1, seen))
    return found


def raw(arr: wp.array) -> np.ndarray:
    """The bytes of an array's elements (its logical contents, in C order)."""
    return np.ascontiguousarray(arr.numpy()).view(np.uint8).reshape(-1)


def assert_same_arrays(eager: dict, replayed: dict, what: str) -> int:
    """Every array of ``eager`` equals its namesake in ``replayed`` bit for bit; returns how many."""
    assert eager.keys() == replayed.keys(), f"{what}: different arrays"
    different = [name for name in eager if not np.array_equal(raw(eager[name]), raw(replayed[name]))]
    assert not different, f"{what}: eager and replay differ in {len(different)} arrays: {sorted(different)[:12]}"
    return len(eager)


@contextlib.contextmanager
def _empty_filled_with(byte: int):
    """``wp.empty`` (as the client calls it, ``warp.empty``) returns arrays whose bytes are all ``byte``."""
    original = wp.empty

    def filled(*args, **kwargs):
        arr = original(*args, **kwargs)
        if arr.ptr and arr.capacity:
            wp.array(ptr=arr.ptr, shape=(arr.capacity,), dtype=wp.uint8, device=arr.device).fill_(byte)
        return arr

    wp.empty = filled
    try:
        yield
    finally:
        wp.empty = original


def zeroed_where_uninitialised(made):
    """A ``fresh()`` that calls ``made()`` (a client's state factory) and zeroes the arrays it leaves uninitialised
    (``wp.empty``: they differ between two fresh objects), so that every fresh state is equal.

    The arrays are found by making the state twice with ``wp.empty`` filling two different byte patterns: two
    plain calls may find the same bytes in fresh memory (both zero) and miss an array."""
    with _empty_filled_with(0x5A):
        first = warp_arrays(made())
    with _empty_filled_with(0xA5):
        second = warp_arrays(made())
    uninitialised = [name for name in first if not np.array_equal(raw(first[name]), raw(second[name]))]

    def fresh():
        state = made()
        arrays = warp_arrays(state)
        for name in uninitialised:
            arrays[name].zero_()
        return state

    fresh.uninitialised = uninitialised
    return fresh


def control_flow_ops(graph) -> int:
    """How many capture_if / capture_while branch and jump ops the graph recorded."""
    return sum(control_of(op) is not None for op in graph.recording.ops)


# A fresh interpreter that cannot import the client (a meta-path finder refuses its packages), loads
# the graph, sets inputs, replays, writes outputs, and proves the client stayed out of reach.
CHILD = textwrap.dedent(  # raw: the regular expression below is the child's
    r"""
    import importlib.abc, json, sys

    job = json.loads(sys.argv[1])
    blocked = tuple(job["blocked"])

    class Blocker(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in blocked:
                raise ImportError(f"{name} is hidden from this process")
            return None

    sys.meta_path.insert(0, Blocker())
    import numpy as np
    import warp as wp
    if hasattr(wp, "LOG_WARNING"):
        wp.config.log_level = wp.LOG_WARNING
    wp.config.quiet = True
    import apic

    import re

    def dtype_of(name):
        # the names apic's Graph.params reports: Warp's own ("transformf") or a type repr
        found = re.fullmatch(r"vector\(length=(\d+), dtype=(\w+)\)", name)
        if found:
            return wp.types.vector(int(found.group(1)), getattr(wp, found.group(2)))
        return getattr(wp, name)

    graph = wp.capture_load(job["path"], device=job["device"])
    if job["mode"]:
        graph.mode = job["mode"]
    for name, file in job["set"].items():
        p = graph.params[name]
        graph.set_param(name, wp.array(np.load(file), dtype=dtype_of(p["dtype"]), shape=p["shape"], device="cpu"))
    graph.min_tasks_per_thread = job["min_tasks"]
    for _ in range(job["iters"]):
        wp.capture_launch(graph, threads=job["threads"])
    wp.synchronize()
    split = sorted({e["kernel"] for e in graph.parallel_report(job["threads"]) if e["chunks"] > 1})
    for name, file in job["get"].items():
        p = graph.params[name]
        out = wp.empty(shape=p["shape"], dtype=dtype_of(p["dtype"]), device="cpu")
        graph.get_param(name, out)
        np.save(file, out.numpy())
    for name in blocked:
        try:
            __import__(name)
        except ImportError:
            pass
        else:
            raise AssertionError(f"the child could import {name}")
    loaded = sorted(m for m in sys.modules if m.split(".")[0] in blocked)
    print(json.dumps({"client_modules": loaded, "split": split}))
    """
)


def replay_without(blocked: tuple[str, ...], path: str, iters: int, set_: dict, get: dict, cwd, device: str = "cpu",
                   mode: str | None = None, threads: int = 1, min_tasks: int = 4096) -> dict:
    """Run ``CHILD`` in a fresh interpreter with ``blocked`` packages unimportable; its JSON report (``split``:
    the kernels its replays on ``threads`` threads split, with ``min_tasks`` tasks per thread at least).

    The graph loads onto ``device``; ``mode`` is a loaded CUDA graph's replay path ("graph" or "launch")."""
    env = dict(os.environ)
    # apic from this checkout, and wherever warp-lang was put on the path; nothing of the test folder
    tests = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    kept = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and not os.path.abspath(p).startswith(tests)]
    env["PYTHONPATH"] = os.pathsep.join([REPO, *kept])
    job = {"blocked": list(blocked), "path": path, "iters": iters, "set": set_, "get": get, "device": device,
           "mode": mode, "threads": threads, "min_tasks": min_tasks}
    result = subprocess.run([sys.executable, "-c", CHILD, json.dumps(job)], cwd=cwd, env=env, capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0, f"child failed ({result.returncode}):\n{result.stdout}\n{result.stderr}"
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["client_modules"] == [], report
    return report
