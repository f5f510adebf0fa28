"""Lowering: a ``Recording`` plus the addresses of its regions and kernels becomes a ``Program``.

A program is an arena of bytes (every blob, with its pointers relocated) and an op table of native
calls for ``interpreter.run_table``. Lowering happens once, at capture end or at load; replay then
runs the table as it is. The same code serves live graphs (regions at their captured addresses)
and loaded ones (regions freshly allocated).
"""

from __future__ import annotations

import ctypes
import os
import signal
import struct
import threading
import dataclasses
from dataclasses import dataclass

import numpy as np

from apic import _compat
from apic.errors import LoopLimitError, ReplayError, ReplayIndexError
from apic.record import natives
from apic.record import ops as rec
from apic.record.splittable import graph_launch_refusal
from apic.replay import fanout
from apic.replay import table as tbl
from apic.replay.relocate import Arena as _Arena

_BOUNDS_QWORDS = struct.Struct("<4q")
_I64 = struct.Struct("<q")  # signed: the table holds int64 (same bits)

# The ABI tags a lowering can call (see apic._compat.KERNEL_ABI).
from apic.targets.cpu import ABI_BY_POINTER, ABI_BY_VALUE  # noqa: E402
SUPPORTED_ABIS = (ABI_BY_POINTER, ABI_BY_VALUE)


def _c_api(name: str) -> int:
    return ctypes.cast(getattr(ctypes.pythonapi, name), ctypes.c_void_p).value or 0


# run_table's limits (table.LIMIT_*): the main thread's also polls for Ctrl-C, a worker thread's does
# not (Python handles signals only in the main thread). Both are updated in place by the setter below.
_MAIN_THREAD = threading.main_thread().ident
_get_ident = threading.get_ident
_LIMITS_MAIN = np.array([tbl.DEFAULT_MAX_LOOP_ITERATIONS, _c_api("PyGILState_Ensure"),
                         _c_api("PyOS_InterruptOccurred"), _c_api("PyGILState_Release")], dtype=np.int64)
_LIMITS_THREAD = np.array([tbl.DEFAULT_MAX_LOOP_ITERATIONS, 0, 0, 0], dtype=np.int64)


def set_max_loop_iterations(count: int) -> None:
    """Cap the iterations of each replayed ``capture_while`` loop (per entry of the loop; default 2**24,
    as upstream Warp's CPU replay). A replay whose loop goes past it stops there and raises
    ``LoopLimitError``. ``0`` removes the cap (a loop whose condition never clears then runs until Ctrl-C)."""
    if type(count) is not int or not 0 <= count < 1 << 62:
        raise ValueError(f"the loop iteration cap must be an integer in [0, 2**62), got {count!r}")
    _LIMITS_MAIN[tbl.LIMIT_ITERATIONS] = count
    _LIMITS_THREAD[tbl.LIMIT_ITERATIONS] = count


def max_loop_iterations() -> int:
    """The iteration cap of each replayed loop (``set_max_loop_iterations``; 0: no cap)."""
    return int(_LIMITS_MAIN[tbl.LIMIT_ITERATIONS])


@dataclass(frozen=True)
class Split:
    """A launch the parallel replay may split: its table rows and what an ``OP_SPLIT`` row needs."""

    rows: np.ndarray  # the table rows (positions in the op sequence) that run this launch
    kernel: int  # index into the recording's kernels
    bounds: int  # address of the launch bounds in the arena
    args: int  # address of the packed arguments in the arena
    tasks: int
    writes: tuple  # (address, nbytes) of the regions it writes (fanout.launch_spans)
    reach: tuple  # (address, nbytes) of every region its arguments point into


