"""The control-flow half of the capture API: ``capture_if``, ``capture_while``, ``capture_pause`` and
``capture_resume`` (:mod:`apic.capture` holds the rest, and points Warp's names at these). On the CPU they
record branches and loops into apic's capture, or run the body now outside one; on CUDA they go to Warp's
own (``ORIGINALS``, saved when apic is installed).
"""

from __future__ import annotations

import ctypes

import warp as wp

from apic._compat import wp_context, wp_types
from apic.errors import UnsupportedOperationError
from apic.record.cpu import active_recorder
from apic.record.cuda import recorder as cuda_recorder
from apic.replay import backends

ORIGINALS: dict[str, object] = {}  # Warp's own capture API, saved by ``apic.capture.patch`` (CUDA work goes there)


refuse_in_cuda_recording = cuda_recorder.refuse_while_recording


def original(name: str):
    """Warp's own ``name`` (for CUDA work), or an error where this warp-lang has none."""
    found = ORIGINALS.get(name)
    if found is None:
        raise RuntimeError(f"warp-lang {wp.config.version} has no {name} for CUDA devices")
    return found


# --- pause and resume ---------------------------------------------------------------------------------
class PausedCapture:
    """What ``wp.capture_pause`` returns for a CPU capture: hand it to ``wp.capture_resume``.

    (Warp returns the ``warp.Graph`` being built; an apic graph exists only once the capture ends.)
    """

    def __init__(self, recorder) -> None:
        self.device = recorder.device
        self.apic = recorder.apic
        self._recorder = recorder

    def __repr__(self) -> str:
        state = "paused" if active_recorder.is_paused(self._recorder) else "not paused"
        return f"<apic.PausedCapture device={self.device} {state}>"


def capture_pause(device=None, stream=None, **kwargs):
    """Pause the graph capture on ``device`` (``stream``), returning a handle for :func:`capture_resume`.

    On the CPU, operations issued while paused run eagerly and are not recorded; the capture goes
    on where it left off after :func:`capture_resume`. ``Device.is_capturing`` is False meanwhile.
    On CUDA this is Warp's own ``capture_pause``.
    """
    recorder = active_recorder.active()
    if recorder is not None and stream is None and (device is None or backends.apic_captures(wp.get_device(device))):
        return PausedCapture(active_recorder.pause())
    refuse_in_cuda_recording("wp.capture_pause")
    return original("capture_pause")(device=device, stream=stream, **kwargs)


def capture_resume(graph, device=None, stream=None, **kwargs):
    """Resume a graph capture paused by :func:`capture_pause` (``graph`` is what it returned)."""
    if isinstance(graph, PausedCapture):
        active_recorder.resume(graph._recorder)
        return None
    return original("capture_resume")(graph, device=device, stream=stream, **kwargs)


# --- conditional execution ----------------------------------------------------------------------------
def _check_condition(condition) -> None:
    if not isinstance(condition, wp_types.array) or condition.dtype is not wp.int32:
        raise TypeError("Condition must be a Warp array of int32 with a single element")


def _read_condition(condition) -> bool:
    return bool(ctypes.cast(condition.ptr, ctypes.POINTER(ctypes.c_int32)).contents.value)


def _run_body(body, what: str, kwargs: dict) -> None:
    """Run a branch body now (no capture running): a Graph is launched, a callable called."""
    if _is_graph(body):
        wp.capture_launch(body)
    elif callable(body):
        body(**kwargs)
    else:
        raise TypeError(f"{what} must be a Callable or a Graph")


def _record_body(recorder, body, what: str, kwargs: dict):
    """A callable that records a branch body into ``recorder``: a Graph inline, a callable by calling it."""
    if body is None:
        return None
    backend = backends.of(body)
    if backend is not None and backend.records_inline:  # an apic CPU graph (a CUDA one is refused below)
        return lambda: recorder.record_graph(body)
    if isinstance(body, _warp_graph_type()):
        raise UnsupportedOperationError(
            f"a warp.Graph as the {what} of a CPU capture", "pass an apic graph or a callable"
        )
    if not callable(body):
        raise TypeError(f"{what} must be a Callable or a Graph")
    return lambda: body(**kwargs)


