"""Where the pointers are in packed kernel arguments and array descriptors.

A CPU kernel receives its arguments as one C struct (``wp_args_<kernel>``) with natural alignment,
byte-identical to a ctypes Structure of the packed parameters. Pointers live only inside array
descriptors (``array_t``: data and grad; ``indexedarray_t``: its array and up to four index
buffers), which may sit at the top level or nested in ``@wp.struct`` values. ``args_layout``
finds them once per kernel signature; ``descriptor_pointers`` reads them out of a packed blob
together with the byte range each one reaches, which the region table needs.
"""

from __future__ import annotations

import ctypes
import functools
from dataclasses import dataclass

from apic import _compat
from apic._compat import wp_codegen, wp_context, wp_types
from apic.errors import UnsupportedOperationError
from apic.record.ops import ArraySlot, RawPtr
from apic.targets import cpu as cpu_target

_ARRAY_T = cpu_target.ARRAY_T
_INDEXED_TAIL = cpu_target.INDEXED_TAIL
_INDEX_ELEM_SIZE = cpu_target.INDEX_ELEM_SIZE
_ARRAY_T_SIZE = _compat.ARRAY_T_SIZE  # 56 in every supported version
_INDEXEDARRAY_T_SIZE = _compat.INDEXEDARRAY_T_SIZE


# Descriptor types apic does not record yet (textures exist from warp 1.12 on, under various modules).
_UNSUPPORTED_NAMES = ("fabricarray_t", "indexedfabricarray_t", "texture1d_t", "texture2d_t", "texture3d_t")
_UNSUPPORTED = tuple(
    {getattr(m, n) for m in (wp_types, wp_context) for n in _UNSUPPORTED_NAMES if isinstance(getattr(m, n, None), type)}
)


def array_slots(warp_type, ctype_cls, offset: int, arg_name: str) -> list[ArraySlot]:
    """The array descriptors inside one argument of Warp type ``warp_type`` packed as ``ctype_cls``."""
    if ctype_cls is wp_types.array_t:
        return [ArraySlot(offset, wp_types.type_size_in_bytes(warp_type.dtype), False)]
    if ctype_cls is wp_types.indexedarray_t:
        return [ArraySlot(offset, wp_types.type_size_in_bytes(warp_type.dtype), True)]
    if issubclass(ctype_cls, _UNSUPPORTED):
        raise UnsupportedOperationError(
            f"wp.launch with a {ctype_cls.__name__} argument '{arg_name}'",
            "Fabric arrays and textures are not recorded yet",
        )
    if isinstance(warp_type, wp_codegen.Struct):
        field_types = dict(ctype_cls._fields_)
        slots = []
        for name, var in warp_type.vars.items():
            field_offset = getattr(ctype_cls, name).offset
            slots += array_slots(var.type, field_types[name], offset + field_offset, f"{arg_name}.{name}")
        return slots
    return []


# 64-bit integer scalars: where a kernel receives a Mesh / Bvh / HashGrid / Volume id.
_WORD_TYPES = (ctypes.c_uint64, ctypes.c_int64)


def word_slots(warp_type, ctype_cls, offset: int) -> list[int]:
    """Offsets of the 64-bit integer scalars (``uint64``, ``int64``, ``wp.handle``) in one argument."""
    if ctype_cls in _WORD_TYPES:
        return [offset]
    if isinstance(warp_type, wp_codegen.Struct):
        field_types = dict(ctype_cls._fields_)
        found = []
        for name, var in warp_type.vars.items():
            found += word_slots(var.type, field_types[name], offset + getattr(ctype_cls, name).offset)
        return found
    return []


def handle_slots(warp_type, ctype_cls, offset: int) -> list[int]:
    """Offsets of the ``wp.handle`` scalars (which must hold a live object's id) in one argument."""
    if _compat.HANDLE_TYPE is not None and warp_type is _compat.HANDLE_TYPE:
        return [offset]
    if isinstance(warp_type, wp_codegen.Struct):
        field_types = dict(ctype_cls._fields_)
        found = []
        for name, var in warp_type.vars.items():
            found += handle_slots(var.type, field_types[name], offset + getattr(ctype_cls, name).offset)
        return found
    return []


