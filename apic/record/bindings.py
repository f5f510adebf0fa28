"""Named bindings: the arrays a saved graph exposes by name (``inputs`` / ``outputs`` of capture_save).

A binding is a typed view into one region of the graph: where it starts (``region``, ``offset``),
how many bytes it covers, and the Warp dtype, shape and byte strides of the array it was made
from. ``set_param`` / ``get_param`` copy between a binding and a user array after checking the
name, dtype, shape and size, which upstream Warp checks only as a byte count.
"""

from __future__ import annotations

import ctypes
import math
import numbers
from dataclasses import dataclass

import numpy as np

from apic._compat import wp_types
from apic._text import short_repr
from apic.errors import BindingError
from apic.record.layout import extent


@dataclass(frozen=True)
class Binding:
    """One named view into a region of a graph (see docs/FORMAT.md, ``bindings``)."""

    name: str
    kind: str  # "input" or "output"
    region: int
    offset: int  # byte offset of the first element inside the region
    nbytes: int  # number of bytes of the elements (size * elem_size)
    dtype: str  # Warp dtype name, e.g. "float32", "vec3f"
    shape: tuple[int, ...]
    strides: tuple[int, ...]  # byte strides
    elem_size: int
    np_dtype: str | None  # NumPy scalar dtype of the elements ("<f4"), None for structs
    elem_shape: tuple[int, ...]  # shape of one element in np_dtype scalars (vec3f: (3,))

    def extent(self) -> tuple[int, int]:
        """The byte range ``[lo, hi)`` of the region the view can reach, relative to the region."""
        return extent(self.offset, self.elem_size, self.shape, self.strides)

    def describe(self) -> dict:
        """What ``Graph.params`` reports for this binding (upstream's ``size`` plus apic's details)."""
        return {
            "size": self.nbytes,
            "kind": self.kind,
            "dtype": self.dtype,
            "shape": tuple(self.shape),
            "strides": tuple(self.strides),
        }


# --- Warp arrays ------------------------------------------------------------------------------------
def dtype_name(dtype) -> str:
    """A stable name for a Warp dtype ("float32", "vec3f", "bool", "module.Struct")."""
    if dtype is wp_types.bool or dtype is bool:
        return "bool"
    return wp_types.type_repr(dtype)


def numpy_layout(dtype) -> tuple[str | None, tuple[int, ...]]:
    """The NumPy scalar dtype (``dtype.str``) and element shape of a Warp dtype; (None, ()) for structs."""
    scalar = getattr(dtype, "_wp_scalar_type_", dtype)
    np_type = wp_types.warp_type_to_np_dtype.get(scalar)
    if np_type is None:
        return None, ()
    return np.dtype(np_type).str, tuple(int(n) for n in getattr(dtype, "_shape_", ()))


def is_warp_array(value) -> bool:
    return isinstance(value, wp_types.array)


def array_facts(arr) -> tuple[int, int, tuple[int, ...], tuple[int, ...]]:
    """``(ptr, elem_size, shape, strides)`` of a Warp array (ptr 0 for an empty one)."""
    return (
        int(arr.ptr or 0),
        wp_types.type_size_in_bytes(arr.dtype),
        tuple(int(n) for n in arr.shape),
        tuple(int(s) for s in arr.strides),
    )


def make_binding(name, kind: str, arr, regions, region_addresses, device=None) -> Binding:
    """The binding of ``arr`` under ``name``: it must lie inside one region of the graph, and on the
    graph's ``device`` (None: a CPU graph, which binds CPU arrays)."""
    if not isinstance(name, str) or not name:
        raise BindingError(f"binding names must be non-empty strings, got {name!r}")
    if not is_warp_array(arr):
        raise TypeError(f"{kind} '{name}' must be a Warp array, got {type(arr).__name__}")
    if device is None and not arr.device.is_cpu:
        raise ValueError(f"{kind} '{name}' is on {arr.device}; an apic graph binds CPU arrays only")
    if device is not None and arr.device != device:
        raise ValueError(f"{kind} '{name}' is on {arr.device}; the graph is on {device}")
    ptr, elem_size, shape, strides = array_facts(arr)
    lo, hi = extent(ptr, elem_size, shape, strides)
    for region, base in zip(regions, region_addresses):
        if ptr and base <= lo and hi <= base + region.nbytes:
            np_dtype, elem_shape = numpy_layout(arr.dtype)
            return Binding(
                name=name, kind=kind, region=region.id, offset=ptr - base,
                nbytes=math.prod(shape) * elem_size, dtype=dtype_name(arr.dtype), shape=shape, strides=strides,
                elem_size=elem_size, np_dtype=np_dtype, elem_shape=elem_shape,
            )
    raise BindingError(
        f"{kind} '{name}' ({dtype_name(arr.dtype)}, shape {shape}) is not memory this graph uses: "
        "bind only arrays that the captured operations read or write"
    )


