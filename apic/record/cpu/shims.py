"""The Python-level shims of a CPU capture, and their installation (with the launch shims'), on warp.

The shims of ``wp.copy``, ``array.zero_/fill_``, ``array._init_new/_init_from_data``, reads such as
``array.numpy``, and the ``wp.utils`` functions that end in a recorded native call tell the recorder
which Python objects an operation uses, so it can keep them alive and know whole allocations, then
call Warp's own code unchanged. The launch shims are ``apic.record.cpu.launch_shims``; the native sinks,
which record what reaches Warp's native code, ``apic.record.cpu.native_sinks``.
"""

from __future__ import annotations

import functools
import inspect
import sys

import warp as wp

from apic import _compat
from apic._compat import wp_context, wp_types
from apic.errors import CaptureError, UnsupportedOperationError
from apic.record.cpu import launch_shims, segmented_sort_checks
from apic.record.cpu.active_recorder import active, paused

_originals: dict[str, object] = {}  # Warp's functions the shims call, saved by ``patch``


def _recorded_call(recorder, original, args, kwargs):
    """Run Warp's own implementation with its native memory calls recorded."""
    recorder.api_depth += 1
    try:
        return original(*args, **kwargs)
    finally:
        recorder.api_depth -= 1


def _copy(*args, **kwargs):
    recorder = active()
    if recorder is None:
        return _originals["copy"](*args, **kwargs)
    call = _COPY_SIGNATURE.bind(*args, **kwargs).arguments
    dest, src = call.get("dest"), call.get("src")
    on_cpu = [a.device.is_cpu for a in (dest, src) if hasattr(a, "device")]
    if not any(on_cpu):
        return _originals["copy"](*args, **kwargs)  # a copy between CUDA arrays is not ours to record
    if not all(on_cpu):
        raise UnsupportedOperationError(
            f"wp.copy from {src.device} to {dest.device}", "a CPU capture records host-to-host copies only"
        )
    recorder.note_values([dest, src])
    return _recorded_call(recorder, _originals["copy"], args, kwargs)


def _array_method(name: str, cls: type):
    original = vars(cls)[name]

    @functools.wraps(original)
    def shim(self, *args, **kwargs):
        recorder = active()
        if recorder is None or not self.device.is_cpu:
            return original(self, *args, **kwargs)
        recorder.note_values([self])
        return _recorded_call(recorder, original, (self, *args), kwargs)

    return shim


def _init_new(self, *args, **kwargs):
    result = _originals["array._init_new"](self, *args, **kwargs)
    recorder = active()
    if recorder is not None and self.device is not None and self.device.is_cpu:
        recorder.record_alloc(self)
    return result


def _init_from_data(self, data, dtype, shape, device, copy, pinned):
    recorder = active()
    if recorder is None or not (copy or pinned) or not wp.get_device(device).is_cpu:
        return _originals["array._init_from_data"](self, data, dtype, shape, device, copy, pinned)
    # Warp would convert ``data`` to a temporary NumPy array and wp.copy from a view that does not
    # keep it alive, so the graph would replay a copy from freed memory. Make the source a view
    # that owns its memory (``copy=False`` keeps it in ``_ref``) and copy from it as Warp does:
    # the recorded copy then keeps the source alive.
    host = wp_types.array(data, dtype=dtype, shape=shape, device="cpu", copy=False)
    self._init_new(host.dtype, host.shape, None, device, pinned)
    wp.copy(self, host)


def _read_guard(name: str, cls: type):
    original = vars(cls)[name]

    @functools.wraps(original)
    def shim(self, *args, **kwargs):
        recorder = active()
        if recorder is None or not self.device.is_cpu:
            return original(self, *args, **kwargs)
        if recorder.touches(self):
            raise CaptureError(
                f"array.{name}() reads an array during a CPU capture, before the captured work has run; "
                "read it after wp.capture_launch()"
            )
        # Memory the capture never used reads as it would eagerly. Warp may read through a temporary
        # copy (indexed arrays): that copy must run now, not be recorded into the graph.
        with paused():
            return original(self, *args, **kwargs)

    return shim


# wp.utils functions that end in a recorded native call (see apic.record.natives), and the parameter
# whose None asks for a host return value, which a record-only capture cannot produce.
_UTILITIES = {
    "array_scan": None, "radix_sort_pairs": None, "segmented_sort_pairs": None,
    "runlength_encode": "run_count", "array_sum": "out", "array_inner": "out",
}