@dataclass(frozen=True)
class ArgsLayout:
    """How one list of packed parameters becomes a ``wp_args`` blob, where its arrays are, and where
    a native handle's id may be (``words``)."""

    struct_type: type
    slots: tuple[ArraySlot, ...]
    words: tuple[int, ...] = ()
    handles: tuple[int, ...] = ()  # the words typed wp.handle

    def pack(self, params) -> bytes:
        return bytes(self.struct_type(*params))


@functools.lru_cache(maxsize=4096)
def args_layout(kernel, param_types: tuple[type, ...]) -> ArgsLayout:
    """The blob layout of ``kernel``'s argument struct for parameters of the given ctypes types."""
    fields = [(f"a{i}", t) for i, t in enumerate(param_types)] or [("_empty", ctypes.c_byte)]
    struct_type = type("ApicArgs", (ctypes.Structure,), {"_fields_": fields})
    slots, words, handle_words = [], [], []
    for i, (arg, ctype_cls) in enumerate(zip(kernel.adj.args, param_types)):
        offset = getattr(struct_type, f"a{i}").offset
        slots += array_slots(arg.type, ctype_cls, offset, arg.label)
        words += word_slots(arg.type, ctype_cls, offset)
        handle_words += handle_slots(arg.type, ctype_cls, offset)
    return ArgsLayout(struct_type, tuple(slots), tuple(words), tuple(handle_words))


def launch_dim(bounds) -> tuple[int, ...]:
    """The launch shape held by a ``launch_bounds`` struct (its layout varies by version)."""
    # An extent above 2^31 (a kernel that never reads wp.tid()) sits in a C int: read it as unsigned.
    return tuple(int(n) & 0xFFFFFFFF for n in _compat.bounds_shape(bounds))


def extent(start: int, elem_size: int, shape, strides) -> tuple[int, int]:
    """The byte range ``[lo, hi)`` that a strided view starting at ``start`` reaches."""
    if any(n == 0 for n in shape):
        return start, start
    lo = start + sum(min(0, (n - 1) * s) for n, s in zip(shape, strides))
    hi = start + sum(max(0, (n - 1) * s) for n, s in zip(shape, strides)) + elem_size
    return lo, hi


def descriptor_pointers(blob: bytes, slot: ArraySlot) -> list[tuple[int, RawPtr]]:
    """The non-null pointers of the descriptor at ``slot``: ``(offset in blob, RawPtr)`` pairs."""
    size = _INDEXEDARRAY_T_SIZE if slot.indexed else _ARRAY_T_SIZE
    descriptor = bytes(blob[slot.at : slot.at + size])
    return [(slot.at + at, ptr) for at, ptr in _pointers_of(descriptor, slot.elem_size, slot.indexed)]


@functools.lru_cache(maxsize=1 << 16)
def _pointers_of(descriptor: bytes, elem_size: int, indexed: bool) -> tuple[tuple[int, RawPtr], ...]:
    # Memoised on the descriptor bytes: a simulation passes the same arrays launch after launch.
    data, grad, *rest = _ARRAY_T.unpack_from(descriptor, 0)
    shape, strides, ndim = rest[0:4], rest[4:8], rest[8]
    shape, strides = shape[:ndim], strides[:ndim]
    found = []
    for field_offset, address in zip(cpu_target.ARRAY_T_POINTER_SLOTS, (data, grad)):
        if address:
            lo, hi = extent(address, elem_size, shape, strides)
            found.append((field_offset, RawPtr(address, lo, hi)))
    if indexed:
        tail = _INDEXED_TAIL.unpack_from(descriptor, _ARRAY_T_SIZE)
        indices, index_shape = tail[:4], tail[4:]
        for i, address in enumerate(indices):
            if address:
                found.append(
                    (_ARRAY_T_SIZE + 8 * i, RawPtr(address, address, address + _INDEX_ELEM_SIZE * index_shape[i]))
                )
    return tuple(found)


def blob_pointers(blob: bytes, slots) -> tuple[tuple[int, RawPtr], ...]:
    """All pointers of all descriptors at ``slots`` in ``blob``."""
    found = []
    for slot in slots:
        found += descriptor_pointers(blob, slot)
    return tuple(found)