def check_array(binding: Binding, arr, method: str, cpu_only: bool = True) -> None:
    """Refuse ``arr`` for ``binding`` unless its dtype, shape and size match, with a clear message (and,
    ``cpu_only``, for a CPU graph, unless it is on the CPU; a CUDA graph copies from either)."""
    where = f"{method}('{binding.name}')"
    if not is_warp_array(arr):
        raise TypeError(f"{where}: expected a Warp array, got {type(arr).__name__}")
    if cpu_only and not arr.device.is_cpu:
        raise ValueError(f"{where}: the array is on {arr.device}, the graph is on cpu")
    got = dtype_name(arr.dtype)
    problems = []
    if got != binding.dtype:
        problems.append(f"dtype {got} (expected {binding.dtype})")
    if tuple(arr.shape) != tuple(binding.shape):
        problems.append(f"shape {tuple(arr.shape)} (expected {tuple(binding.shape)})")
    _, elem_size, shape, _ = array_facts(arr)
    nbytes = math.prod(shape) * elem_size
    if nbytes != binding.nbytes:
        problems.append(f"{nbytes} bytes (expected {binding.nbytes})")
    if problems:
        raise BindingError(f"{where}: the array does not match the binding: " + ", ".join(problems))


# --- copies -----------------------------------------------------------------------------------------
def raw_view(address: int, elem_size: int, shape, strides) -> np.ndarray:
    """A writable NumPy view of a strided array of opaque ``elem_size``-byte elements at ``address``."""
    lo, hi = extent(address, elem_size, shape, strides)
    if hi == lo:
        return np.empty(shape, dtype=np.dtype((np.void, elem_size)))
    buffer = (ctypes.c_uint8 * (hi - lo)).from_address(lo)
    return np.ndarray(shape, dtype=np.dtype((np.void, elem_size)), buffer=buffer, offset=address - lo, strides=strides)


def binding_view(binding: Binding, region_address: int) -> np.ndarray:
    """A raw (opaque elements) view of the binding's memory."""
    return raw_view(region_address + binding.offset, binding.elem_size, binding.shape, binding.strides)


def typed_view(binding: Binding, region_address: int, owner=None) -> np.ndarray:
    """A typed NumPy view (``shape + elem_shape`` of ``np_dtype``) of the binding's memory.

    ``owner`` (the graph) is kept alive by the view, so the view stays valid after the user drops it.
    """
    if binding.np_dtype is None:
        raise BindingError(f"binding '{binding.name}' has dtype {binding.dtype}, which has no NumPy equivalent")
    dtype = np.dtype(binding.np_dtype)
    inner, step = [], dtype.itemsize
    for n in reversed(binding.elem_shape):
        inner.insert(0, step)
        step *= n
    shape = tuple(binding.shape) + tuple(binding.elem_shape)
    start = region_address + binding.offset
    lo, hi = extent(start, binding.elem_size, binding.shape, binding.strides)
    if hi == lo:
        return np.zeros(shape, dtype=dtype)
    buffer = (ctypes.c_uint8 * (hi - lo)).from_address(lo)
    buffer.apic_owner = owner  # the view's .base chain ends at this buffer: it keeps the graph's memory alive
    strides = tuple(binding.strides) + tuple(inner)
    return np.ndarray(shape, dtype=dtype, buffer=buffer, offset=start - lo, strides=strides)


def array_view(arr) -> np.ndarray:
    """A raw (opaque elements) view of a Warp array's memory."""
    ptr, elem_size, shape, strides = array_facts(arr)
    if not ptr:
        return np.empty(shape, dtype=np.dtype((np.void, elem_size)))
    return raw_view(ptr, elem_size, shape, strides)


# --- user arrays: read-only destinations, array-like sources ---------------------------------------
def check_writable(arr, where: str) -> None:
    """Refuse a destination whose memory is read-only: a NumPy array with ``writeable=False``, or a
    Warp array made over one (``wp.array(ro, copy=False)`` and its views, found through ``_ref``)."""
    seen = arr
    for _ in range(64):  # a Warp view refers to its parent; the chain ends at the memory's owner
        if isinstance(seen, np.ndarray):
            if not seen.flags.writeable:
                raise BindingError(f"{where}: the destination array is read-only (writeable=False)")
            return
        if isinstance(seen, memoryview):
            if seen.readonly:
                raise BindingError(f"{where}: the destination array is read-only")
            return
        seen = getattr(seen, "_ref", None)
        if seen is None:
            return