@dataclass
class Program:
    """What the interpreter runs. ``arena`` must stay alive as long as ``table`` (it points into it)."""

    table: np.ndarray
    arena: np.ndarray
    loops: int = 0  # loop heads in the table (branches a backward jump returns to)
    # named scalar parameter -> arena byte offsets of its slots (one per distinct blob that holds it)
    param_offsets: dict = dataclasses.field(default_factory=dict)
    splits: tuple[Split, ...] = ()  # launches proved splittable (docs/PARALLEL.md)
    refusals: tuple[tuple[int, str], ...] = ()  # (kernel, why) of launches of splittable kernels kept serial
    threads: int = 1  # > 1: the table has OP_SPLIT rows, run on this many threads
    plan: fanout.Plan | None = None  # what those rows run (their work items live there)

    def parallel(self, threads: int, min_tasks_per_thread: int, range_entry_of) -> Program:
        """This program on ``threads`` threads (sharing this arena): its large split launches, and its
        runs of independent split launches, become ``OP_SPLIT`` rows (``apic.replay.fanout``); ``self``
        if nothing fans out.

        ``range_entry_of(kernel)`` is the address of a kernel's range entry, or None (it stays serial).
        """
        from apic.replay import split as splitter  # lazy: imports Numba, which only a parallel replay needs

        found = fanout.plan(self.table, self.splits, threads, min_tasks_per_thread, range_entry_of,
                            splitter.splitter_address(), splitter.pool().base)
        if found is None:
            return self
        return Program(found.table, self.arena, self.loops, self.param_offsets, self.splits, self.refusals, threads,
                       found)

    def run(self, repeats: int = 1) -> None:
        """Run every op once (``repeats`` times) in one call into the jitted interpreter.

        Raises ``KeyboardInterrupt`` (through the SIGINT handler) when Ctrl-C stopped the replay, and
        ``LoopLimitError`` when a loop went past the iteration cap; the graph's memory is then as the
        replay left it.
        """
        if not len(self.table):
            return
        # kept to one thread check and one status test: this is on every capture_launch's path
        limits = _LIMITS_MAIN if _get_ident() == _MAIN_THREAD else _LIMITS_THREAD
        if self.threads > 1:
            from apic.replay.split import workers  # imported already: Program.parallel made the table

            with workers(self.threads):
                status = (_run_table or _load_interpreter())(self.table, repeats, limits, self.loops)
        else:
            status = (_run_table or _load_interpreter())(self.table, repeats, limits, self.loops)
        if status:
            raise_status(status, limits, self.table)


def replay_limits() -> np.ndarray:
    """The ``limits`` array a replay on this thread passes to an interpreter (``table.LIMIT_*``)."""
    return _LIMITS_MAIN if _get_ident() == _MAIN_THREAD else _LIMITS_THREAD


def raise_status(status: int, limits: np.ndarray, table: np.ndarray) -> None:
    """Turn an interpreter's ``STATUS_*`` code into what the caller sees (Ctrl-C, ``LoopLimitError``,
    ``ReplayError`` for a segmented sort's invalid range or a padded transpose's changed row offsets)."""
    if status < 0:
        row = table[-status - 1]
        if row[tbl.COL_OPCODE] in (tbl.OP_CHECK_INDICES, tbl.OP_CHECK_IDS):
            what = ("an index outside its array (an indexed array's index buffer, or a Mesh's triangle indices)"
                    if row[tbl.COL_OPCODE] == tbl.OP_CHECK_INDICES else
                    "an array of handle ids with a value that is not the id of a handle of the kinds its kernel took")
            raise ReplayIndexError(
                f"CPU graph replay failed: the replay of a loaded graph stopped at op-table row {-status - 1}: "
                f"graph memory holds {what}, which the next op's native code would use; the graph's memory is as "
                "the replay left it"
            )
        problem = _segment_problem(row) if row[tbl.COL_OPCODE] == tbl.OP_SEGMENTED_SORT else _capacity_problem(row)
        raise ReplayError(f"CPU graph replay failed: {problem}")
    if status == tbl.STATUS_INTERRUPTED:
        # The poll consumed the signal: raise it again so that Python's SIGINT handler runs now
        signal.raise_signal(signal.SIGINT)
    elif status == tbl.STATUS_LOOP_CAP:
        raise LoopLimitError(
            f"a replayed capture_while loop ran more than {int(limits[tbl.LIMIT_ITERATIONS]):,} iterations; "
            "the replay stopped there. Raise the cap with apic.set_max_loop_iterations(n) (0: no cap)"
        )


