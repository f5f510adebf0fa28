"""``warp.fem`` temporaries inside a CPU capture: graph-owned, never recycled, never freed early.

warp.fem borrows scratch arrays from a ``TemporaryStore`` (``fem.borrow_temporary``) and hands them
back with ``release()``, which either returns the buffer to the store's pool or, for an array that
has no store, frees it. A captured graph refers to that memory by address, so inside a capture both
would break replay: a pooled buffer could be handed to other, eager work (or freed with the store),
and a released array would be freed while the graph still uses it. As upstream Warp does for its
own CPU capture, while a CPU capture records on this thread:

* ``TemporaryStore.borrow`` bypasses the pool: the temporary is a fresh array, which the graph owns;
* ``release()`` of a temporary is a no-op, and stays one for temporaries borrowed in the capture
  (their memory goes when both the graph and the caller have dropped them).

warp.fem is large and imported only by those who use it, so apic patches it at the first CPU capture
that begins after it has been imported (``apic.installation.ensure_native_sinks``).
"""

from __future__ import annotations

import functools
import sys

import warp as wp

from apic import _compat
from apic.record.cpu.recorder import active

_MODULE = _compat.FEM_CACHE_MODULE


def _capturing_on(device) -> bool:
    recorder = active()
    return recorder is not None and device is not None and device.is_cpu and recorder.device == device


def _keep() -> None:
    """``release()`` of a temporary borrowed during a capture: the graph owns its memory."""


def _borrow(original):
    @functools.wraps(original)
    def borrow(self, shape, dtype, pinned: bool = False, device=None, requires_grad: bool = False):
        cache = sys.modules[_MODULE]  # imported: install patched it
        dev = wp.get_device(device)
        if not _capturing_on(dev):
            return original(self, shape, dtype, pinned=pinned, device=device, requires_grad=requires_grad)
        temporary = cache.Temporary(shape=shape, dtype=dtype, pinned=pinned, device=dev, requires_grad=requires_grad)
        return cache.TemporaryStore.add_temporary_convenience_methods(temporary)

    borrow.__apic__ = True
    return borrow


def _add_methods(original):
    @functools.wraps(original)
    def add_temporary_convenience_methods(temporary):
        temporary = original(temporary)
        if _capturing_on(getattr(temporary, "device", None)):
            temporary.release = _keep
        return temporary

    return staticmethod(add_temporary_convenience_methods)


def _release(original):
    @functools.wraps(original)
    def release(temporary_ref):
        if active() is not None:
            return  # as under a wp.Tape: the capture may still use it; garbage collection frees it
        return original(temporary_ref)

    return staticmethod(release)


def install(patches) -> None:
    """Patch warp.fem's ``TemporaryStore`` if warp.fem is imported and not patched yet (idempotent)."""
    cache = sys.modules.get(_MODULE)
    if cache is None:
        return
    store = getattr(cache, "TemporaryStore", None)
    own = vars(store) if store is not None else {}
    if "borrow" not in own or getattr(own["borrow"], "__apic__", False):
        return
    patches.set(store, "borrow", _borrow(own["borrow"]))
    if "add_temporary_convenience_methods" in own:
        add = own["add_temporary_convenience_methods"].__func__
        patches.set(store, "add_temporary_convenience_methods", _add_methods(add))
    if "_release_temporary" in own:
        patches.set(store, "_release_temporary", _release(own["_release_temporary"].__func__))
