"""Native utility calls reached without a Python API apic wraps: find and keep the arrays they use.

Libraries built on Warp call its native host utilities themselves (a solver calling
``runtime.core.wp_array_inner_float_host(a.ptr, b.ptr, out.ptr + k * stride, n, ...)``), or call a
``wp.utils`` function they bound before ``import apic``. Upstream Warp records such calls at the
native layer, whatever Python made them; so does apic. The wp.utils path notes the Warp arrays it is
given (the graph keeps them alive, and a region is a whole allocation); here only raw addresses are
known, so each pointer argument must lie, with every byte the call reaches from it, inside the
memory of one live Warp CPU array: that array is then noted as the wp.utils path would note it. A
pointer into anything else (NumPy memory, a freed or foreign buffer) is refused with an error naming
the native, before anything is recorded.
"""

from __future__ import annotations

import bisect
import ctypes
import gc
import weakref

from apic._compat import wp_types
from apic.errors import UnsupportedOperationError
from apic.record import handles, natives
from apic.targets import cpu as cpu_target

# recorder -> sorted (start, end, weak reference to the array) over the live CPU arrays seen (rebuilt on a miss)
_indexes: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _span(arr) -> tuple[int, int] | None:
    """The bytes ``[start, end)`` a live CPU Warp array's memory covers, or None."""
    ptr = getattr(arr, "ptr", None)
    device = getattr(arr, "device", None)
    if not ptr or device is None or not device.is_cpu:
        return None
    capacity = getattr(arr, "capacity", 0) or 0
    return (ptr, ptr + capacity) if capacity > 0 else None


def _build_index(recorder) -> list:
    """Every live CPU Warp array: those the capture keeps, then every other one the garbage collector tracks."""
    spans = []
    candidates = [v for v in recorder.keepalive if isinstance(v, wp_types.array)]
    # A pointer may lead to an array the capture has not seen yet (made before it, or bound by a library):
    # the collector tracks every array object, so a scan finds it. Run only on a miss, once per miss.
    # type(), not isinstance(): isinstance reads __class__, which some lazy objects (module proxies) answer
    # with a warning or an import.
    array_cls = wp_types.array
    candidates += [o for o in gc.get_objects() if issubclass(type(o), array_cls)]
    for arr in candidates:
        span = _span(arr)
        if span is not None:
            spans.append((span[0], span[1], weakref.ref(arr)))  # the index must not keep arrays alive
    spans.sort(key=lambda s: (s[0], s[1]))
    return spans


def _find(spans: list, lo: int, hi: int):
    """An array whose memory holds ``[lo, hi)`` (an empty access: ``lo`` inside it or at its end)."""
    i = bisect.bisect_right(spans, (lo, float("inf")))  # spans starting at or before lo
    for start, end, ref in reversed(spans[:i]):  # views and their roots overlap: any enclosing one will do
        arr = ref() if hi <= end and lo <= end else None
        if arr is not None and _span(arr) == (start, end):  # alive, and still over the same memory
            return arr
    return None


def note_arguments(recorder, name: str, args: tuple) -> None:
    """Before ``wp_<name>(*args)`` (integers) is recorded without an API: note the arrays it reaches.

    Raises ``UnsupportedOperationError`` naming the native if a pointer argument is not inside the
    memory of a live Warp CPU array (with all the bytes the call reaches from it).
    """
    args, sig, _ = natives.recorded_call(name, args)  # refuses what record_native_call would refuse
    reached = [
        (position, value, nbytes or 0)
        for position, (kind, value, nbytes) in enumerate(zip(sig.params, args, sig.reach(args)))
        if kind != natives.INT and value  # an optional pointer left null reaches nothing
    ]
    _note_ranges(recorder, name, reached)


# Host memory functions: the pointer arguments each reaches, as (position, bytes from the arguments).
_MEMORY_REACH = {
    "memcpy_h2h": lambda a: ((0, a[2]), (1, a[2])),  # (dst, src, n)
    "memset_host": lambda a: ((0, a[2]),),  # (dst, value, n)
    "memtile_host": lambda a: ((0, a[2] * a[3]),),  # (dst, src, srcsize, reps): src is a value, copied at capture
}


def note_memory_arguments(recorder, name: str, args: tuple) -> None:
    """``note_arguments`` for a host memory function (memcpy, memset, memtile) called without wp.copy / fill_."""
    reach = _MEMORY_REACH.get(name)
    if reach is None:
        raise UnsupportedOperationError(
            f"wp_{name} (native)", "apic records it only when called through wp.copy, array.zero_ or array.fill_"
        )
    args = tuple(int(a) for a in args)
    if any(nbytes < 0 for _, nbytes in reach(args)):
        raise UnsupportedOperationError(f"wp_{name} (native)", "a negative size")
    _note_ranges(recorder, name, [(i, args[i], nbytes) for i, nbytes in reach(args) if nbytes > 0])


def note_handle_arguments(recorder, name: str, args: tuple) -> None:
    """``note_arguments`` for a native method of a Mesh, Bvh or HashGrid called without its Python method
    (``runtime.core.wp_bvh_refit_host(bvh.id)``), as upstream records it at the native layer.

    The handle must be a live Warp object (``Recorder.record_handle_call`` refuses any other id); a hash
    grid build's points, read through the array descriptor it is given, must lie in a live Warp CPU array.
    """
    if name != cpu_target.HASH_GRID_BUILD:
        return
    elem_size = handles.GRID_POINT_SIZES.get(int(args[1]))
    if elem_size is None or not int(args[3]):
        return  # record_handle_call refuses it with the reason
    reached = [_descriptor_reach(name, 3, int(args[3]), elem_size)]
    if len(args) > 4 and int(args[4]):  # warp 1.19: the groups, one int32 per point
        reached.append(_descriptor_reach(name, 4, int(args[4]), 4))
    _note_ranges(recorder, name, [r for r in reached if r[2]])


def _descriptor_reach(name: str, position: int, address: int, elem_size: int) -> tuple:
    """``(position, data, bytes)`` a 1-d ``array_t`` descriptor at ``address`` gives the native code."""
    data, _, *dims, _ = cpu_target.ARRAY_T.unpack_from(ctypes.string_at(address, cpu_target.ARRAY_T.size))
    count, stride = dims[0], dims[4]
    if count < 0 or stride < 0:
        raise UnsupportedOperationError(f"wp_{name} (native)", f"argument {position}: an array of negative "
                                        "shape or stride")
    return position, data, 0 if count == 0 else (count - 1) * stride + elem_size


def _note_ranges(recorder, name: str, reached: list) -> None:
    spans = _indexes.get(recorder)
    for position, value, nbytes in reached:
        lo, hi = value, value + nbytes
        found = _find(spans, lo, hi) if spans is not None else None
        if found is None:
            spans = _indexes[recorder] = _build_index(recorder)
            found = _find(spans, lo, hi)
        if found is None:
            raise UnsupportedOperationError(
                f"wp_{name} (native)",
                f"argument {position} ({value:#x}, reaching {nbytes} bytes) is not inside the memory of a live "
                "Warp CPU array; apic records a native call made outside its Warp API only on Warp arrays' memory",
            )
        recorder.note_values([found])
