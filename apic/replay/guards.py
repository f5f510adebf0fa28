"""The index checks of a loaded graph: which index values, handle ids and Mesh indices its replay
checks before (or after) the ops whose native code reads them, and the table rows that check them.

A live graph runs as eagerly captured, unchecked; a loaded one may come from a hostile file, so each
value its native code indexes memory with is checked at replay first (``OP_CHECK_INDICES``,
``OP_CHECK_IDS``; docs/RELIABILITY.md).
"""

from __future__ import annotations

from apic.record import ops as rec
from apic.replay import table as tbl
from apic.targets import cpu


def blobs_of(op) -> list[rec.Blob]:
    """The blobs an op holds (packed arguments, array descriptors, fill values)."""
    return [getattr(op, f) for f in op.__dataclass_fields__ if isinstance(getattr(op, f), rec.Blob)]


def _index_buffers(blob: rec.Blob, indexed: bool) -> list[tuple[rec.Ref, int, int]]:
    """``(buffer, count, bound)`` of each index buffer of the descriptor ``blob`` (type 1)."""
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


def _launch_index_buffers(blob: rec.Blob) -> list[tuple[rec.Ref, int, int]]:
    found = []
    for slot in blob.arrays:
        if slot.indexed:
            end = slot.at + cpu.INDEXEDARRAY_T_SIZE
            inner = rec.Blob(blob.data[slot.at : end],
                             tuple(rec.Reloc(r.at - slot.at, r.target) for r in blob.relocs if slot.at <= r.at < end))
            found += _index_buffers(inner, True)
    return found


def mesh_indices(recording) -> list[tuple[rec.Ref, int, int]]:
    """``(indices, count, points)`` of each Mesh of a recording: its triangle indices must stay below its
    point count."""
    found = []
    for handle in recording.handles:
        arrays = dict(handle.arrays)
        if handle.kind == "Mesh" and "indices" in arrays and "points" in arrays:
            found.append((arrays["indices"].start, arrays["indices"].length, arrays["points"].length))
    return found


def _pointer_regions(blob: rec.Blob, skip_index_buffers: bool) -> set[int]:
    """Regions a blob's relocations point into; with ``skip_index_buffers``, not counting the index
    buffers of its indexed descriptors (native code only reads through those)."""
    regions = set()
    for reloc in blob.relocs:
        if not isinstance(reloc.target, rec.Ref):
            continue
        if skip_index_buffers:
            slot = next((a for a in blob.arrays if a.at <= reloc.at < a.at + cpu.INDEXEDARRAY_T_SIZE), None)
            if slot is not None and slot.indexed and reloc.at - slot.at >= cpu.INDEXED_INDICES_AT:
                continue
        regions.add(reloc.target.region)
    return regions


def written_regions(op) -> set[int]:
    """The regions ``op`` may write (conservatively: every region a kernel reaches through an array, and
    every pointer of a native utility call; never the index buffers of an indexed array, which native
    code only reads)."""
    if isinstance(op, rec.Launch):
        found = _pointer_regions(op.args, True)
        if op.adj_args is not None:
            found |= _pointer_regions(op.adj_args, True)
        return found
    if isinstance(op, (rec.Memcpy, rec.Memset, rec.Memtile)):
        return {op.dst.region}
    if isinstance(op, (rec.ArrayCopy, rec.ArrayFill)):
        # a copy or fill descriptor is one array_t / indexedarray_t at byte 0
        return {r.target.region for r in op.dst.relocs if r.at < cpu.ARRAY_T_SIZE and isinstance(r.target, rec.Ref)}
    if isinstance(op, rec.NativeCall):
        return {a.region for a in op.args if isinstance(a, rec.Ref)}
    return set()  # branches, jumps, allocations; handle calls write only the handle's native memory


def guards(op, meshes, id_arrays=None) -> tuple[list, list]:
    """``(before, after)``: the index checks a loaded graph runs around ``op``, as ``(buffer, count, bound)``
    (``bound``: an int for indices, a frozenset of handle kinds for an array of handle ids).

    Before: every index buffer of an indexed array the op's native code reads (a launch's indexed
    arguments, an indexed copy or fill): the values are graph memory that the file and earlier ops set
    (``kept_guards`` drops a check that an identical one already made, with no write in between).
    After: the triangle indices of every Mesh (``meshes``, from ``mesh_indices``) in a region the op
    may write (``written_regions``), so that no later query or refit reads one out of range.
    """
    before = []
    if isinstance(op, rec.Launch):
        before += _launch_index_buffers(op.args)
        if op.adj_args is not None:
            before += _launch_index_buffers(op.adj_args)
    elif isinstance(op, rec.ArrayCopy):
        before += _index_buffers(op.dst, op.dst_type == 1) + _index_buffers(op.src, op.src_type == 1)
    elif isinstance(op, rec.ArrayFill):
        before += _index_buffers(op.dst, op.array_type == 1)
    # a launch's arrays of handle ids (apic.format.manifest): each word must be a handle of the kinds
    # the kernel took there, whatever wrote them since the load
    before += [(data, count, frozenset(kinds)) for data, count, kinds in (id_arrays or {}).get(id(op), ())]
    after = []
    if meshes:
        regions = written_regions(op)
        after = [mesh for mesh in meshes if mesh[0].region in regions]
    return before, after


def kept_guards(ops, guarded: dict) -> list[list[int]]:
    """Position -> which of its op's ``before`` checks run there: a check is dropped when the same
    buffer, count and bound were checked earlier in straight-line code (no branch, jump or jump
    target since) and no op since may have written the buffer's region. A sequence of launches over
    the same indexed array checks its indices once."""
    if not any(before for before, _ in guarded.values()):
        return [[]] * len(ops)  # nothing to keep or drop (read only: callers take lengths and items)
    targets = {op.target for op in ops if isinstance(op, rec.CONTROL_TYPES)}
    written_by: dict[int, set[int]] = {}  # id(op) -> written_regions(op): ops repeat, each is asked once
    valid: set = set()
    kept = []
    for position, op in enumerate(ops):
        if position in targets:
            valid.clear()
        before = guarded.get(id(op), ((), ()))[0]
        keep = []
        for k, (buffer, count, bound) in enumerate(before):
            key = (buffer.region, buffer.offset, count, bound)
            if key not in valid:
                keep.append(k)
                valid.add(key)
        kept.append(keep)
        if isinstance(op, rec.CONTROL_TYPES):
            valid.clear()
        else:
            written = written_by.get(id(op))
            if written is None:
                written = written_by[id(op)] = written_regions(op)
            if written and valid:
                valid = {key for key in valid if key[0] not in written}
    return kept


def ids_blob(kinds: frozenset, handles) -> rec.Blob:
    """A blob of the ids of the graph's handles of ``kinds`` (relocated: laid out at lowering)."""
    chosen = [i for i, handle in enumerate(handles) if handle.kind in kinds]
    return rec.Blob(bytes(8 * max(len(chosen), 1)), tuple(rec.Reloc(8 * j, rec.HandleRef(i)) for j, i in enumerate(chosen)))


def guard_row(guard, address_of, arena, id_blobs) -> list[int]:
    buffer, count, bound = guard
    if isinstance(bound, frozenset):
        blob = id_blobs[bound]
        return [tbl.OP_CHECK_IDS, 0, address_of(buffer), count, arena.address(blob), len(blob.relocs)]
    return [tbl.OP_CHECK_INDICES, 0, address_of(buffer), count, bound]
