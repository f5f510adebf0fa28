"""Which CPU capture records on this thread: Warp's ``capture_pause`` / ``capture_resume``, per thread.

Each capturing thread has its own recorder (``active()``), so other threads keep running eagerly, as
with Warp's thread-local CUDA capture. A paused recorder waits in this thread's paused list.
"""

from __future__ import annotations

import contextlib
import os
import threading

from apic.errors import CaptureError

_local = threading.local()
#: the threads on which a capture records now: ``wp.capture_launch``'s fast path runs only while it is
#: empty (an emptiness test costs less per launch than finding this thread's recorder)
recording_threads: set[int] = set()


def _after_fork_in_child() -> None:
    # the other threads did not come along: only this one may still be recording
    recording_threads.intersection_update({threading.get_ident()} if active() is not None else ())


if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(after_in_child=_after_fork_in_child)


def active():
    """The recorder (``apic.record.cpu.recorder.Recorder``) of the capture running on this thread, if any."""
    return getattr(_local, "recorder", None)


def set_active(recorder) -> None:
    """Make ``recorder`` (or None) the one this thread records into."""
    _local.recorder = recorder
    if recorder is None:
        recording_threads.discard(threading.get_ident())
    else:
        recording_threads.add(threading.get_ident())


def paused_list() -> list:
    """The recorders paused on this thread (``capture_pause``), oldest first."""
    found = getattr(_local, "paused", None)
    if found is None:
        found = _local.paused = []
    return found


def pause():
    """``wp.capture_pause``: stop recording on this thread (work runs eagerly) until ``resume``."""
    recorder = active()
    if recorder is None:
        raise CaptureError("no CPU graph capture is in progress on this thread")
    set_active(None)
    paused_list().append(recorder)
    return recorder


def resume(recorder) -> None:
    """``wp.capture_resume``: record again into a capture paused on this thread."""
    paused_here = paused_list()
    if not any(r is recorder for r in paused_here):
        raise CaptureError("CPU graph capture is not paused (on this thread)")
    if active() is not None:
        raise CaptureError("cannot resume a paused CPU capture while another capture is in progress on this thread")
    paused_here[:] = [r for r in paused_here if r is not recorder]
    set_active(recorder)


def is_paused(recorder) -> bool:
    """Whether ``recorder`` is paused on this thread."""
    return any(r is recorder for r in paused_list())


def forget(recorder) -> None:
    """Drop ``recorder`` from this thread, active or paused (the capture ended or was abandoned)."""
    if active() is recorder:
        set_active(None)
    paused_here = paused_list()
    if any(r is recorder for r in paused_here):
        paused_here[:] = [r for r in paused_here if r is not recorder]


@contextlib.contextmanager
def paused():
    """Let Warp run eagerly on this thread for a moment (e.g. a read of memory the capture never used)."""
    recorder = active()
    set_active(None)
    try:
        yield
    finally:
        set_active(recorder)
