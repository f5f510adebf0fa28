"""The op-table layout shared by the lowering (``lowering.py``) and the interpreter.

Each row is ``OP_COLUMNS`` int64 values: ``[opcode, function address, arg0 .. arg9]``. For a call the
opcode is the number of integer arguments the native function takes; 0 does nothing. Two opcodes
move the program counter instead (their targets are row numbers; the table's length ends the replay):

* ``OP_JUMP``: ``[OP_JUMP, 0, target]``, continue at row ``target``;
* ``OP_BRANCH_IF_ZERO``: ``[OP_BRANCH_IF_ZERO, 0, address, target]``, continue at row ``target`` if the
  int32 at ``address`` is zero, else at the next row.

``OP_CALL5_D2`` calls a function of five arguments whose third is a C ``double`` (held as its bits).

``OP_SPLIT`` runs one or more independent kernel launches, each cut into contiguous task chunks (parallel
replay, docs/PARALLEL.md): ``[OP_SPLIT, splitter, control block, items, count, chunks, slots, guards,
guard count]``. ``items``
is the address of ``count`` work items of ``ITEM_WORDS`` int64 each (``ITEM_*`` below): a launch's range
entry, bounds, arguments, tasks, its number of chunks, the index of its first chunk in the row's
``chunks``, and 0 or the address of ``slots`` range entries, one per thread slot (a kernel using tiles:
each thread runs it in its own loaded copy, ``range_entry.per_thread_entries``). Thread slot 0 is the
replaying thread, slot ``k`` pooled worker ``k - 1``; ``slots`` is 0 when no item has such entries, and
otherwise no thread of slot ``slots`` or above runs a chunk of the row. The Numba interpreter calls
``splitter(control block, items, count, chunks, slots, guards, guard count)`` (``apic.replay.parallel.split_pool``: the
chunks shared with worker threads); the reference interpreter runs each chunk in turn, itself. ``guards``
is 0 or the address of ``guard count`` rows ``(address, copy, nbytes)`` of int64: the bytes the verdicts
of the row's footprint launches read, and a copy of them; where one differs, the row runs serially.

``OP_SEGMENTED_SORT`` is Warp's segmented sort ``[OP_SEGMENTED_SORT, fn, keys, values, count, starts,
ends, segments]``: it first checks every segment range ``0 <= start <= end <= count`` in graph memory,
as upstream Warp's replay does, and stops the replay before the sort at the first invalid one.

``OP_PADDED_TRANSPOSE`` is a BSR transpose into padded rows ``[OP_PADDED_TRANSPOSE, fn, argv, t_offsets,
cols, capacity]`` (its arguments in the arena, as ``OP_CALL_ARGV``'s): it first checks that the
destination's row offsets in graph memory start at 0 or more, never decrease and end within the
recorded ``capacity`` (the bytes the call may write were checked for that capacity at load), and
stops the replay before the call otherwise.

``OP_CHECK_IDS``: ``[OP_CHECK_IDS, 0, address, count, ids, n]``, go on only if each of the ``count``
uint64 at ``address`` is one of the ``n`` uint64 at ``ids`` (the ids of the handles of the kinds a
kernel's array of handle ids held at capture); otherwise stop the replay there (status ``-(row + 1)``).

``OP_CHECK_INDICES``: ``[OP_CHECK_INDICES, 0, address, count, bound]``, go on only if each of the
``count`` int32 at ``address`` lies in ``[0, bound)``; otherwise stop the replay there (status ``-(row + 1)``). A
loaded graph has one before each op whose native code indexes with such values (an indexed array's
index buffer) and after each op that may write a Mesh's triangle indices (``guards.py``).

The CUDA opcodes run a loaded CUDA graph's replay (``apic/replay/cuda/rows.py``): each calls a CUDA driver function by
address and stops the replay where it returns an error (status ``-(row + 1)``; the call was made and failed,
the rows before it were issued). ``cuda`` is the address of the table's CUDA block (``CUDA_*`` words below):
the stream every row issues on, the graph's context, the ``CUresult`` of the call that failed.

* ``OP_CUDA_LAUNCH``: ``cuLaunchKernel(function, grid x, y, z, block x, y, z, smem, stream, params, NULL)``;
* ``OP_CUDA_CALL3``: ``fn(arg0, arg1, arg2, stream)``: ``cuMemcpyDtoDAsync``, ``cuMemsetD8/D16/D32Async``;
* ``OP_CUDA_CALL1``: ``fn(arg0, stream)``: ``cuGraphLaunch``;
* ``OP_CUDA_ENTER``: ``[OP_CUDA_ENTER, cuCtxPushCurrent, cuda, cuCtxGetCurrent]``: make the graph's context
  current unless it is (word ``CUDA_PUSHED`` says whether it pushed it);
* ``OP_CUDA_LEAVE``: ``[OP_CUDA_LEAVE, cuCtxPopCurrent, cuda]``: pop what ``OP_CUDA_ENTER`` pushed. A replay
  that stops between the two pops it too (``cuCtxPopCurrent`` at word ``CUDA_POP``), before it returns.

A call with more than ``MAX_ARGS`` arguments (Warp's BSR builders take up to 17) keeps them in the
arena instead: ``[OP_CALL_ARGV, function address, address of ARGV_ARGS int64 arguments]``; the
unused trailing ones are zero.

``OPCODES`` below holds what every reader of a table needs to know of each opcode: its columns, whether
it may stop a replay and what error that raises, and where it may jump. Lowering, both interpreters,
``program.raise_status``, the profile and the parallel planner read it; ``tests/replay/test_opcodes.py`` runs
every opcode it lists through both interpreters.

Kept apart from the interpreter so that building a table never imports Numba.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Callable

from apic.errors import ReplayError, ReplayIndexError
from apic.replay.cuda.driver import CudaReplayError, result_name
from apic.record import natives

COL_OPCODE = 0
COL_FN = 1
COL_ARG0 = 2
MAX_ARGS = 10
OP_COLUMNS = COL_ARG0 + MAX_ARGS

OP_NOP = 0
OP_CALL2 = 2
OP_CALL3 = 3
OP_CALL4 = 4
OP_CALL5 = 5
OP_CALL10 = 10
CALL_OPCODES = {2: OP_CALL2, 3: OP_CALL3, 4: OP_CALL4, 5: OP_CALL5, 10: OP_CALL10}
OP_JUMP = 16
OP_BRANCH_IF_ZERO = 17
OP_CALL5_D2 = 19  # five arguments, the third a C double (its bits in the row): a hash grid build
OP_CALL_ARGV = 18
OP_SPLIT = 20  # launches run on several threads: [OP_SPLIT, splitter, control, items, count, chunks, slots, guards,
#                guard count]
ARGV_ARGS = 20
OP_SEGMENTED_SORT = 21  # a row like OP_CALL10's (keys, values, count, starts, ends, segments, then zeros)
OP_PADDED_TRANSPOSE = 22
OP_CHECK_INDICES = 23  # a loaded graph's check of index values (apic.replay.guards)
OP_CHECK_IDS = 24  # a loaded graph's check of an array of handle ids
OP_CUDA_LAUNCH = 25  # cuLaunchKernel, its result checked
OP_CUDA_CALL3 = 26  # a driver call (three arguments, then the stream), its result checked
OP_CUDA_CALL1 = 27  # a driver call (one argument, then the stream), its result checked
OP_CUDA_ENTER = 28  # the graph's CUDA context made current (unless it is)
OP_CUDA_LEAVE = 29  # and popped again

# The driver functions CUDA rows call, by address: their names (``cuda_rows.driver_entries`` fills it)
CUDA_NAMES: dict[int, str] = {}
# The CUDA block of a table of CUDA rows (int64 words at ``cuda + 8 * CUDA_*``): the stream the rows issue on,
# the CUresult of a call that failed, the graph's context, whether OP_CUDA_ENTER pushed it, a word the
# context calls write, the address of cuCtxPopCurrent (a stopped replay pops what it pushed).
CUDA_STREAM, CUDA_ERROR, CUDA_CONTEXT, CUDA_PUSHED, CUDA_SCRATCH, CUDA_POP = range(6)
CUDA_WORDS = 6

# An OP_SPLIT row's work item: int64 words at ``items + 8 * (ITEM_WORDS * k + ITEM_*)``.
ITEM_ENTRY, ITEM_BOUNDS, ITEM_ARGS, ITEM_TASKS, ITEM_CHUNKS, ITEM_FIRST, ITEM_PER_THREAD = range(7)
ITEM_WORDS = 7

# A branch row's fifth column: 0, or 1 + the slot of the loop it heads (a backward jump returns to it).
# The interpreter counts each loop's iterations in its slot and resets the count when the loop exits.
COL_LOOP = 4

# What run_table returns.
STATUS_DONE = 0
STATUS_INTERRUPTED = 1  # Ctrl-C arrived during the replay: it stopped at a branch, jump or repeat
STATUS_LOOP_CAP = 2  # a loop ran more iterations than the cap: the replay stopped there
# A negative status -(i + 1): the check of row i failed (a segmented sort's range, a padded transpose's
# row offsets, index values or handle ids in graph memory) and the replay stopped there, before the op
# (memory is as it was then).

# run_table's ``limits`` (int64 array): the iteration cap per loop entry (0: no cap), then the
# addresses of PyGILState_Ensure, PyOS_InterruptOccurred and PyGILState_Release (0: no Ctrl-C poll).
LIMIT_ITERATIONS = 0
LIMIT_GIL_ENSURE = 1
LIMIT_INTERRUPTED = 2
LIMIT_GIL_RELEASE = 3
LIMITS_SIZE = 4
SIGNAL_PERIOD = 256  # control transfers between two Ctrl-C polls (a power of two)
DEFAULT_MAX_LOOP_ITERATIONS = 1 << 24  # as upstream Warp's CPU replay of a conditional loop


# --- what each opcode is ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Opcode:
    """One opcode of the op table."""

    number: int
    name: str
    columns: tuple[str, ...]  # what columns COL_ARG0, COL_ARG0 + 1, ... hold
    stops: Callable | None = None  # it may stop a replay (status -(row + 1)): (row, row index) -> the exception
    jump: str | None = None  # the column holding a row it may continue at (a jump or a branch)
    calls: int | None = None  # for a checked native call: the opcode whose call it makes after its check
    natives: tuple[tuple[str, int], ...] = ()  # (name, recorded arity) of the native calls lowered to it
    check_args: tuple[int, ...] = ()  # their arguments its check reads, after the call's columns (by position)
    guard: bool = False  # a loaded graph's check of graph memory (``guards.py``), not the row of an op

    def column(self, name: str) -> int:
        """The table column of the value ``name``."""
        return COL_ARG0 + self.columns.index(name)


def _loaded_graph_stop(what: str) -> Callable:
    def error(row, at: int) -> Exception:
        return ReplayIndexError(
            f"CPU graph replay failed: the replay of a loaded graph stopped at op-table row {at}: graph memory "
            f"holds {what}, which the next op's native code would use; the graph's memory is as the replay left it")
    return error


def _segment_stop(row, at: int) -> Exception:
    """What is wrong with the segment ranges of an ``OP_SEGMENTED_SORT`` row, read from graph memory (the
    replay stopped at that row, so memory holds what it saw); upstream Warp's words."""
    spec = OPCODES[OP_SEGMENTED_SORT]
    count, starts, ends, segments = (int(row[spec.column(c)]) for c in ("count", "starts", "ends", "segments"))
    found = natives.invalid_segment(count, starts, ends, segments)
    if found is not None:
        k, start, end = found
        return ReplayError(f"CPU graph replay failed: Warp sort error: Invalid segment range at index {k}: "
                           f"[{start}, {end}) for count {count} (wp.utils.segmented_sort_pairs; the replay "
                           "stopped before this sort)")
    return ReplayError("CPU graph replay failed: a segmented sort found an invalid segment range "
                       "(wp.utils.segmented_sort_pairs)")


