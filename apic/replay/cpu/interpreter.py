"""The CPU replay interpreter: one Numba-jitted loop over a flat table of native calls.

Each row of the op table (layout in ``table.py``) is ``[opcode, function address, arg0 .. arg9]``, the
opcode being the number of integer arguments of the native function, or a jump. The lowering in
``lowering.py`` has already turned every recorded operation (kernel launch, memcpy, memset, memtile,
strided copy and fill, native utility call, branch) into such a row with every pointer resolved, so
the loop below never sees a Python object and makes no Python call per operation.

One loop, ``run_rows``, runs a table both for a replay (``run_table``) and for ``apic.profile``
(``run_table_profiled``: a clock read after each row, in a version Numba compiles only for the
profile's arguments), so what a row does is written once. Both callers live in this file because
Numba's on-disk cache of a function is keyed on its own file only: a loop elsewhere inlining this
one would go stale after an edit here.

Guards keep a replay finite, interruptible and what native code indexes with in range (see
``table.py`` for the ``limits`` layout):

* a loop head (a branch that a backward jump returns to) counts the iterations of its loop; past
  ``limits[LIMIT_ITERATIONS]`` the replay stops and returns ``STATUS_LOOP_CAP`` (the caller raises);
* a segmented sort checks its segment ranges in graph memory first, a padded BSR transpose its
  destination's row offsets, and on an invalid one stops the replay there and returns ``-(row + 1)``
  (the caller raises, naming what is wrong); so do an ``OP_CHECK_INDICES`` row (index values out of
  range) and an ``OP_CHECK_IDS`` row (an array of handle ids holding another value), in a loaded graph;
* every ``SIGNAL_PERIOD`` control transfers (branches, jumps, repeats) it asks Python, with the GIL
  taken for that moment, whether Ctrl-C arrived (``PyOS_InterruptOccurred``), and stops with
  ``STATUS_INTERRUPTED`` if so. Only where ``limits`` holds the three C-API addresses (the main
  thread: signals are only ever handled there); elsewhere the poll is skipped.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from apic.replay.cpu import table as _table
from apic.replay.cpu._intrinsics import (
    call0_i32, call1, call1_i32, call2, call2_i32, call3, call4, call4_i32, call5, call5_d2, call10, call11_i32,
    call_argv20, load_i32, load_i32_at, load_i64_at, now_ns, store_i64_at,
)
from apic.replay.cpu.jit_cache import CACHE

# Numba freezes these literals into its on-disk cache, which is keyed on this file only: keep them
# spelled out below and checked against table.py here.
assert (_table.OP_JUMP, _table.OP_BRANCH_IF_ZERO, _table.OP_CALL_ARGV, _table.ARGV_ARGS, _table.OP_CALL5_D2) == (
    16, 17, 18, 20, 19
)
assert (_table.OP_SPLIT, _table.OP_SEGMENTED_SORT, _table.OP_PADDED_TRANSPOSE) == (20, 21, 22)
assert (_table.COL_LOOP, _table.STATUS_DONE, _table.STATUS_INTERRUPTED, _table.STATUS_LOOP_CAP) == (4, 0, 1, 2)
assert (_table.LIMIT_ITERATIONS, _table.LIMIT_GIL_ENSURE, _table.LIMIT_INTERRUPTED, _table.LIMIT_GIL_RELEASE) == (
    0, 1, 2, 3
)
assert _table.SIGNAL_PERIOD == 256
assert (_table.OP_CHECK_INDICES, _table.OP_CHECK_IDS) == (23, 24)
assert (_table.COL_OPCODE, _table.COL_FN, _table.COL_ARG0, _table.LIMITS_SIZE) == (0, 1, 2, 4)
# the opcodes run_rows dispatches, and nothing else: tests/replay/test_opcodes.py runs each through it
assert (_table.OP_CUDA_LAUNCH, _table.OP_CUDA_CALL3, _table.OP_CUDA_CALL1, _table.OP_CUDA_ENTER,
        _table.OP_CUDA_LEAVE) == (25, 26, 27, 28, 29)
assert (_table.CUDA_STREAM, _table.CUDA_ERROR, _table.CUDA_CONTEXT, _table.CUDA_PUSHED, _table.CUDA_SCRATCH,
        _table.CUDA_POP) == (0, 1, 2, 3, 4, 5)
assert set(_table.OPCODES) == {0, 2, 3, 4, 5, 10, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29}


@njit(cache=CACHE, nogil=True)
def indices_in_range(address, count, bound):
    """Whether each of the ``count`` int32 at ``address`` lies in ``[0, bound)`` (an OP_CHECK_INDICES row)."""
    # the smallest and the largest value, without an early exit: a reduction LLVM vectorizes
    lo = np.int32(0)
    hi = np.int32(0)
    for k in range(count):
        value = load_i32_at(address, k)
        lo = min(lo, value)
        hi = max(hi, value)
    return lo >= 0 and (count == 0 or hi < bound)


@njit(cache=CACHE, nogil=True)
def ids_known(address, count, ids, n):
    """Whether each of the ``count`` uint64 at ``address`` is one of the ``n`` at ``ids`` (OP_CHECK_IDS)."""
    for k in range(count):
        value = load_i64_at(address, k)
        found = False
        for j in range(n):
            if load_i64_at(ids, j) == value:
                found = True
                break
        if not found:
            return False
    return True


@njit(cache=CACHE, nogil=True)
def _interrupted(limits):
    """Whether Ctrl-C arrived since the last poll (takes the GIL for the question; main thread only)."""
    if limits[1] == 0:
        return False
    state = call0_i32(limits[1])  # PyGILState_Ensure
    hit = call0_i32(limits[2])  # PyOS_InterruptOccurred: also clears the flag; the caller re-raises
    call1(limits[3], state)  # PyGILState_Release
    return hit != 0


@njit(cache=CACHE, nogil=True)
def cuda_enter(push, cuda, get_current):
    """Make the context in word 2 of the CUDA block ``cuda`` current unless it is (word 3: 1 if pushed); the
    ``CUresult`` of the call that failed, or 0."""
    err = call1_i32(get_current, cuda + 32)  # cuCtxGetCurrent(&block[CUDA_SCRATCH])
    if err != 0:
        return err
    if load_i64_at(cuda, 4) == load_i64_at(cuda, 2):
        store_i64_at(cuda, 3, 0)
        return 0
    err = call1_i32(push, load_i64_at(cuda, 2))  # cuCtxPushCurrent(context)
    if err == 0:
        store_i64_at(cuda, 3, 1)
    return err


@njit(cache=CACHE, nogil=True)
def cuda_leave(pop, cuda):
    """Pop the context ``cuda_enter`` pushed, if it did; the ``CUresult`` of the pop, or 0."""
    if load_i64_at(cuda, 3) == 0:
        return 0
    store_i64_at(cuda, 3, 0)  # popped or not, never popped twice
    return call1_i32(pop, cuda + 32)  # cuCtxPopCurrent(&block[CUDA_SCRATCH])


@njit(cache=CACHE, nogil=True)
def cuda_failed(cuda, err):
    """A CUDA row's call returned ``err``: keep it in the block (the caller's error names it) and pop the
    context the rows pushed, if they did (word 5: cuCtxPopCurrent), as the replay stops here."""
    store_i64_at(cuda, 1, err)
    cuda_leave(load_i64_at(cuda, 5), cuda)


@njit(cache=CACHE, nogil=True)
def bad_segment(starts, ends, count, segments):
    """The first segment ``k`` whose range ``[starts[k], ends[k])`` (int32s at those addresses) is not
    inside ``[0, count]`` with ``start <= end``, or -1: the check Warp 1.19's host sort makes."""
    for k in range(segments):
        start = load_i32(starts + 4 * k)
        end = load_i32(ends + 4 * k)
        if start < 0 or end < start or end > count:
            return k
    return -1