def _segment_problem(row) -> str:
    """What is wrong with the segment ranges of an ``OP_SEGMENTED_SORT`` row, read from graph memory (the
    replay stopped at that row, so memory holds what it saw); upstream Warp's words."""
    count, starts, ends, segments = (int(v) for v in row[tbl.COL_ARG0 + 2 : tbl.COL_ARG0 + 6])
    for k in range(segments):
        start = ctypes.c_int32.from_address(starts + 4 * k).value
        end = ctypes.c_int32.from_address(ends + 4 * k).value
        if start < 0 or end < start or end > count:
            return (f"Warp sort error: Invalid segment range at index {k}: [{start}, {end}) for count {count} "
                    "(wp.utils.segmented_sort_pairs; the replay stopped before this sort)")
    return "a segmented sort found an invalid segment range (wp.utils.segmented_sort_pairs)"


def _capacity_problem(row) -> str:
    """What is wrong with the row offsets of an ``OP_PADDED_TRANSPOSE`` row's destination."""
    offsets, rows, capacity = (int(v) for v in row[tbl.COL_ARG0 + 1 : tbl.COL_ARG0 + 4])
    layout = (ctypes.c_int32 * (rows + 1)).from_address(offsets)[:]
    return (f"the row offsets of a padded bsr_set_transpose destination ({layout[0]} .. {layout[-1]}) are not "
            f"non-decreasing from 0 or more within its recorded capacity of {capacity} blocks (they are restored "
            "from the capture right before it: the file was changed); the replay stopped before the transpose")


_run_table = None  # the jitted interpreter, bound on first replay
def _load_interpreter():
    """Import the interpreter (and Numba) on first replay, not on import. Bound once: an import
    statement on every replay cost about 0.7 us, most of ``wp.capture_launch``'s fixed cost.

    ``APIC_REPLAY=reference`` selects the pure-Python reference interpreter instead (``reference.py``:
    a check of the Numba one, microseconds per op).
    """
    global _run_table
    choice = os.environ.get("APIC_REPLAY", "numba")
    if choice == "reference":
        from apic.replay.reference import run_table  # no Numba: the point is a second implementation
    elif choice == "numba":
        from apic.replay.interpreter import run_table  # lazy: importing Numba costs about a second
    else:
        raise ValueError(f"APIC_REPLAY={choice!r}: expected 'numba' (the default) or 'reference'")
    _run_table = run_table
    return run_table


def _blobs_of(op) -> list[rec.Blob]:
    return [getattr(op, f) for f in op.__dataclass_fields__ if isinstance(getattr(op, f), rec.Blob)]


_INDEX_TAIL = struct.Struct("<4Q4i")  # indexedarray_t: indices[4] @56, shape[4] @88
_SHAPE = struct.Struct("<4i")  # array_t.shape @16
_NDIM = struct.Struct("<h")  # array_t.ndim @48


def _index_buffers(blob: rec.Blob, indexed: bool) -> list[tuple[rec.Ref, int, int]]:
    """``(buffer, count, bound)`` of each index buffer of the descriptor ``blob`` (type 1)."""
    if not indexed or len(blob.data) < 104:
        return []
    found = []
    shape = _SHAPE.unpack_from(blob.data, 16)
    ndim = _NDIM.unpack_from(blob.data, 48)[0]
    counts = _INDEX_TAIL.unpack_from(blob.data, 56)[4:]
    for reloc in blob.relocs:
        d = (reloc.at - 56) // 8
        if reloc.at >= 56 and 0 <= d < min(ndim, 4) and isinstance(reloc.target, rec.Ref):
            found.append((reloc.target, counts[d], shape[d]))
    return found


def _launch_index_buffers(blob: rec.Blob) -> list[tuple[rec.Ref, int, int]]:
    found = []
    for slot in blob.arrays:
        if slot.indexed:
            inner = rec.Blob(blob.data[slot.at : slot.at + 104],
                             tuple(rec.Reloc(r.at - slot.at, r.target) for r in blob.relocs if slot.at <= r.at < slot.at + 104))
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
            slot = next((a for a in blob.arrays if a.at <= reloc.at < a.at + 104), None)
            if slot is not None and slot.indexed and reloc.at - slot.at >= 56:
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
        return {r.target.region for r in op.dst.relocs if r.at < 56 and isinstance(r.target, rec.Ref)}
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
    targets = {op.target for op in ops if isinstance(op, rec.CONTROL_TYPES)}
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
            written = written_regions(op)
            if written:
                valid = {key for key in valid if key[0] not in written}
    return kept


