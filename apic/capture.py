"""The public capture API: ``capture_begin``, ``capture_end``, ``capture_launch``, ``ScopedCapture``; and
``patch``, which points Warp's capture API here and at the control-flow half (``capture_if``,
``capture_while``, ``capture_pause``, ``capture_resume``: :mod:`apic.capture_flow`).

Same names, signatures and semantics as Warp 1.19's. A CPU capture is apic's own record-only
capture; a CUDA capture goes to Warp as before (without Warp's native APIC recorder), and with
``apic=True`` apic records the same operations alongside (``apic.record.cuda.recorder``) so it can be saved.
"""

from __future__ import annotations

import warp as wp

from apic import _compat
from apic import dot as _dot
from apic import patches as _patches
from apic._compat import wp_context, wp_utils
from apic.capture_flow import ORIGINALS as _originals
from apic.capture_flow import capture_if, capture_pause, capture_resume, capture_while
from apic.capture_flow import refuse_in_cuda_recording as _refuse_in_cuda_recording
from apic.cuda_graph import CapturedCudaGraph
from apic.errors import CaptureError
from apic.graph import Graph
from apic.record.cpu import active_recorder
from apic.record.cuda import recorder as cuda_recorder
from apic.record.cpu.recorder import Recorder
from apic.replay import backends

_recording_threads = active_recorder.recording_threads


def _resolve_device(device, stream):
    return stream.device if stream is not None else wp.get_device(device)


def _warp_kwargs(name: str, **kwargs) -> dict:
    """Keep only the keyword arguments the installed Warp's ``name`` accepts (and never ``apic``).

    Dropping ``apic`` keeps Warp's native APIC recorder off under apic on warp 1.13+.
    """
    accepted = _compat.parameters_of(_originals[name])
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
    if not backends.apic_captures(dev):
        kwargs = _warp_kwargs(
            "capture_begin", stream=stream, force_module_load=force_module_load, external=external,
            capture_mode=capture_mode,
        )
        if capture_mode is None:
            kwargs.pop("capture_mode", None)
        if not apic:
            return _originals["capture_begin"](device=device, **kwargs)
        # apic=True: record alongside Warp's own capture, so that the graph can be saved
        _patches.before_capture(cuda=True)
        recording = cuda_recorder.CudaRecorder.begin(dev, int((stream or dev.stream).cuda_stream or 0))
        try:
            return _originals["capture_begin"](device=device, **kwargs)
        except BaseException:
            recording.abort()
            raise
    if external:
        raise CaptureError("external=True is only meaningful for CUDA captures")
    _patches.before_capture(cuda=False)
    if force_module_load:
        wp.force_load(device=dev)
    Recorder.begin(dev, apic=bool(apic))


def capture_end(device=None, stream=None):
    """End the capture of a graph and return it (a :class:`apic.Graph` for a CPU capture)."""
    recorder = active_recorder.active()
    if recorder is not None and (device is None and stream is None or
                                 backends.apic_captures(_resolve_device(device, stream))):
        recording = recorder.end()
        return Graph(recording, recorder.device, apic=recorder.apic, keepalive=[recorder.keepalive, recording.modules])
    dev = _resolve_device(device, stream)
    if backends.apic_captures(dev):
        if active_recorder.paused_list():
            raise CaptureError(
                "the CPU graph capture on this thread is paused; call wp.capture_resume() before wp.capture_end()"
            )
        raise CaptureError("no CPU graph capture is in progress on this thread")
    recorder = cuda_recorder.active()
    try:
        if recorder is None or not recorder.owns(dev):
            return _originals["capture_end"](device=device, stream=stream)
        try:
            warp_graph = _originals["capture_end"](device=device, stream=stream)
        finally:
            recorder.abort()
        return CapturedCudaGraph(warp_graph, recorder.end(), dev, _originals["capture_launch"],
                                 keepalive=[recorder.keepalive])
    finally:
        _release_loaded_graphs_freed_during_capture()


def _release_loaded_graphs_freed_during_capture() -> None:
    """Loaded graphs collected during a capture may wait for its end to give back what they took."""
    backends.free()