@njit(cache=CACHE, nogil=True)
def bad_capacity(offsets, rows, capacity):
    """Whether the ``rows + 1`` int32 row offsets at ``offsets`` start below 0, decrease, or end past
    ``capacity``: a padded BSR transpose would then write outside the capacity its call was checked for."""
    previous = load_i32(offsets)
    if previous < 0:
        return True
    for r in range(1, rows + 1):
        current = load_i32(offsets + 4 * r)
        if current < previous:
            return True
        previous = current
    return previous > capacity


@njit(cache=CACHE, nogil=True, inline="always")
def run_rows(table, repeats, limits, counts, fn_clock, clock_id, row_ns, row_calls):
    """The loop of ``run_table``, ``run_table_profiled`` and the native entry (``native_entry.py``):
    every opcode's meaning, written once.

    ``counts`` (int64, one per loop head, zeroed) holds each loop's iteration count: allocated by the
    caller, so that this loop never allocates (the native entry runs without Numba's runtime).

    With ``row_ns`` and ``row_calls`` (``apic.profile``) it reads the clock ``clock_gettime`` (at
    ``fn_clock``) after every row and adds the row's time to ``row_ns[row]`` and 1 to ``row_calls[row]``.
    Numba compiles one version per argument types and drops the branches on ``row_ns is not None`` from
    the version that ``run_table`` calls with ``None``: a replay pays nothing for the profile.
    """
    n = table.shape[0]
    cap = limits[0] if limits is not None else 0
    poll = limits is not None and limits[1] != 0
    ticks = 0
    for _ in range(repeats):
        i = 0
        if row_ns is not None:
            before = now_ns(fn_clock, clock_id)
        while i < n:
            op = table[i, 0]
            fn = table[i, 1]
            nxt = i + 1
            if op == 2:
                call2(fn, table[i, 2], table[i, 3])
            elif op == 3:
                call3(fn, table[i, 2], table[i, 3], table[i, 4])
            elif op == 4:
                call4(fn, table[i, 2], table[i, 3], table[i, 4], table[i, 5])
            elif op == 5:
                call5(fn, table[i, 2], table[i, 3], table[i, 4], table[i, 5], table[i, 6])
            elif op == 10 or op == 20:  # OP_SPLIT: the splitter shares the launch's task chunks with worker threads
                call10(
                    fn, table[i, 2], table[i, 3], table[i, 4], table[i, 5], table[i, 6],
                    table[i, 7], table[i, 8], table[i, 9], table[i, 10], table[i, 11],
                )
            elif op == 16:  # OP_JUMP
                ticks += 1
                if poll and (ticks & 255) == 0 and _interrupted(limits):
                    return 1  # STATUS_INTERRUPTED
                nxt = table[i, 2]
            elif op == 17:  # OP_BRANCH_IF_ZERO
                ticks += 1
                if poll and (ticks & 255) == 0 and _interrupted(limits):
                    return 1  # STATUS_INTERRUPTED
                slot = table[i, 4]  # COL_LOOP: 0, or 1 + the loop's slot when this branch heads a loop
                if load_i32(table[i, 2]) == 0:
                    if slot and cap:  # counted only under a cap (the two-argument call passes no loops)
                        counts[slot - 1] = 0  # the loop ends: its next entry counts from zero
                    nxt = table[i, 3]
                elif slot and cap:
                    counts[slot - 1] += 1
                    if counts[slot - 1] > cap:
                        return 2  # STATUS_LOOP_CAP
            elif op == 18:  # OP_CALL_ARGV: arguments in the arena
                call_argv20(fn, table[i, 2])
            elif op == 19:  # OP_CALL5_D2
                call5_d2(fn, table[i, 2], table[i, 3], table[i, 4], table[i, 5], table[i, 6])
            elif op == 21:  # OP_SEGMENTED_SORT: every range checked in graph memory first, as upstream
                if bad_segment(table[i, 5], table[i, 6], table[i, 4], table[i, 7]) >= 0:
                    return -(i + 1)
                call10(
                    fn, table[i, 2], table[i, 3], table[i, 4], table[i, 5], table[i, 6],
                    table[i, 7], table[i, 8], table[i, 9], table[i, 10], table[i, 11],
                )
            elif op == 22:  # OP_PADDED_TRANSPOSE: the destination's row offsets checked against its capacity
                if bad_capacity(table[i, 3], table[i, 4], table[i, 5]):
                    return -(i + 1)
                call_argv20(fn, table[i, 2])
            elif op == 23:  # OP_CHECK_INDICES
                if not indices_in_range(table[i, 2], table[i, 3], table[i, 4]):
                    return -(i + 1)
            elif op == 24:  # OP_CHECK_IDS
                if not ids_known(table[i, 2], table[i, 3], table[i, 4], table[i, 5]):
                    return -(i + 1)
            elif op >= 25 and op <= 29:  # a CUDA driver call: its CUresult checked (table.py)
                if op == 25:  # OP_CUDA_LAUNCH: cuLaunchKernel(function, grid, block, smem, stream, params, NULL)
                    cuda = table[i, 11]
                    err = call11_i32(fn, table[i, 2], table[i, 3], table[i, 4], table[i, 5], table[i, 6], table[i, 7],
                                     table[i, 8], table[i, 9], load_i64_at(cuda, 0), table[i, 10], np.int64(0))
                elif op == 26:  # OP_CUDA_CALL3: fn(arg0, arg1, arg2, stream)
                    cuda = table[i, 5]
                    err = call4_i32(fn, table[i, 2], table[i, 3], table[i, 4], load_i64_at(cuda, 0))
                elif op == 27:  # OP_CUDA_CALL1: fn(arg0, stream)
                    cuda = table[i, 3]
                    err = call2_i32(fn, table[i, 2], load_i64_at(cuda, 0))
                elif op == 28:  # OP_CUDA_ENTER
                    cuda = table[i, 2]
                    err = cuda_enter(fn, cuda, table[i, 3])
                else:  # OP_CUDA_LEAVE
                    cuda = table[i, 2]
                    err = cuda_leave(fn, cuda)
                if err != 0:
                    cuda_failed(cuda, err)
                    return -(i + 1)
            elif op != 0:  # not OP_NOP: an opcode this loop does not run stops the replay (the caller raises)
                return -(i + 1)
            if row_ns is not None:
                after = now_ns(fn_clock, clock_id)
                row_ns[i] += after - before
                row_calls[i] += 1
                before = after
            i = nxt
        ticks += 1
        if poll and (ticks & 255) == 0 and _interrupted(limits):
            return 1  # STATUS_INTERRUPTED
    return 0