def _ids_blob(kinds: frozenset, handles) -> rec.Blob:
    """A blob of the ids of the graph's handles of ``kinds`` (relocated: laid out at lowering)."""
    chosen = [i for i, handle in enumerate(handles) if handle.kind in kinds]
    return rec.Blob(bytes(8 * max(len(chosen), 1)), tuple(rec.Reloc(8 * j, rec.HandleRef(i)) for j, i in enumerate(chosen)))


def _guard_row(guard, address_of, arena, id_blobs) -> list[int]:
    buffer, count, bound = guard
    if isinstance(bound, frozenset):
        blob = id_blobs[bound]
        return [tbl.OP_CHECK_IDS, 0, address_of(buffer), count, arena.address(blob), len(blob.relocs)]
    return [tbl.OP_CHECK_INDICES, 0, address_of(buffer), count, bound]


def lower(recording, address_of, kernel_addresses: list[int], checked: bool = False, id_arrays=None) -> Program:
    """Build the program of ``recording`` with kernels at the given addresses.

    ``address_of(target)`` is the live address of a region reference (``Ref``), or the id of a native
    handle (``HandleRef``). ``checked`` (a loaded graph) adds the index checks of ``guards``, and of the
    arrays of handle ids ``id_arrays`` names (``apic.format.manifest.check``).
    """
    if recording.abi not in SUPPORTED_ABIS:
        raise ValueError(f"unsupported kernel ABI {recording.abi!r}; this apic calls {SUPPORTED_ABIS}")
    distinct_ops = {id(op): op for op in recording.ops}.values()  # shared ops hold shared blobs
    blobs = [blob for op in distinct_ops for blob in _blobs_of(op)]
    wide = [op for op in distinct_ops if isinstance(op, rec.NativeCall) and len(op.args) > tbl.MAX_ARGS]
    argvs = {id(op): _argv_blob(op) for op in wide}
    meshes = mesh_indices(recording) if checked else []
    guarded = {id(op): guards(op, meshes, id_arrays) for op in distinct_ops} if checked else {}
    id_blobs = {g[2]: _ids_blob(g[2], recording.handles)
                for before, _ in guarded.values() for g in before if isinstance(g[2], frozenset)}
    arena = _Arena(blobs + list(argvs.values()) + list(id_blobs.values()))
    arena.fill(address_of)
    kept = kept_guards(recording.ops, guarded) if checked else None
    rows_before: list = []  # table row of each position of the op sequence (built if a jump needs it)

    def rows_of(position: int, op) -> int:
        if kept is None:
            return not isinstance(op, _NO_ROW)
        return (not isinstance(op, _NO_ROW)) + len(kept[position]) + len(guarded[id(op)][1])

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
        before, after = guarded.get(id(op), ((), ()))
        if before or after:
            first = len(distinct)
            for g in (*before, *after):
                row = _guard_row(g, address_of, arena, id_blobs)
                distinct.append(row + [0] * (tbl.OP_COLUMNS - len(row)))
            rows = list(range(first, len(distinct)))
            guard_rows[id(op)] = (rows[: len(before)], rows[len(before) :])
    for position, op in enumerate(recording.ops):
        before, after = guard_rows.get(id(op), ((), ()))
        if before:
            sequence.extend(before[k] for k in kept[position])
        if position in heads:  # a loop head has a row of its own: it carries its loop's slot
            sequence.append(len(distinct))
            row = _lower_op(op, recording.abi, arena, address_of, kernel_addresses, row_at)
            row = row + [0] * (tbl.OP_COLUMNS - len(row))
            row[tbl.COL_LOOP] = 1 + heads[position]
            distinct.append(row)
            sequence.extend(after)
            continue
        row = row_of.get(id(op))
        if row is None:
            argv = argvs.get(id(op))
            if argv is not None:  # a native call with too many arguments for a row: they live in the arena
                natives.check_host(op.name, len(op.args))
                lowered = [tbl.OP_CALL_ARGV, _compat.native_address(op.name), arena.address(argv)]
                if natives.is_padded_transpose(op.name, len(op.args)):  # its capacity checked first
                    offsets, cols, capacity = address_of(op.args[6]), op.args[1], op.args[11]
                    lowered = [tbl.OP_PADDED_TRANSPOSE, *lowered[1:], offsets, cols, capacity]
            else:
                lowered = _lower_op(op, recording.abi, arena, address_of, kernel_addresses, row_at)
            row = row_of[id(op)] = -1 if lowered is None else len(distinct)
            if isinstance(op, rec.Launch) and recording.kernels[op.kernel].split_writes is not None:
                launch_rows[row] = op
            if lowered is not None:
                distinct.append(lowered + [0] * (tbl.OP_COLUMNS - len(lowered)))
        if row >= 0:
            sequence.append(row)
        sequence.extend(after)
    table = np.array(distinct, dtype=np.int64).reshape(-1, tbl.OP_COLUMNS)[np.array(sequence, dtype=np.intp)]
    splits, refusals = _splits(recording, arena, address_of, launch_rows, sequence)
    return Program(np.ascontiguousarray(table), arena.buffer, len(heads), arena.param_offsets(), splits, refusals)