def _utility(name: str, original):
    host_return = _UTILITIES[name]
    signature = inspect.signature(original)

    @functools.wraps(original)
    def shim(*args, **kwargs):
        recorder = active()
        if recorder is None:
            return original(*args, **kwargs)
        arrays = [v for v in (*args, *kwargs.values()) if isinstance(v, wp_types.array)]
        if not any(a.device.is_cpu for a in arrays):
            return original(*args, **kwargs)  # CUDA work is not ours to record
        _check_count(name, signature, args, kwargs)
        if host_return is not None and signature.bind(*args, **kwargs).arguments.get(host_return) is None:
            if name == "runlength_encode" and _no_values(signature, args, kwargs):
                return original(*args, **kwargs)  # returns 0 without touching memory, as upstream records it
            # upstream's words ("requires array_sum() to receive an explicit out array") and apic's reason
            raise UnsupportedOperationError(
                f"wp.utils.{name}() without {host_return}",
                f"its host return value would be read before the captured work has run; pass an explicit "
                f"{host_return} array ({host_return}=)",
            )
        if any(stride < 0 for a in arrays for stride in a.strides):
            raise UnsupportedOperationError(f"wp.utils.{name}() on an array with negative strides")
        if name == "segmented_sort_pairs" and not segmented_sort_checks.check(
                signature.bind(*args, **kwargs).arguments):
            return None  # as upstream 1.19: no element or no segment, nothing to sort and nothing recorded
        recorder.note_values(arrays)
        return _recorded_call(recorder, original, args, kwargs)

    return shim


# The element-count parameter of the reductions: a negative one is refused as upstream refuses it.
_COUNTS = {"array_sum": "value_count", "array_inner": "count"}


def _check_count(name: str, signature, args, kwargs) -> None:
    """Refuse a negative element count with a ``RuntimeError``, as upstream's CPU capture does (eager Warp
    hands it to native code as it is)."""
    count = signature.bind(*args, **kwargs).arguments.get(_COUNTS.get(name, ""))
    if isinstance(count, int) and count < 0:
        raise CaptureError(f"wp.utils.{name}() was given a negative count ({_COUNTS[name]}={count}) during a CPU "
                           "APIC graph capture; pass a count of 0 or more")


def _no_values(signature, args, kwargs) -> bool:
    """Whether a ``runlength_encode`` call encodes no value (``value_count=0``, or an empty ``values``)."""
    call = signature.bind(*args, **kwargs).arguments
    count = call.get("value_count")
    return (count if count is not None else getattr(call.get("values"), "size", 1)) == 0


def _array_classes():
    """Warp's array classes that define their own ``zero_``/``fill_`` (indexed, fixed, fabric...)."""
    classes = []
    for value in vars(wp_types).values():
        if isinstance(value, type) and ("zero_" in vars(value) or "fill_" in vars(value)):
            classes.append(value)
    return classes


def patch(patches) -> None:
    """Put the Python-level shims over Warp's functions and methods, recording each change in ``patches``."""
    global _COPY_SIGNATURE
    launch_shims.patch(patches)
    _originals["copy"] = wp_context.copy
    _originals["array._init_new"] = vars(wp_types.array)["_init_new"]
    _originals["array._init_from_data"] = vars(wp_types.array)["_init_from_data"]
    _COPY_SIGNATURE = inspect.signature(wp_context.copy)

    for owner in (wp, wp_context):
        patches.set(owner, "copy", functools.wraps(_originals["copy"])(_copy))
    patches.set(wp_types.array, "_init_new", _init_new)
    patches.set(wp_types.array, "_init_from_data", _init_from_data)
    for cls in _array_classes():
        for name in ("zero_", "fill_"):
            if name in vars(cls):
                patches.set(cls, name, _array_method(name, cls))
        for name in ("numpy", "list"):
            if name in vars(cls):
                patches.set(cls, name, _read_guard(name, cls))
    # Warp modules imported before apic (warp.fem, warp.optim, ...) hold their own names for these
    # functions: point every one at the shim, so `import apic` after them behaves as before them.
    owners = [m for key, m in list(sys.modules.items()) if m is not None and (key == "warp" or key.startswith("warp."))]
    for name in _UTILITIES:
        original = vars(_compat.wp_utils)[name]
        shim = _utility(name, original)
        for owner in owners:
            if vars(owner).get(name) is original:
                patches.set(owner, name, shim)
