"""The driver objects a loaded CUDA graph owns (``apic.replay.cuda.loaded_graph``), and their release.

Releasing them synchronizes the context and frees memory, which a stream capture forbids: run while a capture
is in progress (a garbage collection can free a graph at any moment, inside the caller's ``wp.ScopedCapture``
too), it would invalidate that capture (CUDA error 901 at the caller's next launch; seen on an H100). So a
release waits in ``PENDING`` while Warp captures on any CUDA device, until ``release_pending`` finds none.
"""

from __future__ import annotations

import warp as wp

from apic.replay.cuda.driver import Driver


class Resources:
    """Every driver object a loaded graph owns, released together (when the graph is freed).

    The release synchronizes the context and frees memory, which a stream capture forbids: run while any
    capture Warp knows of is in progress (a garbage collection can free a graph at any moment, inside the
    caller's ``wp.ScopedCapture`` too), it would invalidate that capture. Then it waits in ``PENDING``
    until ``release_pending`` finds no capture running (the next load or replay, or the end of a capture)."""

    def __init__(self, cu: Driver) -> None:
        self.cu = cu
        self.context = None
        self.device = None
        self.warp_device = None  # the graph's Warp device: its captures are looked at with every other device's
        self.stream = None
        self.graph = None
        self.exec = None
        self.modules: list = []
        self.memory: list = []

    def release(self) -> None:
        if self.context is None:
            return
        if _captures_running(self.warp_device):
            PENDING.append(self)
            return
        self._release_now()

    def _release_now(self) -> None:
        cu = self.cu.cu
        try:
            cu.cuCtxPushCurrent(self.context)
            cu.cuCtxSynchronize()
            if self.exec is not None:
                cu.cuGraphExecDestroy(self.exec)
            if self.graph is not None:
                cu.cuGraphDestroy(self.graph)
            if self.stream is not None:
                cu.cuStreamDestroy(self.stream)
            for module in self.modules:
                cu.cuModuleUnload(module)
            for pointer in self.memory:
                cu.cuMemFree(pointer)
            cu.cuCtxPopCurrent()
            cu.cuDevicePrimaryCtxRelease(self.device)
        except Exception:  # interpreter shutdown: the driver may be gone already
            pass
        self.context = None


class ContextGuard:
    """Pushes a CUDA context for the span of a ``with`` block (the calls of a load or a replay)."""

    __slots__ = ("_cu", "_context")

    def __init__(self, cu: Driver, context) -> None:
        self._cu, self._context = cu, context

    def __enter__(self) -> None:
        self._cu("cuCtxPushCurrent", self._context)

    def __exit__(self, *exc) -> None:
        self._cu("cuCtxPopCurrent")


# Resources of graphs freed while a capture ran (see Resources), released by release_pending.
PENDING: list[Resources] = []


def _captures_running(device=None) -> bool:
    """Whether Warp is capturing a graph on ``device`` or any other CUDA device (a look at each ``captures``)."""
    try:
        devices = [device, *wp.get_cuda_devices()]
    except Exception:  # interpreter shutdown
        devices = [device]
    return any(getattr(d, "captures", None) for d in devices)


def release_pending() -> None:
    """Release what graphs freed during a capture left in ``PENDING``, unless a capture still runs."""
    while PENDING:
        if _captures_running(PENDING[-1].warp_device):
            return
        try:
            res = PENDING.pop()
        except IndexError:  # another thread emptied it meanwhile
            return
        res._release_now()
