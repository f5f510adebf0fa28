"""What each op kind does to memory and to the replay, one entry per kind of ``ops.OP_SPECS``.

Every layer that asks what an op reads or writes, which index buffers its native code indexes with,
how many table rows it lowers to, whether it moves control, or how to name it, reads ``EFFECTS``:
the loaded-graph index checks (``apic.replay.guards``), the profile, the DOT picture, the load
budget and the lowering. ``tests/project/test_op_kinds.py`` checks that every kind has an entry, so a new
kind cannot skip the checks by falling through a type test.

Memory is named as the DOT picture names it: a region id (int), or ``("h", index)`` for the native
memory of handle ``index`` (a Mesh, Bvh, HashGrid or Volume).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from apic.record import ops as rec
from apic.targets import cpu

BRANCH = "branch"  # a conditional forward jump: ``op.target`` when the int32 at ``op.cond`` is zero
JUMP = "jump"  # an unconditional jump to ``op.target``


@dataclass(frozen=True)
class OpEffects:
    """One op kind's effects. Each function takes the op; ``reads`` also the recording's handles."""

    reads: Callable  # (op, handles) -> memory it may read
    writes: Callable  # op -> memory it may write (conservatively: a kernel writes every array it reaches)
    index_buffers: Callable  # op -> [(buffer Ref, count, bound)] of int32 index values its native code uses
    label: Callable  # (op, kernels) -> what a report calls it: the kernel, wp_<native>, or the kind's name
    rows: int = 1  # CPU op-table rows it lowers to (0: nothing runs at replay)
    control: str | None = None  # BRANCH or JUMP: it moves the program counter to ``op.target``
    grid_points: Callable | None = None  # op -> (handle index, points) a hash grid is sized for, or None


def effects_of(op, layer: str = "op effects") -> OpEffects:
    """The ``OpEffects`` of ``op``'s kind; a ``TypeError`` naming ``layer`` for a type that is no op kind."""
    return rec.handler(EFFECTS, op, layer)


def control_of(op) -> str | None:
    """``BRANCH``, ``JUMP`` or None: whether (and how) ``op`` moves the program counter to ``op.target``."""
    return EFFECTS[type(op)].control


# --- memory ---------------------------------------------------------------------------------------------------
def _refs(value) -> list:
    """The memory a pointer, a handle reference, a blob or a list of arguments points into."""
    if isinstance(value, rec.Ref):
        return [value.region]
    if isinstance(value, rec.HandleRef):
        return [("h", value.index)]
    if isinstance(value, rec.Blob):
        return [found for r in value.relocs for found in _refs(r.target)]
    if isinstance(value, (tuple, list)):
        return [found for item in value for found in _refs(item)]
    return []


def _is_index_buffer(blob: rec.Blob, at: int) -> bool:
    """Whether the relocation at byte ``at`` of packed arguments is an indexed array's index buffer."""
    slot = next((a for a in blob.arrays if a.at <= at < a.at + cpu.INDEXEDARRAY_T_SIZE), None)
    return slot is not None and slot.indexed and at - slot.at >= cpu.INDEXED_INDICES_AT


def _written_by_kernel(blob: rec.Blob | None) -> set:
    """Regions a kernel may write through its packed arguments: every array but the index buffers of its
    indexed ones (native code only reads those)."""
    if blob is None:
        return set()
    return {r.target.region for r in blob.relocs if isinstance(r.target, rec.Ref) and not _is_index_buffer(blob, r.at)}


def _descriptor_data(blob: rec.Blob) -> set:
    """The region of the data pointer of the one ``array_t`` / ``indexedarray_t`` at byte 0 of ``blob``."""
    return {r.target.region for r in blob.relocs if r.at < cpu.ARRAY_T_SIZE and isinstance(r.target, rec.Ref)}


# --- index buffers --------------------------------------------------------------------------------------------
def _descriptor_index_buffers(blob: rec.Blob, indexed: bool) -> list:
    """``(buffer, count, bound)`` of each index buffer of the descriptor ``blob`` (an ``indexedarray_t``)."""
    if not indexed or len(blob.data) < cpu.INDEXEDARRAY_T_SIZE:
        return []
    found = []
    shape = cpu.ARRAY_T_SHAPE.unpack_from(blob.data, cpu.ARRAY_T_SHAPE_AT)
    ndim = cpu.ARRAY_T_NDIM.unpack_from(blob.data, cpu.ARRAY_T_NDIM_AT)[0]
    counts = cpu.INDEXED_TAIL.unpack_from(blob.data, cpu.INDEXED_INDICES_AT)[4:]
    for reloc in blob.relocs:
        d = (reloc.at - cpu.INDEXED_INDICES_AT) // 8
        if reloc.at >= cpu.INDEXED_INDICES_AT and 0 <= d < min(ndim, 4) and isinstance(reloc.target, rec.Ref):
            found.append((reloc.target, counts[d], shape[d]))
    return found


