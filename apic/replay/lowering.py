"""Lowering: a ``Recording`` plus the addresses of its regions and kernels becomes a ``Program``.

A program is an arena of bytes (every blob, with its pointers relocated) and an op table of native
calls for ``interpreter.run_table``. Lowering happens once, at capture end or at load; replay then
runs the table as it is. The same code serves live graphs (regions at their captured addresses)
and loaded ones (regions freshly allocated, with the index checks of ``guards``).
"""

from __future__ import annotations

import itertools
import operator
import struct

import numpy as np

from apic import _compat
from apic.record import natives
from apic.record import ops as rec
from apic.record.control_flow import control_flow_problem
from apic.record.effects import EFFECTS, JUMP, control_of
from apic.record.splittable import graph_launch_refusal
from apic.record.world_split import world_launch_refusal
from apic.replay import split_planner
from apic.replay import table as tbl
from apic.replay.guards import blobs_of, guard_row, guarded_ops, ids_blob, kept_guards, mesh_indices
from apic.replay.program import Program, Split
from apic.replay.relocate import Arena as _Arena
from apic.targets.cpu import ABI_BY_POINTER, ABI_BY_VALUE, ARRAY_T_SIZE, INDEXEDARRAY_T_SIZE

SUPPORTED_ABIS = (ABI_BY_POINTER, ABI_BY_VALUE)  # the ABI tags a lowering can call (apic._compat.KERNEL_ABI)
_BOUNDS_QWORDS = struct.Struct("<4q")
_I64 = struct.Struct("<q")  # signed: the table holds int64 (same bits)
_UNGUARDED = ((), ())  # the checks before and after an op that has none


def lower(recording, address_of, kernel_addresses: list[int], checked: bool = False, id_arrays=None) -> Program:
    """Build the program of ``recording`` with kernels at the given addresses.

    ``address_of(target)`` is the live address of a region reference (``Ref``), or the id of a native
    handle (``HandleRef``). ``checked`` (a loaded graph) adds the index checks of ``guards``, and of the
    arrays of handle ids ``id_arrays`` names (``apic.format.manifest.check``).
    """
    if recording.abi not in SUPPORTED_ABIS:
        raise ValueError(f"unsupported kernel ABI {recording.abi!r}; this apic calls {SUPPORTED_ABIS}")
    distinct_ops = dict(zip(map(id, recording.ops), recording.ops)).values()  # shared ops hold shared blobs
    blobs = _blobs(distinct_ops)
    wide = [op for op in distinct_ops if isinstance(op, rec.NativeCall) and len(op.args) > tbl.MAX_ARGS]
    argvs = {id(op): _argv_blob(op) for op in wide}
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

    lowering = _Lowering(recording.abi, arena, address_of, kernel_addresses, row_at, argvs)

    launch_rows_of: dict = {}  # (kernel, id(bounds), id(adj_args)) -> (_launch_row padded, its column, splittable)

    def distinct_row(op) -> int:
        """Lower ``op`` into a row of ``distinct``: its index, or -1 when it has nothing to run."""
        row = row_of[id(op)] = len(distinct)
        if type(op) is rec.Launch:  # the ops hold their bounds and adjoint arguments: no id is reused
            key = (op.kernel, id(op.bounds), id(op.adj_args))
            shared = launch_rows_of.get(key)
            if shared is None:
                lowered, column = _launch_row(op, lowering)
                shared = launch_rows_of[key] = (lowered + [0] * (tbl.OP_COLUMNS - len(lowered)), column,
                                                recording.kernels[op.kernel].split_writes is not None)
            lowered, column, splittable = shared
            lowered = lowered.copy()
            lowered[column] = arena.address(op.args)
            if splittable:
                launch_rows[row] = op
            distinct.append(lowered)
            return row
        lowered = rec.handler(_LOWER, op, "lowering a graph for CPU replay")(op, lowering)
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
                row = _lower_op(op, recording.abi, arena, address_of, kernel_addresses, row_at, argvs)
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
    if set(map(type, ops)) == {rec.Launch} and not any(map(_ADJ, ops)):
        return list(itertools.chain.from_iterable(zip(map(_BOUNDS, ops), map(_ARGS, ops))))
    return [blob for op in ops for blob in blobs_of(op)]


