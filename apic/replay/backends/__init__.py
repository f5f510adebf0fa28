"""Replay backends: one module per backend in this package, found by its name (as tinygrad finds a device's
``runtime/ops_<device>.py``), each holding a ``BACKEND`` that gives the same few parts (:class:`Backend`).

The loader and ``Graph`` call a backend for everything a device does differently:

* ``load(saved, images, device, services)``: make a saved graph live here: load its modules, allocate and
  fill its memory, build its handles, lower it; returns the replayable graph. ``images`` are the verified
  module files; ``services`` are what the file format provides (a module's saved source, the checks of
  handle data), handed in by the loader so that replay never imports the format;
* ``run(graph_or_program, repeats)``: one replay, ``repeats`` times;
* ``write_binding(graph, binding, arr)`` / ``read_binding(graph, binding, arr)``: copy a named array in and out;
* ``free(graph)``: give back what ``load`` took (here: when the graph is collected).

The backends here: ``cpu_native`` (the default CPU one: the native serial interpreter, or the Numba
dispatcher of the same loop where it cannot be had), ``cpu_reference`` (the pure-Python reference
interpreter, a second implementation of every opcode) and ``cuda`` (cuda-python driver replay). A CPU
graph's interpreter is its backend's: ``APIC_REPLAY`` names the CPU backend (``numba``, the default, is
``cpu_native``; ``reference`` is ``cpu_reference``; any other value is a backend's module name).
"""

from __future__ import annotations

import importlib
import os

# APIC_REPLAY's values of old -> the CPU backend they name
_ALIASES = {"numba": "cpu_native", "reference": "cpu_reference"}
_found: dict = {}  # backend name -> its BACKEND (each module is imported once, when first named)


class Backend:
    """What a replay backend provides (see the module docstring); a backend module's ``BACKEND`` is one."""

    name = ""  # its module's name in apic.replay.backends
    device_kind = ""  # the saved ``device.kind`` it loads: "cpu" or "cuda"

    def load(self, saved, images: dict, device, services):
        """A saved graph made live on ``device`` and lowered: the graph ``wp.capture_launch`` replays."""
        raise NotImplementedError

    def run(self, target, repeats: int = 1) -> None:
        """Replay ``target`` (a CPU ``Program``, or a loaded graph) ``repeats`` times."""
        raise NotImplementedError

    def write_binding(self, graph, binding, arr) -> None:
        """Copy ``arr`` into the graph memory of ``binding`` (checked against its type first)."""
        raise NotImplementedError

    def read_binding(self, graph, binding, arr) -> None:
        """Copy the graph memory of ``binding`` into ``arr`` (checked against its type first)."""
        raise NotImplementedError

    def free(self, graph) -> None:
        """Give back what ``load`` took for ``graph``. Every backend here ties it to the graph object (host
        buffers and module handles it owns, driver objects behind a finalizer): dropping the last reference
        frees it, so this does nothing more; a backend whose memory outlives its graph object overrides it."""


def get(name: str) -> Backend:
    """The backend named ``name`` (its module in this package), imported when first asked for."""
    found = _found.get(name)
    if found is None:
        if not name.isidentifier() or name.startswith("_"):
            raise ValueError(f"{name!r} names no replay backend")
        try:
            module = importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as error:
            if error.name != f"{__name__}.{name}":
                raise
            raise ValueError(f"no replay backend {name!r} (apic/replay/backends/{name}.py)") from None
        found = getattr(module, "BACKEND", None)
        if not isinstance(found, Backend):  # a module the backends share (cpu.py), not one itself
            raise ValueError(f"apic/replay/backends/{name}.py gives no replay backend (no BACKEND)")
        _found[name] = found
    return found


def cpu_backend() -> Backend:
    """The CPU backend ``APIC_REPLAY`` names (default: ``cpu_native``), read when a graph first replays."""
    choice = os.environ.get("APIC_REPLAY", "numba")
    try:
        backend = get(_ALIASES.get(choice, choice))
    except ValueError:
        backend = None
    if backend is None or backend.device_kind != "cpu":
        raise ValueError(f"APIC_REPLAY={choice!r}: expected 'numba' (the default), 'reference' or the name of a "
                         "CPU replay backend")
    return backend
