"""The index checks of a loaded graph: which index values, handle ids and Mesh indices its replay
checks before (or after) the ops whose native code reads them, and the table rows that check them.

A live graph runs as eagerly captured, unchecked; a loaded one may come from a hostile file, so each
value its native code indexes memory with is checked at replay first (``OP_CHECK_INDICES``,
``OP_CHECK_IDS``; docs/RELIABILITY.md).
"""

from __future__ import annotations

from apic.record import ops as rec
from apic.record.effects import EFFECTS, control_of, effects_of
from apic.replay.cpu import table as tbl
from apic.targets import handle_kinds as hk


def blobs_of(op) -> list[rec.Blob]:
    """The blobs an op holds (packed arguments, array descriptors, fill values)."""
    if rec.is_cpu_launch(op):  # most ops of most graphs: their fields named
        return [op.bounds, op.args] if op.adj_args is None else [op.bounds, op.args, op.adj_args]
    return [value for value in map(op.__getattribute__, op.__dataclass_fields__) if isinstance(value, rec.Blob)]


def mesh_indices(recording) -> list[tuple[rec.Ref, int, int]]:
    """``(indices, count, points)`` of each Mesh of a recording: its triangle indices must stay below its
    point count."""
    found = []
    for handle in recording.handles:
        arrays = dict(handle.arrays)
        if handle.kind == hk.MESH and "indices" in arrays and "points" in arrays:
            found.append((arrays["indices"].start, arrays["indices"].length, arrays["points"].length))
    return found


def guards(op, meshes, id_arrays=None) -> tuple[list, list]:
    """``(before, after)``: the index checks a loaded graph runs around ``op``, as ``(buffer, count, bound)``
    (``bound``: an int for indices, a frozenset of handle kinds for an array of handle ids).

    Before: every index buffer of an indexed array the op's native code reads (a launch's indexed
    arguments, an indexed copy or fill): the values are graph memory that the file and earlier ops set
    (``kept_guards`` drops a check that an identical one already made, with no write in between).
    After: the triangle indices of every Mesh (``meshes``, from ``mesh_indices``) in a region the op
    may write (``OpEffects.writes``), so that no later query or refit reads one out of range.
    """
    effects = effects_of(op, "the index checks of a loaded graph")
    before = list(effects.index_buffers(op))
    # a launch's arrays of handle ids (apic.format.manifest): each word must be a handle of the kinds
    # the kernel took there, whatever wrote them since the load
    before += [(data, count, frozenset(kinds)) for data, count, kinds in (id_arrays or {}).get(id(op), ())]
    after = []
    if meshes:
        written = effects.writes(op)
        after = [mesh for mesh in meshes if mesh[0].region in written]
    return before, after


def guarded_ops(ops, meshes, id_arrays=None) -> dict[int, tuple[list, list]]:
    """``id(op)`` -> ``guards(op, ...)`` of each of ``ops`` (distinct) that has index checks.

    A forward launch none of whose arguments is an indexed array, passing no array of handle ids, in a
    graph without Meshes, has none: found by its array slots (shared by launches read alike) alone."""
    id_arrays = id_arrays or {}
    found = {}
    plain: dict[int, bool] = {}  # id(array slots) -> none is indexed (the ops hold the slots: no id is reused)
    for op in ops:
        if rec.is_cpu_launch(op) and op.adj_args is None and not meshes and id(op) not in id_arrays:
            slots = op.args.arrays
            unindexed = plain.get(id(slots))
            if unindexed is None:
                unindexed = plain[id(slots)] = not any(slot.indexed for slot in slots)
            if unindexed:
                continue
        before, after = guards(op, meshes, id_arrays)
        if before or after:
            found[id(op)] = (before, after)
    return found


def kept_guards(ops, guarded: dict) -> list[list[int]]:
    """Position -> which of its op's ``before`` checks run there: a check is dropped when the same
    buffer, count and bound were checked earlier in straight-line code (no branch, jump or jump
    target since) and no op since may have written the buffer's region. A sequence of launches over
    the same indexed array checks its indices once."""
    if not any(before for before, _ in guarded.values()):
        return [[]] * len(ops)  # nothing to keep or drop (read only: callers take lengths and items)
    targets = {op.target for op in ops if control_of(op)}
    valid: set = set()
    kept = []
    written_by: dict[int, set] = {}  # id(op) -> what it writes: asked once per distinct op
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
        if control_of(op):
            valid.clear()
        else:
            written = written_by.get(id(op))
            if written is None:
                written = written_by[id(op)] = EFFECTS[type(op)].writes(op)
            if written and valid:
                valid = {key for key in valid if key[0] not in written}
    return kept


def ids_blob(kinds: frozenset, handles) -> rec.Blob:
    """A blob of the ids of the graph's handles of ``kinds`` (relocated: laid out at lowering)."""
    chosen = [i for i, handle in enumerate(handles) if handle.kind in kinds]
    return rec.Blob(
        bytes(8 * max(len(chosen), 1)), tuple(rec.Reloc(8 * j, rec.HandleRef(i)) for j, i in enumerate(chosen))
    )


def guard_row(guard, address_of, arena, id_blobs) -> list[int]:
    buffer, count, bound = guard
    if isinstance(bound, frozenset):
        blob = id_blobs[bound]
        return [tbl.OP_CHECK_IDS, 0, address_of(buffer), count, arena.address(blob), len(blob.relocs)]
    return [tbl.OP_CHECK_INDICES, 0, address_of(buffer), count, bound]
