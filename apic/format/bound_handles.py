"""Handles a binding's dtype types: the ``wp.handle`` fields of the named arrays of a save.

``capture_save(g, path, outputs={"h": h})`` where ``h``'s dtype is ``wp.handle`` or a ``@wp.struct``
with a ``wp.handle`` field (nested or not): each such field is a handle by its type, as upstream Warp
reads it. One that holds the id of a live Mesh, Bvh, HashGrid or Volume is saved as a handle
relocation, so a load writes the new process's id into it; an object the capture never reached is
recorded at the save (its arrays become graph memory, as a capture would make them).

What a binding types is known only at the save, and only for memory no captured operation uses (the
extra regions of ``apic.format.unrecorded_bindings``): there the types decide, and a word that no binding
types as a handle (a plain ``uint64`` view of the same memory) keeps its number, even one equal to
the id. Memory the captured operations use may be read by a kernel through any type, so there the
untyped rule of ``apic.record.handles`` stays: a word equal to a graph handle's id is that handle.
"""

from __future__ import annotations

import ctypes

import numpy as np

from apic import _compat
from apic.record.bindings import array_facts, is_warp_array
from apic.record import handles as rec_handles
from apic.record import layout


def handle_offsets(dtype) -> tuple[int, ...]:
    """Byte offsets of the ``wp.handle`` words in one element of ``dtype`` (none where Warp has no such type)."""
    if _compat.HANDLE_TYPE is None:
        return ()
    return tuple(layout.handle_slots(dtype, getattr(dtype, "ctype", None), 0))


def _element_offsets(shape, strides) -> np.ndarray:
    """Byte offset of every element of a strided view from its first element."""
    offsets = np.zeros(1, dtype=np.int64)
    for n, stride in zip(shape, strides):
        offsets = (offsets[:, None] + np.arange(n, dtype=np.int64) * stride).ravel()
    return offsets


def _read_words(addresses: np.ndarray) -> np.ndarray:
    """The 64-bit little-endian words at ``addresses`` (live CPU memory of one array's extent)."""
    lo, hi = int(addresses.min()), int(addresses.max()) + 8
    memory = np.frombuffer((ctypes.c_uint8 * (hi - lo)).from_address(lo), dtype=np.uint8)
    return memory[(addresses - lo)[:, None] + np.arange(8)].view("<u8").ravel()


def typed_words(named) -> tuple[np.ndarray, np.ndarray]:
    """``(addresses, values)``, sorted by address, of every ``wp.handle`` word of the named CPU arrays
    (``named``: ``(kind, name, array)``); a word two overlapping views type is listed once."""
    addresses, values = [np.empty(0, dtype=np.int64)], [np.empty(0, dtype=np.uint64)]
    for _, _, arr in named:
        if not is_warp_array(arr) or not arr.device.is_cpu:
            continue  # make_binding refuses it, saying why
        fields = handle_offsets(arr.dtype)
        ptr, _, shape, strides = array_facts(arr)
        if not fields or not ptr or 0 in shape:
            continue
        at = (ptr + _element_offsets(shape, strides)[:, None] + np.array(fields, dtype=np.int64)[None, :]).ravel()
        addresses.append(at)
        values.append(_read_words(at))
    at, first = np.unique(np.concatenate(addresses), return_index=True)
    return at, np.concatenate(values)[first]


def unknown_objects(values: np.ndarray, known_ids) -> list:
    """The live Mesh / Bvh / HashGrid / Volume objects whose ids ``values`` hold, other than ``known_ids``.

    A value that is no live object's id (0, a stale id, a number) names nothing and is left as it is.
    """
    known = set(known_ids)
    found = []
    for value in np.unique(values).tolist():
        obj = rec_handles.lookup(value) if value and value not in known else None
        if obj is not None:
            found.append(obj)
    return found


def array_ranges(obj) -> list[tuple[int, int, str]]:
    """``(lo, hi, what)`` of each array a handle object was built over (what a load rebuilds it from)."""
    kind = rec_handles.kind_of(obj)
    found = []
    for name, arr in rec_handles.handle_arrays(kind, obj):
        if arr is not None and arr.ptr:
            nbytes = arr.size * _compat.wp_types.type_size_in_bytes(arr.dtype)
            found.append((int(arr.ptr), int(arr.ptr) + nbytes, f"the {name} of a wp.{kind} a binding holds"))
    return found


def slots_in(region, base: int, addresses: np.ndarray, values: np.ndarray, index: dict) -> list | None:
    """``[[region, offset, handle]]`` of the typed words inside ``region`` (at ``base``) that hold the id of a
    handle of ``index`` (id -> handle index); None if no binding types a word of it as a handle."""
    inside = (addresses >= base) & (addresses < base + region.nbytes)
    if not inside.any():
        return None
    return [[region.id, int(at) - base, index[int(value)]]
            for at, value in zip(addresses[inside], values[inside]) if int(value) in index]
