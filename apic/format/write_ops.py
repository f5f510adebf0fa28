"""Ops on the wire: one writer per op kind (``WRITE``, keyed by op type), and the blob and reference forms.

Each writer returns the op's fields besides ``kind`` (``schema.OP_FIELDS``), in the order they are
written; ``op_wire`` adds the kind from the op's ``OpSpec`` and refuses a kind the graph's target
cannot hold.
"""

from __future__ import annotations

import numpy as np

from apic.errors import UnsupportedOperationError
from apic.format import handles as wire_handles
from apic.record import ops as rec
from apic.targets import cpu

# The int16 flags after a descriptor's int16 ndim mean nothing to Warp's native copy/fill, but a
# warp <= 1.12 reads ndim as int32, so they are written as zero.
_DESCRIPTOR_FLAGS = (cpu.ARRAY_T_FLAGS,)


def blob(value: rec.Blob, clear: tuple[slice, ...] = (), params: dict | None = None) -> dict:
    """A blob on the wire; relocated slots (and handle ids) are zeroed so no live address leaks into the file.

    ``params`` maps each named scalar parameter to ``(binding index, current value)``: its slots hold
    the value the graph has now (``set_param`` changed the arena, not the recording) and are listed.
    """
    data = bytearray(value.data)
    for reloc in value.relocs:
        data[reloc.at : reloc.at + 8] = bytes(8)
    for slot in value.params:
        current = params[slot.name][1]
        data[slot.at : slot.at + len(current)] = current
    for part in clear:
        data[part] = bytes(len(data[part]))
    relocs = [[r.at, r.target.region, r.target.offset] for r in value.relocs if isinstance(r.target, rec.Ref)]
    wire = {"data": bytes(data), "relocs": relocs}
    if value.arrays:
        wire["arrays"] = [[a.at, a.elem_size, a.indexed] for a in value.arrays]
    if len(relocs) != len(value.relocs):
        wire["handles"] = wire_handles.blob_handles(value)
    if value.params:
        wire["params"] = [[slot.at, params[slot.name][0]] for slot in value.params]
    return wire


def _ref(ref: rec.Ref) -> list:
    return [ref.region, ref.offset]


def _descriptor(value) -> dict | None:
    return None if value is None else blob(value, _DESCRIPTOR_FLAGS)


def _launch(op: rec.Launch, params: dict) -> dict:
    return {"kernel": op.kernel, "dim": list(op.dim), "bounds": blob(op.bounds), "args": blob(op.args, (), params),
            "adj_args": None if op.adj_args is None else blob(op.adj_args, (), params)}


def _cuda_launch(op: rec.CudaLaunch, params: dict) -> dict:
    return {"kernel": op.kernel, "dim": list(op.dim), "params": blob(op.params), "grid": list(op.grid),
            "block": list(op.block), "smem": op.smem}


def _array_copy(op: rec.ArrayCopy, params: dict) -> dict:
    return {"dst": _descriptor(op.dst), "src": _descriptor(op.src), "dst_type": op.dst_type, "src_type": op.src_type,
            "elem_size": op.elem_size}


def _handle_call(op: rec.HandleCall, params: dict) -> dict:
    return {"fn": op.name, "handle": op.handle.index, "ints": list(op.ints), "radius": op.radius,
            "points": _descriptor(op.points), "groups": _descriptor(op.groups)}


WRITE = {
    rec.Launch: _launch,
    rec.Memcpy: lambda op, params: {"dst": _ref(op.dst), "src": _ref(op.src), "nbytes": op.nbytes},
    rec.Memset: lambda op, params: {"dst": _ref(op.dst), "value": op.value, "nbytes": op.nbytes},
    rec.Memtile: lambda op, params: {"dst": _ref(op.dst), "value": blob(op.value), "count": op.count},
    rec.ArrayCopy: _array_copy,
    rec.ArrayFill: lambda op, params: {
        "dst": _descriptor(op.dst), "array_type": op.array_type, "value": blob(op.value)
    },
    rec.Alloc: lambda op, params: {"dst": _ref(op.dst), "nbytes": op.nbytes},
    rec.Branch: lambda op, params: {"cond": _ref(op.cond), "target": op.target},
    rec.Jump: lambda op, params: {"target": op.target},
    rec.NativeCall: lambda op, params: {
        "fn": op.name, "args": [_ref(a) if isinstance(a, rec.Ref) else a for a in op.args]
    },
    rec.CudaLaunch: _cuda_launch,
    rec.HandleCall: _handle_call,
}


def op_wire(op, params: dict, target: str) -> dict:
    """``op`` as an op map of a ``target`` graph (``Target.name``); ``params`` as for ``blob``."""
    write = rec.handler(WRITE, op, "saving a graph")
    if target not in rec.SPEC_OF_TYPE[type(op)].targets:
        raise UnsupportedOperationError(f"saving a {type(op).__name__} op in a {target.upper()} graph")
    return {"kind": int(op.kind), **write(op, params)}


def ops_and_sequence(ops, params: dict, target: str) -> dict:
    """Each distinct op once (``ops``), and the order they run in (``sequence``, uint32 indices)."""
    index: dict[int, int] = {}  # id(op) -> position in "ops"; the recording shares equal ops
    distinct = []
    sequence = np.empty(len(ops), dtype="<u4")
    for i, op in enumerate(ops):
        j = index.get(id(op))
        if j is None:
            distinct.append(op_wire(op, params, target))
            j = index[id(op)] = len(distinct) - 1
        sequence[i] = j
    return {"ops": distinct, "sequence": sequence.tobytes()}
