"""Lowering: a ``Recording`` plus the addresses of its regions and kernels becomes a ``Program``.

A program is an arena of bytes (every blob, with its pointers relocated) and an op table of native
calls for ``interpreter.run_table``. Lowering happens once, at capture end or at load; replay then
runs the table as it is. The same code serves live graphs (regions at their captured addresses)
and loaded ones (regions freshly allocated, with the index checks of ``guards``). The row each op kind
becomes is :mod:`apic.replay.lowering_rows`'s; which launches may run split, :mod:`apic.replay.lowering_splits`'s.
"""

from __future__ import annotations

import itertools
import operator

import numpy as np

from apic.record import ops as rec
from apic.record.control_flow import control_flow_problem
from apic.record.effects import EFFECTS, JUMP, control_of
from apic.replay.cpu import table as tbl
from apic.replay.guards import blobs_of, guard_row, guarded_ops, ids_blob, kept_guards, mesh_indices
from apic.replay.lowering_rows import LOWER, Lowering, argv_blob, launch_row, lower_op
from apic.replay.lowering_splits import splits as _splits
from apic.replay.program import Program
from apic.replay.relocate import Arena as _Arena
from apic.targets.cpu import ABI_BY_POINTER, ABI_BY_VALUE

SUPPORTED_ABIS = (ABI_BY_POINTER, ABI_BY_VALUE)  # the ABI tags a lowering can call (apic._compat.KERNEL_ABI)
_UNGUARDED = ((), ())  # the checks before and after an op that has none