@njit(cache=CACHE, nogil=True)
def run_table(table, repeats, limits=None, loops=0):
    """Execute ``table`` from its first row to its end, ``repeats`` times; returns a ``STATUS_*`` code.

    ``limits`` (int64, see ``table.py``) caps each loop's iterations and enables the Ctrl-C poll;
    ``loops`` is the number of loop heads (their slot numbers are ``1 .. loops`` in ``COL_LOOP``).
    Without ``limits`` loops run uncapped and unpolled. (Four arguments,
    not ``run_rows``'s eight: each one costs Numba's dispatcher time on every ``wp.capture_launch``.)
    """
    return run_rows(table, repeats, limits, np.zeros(max(loops, 1), dtype=np.int64), 0, 0, None, None)


@njit(cache=CACHE, nogil=True)
def run_table_profiled(table, repeats, limits, loops, fn_clock, clock_id, row_ns, row_calls):
    """``run_table`` with a clock read after every row: each executed row's time added to ``row_ns[row]``
    and 1 to ``row_calls[row]`` (``apic.profile``); the same guards and ``STATUS_*`` result."""
    counts = np.zeros(max(loops, 1), dtype=np.int64)
    return run_rows(table, repeats, limits, counts, fn_clock, clock_id, row_ns, row_calls)


@njit(cache=CACHE, nogil=True)
def time_clock(fn, clock_id, reads):
    """Read the clock ``reads`` times (to measure what one read costs); the last reading."""
    last = 0
    for _ in range(reads):
        last = now_ns(fn, clock_id)
    return last