def _splits(recording, arena: _Arena, address_of, launch_rows: dict, sequence: list[int]):
    """The launches of splittable kernels that may run split (``Split``), and why the others may not."""
    if not launch_rows:
        return (), ()
    def region_span(ref) -> tuple[int, int]:
        region = recording.regions[ref.region]
        return address_of(rec.Ref(ref.region, 0)), region.nbytes

    positions: dict[int, list[int]] = {row: [] for row in launch_rows}
    for position, row in enumerate(sequence):
        if row in positions:
            positions[row].append(position)
    splits, refusals = [], []
    for row, op in launch_rows.items():
        kernel = recording.kernels[op.kernel]
        at = arena.address(op.args) - arena.base
        data = arena.buffer[at : at + len(op.args.data)].tobytes()
        why = "backward launch" if op.adj_args is not None else None
        if why is None and kernel.cpu_blocks:
            why = "runs as cooperative CPU blocks"
        why = why or graph_launch_refusal(data, op.args, kernel.split_writes, region_span)
        if why is not None:
            refusals.append((op.kernel, why))
            continue
        tasks = int(np.prod(op.dim, dtype=np.int64)) if op.dim else 1
        rows = np.array(positions[row], dtype=np.intp)
        writes, reach = fanout.launch_spans(op.args, kernel.split_writes, region_span)
        splits.append(Split(rows, op.kernel, arena.address(op.bounds), arena.address(op.args), tasks, writes, reach))
    return tuple(splits), tuple(refusals)


def control_flow_problem(ops) -> str | None:
    """Why the branches and jumps of an op sequence could loop without a loop head, or None.

    Every loop must pass a branch that counts it (a loop head): a branch only goes forward, and a
    jump goes forward or back to a branch whose forward target lies past the jump (the jump is
    inside the code that branch skips), as ``capture_while`` writes ``L0: branch(-> L2); body;
    jump(-> L0); L2:``. A jump to itself or to anything else that is not such a branch is refused.
    """
    for position, op in enumerate(ops):
        if isinstance(op, rec.Branch) and op.target <= position:
            return f"the branch at position {position} goes back to position {op.target} (branches only go forward)"
        if isinstance(op, rec.Jump) and op.target <= position:
            head = ops[op.target]
            if not isinstance(head, rec.Branch) or head.target <= position:
                return (f"the jump at position {position} goes back to position {op.target}, which is not the "
                        f"branch that ends a loop around it: it could loop forever without a condition")
    return None


def loop_heads(ops) -> dict[int, int]:
    """Position -> slot (0, 1, ...) of every branch that a backward jump returns to."""
    problem = control_flow_problem(ops)
    if problem is not None:
        raise ValueError(f"cannot replay this op sequence: {problem}")
    heads: dict[int, int] = {}
    for position, op in enumerate(ops):
        if isinstance(op, rec.Jump) and op.target <= position:
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


