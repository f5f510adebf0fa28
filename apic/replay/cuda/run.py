"""Replaying a loaded CUDA graph (:class:`apic.replay.cuda.loaded_graph.LoadedCudaGraph`): one
``cuGraphLaunch``, or the steps one by one, on the graph's stream or on a caller's capturing stream
(the module docstring of :mod:`apic.replay.cuda.loaded_graph` says what is refused and why)."""

from __future__ import annotations

from apic.errors import CaptureError
from apic.record.cuda import recorder as cuda_recorder
from apic.replay.cuda import resources as cuda_resources
from apic.replay.cuda.conditional import add_to_capture, has_conditional_steps, run_on_host
from apic.replay.cuda.driver import CudaReplayError
from apic.replay.cuda.lowering import enqueue_step

MODES = ("graph", "launch")


class CudaRun:
    """The replay half of a loaded CUDA graph; the loader sets ``_cu``, ``_resources``, ``_plan``, ``_rows``
    (``apic.replay.cuda.rows.CudaRows``, or None where the driver library's entry points cannot be had),
    ``device`` and ``ordinal``."""

    _fast = None  # (mode, native call, status check) of the last common replay: what issue() makes again

    def issue(self) -> bool:
        """``wp.capture_launch(graph)``'s common case in as few steps as it takes (its issue time): the last
        replay on the graph's own stream again, in the same mode, where one native call holding the GIL made
        it, no capture runs on the device or records on this thread, and no release is pending. False
        (nothing done) otherwise: ``launch`` then replays, or refuses, as it says."""
        fast = self._fast
        if fast is None or fast[0] != self.mode or cuda_resources.PENDING or \
                getattr(self.device, "captures", None) or cuda_recorder.active() is not None:
            return False
        status = fast[1]()
        if status:
            fast[2](status)
        return True

    def _stream(self, stream):
        """The ``CUstream`` to replay on: ``stream`` (a ``wp.Stream``, a ``CUstream`` or a raw handle), else the
        device's current stream while Warp captures on it (the replay becomes part of that capture), else
        the graph's own stream."""
        if stream is None:
            capturing = _warp_capture(self.device)
            if capturing is None:
                return self._resources.stream
            stream = capturing[0]
        driver = self._cu.cu
        handle = getattr(stream, "cuda_stream", stream)
        return handle if isinstance(handle, driver.CUstream) else driver.CUstream(int(handle or 0))

    def _check_stream(self, stream) -> bool:
        """Whether ``stream`` (not the graph's own) is capturing; refuses, saying why, a stream of another
        CUDA context and a capture that an earlier error invalidated (before any node is added)."""
        cu = self._cu
        status = cu.cu.CUstreamCaptureStatus
        try:
            context = cu("cuStreamGetCtx", stream)
            capture = cu("cuStreamIsCapturing", stream)
        except CudaReplayError as error:
            raise CaptureError(f"cannot replay this CUDA graph on stream {int(stream):#x}: {error}") from error
        if int(context) != int(self._resources.context):
            raise CaptureError(
                f"cannot replay this CUDA graph on stream {int(stream):#x}: the stream belongs to another CUDA "
                f"context than the graph (the primary context of cuda:{self.ordinal}, which Warp uses)"
            )
        if capture == status.CU_STREAM_CAPTURE_STATUS_INVALIDATED:
            raise CaptureError(
                f"cannot replay this CUDA graph into the capture on stream {int(stream):#x}: an earlier error "
                "invalidated that capture; end it (wp.capture_end or cuStreamEndCapture) and capture again"
            )
        return capture == status.CU_STREAM_CAPTURE_STATUS_ACTIVE

    def launch(self, stream=None, mode: str | None = None) -> None:
        """Replay once: one ``cuGraphLaunch`` (``mode="graph"``), or op by op (``mode="launch"``).

        On a capturing stream (see the module docstring) the ops are enqueued one by one in both modes:
        they become nodes of the caller's graph."""
        mode = self.mode if mode is None else mode
        rows = self._rows
        # the common replay first, in as few steps as it takes (wp.capture_launch's issue time): on the graph's
        # own stream, no capture on the device, no release pending; one native call, which enters and leaves
        # the context itself. False for a mode it does not know: refused below.
        if stream is None and rows is not None and not cuda_resources.PENDING and \
                not getattr(self.device, "captures", None) and rows.run_own(mode):
            if self._fast is None or self._fast[0] != mode:  # what issue() makes again
                found = rows.fast_own(mode)
                self._fast = None if found is None else (mode, *found)
            return
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        if cuda_resources.PENDING:
            cuda_resources.release_pending()
        if not self._plan:
            return
        handle = self._stream(stream)
        # False where the rows hold no table for this mode (op by op with conditional steps): enqueued below
        if rows is not None and handle is self._resources.stream and rows.run_own(mode):
            return
        with self.current():
            if handle is not self._resources.stream and self._check_stream(handle):
                _hold_in_capture(self.device, handle, self)
                # op by op: the ops become nodes of the caller's graph (conditional nodes are added whole)
                if rows is not None and rows.has("launch"):
                    rows.run("launch", handle)
                else:
                    self._enqueue(handle, capturing=True)
            elif rows is not None and rows.has(mode):
                rows.run(mode, handle)
            elif mode == "graph":
                self._cu("cuGraphLaunch", self._resources.exec, handle)
            else:
                self._enqueue(handle)

    def _enqueue(self, stream, capturing: bool = False) -> None:
        """Enqueue the plan's steps one by one on ``stream`` through cuda-python (the context is current): where
        the op-table rows cannot run them (the driver library's entry points not found, ``cuda_rows.driver_entries``,
        or a plan with conditional steps). With conditional nodes: into a capture, the plan's nodes are added to the
        capture's graph; otherwise each condition is read on the host when reached (``apic.replay.cuda.conditional``)."""  # noqa: E501
        cu = self._cu
        if has_conditional_steps(self._plan):
            if capturing:
                add_to_capture(self._plan, stream, cu, self._resources.context, self._set_condition, self._keep)
            else:
                run_on_host(self._plan, stream, cu)
            return
        for step in self._plan:
            enqueue_step(step, stream, cu)

    def refuse_in_capture(self, what: str) -> None:
        """``what`` waits for the device, which a stream capture forbids (it would invalidate the capture)."""
        if _warp_capture(self.device, any_stream=True) is not None:
            raise CaptureError(
                f"{what} on a loaded CUDA graph while a graph capture runs on cuda:{self.ordinal}: it waits for the "
                "device, which a stream capture forbids; call it before wp.capture_begin or after wp.capture_end"
            )

    def synchronize(self) -> None:
        """Wait for every replay of this graph (on any stream of its context) to finish."""
        self.refuse_in_capture("synchronize()")
        with self.current():
            self._cu("cuCtxSynchronize")


def _warp_capture(device, any_stream: bool = False):
    """``(stream, warp.Graph)`` of the capture Warp runs on ``device``'s current stream (with ``any_stream``: on
    any of its streams), or None; no driver call where Warp captures nothing (a dict look-up per replay)."""
    captures = getattr(device, "captures", None)
    if not captures:
        return None
    current = getattr(device, "stream", None)
    if current in captures:
        return current, captures[current]
    return next(iter(captures.items())) if any_stream else None


def _hold_in_capture(device, stream, graph) -> None:
    """Keep ``graph`` (its memory, modules and param blobs) alive as long as the Warp graph being captured on
    ``stream``, whose nodes now use them. A capture Warp does not know of (one begun with cuda-python alone)
    leaves that to the caller."""
    for warp_stream, warp_graph in list((getattr(device, "captures", None) or {}).items()):
        if int(getattr(warp_stream, "cuda_stream", 0) or 0) == int(stream):
            held = vars(warp_graph).setdefault("_apic_held_graphs", [])
            if not any(g is graph for g in held):
                held.append(graph)