def _capacity_stop(row, at: int) -> Exception:
    """What is wrong with the row offsets of an ``OP_PADDED_TRANSPOSE`` row's destination."""
    spec = OPCODES[OP_PADDED_TRANSPOSE]
    offsets, rows, capacity = (int(row[spec.column(c)]) for c in ("offsets", "rows", "capacity"))
    layout = natives.row_offsets(offsets, rows)
    return ReplayError(
        f"CPU graph replay failed: the row offsets of a padded bsr_set_transpose destination ({layout[0]} .. "
        f"{layout[-1]}) are not non-decreasing from 0 or more within its recorded capacity of {capacity} blocks "
        "(they are restored from the capture right before it: the file was changed); the replay stopped before "
        "the transpose")


def _cuda_stop(row, at: int) -> Exception:
    """The driver call of a CUDA row returned an error: which call, and the ``CUresult`` its block holds."""
    spec = OPCODES[int(row[COL_OPCODE])]
    cuda = int(row[spec.column("cuda")])
    code = ctypes.c_int64.from_address(cuda + 8 * CUDA_ERROR).value
    fn = int(row[COL_FN])
    name = CUDA_NAMES.get(fn, f"the driver function at {fn:#x}")
    if spec.number == OP_CUDA_ENTER:
        name = f"{CUDA_NAMES.get(int(row[spec.column('get_current')]), '?')} or {name}"
    return CudaReplayError(
        f"CUDA graph replay failed: {name} returned {result_name(code)} ({code}) at op-table row {at}; the ops "
        "before it were issued to the stream, none after it")


