"""The public capture API: ``capture_begin``, ``capture_end``, ``capture_launch``, ``ScopedCapture``.

Same names, signatures and semantics as Warp 1.19's. A CPU capture is apic's own record-only
capture; a CUDA capture goes to Warp as before (without Warp's native APIC recorder).
"""

from __future__ import annotations

import inspect

import warp as wp

from apic._compat import wp_context
from apic.errors import CaptureError
from apic.graph import Graph
from apic.record import recorder as _recorder

_originals: dict[str, object] = {}


def _resolve_device(device, stream):
    return stream.device if stream is not None else wp.get_device(device)


def _warp_kwargs(name: str, **kwargs) -> dict:
    """Keep only the keyword arguments the installed Warp's ``name`` accepts (and never ``apic``).

    Dropping ``apic`` keeps Warp's native APIC recorder off under apic on warp 1.13+.
    """
    accepted = inspect.signature(_originals[name]).parameters
    return {k: v for k, v in kwargs.items() if k in accepted and k != "apic"}


def capture_begin(device=None, stream=None, force_module_load=None, external=False, apic=False, capture_mode=None):
    """Begin capture of a graph.

    On a CPU device, apic records every supported operation issued on this thread until
    :func:`capture_end`; nothing runs until the graph is replayed with :func:`capture_launch`.
    On a CUDA device, Warp's own CUDA graph capture begins.

    Args:
        device: The device to capture on (CPU or CUDA).
        stream: The CUDA stream to capture on (CUDA only).
        force_module_load: Load all modules of the device before capture begins.
        external: Whether the capture was already started externally (CUDA only).
        apic: Allow :func:`capture_save` on the graph (as upstream requires).
        capture_mode: The CUDA stream capture mode (ignored on the CPU).
    """
    dev = _resolve_device(device, stream)
    if not dev.is_cpu:
        kwargs = _warp_kwargs(
            "capture_begin", stream=stream, force_module_load=force_module_load, external=external,
            capture_mode=capture_mode,
        )
        if capture_mode is None:
            kwargs.pop("capture_mode", None)
        return _originals["capture_begin"](device=device, **kwargs)
    if external:
        raise CaptureError("external=True is only meaningful for CUDA captures")
    from apic.record.shims import ensure_native_sinks

    ensure_native_sinks()
    if force_module_load:
        wp.force_load(device=dev)
    _recorder.Recorder.begin(dev, apic=bool(apic))


def capture_end(device=None, stream=None):
    """End the capture of a graph and return it (a :class:`apic.Graph` for a CPU capture)."""
    recorder = _recorder.active()
    if recorder is not None and (device is None and stream is None or _resolve_device(device, stream).is_cpu):
        recording = recorder.end()
        return Graph(recording, recorder.device, apic=recorder.apic, keepalive=[recorder.keepalive, recording.modules])
    dev = _resolve_device(device, stream)
    if dev.is_cpu:
        raise CaptureError("no CPU graph capture is in progress on this thread")
    return _originals["capture_end"](device=device, stream=stream)


def capture_launch(graph, stream=None):
    """Launch a previously captured (or loaded) graph.

    An apic graph replays in one call of the native interpreter; a CUDA graph goes to Warp.
    """
    if isinstance(graph, Graph):
        graph.launch()
        return
    return _originals["capture_launch"](graph, stream=stream)


class ScopedCapture:
    """Context manager capturing the operations of its block into ``self.graph``.

    Arguments as :func:`capture_begin`. If the block raises, the capture is abandoned and
    ``graph`` stays None (a partly recorded graph is never handed out).
    """

    def __init__(self, device=None, stream=None, force_module_load=None, external=False, apic=False,
                 capture_mode=None):
        self.device = device
        self.stream = stream
        self.force_module_load = force_module_load
        self.external = external
        self.apic = apic
        self.capture_mode = capture_mode
        self.active = False
        self.graph = None

    def __enter__(self):
        wp.capture_begin(
            device=self.device, stream=self.stream, force_module_load=self.force_module_load,
            external=self.external, apic=self.apic, capture_mode=self.capture_mode,
        )
        self.active = True
        return self

    def __exit__(self, exc_type, exc_value, traceback):
        if not self.active:
            return
        self.active = False
        recorder = _recorder.active()
        if exc_type is not None and recorder is not None:
            recorder.abort()
            return
        try:
            self.graph = wp.capture_end(device=self.device, stream=self.stream)
        except Exception:
            if exc_type is None:
                raise


def abort_all() -> None:
    """Abandon this thread's capture, if any (used by ``apic.uninstall``)."""
    recorder = _recorder.active()
    if recorder is not None:
        recorder.abort()


def install_capture_api(patches) -> None:
    """Point warp's capture API at this module (called by ``apic.record.shims.install``)."""
    from warp._src import utils as wp_utils  # noqa: F401  (present on every supported version)

    for name in ("capture_begin", "capture_end", "capture_launch"):
        _originals[name] = getattr(wp_context, name)
    for owner in (wp, wp_context):
        patches.set(owner, "capture_begin", capture_begin)
        patches.set(owner, "capture_end", capture_end)
        patches.set(owner, "capture_launch", capture_launch)
    for owner in (wp, wp_utils):
        patches.set(owner, "ScopedCapture", ScopedCapture)
    # Saving and loading: apic's own (warp <= 1.12 has none; 1.13+ has upstream's native APIC,
    # which must never see an apic graph). Uninstall restores or deletes them exactly.
    from apic import persist

    for owner in (wp, wp_context):
        for name in ("capture_save", "capture_load", "capture_load_from_bytes"):
            patches.set(owner, name, getattr(persist, name))
