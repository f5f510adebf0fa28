"""Warp's handle classes wrapped for apic: every Mesh, Bvh, HashGrid and Volume made is registered, and their
refit / rebuild / build / reserve methods are recorded by a CPU capture (``apic.record.handles`` says why).
"""

from __future__ import annotations

import functools
import inspect

import warp as wp

from apic.errors import UnsupportedOperationError
from apic.record import handles
from apic.record.cpu.active_recorder import active
from apic.targets import handle_kinds as hk


def _init_shim(kind: str, original):
    signature = inspect.signature(original)

    @functools.wraps(original)
    def __init__(self, *args, **kwargs):
        try:
            original(self, *args, **kwargs)
        except UnsupportedOperationError as error:  # its native build was refused by a CPU capture
            raise UnsupportedOperationError(
                f"wp.{kind}(...) inside a CPU capture", "build it before capture_begin and refit or rebuild it inside"
            ) from error
        try:
            bound = signature.bind(self, *args, **kwargs).arguments
        except TypeError:  # pragma: no cover - Warp accepted what its own signature does not
            bound = {}
        self._apic_options = {k: handles.option_value(v) for k, v in bound.items() if k in handles.OPTIONS[kind]}
        handles.register(self)

    return __init__


def _method_shim(original, remember_build: bool = False):
    """A handle method whose native call a CPU capture records (refit, rebuild, build, reserve).

    In a capture the method runs Warp's own code, whose native call (``wp_mesh_refit_host``, ...)
    reaches apic's sink and is recorded; outside it runs as usual. ``HashGrid.build`` also remembers
    its last eager build, which a save needs to build the grid again on load.
    """

    signature = inspect.signature(original)

    @functools.wraps(original)
    def method(self, *args, **kwargs):
        recorder = active()
        if recorder is None or not self.device.is_cpu:
            result = original(self, *args, **kwargs)
            if remember_build and recorder is None:
                bound = signature.bind(self, *args, **kwargs).arguments
                self._apic_build = (bound["points"], float(bound["radius"]), bound.get("groups"))
            return result
        recorder.note_handle(self)
        recorder.note_values([v for v in (*args, *kwargs.values()) if isinstance(v, wp.array)])
        recorder.api_depth += 1
        try:
            return original(self, *args, **kwargs)
        finally:
            recorder.api_depth -= 1

    return method


# Handle methods a CPU capture records: (class, method); they end in ``handles.NATIVE_CALLS``.
METHODS = ((hk.MESH, "refit"), (hk.BVH, "refit"), (hk.BVH, "rebuild"), (hk.HASH_GRID, "build"),
           (hk.HASH_GRID, "reserve"))


def patch(patches) -> None:
    """Wrap the handle classes (through apic's undo log ``patches``)."""
    classes = handles.handle_classes()
    for kind, cls in classes.items():
        patches.set(cls, "__init__", _init_shim(kind, vars(cls)["__init__"]))
    for kind, name in METHODS:
        cls = classes.get(kind)
        if cls is not None and name in vars(cls):
            build = (kind, name) == (hk.HASH_GRID, "build")
            patches.set(cls, name, _method_shim(vars(cls)[name], remember_build=build))