def _args(n: int) -> tuple[str, ...]:
    return tuple(f"arg{k}" for k in range(n))


OPCODES: dict[int, Opcode] = {spec.number: spec for spec in (
    Opcode(OP_NOP, "nop", ()),
    *(Opcode(number, f"call{n}", _args(n)) for n, number in CALL_OPCODES.items()),
    Opcode(OP_JUMP, "jump", ("target",), jump="target"),
    Opcode(OP_BRANCH_IF_ZERO, "branch_if_zero", ("address", "target", "loop"), jump="target"),
    Opcode(OP_CALL_ARGV, "call_argv", ("argv",)),
    Opcode(OP_CALL5_D2, "call5_d2", _args(5)),
    Opcode(OP_SPLIT, "split", ("control", "items", "count", "chunks", "slots", "guards", "guard_count")),
    Opcode(OP_SEGMENTED_SORT, "segmented_sort", ("keys", "values", "count", "starts", "ends", "segments"),
           stops=_segment_stop, calls=OP_CALL10,
           natives=(("segmented_sort_pairs_int_host", 6), ("segmented_sort_pairs_float_host", 6))),
    # the padded transpose's recorded arguments end with apic's own capacity (apic.record.natives)
    Opcode(OP_PADDED_TRANSPOSE, "padded_transpose", ("argv", "offsets", "rows", "capacity"), stops=_capacity_stop,
           calls=OP_CALL_ARGV, natives=(("bsr_transpose_host", 12),), check_args=(6, 1, 11)),
    Opcode(OP_CHECK_INDICES, "check_indices", ("address", "count", "bound"), guard=True, stops=_loaded_graph_stop(
        "an index outside its array (an indexed array's index buffer, or a Mesh's triangle indices)")),
    Opcode(OP_CUDA_LAUNCH, "cuda_launch", ("function", "grid_x", "grid_y", "grid_z", "block_x", "block_y",
                                           "block_z", "smem", "params", "cuda"), stops=_cuda_stop),
    Opcode(OP_CUDA_CALL3, "cuda_call3", ("arg0", "arg1", "arg2", "cuda"), stops=_cuda_stop),
    Opcode(OP_CUDA_CALL1, "cuda_call1", ("arg0", "cuda"), stops=_cuda_stop),
    Opcode(OP_CUDA_ENTER, "cuda_enter", ("cuda", "get_current"), stops=_cuda_stop),
    Opcode(OP_CUDA_LEAVE, "cuda_leave", ("cuda",), stops=_cuda_stop),
    Opcode(OP_CHECK_IDS, "check_ids", ("address", "count", "ids", "n"), guard=True, stops=_loaded_graph_stop(
        "an array of handle ids with a value that is not the id of a handle of the kinds its kernel took")),
)}
JUMPS: tuple[Opcode, ...] = tuple(spec for spec in OPCODES.values() if spec.jump)
CHECKED_CALLS: dict[tuple[str, int], Opcode] = {call: spec for spec in OPCODES.values() for call in spec.natives}
assert all(len(spec.columns) <= MAX_ARGS for spec in OPCODES.values())
assert COL_LOOP == OPCODES[OP_BRANCH_IF_ZERO].column("loop")


def stop_error(status: int, table) -> Exception:
    """The exception for a replay of ``table`` that stopped with the negative status ``status`` (at row
    ``-status - 1``): what its opcode says, or a ``ReplayError`` naming an opcode no interpreter runs."""
    at = -status - 1
    row = table[at]
    spec = OPCODES.get(int(row[COL_OPCODE]))
    if spec is None or spec.stops is None:
        return ReplayError(f"CPU graph replay failed: op-table row {at} holds opcode {int(row[COL_OPCODE])}, "
                           "which the interpreter does not run; the replay stopped there")
    return spec.stops(row, at)