def _warp_body(body, stream, device):
    """A branch body Warp's own CUDA ``capture_if`` / ``capture_while`` takes: for an apic graph, what its
    backend gives (``conditional_body``: an apic CUDA graph captured with ``apic=True`` as its Warp graph, a
    loaded one as a callable that replays it on Warp's stream); anything else as is."""
    backend = backends.of(body)
    return body if backend is None else backend.conditional_body(body, stream, device)


def _cuda_recording_of(condition, api: str, **bodies):
    """The apic CUDA recording a conditional on ``condition``'s device goes into, or None; refuses bodies it
    cannot record (a graph's ops would reach Warp's body graph without passing apic's recorder)."""
    recorder = cuda_recorder.active()
    if recorder is None or not recorder.owns(condition.device):
        return None
    for what, body in bodies.items():
        if body is not None and (_is_graph(body) or not callable(body)):
            raise UnsupportedOperationError(
                f"wp.{api} with a {type(body).__name__} as its {what}", "pass a callable that issues the body's work",
                capture="CUDA (apic=True)")
    return recorder


def _is_graph(body) -> bool:
    """Whether ``body`` is a graph: an apic one (it has a replay backend) or Warp's own."""
    return backends.of(body) is not None or isinstance(body, _warp_graph_type())


def _warp_graph_type() -> type:
    return wp_context.Graph


def capture_if(condition, on_true=None, on_false=None, stream=None, **kwargs):
    """Create a dynamic branch based on a condition.

    The condition value is retrieved from the first element of the ``condition`` array (int32;
    nonzero is true). During a CPU capture both bodies are recorded and the condition is read each
    time the graph is replayed; otherwise the chosen body runs now.

    Args:
        condition: Warp array holding the condition value.
        on_true: A callback function or :class:`Graph` to execute if the condition is True.
        on_false: A callback function or :class:`Graph` to execute if the condition is False.
        stream: The CUDA stream where the condition was written (CUDA only).

    Any additional keyword arguments are forwarded to the callback functions.
    """
    if on_true is None and on_false is None:
        return
    _check_condition(condition)
    if not backends.apic_captures(condition.device):
        recording = _cuda_recording_of(condition, "capture_if", on_true=on_true, on_false=on_false)
        if recording is not None:  # Warp builds the conditional node; apic records its bodies as Warp calls them
            warp_if = original("capture_if")
            recording.record_cuda_if(condition, on_true, on_false, lambda t, f: warp_if(
                condition, on_true=t, on_false=f, stream=stream, **kwargs))
            return None
        refuse_in_cuda_recording("wp.capture_if")
        return original("capture_if")(condition, on_true=_warp_body(on_true, stream, condition.device),
                                       on_false=_warp_body(on_false, stream, condition.device), stream=stream, **kwargs)
    recorder = active_recorder.active()
    if recorder is None:
        body, what = (on_true, "on_true") if _read_condition(condition) else (on_false, "on_false")
        if body is not None:
            _run_body(body, what, kwargs)
        return
    recorder.record_if(
        condition,
        _record_body(recorder, on_true, "on_true", kwargs),
        _record_body(recorder, on_false, "on_false", kwargs),
    )


def capture_while(condition, while_body, stream=None, **kwargs):
    """Create a dynamic loop based on a condition.

    The condition value is retrieved from the first element of the ``condition`` array (int32;
    nonzero is true); ``while_body`` must update it so that the loop ends. During a CPU capture the
    body is recorded once and replay tests the condition before every iteration; otherwise the loop
    runs now.

    Args:
        condition: Warp array holding the condition value.
        while_body: A callback function or :class:`Graph` to execute while the loop condition is True.
        stream: The CUDA stream where the condition was written (CUDA only).

    Any additional keyword arguments are forwarded to the callback function.
    """
    _check_condition(condition)
    if not backends.apic_captures(condition.device):
        recording = _cuda_recording_of(condition, "capture_while", while_body=while_body)
        if recording is not None:
            warp_while = original("capture_while")
            recording.record_cuda_while(condition, while_body, lambda body: warp_while(
                condition, body, stream=stream, **kwargs))
            return None
        refuse_in_cuda_recording("wp.capture_while")
        body = _warp_body(while_body, stream, condition.device)
        return original("capture_while")(condition, body, stream=stream, **kwargs)
    recorder = active_recorder.active()
    if recorder is None:
        while _read_condition(condition):
            _run_body(while_body, "while_body", kwargs)
        return
    recorder.record_while(condition, _record_body(recorder, while_body, "while_body", kwargs))