def _kernel_index_buffers(blob: rec.Blob | None) -> list:
    """The index buffers of the indexed arrays among a kernel's packed arguments."""
    found = []
    for slot in blob.arrays if blob is not None else ():
        if slot.indexed:
            end = slot.at + cpu.INDEXEDARRAY_T_SIZE
            inner = rec.Blob(blob.data[slot.at : end],
                             tuple(rec.Reloc(r.at - slot.at, r.target) for r in blob.relocs if slot.at <= r.at < end))
            found += _descriptor_index_buffers(inner, True)
    return found


def _grid_points(op: rec.HandleCall) -> tuple[int, int] | None:
    """A hash grid reserve's point count, or a build's (the first extent of its points' ``array_t``)."""
    if op.name == cpu.HASH_GRID_RESERVE and len(op.ints) > 1:
        return op.handle.index, op.ints[1]
    if op.points is None:
        return None
    data = op.points.data
    if len(data) < cpu.ARRAY_T_SHAPE_AT + cpu.ARRAY_T_SHAPE.size:
        return op.handle.index, 0
    return op.handle.index, max(cpu.ARRAY_T_SHAPE.unpack_from(data, cpu.ARRAY_T_SHAPE_AT)[0], 0)


def _handle_call_reads(op: rec.HandleCall, handles) -> set:
    """A handle method reads the handle's arrays, and a hash grid build its points and groups."""
    index = op.handle.index
    arrays = dict(handles[index].arrays) if 0 <= index < len(handles) else {}
    return set(_refs(op.points)) | set(_refs(op.groups)) | {a.start.region for a in arrays.values()}


def _kernel_label(op, kernels) -> str:
    kernel = kernels[op.kernel]
    return kernel.key + (" (backward)" if kernel.adjoint else "")


def _kind_name(op, kernels=None) -> str:
    return rec.SPEC_OF_TYPE[type(op)].name


def _nothing(op, *handles) -> set:
    return set()


def _none(op) -> list:
    return []


EFFECTS: dict[type, OpEffects] = {
    rec.Launch: OpEffects(
        reads=lambda op, handles: set(_refs(op.args)) | set(_refs(op.adj_args)),
        writes=lambda op: _written_by_kernel(op.args) | _written_by_kernel(op.adj_args),
        index_buffers=lambda op: _kernel_index_buffers(op.args) + _kernel_index_buffers(op.adj_args),
        label=_kernel_label),
    rec.CudaLaunch: OpEffects(
        reads=lambda op, handles: set(_refs(op.params)), writes=lambda op: set(_refs(op.params)),
        index_buffers=_none, label=_kernel_label),
    rec.Memcpy: OpEffects(reads=lambda op, handles: set(_refs(op.src)), writes=lambda op: {op.dst.region},
                          index_buffers=_none, label=_kind_name),
    rec.Memset: OpEffects(reads=_nothing, writes=lambda op: {op.dst.region}, index_buffers=_none, label=_kind_name),
    rec.Memtile: OpEffects(reads=_nothing, writes=lambda op: {op.dst.region}, index_buffers=_none, label=_kind_name),
    rec.ArrayCopy: OpEffects(
        reads=lambda op, handles: set(_refs(op.src)), writes=lambda op: _descriptor_data(op.dst),
        index_buffers=lambda op: (_descriptor_index_buffers(op.dst, op.dst_type == cpu.ARRAY_TYPE_INDEXED)
                                  + _descriptor_index_buffers(op.src, op.src_type == cpu.ARRAY_TYPE_INDEXED)),
        label=_kind_name),
    rec.ArrayFill: OpEffects(
        reads=_nothing, writes=lambda op: _descriptor_data(op.dst),
        index_buffers=lambda op: _descriptor_index_buffers(op.dst, op.array_type == cpu.ARRAY_TYPE_INDEXED),
        label=_kind_name),
    # an allocation runs nothing, but it is where the region's contents start (the DOT picture's first writer)
    rec.Alloc: OpEffects(reads=_nothing, writes=lambda op: {op.dst.region}, index_buffers=_none, label=_kind_name,
                         rows=0),
    rec.Branch: OpEffects(reads=lambda op, handles: {op.cond.region}, writes=_nothing, index_buffers=_none,
                          label=_kind_name, control=BRANCH),
    rec.Jump: OpEffects(reads=_nothing, writes=_nothing, index_buffers=_none, label=_kind_name, control=JUMP),
    rec.NativeCall: OpEffects(
        reads=lambda op, handles: set(_refs(list(op.args))), writes=lambda op: set(_refs(list(op.args))),
        index_buffers=_none, label=lambda op, kernels: f"wp_{op.name}"),
    # a handle method writes only the handle's native memory
    rec.HandleCall: OpEffects(
        reads=_handle_call_reads, writes=lambda op: {("h", op.handle.index)}, index_buffers=_none,
        label=lambda op, kernels: f"wp_{op.name}", grid_points=_grid_points),
}