def lower(recording, address_of, kernel_addresses: list[int], checked: bool = False, id_arrays=None) -> Program:
    """Build the program of ``recording`` with kernels at the given addresses.

    ``address_of(target)`` is the live address of a region reference (``Ref``), or the id of a native
    handle (``HandleRef``). ``checked`` (a loaded graph) adds the index checks of ``guards``, and of the
    arrays of handle ids ``id_arrays`` names (``apic.format.manifest_check.check``).
    """
    if recording.abi not in SUPPORTED_ABIS:
        raise ValueError(f"unsupported kernel ABI {recording.abi!r}; this apic calls {SUPPORTED_ABIS}")
    distinct_ops = dict(zip(map(id, recording.ops), recording.ops)).values()  # shared ops hold shared blobs
    blobs = _blobs(distinct_ops)
    wide = [op for op in distinct_ops if rec.is_native_call(op) and len(op.args) > tbl.MAX_ARGS]
    argvs = {id(op): argv_blob(op) for op in wide}
    meshes = mesh_indices(recording) if checked else []
    guarded = guarded_ops(distinct_ops, meshes, id_arrays) if checked else {}  # id(op) -> checks, if it has any
    id_blobs = {g[2]: ids_blob(g[2], recording.handles)
                for before, _ in guarded.values() for g in before if isinstance(g[2], frozenset)}
    arena = _Arena(blobs + list(argvs.values()) + list(id_blobs.values()))
    arena.fill(address_of)
    kept = kept_guards(recording.ops, guarded) if checked else None
    rows_before: list = []  # table row of each position of the op sequence (built if a jump needs it)

    def rows_of(position: int, op) -> int:
        if kept is None:
            return EFFECTS[type(op)].rows
        return EFFECTS[type(op)].rows + len(kept[position]) + len(guarded.get(id(op), _UNGUARDED)[1])

    def row_at(position: int) -> int:
        if not rows_before:
            rows_before.extend(np.cumsum([0] + [rows_of(p, op) for p, op in enumerate(recording.ops)]).tolist())
        return rows_before[position]

    heads = loop_heads(recording.ops)  # position -> slot of each loop head
    launch_rows: dict[int, rec.Launch] = {}  # distinct row -> the launch of a splittable kernel it runs
    # Lower each distinct op once (the recording shares equal ops), then gather the table's rows.
    row_of: dict[int, int] = {}  # id(op) -> row in `distinct`, or -1 for an op with nothing to run
    distinct = []
    sequence = []
    guard_rows: dict[int, tuple[list, list]] = {}  # id(op) -> rows of its checks before and after
    for op in distinct_ops:
        before, after = guarded.get(id(op), _UNGUARDED)
        if before or after:
            first = len(distinct)
            for g in (*before, *after):
                row = guard_row(g, address_of, arena, id_blobs)
                distinct.append(row + [0] * (tbl.OP_COLUMNS - len(row)))
            rows = list(range(first, len(distinct)))
            guard_rows[id(op)] = (rows[: len(before)], rows[len(before) :])

    lowering = Lowering(recording.abi, arena, address_of, kernel_addresses, row_at, argvs)

    launch_rows_of: dict = {}  # (kernel, id(bounds), id(adj_args)) -> (launch_row padded, its column, splittable)

    def distinct_row(op) -> int:
        """Lower ``op`` into a row of ``distinct``: its index, or -1 when it has nothing to run."""
        row = row_of[id(op)] = len(distinct)
        if rec.is_cpu_launch(op):  # the ops hold their bounds and adjoint arguments: no id is reused
            key = (op.kernel, id(op.bounds), id(op.adj_args))
            shared = launch_rows_of.get(key)
            if shared is None:
                lowered, column = launch_row(op, lowering)
                shared = launch_rows_of[key] = (lowered + [0] * (tbl.OP_COLUMNS - len(lowered)), column,
                                                recording.kernels[op.kernel].may_split)
            lowered, column, splittable = shared
            lowered = lowered.copy()
            lowered[column] = arena.address(op.args)
            if splittable:
                launch_rows[row] = op
            distinct.append(lowered)
            return row
        lowered = rec.handler(LOWER, op, "lowering a graph for CPU replay")(op, lowering)
        if lowered is None:
            row = row_of[id(op)] = -1
        else:
            distinct.append(lowered + [0] * (tbl.OP_COLUMNS - len(lowered)))
        return row

    if not heads and not guard_rows:  # one row per position, its op's: gathered without a loop over positions
        table, sequence = _bulk_table(recording, list(distinct_ops), lowering, launch_rows)
    else:
        for position, op in enumerate(recording.ops):
            before, after = guard_rows.get(id(op), ((), ()))
            if before:
                sequence.extend(before[k] for k in kept[position])
            if position in heads:  # a loop head has a row of its own: it carries its loop's slot
                sequence.append(len(distinct))
                row = lower_op(op, recording.abi, arena, address_of, kernel_addresses, row_at, argvs)
                row = row + [0] * (tbl.OP_COLUMNS - len(row))
                row[tbl.COL_LOOP] = 1 + heads[position]
                distinct.append(row)
                sequence.extend(after)
                continue
            row = row_of.get(id(op))
            if row is None:
                row = distinct_row(op)
            if row >= 0:
                sequence.append(row)
            sequence.extend(after)
        table = np.array(distinct, dtype=np.int64).reshape(-1, tbl.OP_COLUMNS)[np.array(sequence, dtype=np.intp)]
    verdicts = ((), ())
    if launch_rows:  # judged when a replay on more threads first asks (the arena's descriptors never change)
        bases = [address_of(rec.Ref(region, 0)) for region in range(len(recording.regions))]
        verdicts = lambda: _splits(recording, arena, bases, launch_rows, sequence)  # noqa: E731
    return Program(np.ascontiguousarray(table), arena.buffer, len(heads), arena.param_offsets(), verdicts)


_KERNEL, _BOUNDS, _ARGS, _ADJ = map(operator.attrgetter, ("kernel", "bounds", "args", "adj_args"))


def _blobs(ops) -> list:
    """The blobs of distinct ``ops`` in order (``guards.blobs_of``), without a call per op where every op is a
    forward launch (its bounds, then its arguments)."""
    if rec.only_cpu_launches(ops) and not any(map(_ADJ, ops)):
        return list(itertools.chain.from_iterable(zip(map(_BOUNDS, ops), map(_ARGS, ops))))
    return [blob for op in ops for blob in blobs_of(op)]


