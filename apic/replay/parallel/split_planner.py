"""Which rows of a program run on several threads (parallel replay, docs/PARALLEL.md).

The lowering finds the launches that may be split (``program.Split``: kernels proved splittable at
capture, launches checked on their arguments). For a replay on ``threads`` threads, :func:`plan`
turns them into ``OP_SPLIT`` rows of work items (``table.ITEM_*``), in two ways:

* **a large launch** (at least two threads' worth of ``min_tasks_per_thread`` tasks) is cut into
  ``CHUNKS_PER_THREAD`` chunks per thread;
* **consecutive independent launches** (no launch writes a region another one reads or writes) form
  one row whose items are those launches: the threads share the chunks of all of them, and wait for
  each other once per row instead of once per launch. The row is cut as one launch of all their
  tasks would be, its chunks shared among the launches by their tasks; a launch too small to split
  alone runs whole. Such a group runs only if it is large enough as a whole.

Independence is judged on whole regions (allocations), by address span, not on the exact extents
of the arrays: two launches over disjoint views of one allocation stay apart. Rows that a jump or
branch lands on start a new group (a group's later rows become ``OP_NOP`` rows, so control must
not enter it in the middle). Everything else keeps its serial row.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from apic.record.ops import HandleRef
from apic.record.parallel.splittable import spans_overlap
from apic.replay.parallel import plan_costs
from apic.replay.cpu import table as tbl
from apic.replay.parallel import thread_count
from apic.replay.parallel.plan_costs import MIN_NS_PER_THREAD

CHUNKS_PER_THREAD = 4  # more chunks than threads: a thread the OS runs late leaves its share to the others
MAX_GROUP = 16  # launches in one row at most (a chunk's item is found by a linear search)


def launch_spans(blob, split_writes: tuple[int, ...], region_span) -> tuple[tuple, tuple]:
    """``(writes, reach)`` of one launch's packed arguments ``blob``: the ``(address, nbytes)`` spans of
    the regions its written arrays lie in, and of every region any of its pointers reaches."""
    written = set(split_writes)
    writes, reach = [], []
    for reloc in blob.relocs:
        if isinstance(reloc.target, HandleRef):  # refused by the launch check before this is asked
            raise ValueError("a launch holding a native handle id has no known memory reach")
        span = region_span(reloc.target)
        reach.append(span)
        if reloc.at in written:  # the data pointer of a written array_t (its first field)
            writes.append(span)
    return tuple(writes), tuple(reach)


def _independent(a, b) -> bool:
    return not (spans_overlap(a.writes, b.reach) or spans_overlap(b.writes, a.reach))


def jump_targets(table: np.ndarray) -> set[int]:
    """The rows a jump or branch of ``table`` may continue at."""
    ops = table[:, tbl.COL_OPCODE]
    return {int(target) for spec in tbl.JUMPS for target in table[ops == spec.number, spec.column(spec.jump)]}


def _chunks(tasks: int, threads: int, min_tasks: int, ns: int | None = None,
            per_thread: int = MIN_NS_PER_THREAD) -> int:
    """The chunks ``tasks`` tasks are cut into: ``CHUNKS_PER_THREAD`` per thread, on as many threads (up to
    ``threads``) as have ``min_tasks`` tasks each, or, given its measured time ``ns``, as have
    ``per_thread`` ns of it (1: too little to share between two threads)."""
    ranges = min(threads, tasks // max(min_tasks, 1))
    if ns is not None:
        ranges = max(ranges, min(threads, tasks, ns // max(per_thread, 1)))
    return min(tasks, ranges * CHUNKS_PER_THREAD) if ranges >= 2 else 1


def _cuts(tasks: list[int], threads: int, min_tasks: int, times: list[int] | None = None,
          per_thread: int = MIN_NS_PER_THREAD) -> list[int] | None:
    """The chunks of each launch of a row of independent launches, or None when the row is too small
    to fan out. The row as a whole gets the chunks its total would get as one launch, shared in
    proportion to the launches' tasks and rounded up to a multiple of the threads that would share the
    launch alone (at least one chunk each); a launch too small to split alone runs whole. (Each chunk costs
    a range-entry call: W4's rows of four 25,000-task launches on 2 threads run 8 chunks, not 32. Tasks
    are no measure of time, though: in a mujoco-warp step, a tile kernel's 256 tasks, one per world,
    take fifty times as long as the 4,000 small tasks launched beside them.) Given the launches' measured
    ``times`` (ns), they also decide what splits, and the row's chunks are shared by time."""
    row = _chunks(sum(tasks), threads, min_tasks, sum(times) if times is not None else None, per_thread)
    if row == 1:
        return None
    weights = times if times is not None and sum(times) > 0 else tasks
    cuts = []
    for k, n in enumerate(tasks):
        alone = _chunks(n, threads, min_tasks, times[k] if times is not None else None, per_thread)
        ranges = alone // CHUNKS_PER_THREAD  # the threads that would share it alone (0: it runs whole)
        share = round(row * weights[k] / sum(weights))
        # a multiple of those threads: 7 chunks of one launch on 2 threads would leave one thread 4 of them
        cuts.append(min(alone, max(ranges, -(-share // ranges) * ranges)) if ranges else 1)
    return cuts


def _basis(tasks: list[int], times: list[int] | None, min_tasks: int, boundary: int | None, split: bool,
           by_tasks: bool) -> str:
    """What decided whether a row of launches (``tasks``, measured ``times``) fans out (``parallel_report``)."""
    row = f"{sum(tasks):,} tasks" + (f" in {len(tasks)} independent launches" if len(tasks) > 1 else "")
    if by_tasks:
        return f"split by size: {row}, at least 2 x {min_tasks} (min_tasks_per_thread)"
    small = f"fewer than 2 x {min_tasks} tasks, alone or with the independent launches next to it"
    if boundary is None:
        return small
    if sum(tasks) < 2:
        return f"{small}; fewer than 2 tasks"
    measured = (f"{sum(times) / 1e3:.0f} us (median of {plan_costs.TIMED_REPLAYS} timed serial replays), "
                f"{'at least' if split else 'under'} the boundary {boundary / 1e3:.0f} us")
    return f"split by time: {row}, {measured}" if split else f"{small}; {row}: {measured}"


@dataclass(frozen=True)
class Plan:
    """A parallel table and what it fans out. ``items`` and ``per_thread`` must stay alive as long as ``table``."""

    table: np.ndarray
    items: np.ndarray
    per_thread: np.ndarray  # the per-thread range entries of items that have them, one row each
    guards: list  # per OP_SPLIT row with footprint launches: its guards' (address, copy, nbytes) rows
    chunks: dict  # table row of a launch that runs on several threads -> chunks it is cut into
    together: dict  # that row -> launches its OP_SPLIT row runs (1: split alone)


def _groups(table: np.ndarray, candidates: dict) -> list[list[int]]:
    """Runs of consecutive candidate rows, pairwise independent, none but the first a jump target."""
    targets = jump_targets(table)
    groups: list[list[int]] = []
    for row in sorted(candidates):
        group = groups[-1] if groups else None
        if (group and row == group[-1] + 1 and row not in targets and len(group) < MAX_GROUP
                and all(_independent(candidates[row][0], candidates[other][0]) for other in group)):
            group.append(row)
        else:
            groups.append([row])
    return groups


def plan(table: np.ndarray, splits, threads: int, min_tasks: int, range_entry_of, splitter: int,
         control: int, row_ns: np.ndarray | None = None, basis: dict | None = None) -> Plan | None:
    """The parallel version of ``table`` for ``threads`` threads, or None when nothing fans out.

    ``splits`` are the program's ``Split`` launches, ``range_entry_of(kernel, slots)`` a kernel's range
    entry address (0 or None: its launches stay serial) or a tuple of ``slots`` of them, one per thread
    slot (a kernel using tiles, ``range_entry.per_thread_entries``), ``splitter`` and ``control`` the
    native splitter and its pool's control block (``apic.replay.parallel.split_pool``). ``row_ns``, each row's time
    in a serial replay (ns, ``plan_costs.RowTimes``), lets a launch whose time pays for a split split
    whatever its tasks: a row of launches measured at ``plan_costs.boundary`` of the rows so decided or
    more. ``basis``, when given, receives for each launch with a range entry (by table row) what decided.
    """
    slots = thread_count.running(threads)  # the threads the pool runs a replay of this table on, at most
    candidates = {}  # table row -> (split, range entry or per-thread entries)
    for split in splits:
        entry = range_entry_of(split.kernel, slots)
        if entry:
            candidates.update((int(row), (split, entry)) for row in split.rows)
    groups = _groups(table, candidates)
    by_tasks = {g[0]: _chunks(sum(candidates[row][0].tasks for row in g), threads, min_tasks) > 1 for g in groups}
    # the rows whose time alone decides (too few tasks, at least two): the boundary is put in a gap between them
    timed = [sum(int(row_ns[row]) for row in g) for g in groups
             if row_ns is not None and not by_tasks[g[0]] and sum(candidates[row][0].tasks for row in g) >= 2]
    boundary = plan_costs.boundary(timed) if row_ns is not None else None
    per_thread = boundary // 2 if boundary is not None else MIN_NS_PER_THREAD
    chosen = []
    for group in groups:
        tasks = [candidates[row][0].tasks for row in group]
        times = [int(row_ns[row]) for row in group] if row_ns is not None else None
        cuts = _cuts(tasks, threads, min_tasks, times, per_thread)
        if cuts is not None:
            chosen.append((group, cuts))
        if basis is not None:
            basis.update((row, _basis(tasks, times, min_tasks, boundary, cuts is not None, by_tasks[group[0]]))
                         for row in group)
    if not chosen:
        return None
    items = np.zeros((sum(len(group) for group, _ in chosen), tbl.ITEM_WORDS), dtype=np.int64)
    per_thread = np.array([candidates[row][1] for group, _ in chosen for row in group
                           if isinstance(candidates[row][1], tuple)], dtype=np.int64).reshape(-1, slots)
    parallel = table.copy()
    guards = []
    chunks, together = {}, {}
    k = n_per_thread = 0
    for group, cuts in chosen:
        first_item, first_chunk, row_slots = k, 0, 0
        for row, cut in zip(group, cuts):
            split, entry = candidates[row]
            entries = 0
            if isinstance(entry, tuple):  # each thread slot runs this launch in its own loaded copy
                entry, entries, row_slots = entry[0], per_thread[n_per_thread].ctypes.data, slots
                n_per_thread += 1
            items[k] = (entry, split.bounds, split.args, split.tasks, cut, first_chunk, entries)
            first_chunk += cut
            chunks[row], together[row] = cut, len(group)
            parallel[row] = 0  # OP_NOP: the group's first row runs it
            k += 1
        address = items.ctypes.data + first_item * tbl.ITEM_WORDS * 8
        # footprint launches split only while the bytes their verdicts read are as they were (else serially)
        held = [candidates[row][0].guards.table for row in group if candidates[row][0].guards is not None]
        guard_rows = np.concatenate(held) if held else np.zeros((0, 3), dtype=np.int64)
        if held:
            guards.append(guard_rows)
        parallel[group[0], : tbl.COL_ARG0 + 7] = (tbl.OP_SPLIT, splitter, control, address, len(group), first_chunk,
                                                  row_slots, guard_rows.ctypes.data if held else 0, len(guard_rows))
    return Plan(parallel, items, per_thread, guards, chunks, together)
