"""A pytest plugin that says where a test file's time goes: loading (on a cold cache: compiling) Warp modules,
waiting for child processes, and the rest. ``scripts/ci_cold.sh`` loads it (``-p ci_timings_plugin``, with
``scripts/`` on ``PYTHONPATH``) when ``APIC_TEST_TIMINGS`` names a folder; each pytest process (every
pytest-xdist worker) appends one JSON line per test file to a file of its own there, which
``scripts/ci_timings.py`` reads. Without ``APIC_TEST_TIMINGS`` it does nothing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

_folder = os.environ.get("APIC_TEST_TIMINGS")
_spent = {"warp_modules": 0.0, "children": 0.0}  # seconds since the current test file began
_depth = {"warp_modules": 0}  # Module.load may load the modules a module imports: count the outer call only
# which of CI's runs this is: the interpreter's environment (a venv per warp-lang, the wheel's own) and replay
_VENV = os.path.basename(os.path.dirname(os.path.dirname(sys.executable)))
_RUN = f"{_VENV} {os.environ.get('APIC_REPLAY', '')}".strip()


def _timed(kind: str, function):
    def wrapper(*args, **kwargs):
        outer = _depth.get(kind, 0) == 0
        _depth[kind] = _depth.get(kind, 0) + 1
        start = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            _depth[kind] -= 1
            if outer:
                _spent[kind] += time.perf_counter() - start

    wrapper.__wrapped__ = function
    return wrapper


def _patch_warp() -> None:
    """Time ``Module.load`` of whichever warp-lang is installed (its module moved in 1.13)."""
    try:
        from warp._src.context import Module  # warp-lang >= 1.13
    except ImportError:
        try:
            from warp.context import Module  # warp-lang <= 1.12
        except ImportError:
            return
    if not hasattr(Module.load, "__wrapped__"):
        Module.load = _timed("warp_modules", Module.load)


def _patch_fork_server() -> None:
    """Time the children the suite forks (``tests/fork_server.py``) as children too."""
    fork_server = sys.modules.get("fork_server")
    if fork_server is not None and not hasattr(fork_server.run, "__wrapped__"):
        fork_server.run = _timed("children", fork_server.run)


class _FileClock:
    def __init__(self, out_path: str) -> None:
        self.out_path = out_path
        self.current = None
        self.start = 0.0

    def flush(self) -> None:
        if self.current is None:
            return
        row = {"run": _RUN, "file": self.current, "seconds": time.perf_counter() - self.start, **_spent}
        with open(self.out_path, "a", encoding="utf-8") as out:
            out.write(json.dumps(row) + "\n")
        self.current = None

    def begin(self, path: str) -> None:
        if path != self.current:
            self.flush()
            self.current, self.start = path, time.perf_counter()
            for kind in _spent:
                _spent[kind] = 0.0


if _folder:
    import pytest

    subprocess.run = _timed("children", subprocess.run)
    subprocess.call = _timed("children", subprocess.call)
    _clock = _FileClock(os.path.join(_folder, f"timings-{os.getpid()}.jsonl"))

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(item, nextitem):
        _patch_warp()  # Warp is imported by the test files, after this plugin
        _patch_fork_server()
        _clock.begin(item.nodeid.split("::", 1)[0])
        yield

    def pytest_sessionfinish(session, exitstatus):
        _clock.flush()
