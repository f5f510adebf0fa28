"""Capture-time address translation of recorded ops (:mod:`apic.record.ops`): the raw addresses a capture
records (``RawPtr``, ``RawBlob``, ``RawHandle``) become region references once the region table is final
(``resolve_op``), and back (``unresolve_op``, to record a finished graph into another capture)."""

from __future__ import annotations

import dataclasses
import functools
from typing import Callable

from apic.record.ops import Blob, HandleRef, RawBlob, RawHandle, RawPtr, Ref, Reloc


@functools.lru_cache(maxsize=None)
def _field_names(op_type: type) -> tuple[str, ...]:
    return tuple(field.name for field in dataclasses.fields(op_type))


def raw_pointers(op) -> list[RawPtr]:
    """Every ``RawPtr`` an op holds, directly or inside its blobs."""
    found = []
    for name in _field_names(type(op)):
        value = getattr(op, name)
        if isinstance(value, RawPtr):
            found.append(value)
        elif isinstance(value, RawBlob):
            found.extend(ptr for _, ptr in value.pointers if isinstance(ptr, RawPtr))
        elif type(value) is tuple:  # NativeCall.args (a RawPtr is a tuple too, handled above)
            found.extend(v for v in value if isinstance(v, RawPtr))
    return found


def intern_op(op, interned: dict, ranges):
    """The one shared instance of ``op`` in a capture; the first time an op is seen, the memory it
    uses is noted in ``ranges`` (a ``RegionTableBuilder``). Equal ops (a fill or copy repeated every
    step) share one immutable object, so saving, loading and lowering handle each distinct op once."""
    shared = interned.setdefault(op, op)
    if shared is op:
        for ptr in raw_pointers(op):
            ranges.note(ptr.lo, ptr.hi, used=True)
    return shared


def resolve_ops(ops, resolve: Callable[[int], Ref], handle: Callable[[int], HandleRef] | None = None) -> tuple:
    """``resolve_op`` over a captured op sequence; ops shared in it stay shared (resolved once)."""
    resolved: dict[int, object] = {}
    out = []
    for op in ops:
        done = resolved.get(id(op))
        if done is None:
            done = resolved[id(op)] = resolve_op(op, resolve, handle)
        out.append(done)
    return tuple(out)


def resolve_op(op, resolve: Callable[[int], Ref], handle: Callable[[int], HandleRef] | None = None):
    """Replace the raw addresses of a captured op by region references (and handle ids by ``handle(id)``)."""

    def target(ptr):
        return handle(ptr) if isinstance(ptr, RawHandle) else resolve(ptr.address)

    changes = {}
    for name in _field_names(type(op)):
        value = getattr(op, name)
        if isinstance(value, RawPtr):
            changes[name] = resolve(value.address)
        elif isinstance(value, RawHandle):
            changes[name] = handle(value)
        elif isinstance(value, RawBlob):
            relocs = tuple(Reloc(at, target(ptr)) for at, ptr in value.pointers)
            changes[name] = Blob(value.data, relocs, value.arrays, value.params)
        elif type(value) is tuple and any(isinstance(v, RawPtr) for v in value):
            changes[name] = tuple(resolve(v.address) if isinstance(v, RawPtr) else v for v in value)
    return dataclasses.replace(op, **changes) if changes else op


def unresolve_op(op, address_of: Callable[[Ref], int], param_values: dict | None = None):
    """The inverse of ``resolve_op``: region references back to live addresses (``RawPtr``/``RawBlob``).

    Used to record a finished graph into another capture. The byte ranges of the ``RawPtr`` are
    empty: the caller notes the graph's regions whole. ``address_of`` also gives a ``HandleRef``'s id;
    ``param_values`` (name -> bytes) are the graph's current scalar parameter values, written into their slots.
    """

    def raw(target):
        address = address_of(target)
        return RawHandle(address) if isinstance(target, HandleRef) else RawPtr(address, address, address)

    changes = {}
    for name in _field_names(type(op)):
        value = getattr(op, name)
        if isinstance(value, (Ref, HandleRef)):
            changes[name] = raw(value)
        elif isinstance(value, Blob):
            data = bytearray(value.data)
            for slot in value.params:
                current = (param_values or {}).get(slot.name)
                if current is not None:
                    data[slot.at : slot.at + len(current)] = current
            pointers = []
            for reloc in value.relocs:
                address = address_of(reloc.target)
                data[reloc.at : reloc.at + 8] = address.to_bytes(8, "little")
                pointers.append((reloc.at, raw(reloc.target)))
            changes[name] = RawBlob(bytes(data), tuple(pointers), value.arrays, value.params)
        elif type(value) is tuple and any(isinstance(v, Ref) for v in value):
            changes[name] = tuple(
                RawPtr(address_of(v), address_of(v), address_of(v)) if isinstance(v, Ref) else v for v in value
            )
    return dataclasses.replace(op, **changes) if changes else op