def _bulk_table(recording, ops: list, lowering: Lowering, launch_rows: dict) -> tuple[np.ndarray, np.ndarray]:
    """``(table, sequence)`` of a program with no loop heads and no checks: a row per distinct op of ``ops``
    (none for an op with nothing to run), gathered for each position of the op sequence; ``launch_rows`` gets
    the launches of splittable kernels by row.

    Launches that differ in their arguments only (one kernel, bounds and adjoint arguments) share their row
    but for the address of their arguments: each such row is built once and the addresses set in bulk."""
    every = rec.only_cpu_launches(ops)  # the common case: no op but launches
    at = np.arange(len(ops)) if every else np.array([i for i, op in enumerate(ops) if rec.is_cpu_launch(op)],
                                                    dtype=np.intp)
    launches = ops if every else list(map(ops.__getitem__, at.tolist()))
    rows = np.zeros((len(ops), tbl.OP_COLUMNS), dtype=np.int64)
    has_row = np.ones(len(ops), dtype=bool)  # an op with nothing to run (an Alloc) has no row
    if launches:
        # the ops hold their bounds and adjoint arguments: no id is reused
        keys = list(zip(map(_KERNEL, launches), map(id, map(_BOUNDS, launches)), map(id, map(_ADJ, launches))))
        group_of = {key: g for g, key in enumerate(dict.fromkeys(keys))}
        group = np.fromiter(map(group_of.__getitem__, keys), dtype=np.intp, count=len(keys))
        shared, columns, splittable = [], [], []
        for first in np.unique(group, return_index=True)[1].tolist():  # the first launch of each group, in order
            op = launches[first]
            lowered, column = launch_row(op, lowering)
            shared.append(lowered + [0] * (tbl.OP_COLUMNS - len(lowered)))
            columns.append(column)
            splittable.append(recording.kernels[op.kernel].may_split)
        rows[at] = np.array(shared, dtype=np.int64)[group]
        rows[at, np.array(columns, dtype=np.intp)[group]] = lowering.arena.addresses(map(_ARGS, launches))
    for i, op in enumerate(() if every else ops):
        if not rec.is_cpu_launch(op):
            lowered = rec.handler(LOWER, op, "lowering a graph for CPU replay")(op, lowering)
            if lowered is None:
                has_row[i] = False
            else:
                rows[i] = lowered + [0] * (tbl.OP_COLUMNS - len(lowered))
    row_of = np.cumsum(has_row) - 1  # op index -> its row among those with one
    if launches and any(splittable):
        chosen = np.array(splittable, dtype=bool)[group]
        launch_rows.update(zip(row_of[at[chosen]].tolist(), launches if chosen.all() else
                               itertools.compress(launches, chosen.tolist())))
    if len(ops) == len(recording.ops):  # no op repeats: the distinct ops are the sequence's
        positions = np.flatnonzero(has_row)
    else:
        index_of = dict(zip(map(id, ops), range(len(ops))))
        positions = np.fromiter(map(index_of.__getitem__, map(id, recording.ops)), dtype=np.intp,
                                count=len(recording.ops))
        positions = positions[has_row[positions]]
    return rows[positions], row_of[positions]

def loop_heads(ops) -> dict[int, int]:
    """Position -> slot (0, 1, ...) of every branch that a backward jump returns to."""
    problem = control_flow_problem(ops)
    if problem is not None:
        raise ValueError(f"cannot replay this op sequence: {problem}")
    heads: dict[int, int] = {}
    if not any(EFFECTS[kind].control == JUMP for kind in set(map(type, ops))):
        return heads
    for position, op in enumerate(ops):
        if control_of(op) == JUMP and op.target <= position:
            heads.setdefault(op.target, len(heads))
    return heads