def _bulk_table(recording, ops: list, lowering: _Lowering, launch_rows: dict) -> tuple[np.ndarray, np.ndarray]:
    """``(table, sequence)`` of a program with no loop heads and no checks: a row per distinct op of ``ops``
    (none for an op with nothing to run), gathered for each position of the op sequence; ``launch_rows`` gets
    the launches of splittable kernels by row.

    Launches that differ in their arguments only (one kernel, bounds and adjoint arguments) share their row
    but for the address of their arguments: each such row is built once and the addresses set in bulk."""
    every = set(map(type, ops)) == {rec.Launch}  # the common case: no op but launches
    at = np.arange(len(ops)) if every else np.array([i for i, op in enumerate(ops) if type(op) is rec.Launch],
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
            lowered, column = _launch_row(op, lowering)
            shared.append(lowered + [0] * (tbl.OP_COLUMNS - len(lowered)))
            columns.append(column)
            splittable.append(recording.kernels[op.kernel].split_writes is not None)
        rows[at] = np.array(shared, dtype=np.int64)[group]
        rows[at, np.array(columns, dtype=np.intp)[group]] = lowering.arena.addresses(map(_ARGS, launches))
    for i, op in enumerate(() if every else ops):
        if type(op) is not rec.Launch:
            lowered = rec.handler(_LOWER, op, "lowering a graph for CPU replay")(op, lowering)
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


def _splits(recording, arena: _Arena, bases: list[int], launch_rows: dict, sequence) -> tuple:
    """The launches of splittable kernels that may run split (``Split``), and why the others may not
    (``bases``: the address of each region)."""
    def region_span(ref) -> tuple[int, int]:
        return bases[ref.region], recording.regions[ref.region].nbytes

    # the positions of each row: the sequence sorted by row (stable, so positions stay in order), cut at each row
    sequence = np.asarray(sequence, dtype=np.intp)
    order = np.argsort(sequence, kind="stable")
    ordered = sequence[order]
    keys = np.fromiter(launch_rows, dtype=np.intp, count=len(launch_rows))
    starts, ends = np.searchsorted(ordered, keys).tolist(), np.searchsorted(ordered, keys, side="right").tolist()
    # The verdict and spans read the kernel, the relocations and the array descriptors only: launches that
    # share them (one kernel over the same arrays, other scalars) are judged once.
    judged: dict = {}
    tasks_of: dict = {}
    # Equal relocations and slots, hashed once per tuple object (a loaded graph's launches read alike share
    # theirs): the id of the first equal tuple. The ops hold every tuple, so no id is reused meanwhile.
    first_equal: dict = {}
    by_value: dict = {}

    def same(parts: tuple) -> int:
        found = first_equal.get(id(parts))
        if found is None:
            found = first_equal[id(parts)] = id(by_value.setdefault(parts, parts))
        return found

    splits, refusals = [], []
    for (row, op), start, end in zip(launch_rows.items(), starts, ends):
        kernel = recording.kernels[op.kernel]
        args = op.args
        key = (op.kernel, op.adj_args is None, op.dim if kernel.split_world is not None else None,
               same(args.relocs), same(args.arrays),
               b"".join(args.data[a.at : a.at + (INDEXEDARRAY_T_SIZE if a.indexed else ARRAY_T_SIZE)]
                        for a in args.arrays))
        verdict = judged.get(key)
        if verdict is None:
            at = arena.address(args) - arena.base
            data = arena.buffer[at : at + len(args.data)].tobytes()
            why = "backward launch" if op.adj_args is not None else None
            if why is None and kernel.cpu_blocks:
                why = "runs as cooperative CPU blocks"
            if kernel.split_world is not None:  # its launch check reads the launch's dim
                why = why or world_launch_refusal(data, args, kernel.split_writes, kernel.split_world, op.dim,
                                                  region_span)
            else:
                why = why or graph_launch_refusal(data, args, kernel.split_writes, region_span)
            spans = None if why is not None else split_planner.launch_spans(args, kernel.split_writes, region_span)
            verdict = judged[key] = (why, spans)
        why, spans = verdict
        if why is not None:
            refusals.append((op.kernel, why))
            continue
        writes, reach = spans
        tasks = tasks_of.get(op.dim)
        if tasks is None:
            tasks = tasks_of[op.dim] = int(np.prod(op.dim, dtype=np.int64)) if op.dim else 1
        rows = order[start:end]
        splits.append(Split(rows, op.kernel, arena.address(op.bounds), arena.address(op.args), tasks, writes, reach))
    return tuple(splits), tuple(refusals)


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


def _argv_blob(op: rec.NativeCall) -> rec.Blob:
    """The arguments of a wide native call as ``ARGV_ARGS`` int64 (pointers relocated, the rest zero).
    apic's own trailing arguments (``natives.Signature.extra``) are not passed."""
    args = op.args[: natives.native_arity(op.name, len(op.args))]
    if len(args) > tbl.ARGV_ARGS:
        raise ValueError(f"wp_{op.name} takes {len(args)} arguments; the interpreter passes at most {tbl.ARGV_ARGS}")
    data = bytearray(8 * tbl.ARGV_ARGS)
    relocs = []
    for i, arg in enumerate(args):
        if isinstance(arg, rec.Ref):
            relocs.append(rec.Reloc(8 * i, arg))
        else:
            struct.pack_into("<q", data, 8 * i, arg)
    return rec.Blob(bytes(data), tuple(relocs))


_CALL_ARITY: dict[int, int] = {}  # number of arguments -> the arity of the call opcode that passes them


def _call(fn: int, *args: int) -> list[int]:
    # A function of another arity is called with trailing zeros: extra integer arguments are harmless
    # to a C callee on every supported ABI (the caller owns and cleans up the argument area).
    arity = _CALL_ARITY.get(len(args))
    if arity is None:
        arity = _CALL_ARITY[len(args)] = min(n for n in tbl.CALL_OPCODES if n >= len(args))
    return [tbl.CALL_OPCODES[arity], fn, *args, *[0] * (arity - len(args))]


class _Lowering:
    """What lowering one op needs besides the op (the arguments of ``_lower_op``). A plain class with
    slots, not a frozen dataclass: one is made per distinct op, and that costs a third as much."""

    __slots__ = ("abi", "arena", "address_of", "kernel_addresses", "row_at", "argvs")

    def __init__(self, abi: str, arena: _Arena, address_of, kernel_addresses: list, row_at, argvs) -> None:
        self.abi, self.arena, self.address_of, self.kernel_addresses, self.row_at, self.argvs = (
            abi, arena, address_of, kernel_addresses, row_at, argvs)


def _lower_op(op, abi: str, arena: _Arena, address_of, kernel_addresses, row_at, argvs=None) -> list[int] | None:
    """One op-table row (as a list) for ``op``, or None when there is nothing to run (``_LOWER``, by op kind).

    ``row_at(position)`` is the table row of a position in the op sequence (for jump targets); ``argvs``
    maps ``id(op)`` of a native call with too many arguments for a row to the blob that holds them.
    """
    lower = rec.handler(_LOWER, op, "lowering a graph for CPU replay")
    return lower(op, _Lowering(abi, arena, address_of, kernel_addresses, row_at, argvs or {}))


def _lower_launch(op: rec.Launch, low: _Lowering) -> list[int]:
    row, column = _launch_row(op, low)
    row[column] = low.arena.address(op.args)
    return row


def _launch_row(op: rec.Launch, low: _Lowering) -> tuple[list[int], int]:
    """The row of launch ``op`` with 0 where the address of its arguments goes, and that column: launches
    that differ in their arguments only (one kernel, bounds and adjoint arguments) share the rest."""
    fn = low.kernel_addresses[op.kernel]
    adj = low.arena.address(op.adj_args) if op.adj_args is not None else None
    if low.abi == ABI_BY_VALUE and _compat.SYSV_X86_64:
        # The 32-byte bounds struct goes on the stack after the six register arguments:
        # call f(args, [adj], 0, ..., q0, q1, q2, q3) with ten integer arguments.
        regs = [0] if adj is None else [0, adj]
        regs += [0] * (6 - len(regs))
        return _call(fn, *regs, *_BOUNDS_QWORDS.unpack_from(op.bounds.data.ljust(32, b"\0"))), tbl.COL_ARG0
    # By pointer (1.13+), or by value on Win64/AArch64, where the caller passes a pointer to a copy.
    bounds = low.arena.address(op.bounds)
    return (_call(fn, bounds, 0) if adj is None else _call(fn, bounds, 0, adj)), tbl.COL_ARG0 + 1


def _lower_native_call(op: rec.NativeCall, low: _Lowering) -> list[int]:
    """A call row; a call with too many arguments for a row passes them in the arena (``OP_CALL_ARGV``); a
    call the opcode table checks first (``table.CHECKED_CALLS``) gets that opcode: the same call's columns,
    then the arguments its check reads."""
    natives.check_host(op.name, len(op.args))
    fn = _compat.native_address(op.name)

    def value(arg):
        return low.address_of(arg) if isinstance(arg, rec.Ref) else arg

    argv = low.argvs.get(id(op))
    if argv is not None:
        row = [tbl.OP_CALL_ARGV, fn, low.arena.address(argv)]
    else:
        passed = op.args[: natives.native_arity(op.name, len(op.args))]  # apic's own trailing arguments are not
        row = _call(fn, *[value(a) for a in passed])
    check = tbl.CHECKED_CALLS.get((op.name, len(op.args)))
    if check is None:
        return row
    if row[tbl.COL_OPCODE] != check.calls:
        raise ValueError(f"wp_{op.name} lowers to opcode {row[tbl.COL_OPCODE]}, not the {check.calls} its check "
                         f"{check.name!r} calls")
    call_columns = tbl.COL_ARG0 + len(tbl.OPCODES[check.calls].columns)
    return [check.number, *row[tbl.COL_FN : call_columns], *[value(op.args[k]) for k in check.check_args]]


def _lower_handle_call(op: rec.HandleCall, low: _Lowering) -> list[int]:
    """``wp_<name>(id, ...)``; a hash grid build passes its radius as a C double (argument 2)."""
    fn = _compat.native_address(op.name)
    handle = low.address_of(op.handle)
    if op.points is None:  # every handle method but a hash grid build
        return _call(fn, handle, *op.ints)
    groups = low.arena.address(op.groups) if op.groups is not None else 0  # an array descriptor (warp 1.19)
    radius_bits = _I64.unpack(struct.pack("<d", op.radius))[0]
    # warp <= 1.12 takes no groups argument: the extra integer is harmless to a C callee (see _call)
    return [tbl.OP_CALL5_D2, fn, handle, op.ints[0], radius_bits, low.arena.address(op.points), groups]


_LOWER = {  # op type -> (op, _Lowering) -> one table row, or None for an op of no rows (OpEffects.rows)
    rec.Launch: _lower_launch,
    rec.Memcpy: lambda op, low: _call(_compat.native_address("memcpy_h2h"), low.address_of(op.dst),
                                      low.address_of(op.src), op.nbytes),
    rec.Memset: lambda op, low: _call(_compat.native_address("memset_host"), low.address_of(op.dst), op.value,
                                      op.nbytes),
    rec.Memtile: lambda op, low: _call(_compat.native_address("memtile_host"), low.address_of(op.dst),
                                       low.arena.address(op.value), len(op.value.data), op.count),
    rec.ArrayCopy: lambda op, low: _call(_compat.native_address("array_copy_host"), low.arena.address(op.dst),
                                         low.arena.address(op.src), op.dst_type, op.src_type, op.elem_size),
    rec.ArrayFill: lambda op, low: _call(_compat.native_address("array_fill_host"), low.arena.address(op.dst),
                                         op.array_type, low.arena.address(op.value), len(op.value.data)),
    rec.Alloc: lambda op, low: None,
    rec.Branch: lambda op, low: [tbl.OP_BRANCH_IF_ZERO, 0, low.address_of(op.cond), low.row_at(op.target)],
    rec.Jump: lambda op, low: [tbl.OP_JUMP, 0, low.row_at(op.target)],
    rec.NativeCall: _lower_native_call,
    rec.HandleCall: _lower_handle_call,
    rec.CudaLaunch: rec.Refused("cannot lower op {type}: a CUDA graph replays through apic.replay.cuda_loaded_graph"),
}