def _call(fn: int, *args: int) -> list[int]:
    # A function of another arity is called with trailing zeros: extra integer arguments are harmless
    # to a C callee on every supported ABI (the caller owns and cleans up the argument area).
    arity = min(n for n in tbl.CALL_OPCODES if n >= len(args))
    return [tbl.CALL_OPCODES[arity], fn, *args, *[0] * (arity - len(args))]


_NO_ROW = (rec.Alloc,)  # ops that lower to no table row


class _Lowering:
    """What lowering one op needs besides the op (the arguments of ``_lower_op``). A plain class with
    slots, not a frozen dataclass: one is made per distinct op, and that costs a third as much."""

    __slots__ = ("abi", "arena", "address_of", "kernel_addresses", "row_at")

    def __init__(self, abi: str, arena: _Arena, address_of, kernel_addresses: list, row_at) -> None:
        self.abi, self.arena, self.address_of, self.kernel_addresses, self.row_at = (
            abi, arena, address_of, kernel_addresses, row_at)


def _lower_op(op, abi: str, arena: _Arena, address_of, kernel_addresses, row_at) -> list[int] | None:
    """One op-table row (as a list) for ``op``, or None when there is nothing to run (``_LOWER``, by op kind).

    ``row_at(position)`` is the table row of a position in the op sequence (for jump targets).
    """
    lower = rec.handler(_LOWER, op, "lowering a graph for CPU replay")
    return lower(op, _Lowering(abi, arena, address_of, kernel_addresses, row_at))


def _lower_launch(op: rec.Launch, low: _Lowering) -> list[int]:
    fn = low.kernel_addresses[op.kernel]
    args = low.arena.address(op.args)
    adj = low.arena.address(op.adj_args) if op.adj_args is not None else None
    if low.abi == ABI_BY_VALUE and _compat.SYSV_X86_64:
        # The 32-byte bounds struct goes on the stack after the six register arguments:
        # call f(args, [adj], 0, ..., q0, q1, q2, q3) with ten integer arguments.
        regs = [args] if adj is None else [args, adj]
        regs += [0] * (6 - len(regs))
        return _call(fn, *regs, *_BOUNDS_QWORDS.unpack_from(op.bounds.data.ljust(32, b"\0")))
    # By pointer (1.13+), or by value on Win64/AArch64, where the caller passes a pointer to a copy.
    bounds = low.arena.address(op.bounds)
    return _call(fn, bounds, args) if adj is None else _call(fn, bounds, args, adj)


def _lower_native_call(op: rec.NativeCall, low: _Lowering) -> list[int]:
    natives.check_host(op.name, len(op.args))
    passed = op.args[: natives.native_arity(op.name, len(op.args))]  # apic's own trailing arguments are not
    row = _call(_compat.native_address(op.name), *[low.address_of(a) if isinstance(a, rec.Ref) else a for a in passed])
    if op.name.startswith("segmented_sort_pairs_"):
        row[0] = tbl.OP_SEGMENTED_SORT  # the same call, after the range check upstream's replay makes
    return row


def _lower_handle_call(op: rec.HandleCall, low: _Lowering) -> list[int]:
    """``wp_<name>(id, ...)``; a hash grid build passes its radius as a C double (argument 2)."""
    fn = _compat.native_address(op.name)
    handle = low.address_of(op.handle)
    if op.name != "hash_grid_update_host":
        return _call(fn, handle, *op.ints)
    groups = low.arena.address(op.groups) if op.groups is not None else 0  # an array descriptor (warp 1.19)
    radius_bits = _I64.unpack(struct.pack("<d", op.radius))[0]
    # warp <= 1.12 takes no groups argument: the extra integer is harmless to a C callee (see _call)
    return [tbl.OP_CALL5_D2, fn, handle, op.ints[0], radius_bits, low.arena.address(op.points), groups]


_LOWER = {  # op type -> (op, _Lowering) -> one table row, or None for an op with nothing to run (_NO_ROW)
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
    rec.CudaLaunch: rec.Refused("cannot lower op {type}: a CUDA graph replays through apic.replay.cuda"),
}