def claimed_shape(value) -> tuple[int, ...] | None:
    """The shape ``value`` says it has, found without converting or copying it: the ``shape`` of an array
    (NumPy, torch, memoryview, anything with a tuple of integers there), or a nested list's lengths
    along its first items when they end in a number (or an array: its shape follows); None when it says
    nothing.

    Conversion checks the real shape afterwards (a ragged list); this only lets a caller refuse a value of
    the wrong size before converting millions of elements."""
    shape = getattr(value, "shape", None)
    if isinstance(shape, tuple) and all(isinstance(n, int) for n in shape):
        return tuple(int(n) for n in shape)
    if not isinstance(value, (list, tuple)):
        return None
    dims = []
    item = value
    while isinstance(item, (list, tuple)):
        dims.append(len(item))
        if not item:
            return tuple(dims)
        item = item[0]
    if isinstance(item, (numbers.Number, str, bytes)):  # a scalar leaf (NumPy scalars are Numbers)
        return tuple(dims)
    inner = getattr(item, "shape", None)
    if isinstance(inner, tuple) and all(isinstance(n, int) for n in inner):  # a list of arrays
        return tuple(dims) + tuple(int(n) for n in inner)
    return None  # a leaf NumPy may read as a sequence (a Warp vector): let the conversion find out


def _check_claimed(value, expected: tuple, np_dtype: np.dtype, where: str) -> None:
    """Refuse ``value`` if the shape or NumPy dtype it says it has already cannot match: before any copy."""
    claimed = claimed_shape(value)
    if claimed is not None and claimed != expected:
        raise BindingError(f"{where}: shape {claimed} (expected {expected})")
    dtype = getattr(value, "dtype", None)
    if isinstance(dtype, np.dtype):
        _check_cast(dtype, np_dtype, where)


def _check_cast(dtype: np.dtype, np_dtype: np.dtype, where: str) -> None:
    """Refuse an array of ``dtype`` for a binding of ``np_dtype`` unless every value converts exactly
    (NumPy's ``safe`` casting: float32 into float64, int16 into int32, never float64 into float32)."""
    if not np.can_cast(dtype, np_dtype, casting="safe"):
        raise BindingError(f"{where}: dtype {dtype} (expected {np_dtype}; an array is converted only where every "
                           f"value converts exactly: convert it to {np_dtype} first)")


def array_like_copy(binding: Binding, value, where: str) -> np.ndarray:
    """A new NumPy array holding ``value`` (NumPy, list, memoryview, torch tensor, anything
    ``np.array`` takes) with the binding's element type and ``shape + elem_shape``; always a copy, so
    the graph never aliases the caller's memory. The shape and dtype ``value`` says it has are checked
    first, so a value of the wrong size is refused without being converted. An array's dtype converts only
    where every value converts exactly (float32 into a float64 binding, not float64 into float32); a list's
    numbers are converted as ``np.array(value).astype(dtype)`` does, an integer that does not fit refused."""
    if binding.np_dtype is None:
        raise BindingError(f"{where}: binding dtype {binding.dtype} has no NumPy equivalent; pass a Warp array")
    expected = tuple(binding.shape) + tuple(binding.elem_shape)
    target = np.dtype(binding.np_dtype)
    _check_claimed(value, expected, target, where)
    if hasattr(value, "detach") and hasattr(value, "cpu"):  # a torch tensor (maybe on a GPU or needing grad)
        value = value.detach().cpu().numpy()
    # an array (NumPy, torch, a memoryview: anything with its own element type) keeps its dtype's meaning;
    # nested lists and Python numbers have none, and are read as NumPy reads them, then converted
    typed = not isinstance(value, (list, tuple, numbers.Number))
    try:
        source = np.array(value, copy=True)
    except (ValueError, TypeError) as error:  # a ragged nesting, an object NumPy cannot read
        raise BindingError(f"{where}: cannot read {short_repr(value)} as an array: {error}") from None
    if source.shape != expected:
        raise BindingError(f"{where}: shape {source.shape} (expected {expected})")
    if source.dtype != target:
        if typed:  # an array's own dtype: converted only where exact (never narrowed silently)
            _check_cast(source.dtype, target, where)
        elif not np.can_cast(source.dtype, target, casting="same_kind"):
            raise BindingError(f"{where}: dtype {source.dtype} (expected {target})")
        converted = source.astype(target)
        if not typed and target.kind in "iub" and not np.array_equal(converted, source):
            raise BindingError(f"{where}: {short_repr(value)} holds values a {target} cannot hold")
        source = converted
    return source