def capture_launch(graph, stream=None, threads=None):
    """Launch a previously captured (or loaded) graph.

    An apic graph replays in one call of the native interpreter; a CUDA graph goes to Warp.
    Inside a CPU capture, launching an apic graph records its operations into the capture
    (as a CUDA graph launched during stream capture becomes part of it); nothing runs then.

    ``threads`` (apic CPU graphs only; default the graph's ``threads`` attribute, itself 1) > 1 runs
    each launch whose kernel is proved splittable, and that is large enough, split over that many
    threads, bit-identical to the serial replay; everything else runs as before (docs/PARALLEL.md).
    ``threads`` must be an ``int`` >= 1 (else ``ValueError``); a count above what can run is bounded by
    the CPUs the process may use and a hard cap (``Graph.launch``, ``apic.replay.parallel.thread_count``).
    """
    # The common replay in one bound native call, where the graph has made one for this thread count
    # (apic.replay.cpu.plans; an exact int: 2.0 or True must still be refused); whether a capture records can
    # change at any time: checked per call, on every thread at once (cheaper).
    fast = getattr(graph, "fast_replays", None)
    if fast is not None and (threads is None or type(threads) is int) and not _recording_threads:
        replay = fast.get(threads)
        if replay is not None:
            status = replay()
            if status:
                graph.fast_replay_failed(status)
            return
    backend = backends.of(graph)  # every apic graph replays through its backend
    if backend is not None:
        return backend.launch(graph, stream, threads)
    if threads is not None:
        raise ValueError("wp.capture_launch(threads=...) is only for apic CPU graphs")
    _refuse_in_cuda_recording("wp.capture_launch of a CUDA graph")  # it would become an unrecorded child graph
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
        self._recorder = active_recorder.active()  # None for a CUDA capture
        return self

    def __exit__(self, exc_type, exc_value, traceback):
        if not self.active:
            return
        self.active = False
        recorder = active_recorder.active()
        if exc_type is not None and recorder is not None:
            recorder.abort()
            return
        if exc_type is not None and self._recorder is not None and active_recorder.is_paused(self._recorder):
            self._recorder.abort()  # raised while paused: abandon it too
            return
        try:
            self.graph = wp.capture_end(device=self.device, stream=self.stream)
        except Exception:
            if exc_type is None:
                raise


def abort_all() -> None:
    """Abandon this thread's capture, if any, running or paused (used by ``apic.uninstall``)."""
    recorder = active_recorder.active()
    if recorder is not None:
        recorder.abort()
    for paused in list(active_recorder.paused_list()):
        paused.abort()


def _device_is_capturing(original):
    """``Device.is_capturing``, also True for the CPU device while this thread records an apic capture."""

    def is_capturing(self) -> bool:
        if backends.apic_captures(self):
            recorder = active_recorder.active()
            if recorder is not None and recorder.device == self:
                return True
        return original.fget(self)

    is_capturing.__doc__ = original.__doc__
    return property(is_capturing)


def patch(patches) -> None:
    """Point warp's capture API at this module, recording each change in ``patches`` (``apic.installation``)."""
    for name in ("capture_begin", "capture_end", "capture_launch"):
        _originals[name] = getattr(wp_context, name)
    for owner in (wp, wp_context):
        patches.set(owner, "capture_begin", capture_begin)
        patches.set(owner, "capture_end", capture_end)
        patches.set(owner, "capture_launch", capture_launch)
    # Control flow and pause/resume (absent from a warp-lang without them: uninstall deletes them there).
    extra = {"capture_if": capture_if, "capture_while": capture_while, "capture_pause": capture_pause,
             "capture_resume": capture_resume}
    for name, function in extra.items():
        _originals[name] = getattr(wp_context, name, None)
        for owner in (wp, wp_context):
            patches.set(owner, name, function)
    # A picture of the graph: apic graphs as DOT, CUDA graphs still through Warp's own (apic.dot).
    _originals["capture_debug_dot_print"] = getattr(wp_context, "capture_debug_dot_print", None)
    debug_dot_print = _dot.make_capture_debug_dot_print(_originals["capture_debug_dot_print"])
    for owner in (wp, wp_context):
        patches.set(owner, "capture_debug_dot_print", debug_dot_print)
    patches.set(wp_context.Device, "is_capturing", _device_is_capturing(vars(wp_context.Device)["is_capturing"]))
    for owner in (wp, wp_utils):
        patches.set(owner, "ScopedCapture", ScopedCapture)
