"""Replay backends: one module per backend in this package, found by its name (as tinygrad finds a device's
``runtime/ops_<device>.py``), each holding a ``BACKEND`` that gives the same few parts (:class:`Backend`).

This package is the device seam: what a device does differently is reached through a backend, and nothing
outside it asks what kind of device or graph it holds. Every apic graph (``apic.Graph``, a CUDA graph
captured with ``apic=True``, a loaded one) has a ``backend`` attribute; the callers of each part:

* ``device(requested)``: the device a load onto ``requested`` replays on, or ``ValueError`` (``apic.loading``);
* ``load(saved, images, device, services)``: make a saved graph live here: load its modules, allocate and
  fill its memory, build its handles, lower it; returns the replayable graph (``apic.loading``). ``images``
  are the verified module files; ``services`` are what the file format and the graph types provide (a
  module's saved source, the checks of handle data, the graph type a CPU load makes), handed in by the
  loader so that replay never imports the format nor the graph types above it;
* ``launch(graph, stream, threads)``: one replay (``wp.capture_launch``); ``launch_many(graph, repeats,
  threads)``: ``repeats`` of them one after another (``apic.sweep``), in one call where the backend can;
* ``write_binding(graph, binding, arr)`` / ``read_binding(graph, binding, arr)``: copy a named array in and
  out (``set_param`` / ``get_param``);
* ``keeps_untouched_arrays``: whether a save adds named arrays no operation touches as extra graph memory
  (``apic.persist``);
* ``records_inline``: whether a graph of it used as a branch body inside an apic CPU capture has its operations
  recorded inline (``apic.capture_flow``; a graph of another device there is refused);
* ``conditional_body(graph, stream, device)``: what Warp's own CUDA ``capture_if`` / ``capture_while`` takes
  for ``graph`` as a branch body (``apic.capture_flow``);
* ``memory_on_host``: whether the graph's memory (``graph.region_addresses``) is host memory this process can
  copy with ``ctypes`` (``apic.sweep`` keeps a copy of it as loaded; elsewhere it loads the graph again);
* ``free()``: give back what graphs collected while it could not be given back left (a CUDA stream capture
  in progress); ``wp.capture_end`` calls it for every backend in use. What ``load`` took is otherwise tied
  to the graph object (buffers, module handles, a driver finalizer): dropping it frees them.

The backends here: ``cpu_native`` (the default CPU one: the native serial interpreter, or the Numba
dispatcher of the same loop where it cannot be had), ``cpu_reference`` (the pure-Python reference
interpreter, a second implementation of every opcode) and ``cuda`` (cuda-python driver replay, and Warp's
own graph for a CUDA capture with ``apic=True``). A CPU graph's interpreter is its backend's:
``APIC_REPLAY`` names the CPU backend (``numba``, the default, is ``cpu_native``; ``reference`` is
``cpu_reference``; any other value is a backend's module name). A saved graph's ``device.kind`` (none: the
CPU) names the backend that loads it (:func:`for_saved`). Whether a capture on a device is apic's own
(recorded by apic, the CPU) or Warp's (CUDA, with apic recording alongside for ``apic=True``) is
:func:`apic_captures`.
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
    keeps_untouched_arrays = False  # a save keeps named arrays no operation touches as extra graph memory
    records_inline = False  # a graph of it as a branch body of an apic CPU capture is recorded inline
    memory_on_host = False  # graph.region_addresses are host addresses (ctypes can copy them)

    def device(self, requested):
        """The device a graph loaded onto ``requested`` (None: this kind's default) replays on; ``ValueError``
        for a device this backend cannot replay on."""
        raise NotImplementedError

    def load(self, saved, images: dict, device, services):
        """A saved graph made live on ``device`` and lowered: the graph ``wp.capture_launch`` replays."""
        raise NotImplementedError

    def launch(self, graph, stream=None, threads=None) -> None:
        """One replay of ``graph`` (``wp.capture_launch``): on ``stream`` where the device has streams, split
        over ``threads`` where the backend splits launches (else ``threads`` must be None)."""
        raise NotImplementedError

    def launch_many(self, graph, repeats: int, threads=None) -> None:
        """``repeats`` replays of ``graph`` one after another on its default stream (``apic.sweep``); a backend
        that repeats in one call (the CPU ones: one native call) gives its own."""
        for _ in range(repeats):
            self.launch(graph, None, threads)

    def write_binding(self, graph, binding, arr) -> None:
        """Copy ``arr`` into the graph memory of ``binding`` (checked against its type first)."""
        raise NotImplementedError

    def read_binding(self, graph, binding, arr) -> None:
        """Copy the graph memory of ``binding`` into ``arr`` (checked against its type first)."""
        raise NotImplementedError

    def conditional_body(self, graph, stream, device):
        """What Warp's own CUDA ``capture_if`` / ``capture_while`` on ``device`` (``stream``: where the condition
        was written, or None) takes for ``graph`` as a branch body: ``graph`` itself unless the backend says
        otherwise."""
        return graph

    def free(self) -> None:
        """Give back what graphs collected while it could not be given back left (``wp.capture_end`` calls
        it). Every backend here ties what ``load`` took to the graph object, so a backend without such a
        wait does nothing."""


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


def of(graph) -> Backend | None:
    """The replay backend of an apic graph (its ``backend``), else None: a Warp graph has none, and a user's
    object may have an attribute of that name that is no backend."""
    backend = getattr(graph, "backend", None)
    return backend if isinstance(backend, Backend) else None


def for_saved(device: dict | None) -> Backend:
    """The backend that loads a saved graph whose ``device`` map is ``device`` (None: a CPU graph, loaded by
    the CPU backend ``APIC_REPLAY`` names)."""
    kind = "cpu" if device is None else device.get("kind")
    if kind == "cpu":
        return cpu_backend()
    backend = get(kind) if isinstance(kind, str) else None
    if backend is None or backend.device_kind != kind:
        raise ValueError(f"no replay backend loads a graph saved for device kind {kind!r}")
    return backend


def apic_captures(device) -> bool:
    """Whether a capture on the Warp device ``device`` is apic's own, recorded by apic's CPU recorder and
    replayed by a CPU backend (``wp.capture_begin`` / ``capture_end``, the control flow and pause of
    ``apic.capture_flow``); else it is Warp's own CUDA capture, with apic recording alongside for
    ``apic=True``."""
    return device.is_cpu


def in_use() -> tuple[Backend, ...]:
    """The backends imported so far (a graph of each may be alive)."""
    return tuple(_found.values())


def free() -> None:
    """``free()`` of every backend in use (``wp.capture_end``: graphs collected during the capture)."""
    for backend in tuple(_found.values()):
        backend.free()
