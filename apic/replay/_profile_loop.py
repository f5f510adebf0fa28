"""The profiled interpreter loop (Numba): ``interpreter.run_table`` plus a clock read after every row.

Kept apart from ``interpreter.py`` so that the replay path ``wp.capture_launch`` takes is unchanged,
and apart from ``profile.py`` so that importing the report types never imports Numba.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core.extending import intrinsic

from apic.replay import table as _table
from apic.replay._intrinsics import call2, call3, call4, call5, call5_d2, call10, call_argv20, load_i32
from apic.replay.interpreter import _interrupted, bad_capacity, bad_segment, ids_known, indices_in_range

# Numba freezes these literals into its on-disk cache, keyed on this file only: checked here.
assert (_table.OP_JUMP, _table.OP_BRANCH_IF_ZERO, _table.OP_CALL_ARGV, _table.OP_CALL5_D2) == (16, 17, 18, 19)
assert (_table.COL_LOOP, _table.STATUS_INTERRUPTED, _table.STATUS_LOOP_CAP, _table.OP_SPLIT, _table.OP_SEGMENTED_SORT,
        _table.OP_PADDED_TRANSPOSE) == (4, 1, 2, 20, 21, 22)
assert (_table.COL_OPCODE, _table.COL_FN, _table.COL_ARG0, _table.LIMITS_SIZE) == (0, 1, 2, 4)

_I64 = ir.IntType(64)


@intrinsic
def now_ns(typingctx, fn, clock_id):
    """``clock_gettime(clock_id, &ts)`` through the function address ``fn``; ``ts`` as nanoseconds."""
    if not (isinstance(fn, types.Integer) and isinstance(clock_id, types.Integer)):
        return None

    def codegen(context, builder, signature, llargs):
        timespec = ir.LiteralStructType([_I64, _I64])  # struct timespec on 64-bit Linux
        slot = builder.alloca(timespec)
        fnty = ir.FunctionType(ir.IntType(32), [ir.IntType(32), timespec.as_pointer()])
        target = builder.inttoptr(context.cast(builder, llargs[0], signature.args[0], types.int64), fnty.as_pointer())
        clock = builder.trunc(context.cast(builder, llargs[1], signature.args[1], types.int64), ir.IntType(32))
        builder.call(target, [clock, slot])
        zero = ir.Constant(ir.IntType(32), 0)
        sec = builder.load(builder.gep(slot, [zero, zero]))
        nsec = builder.load(builder.gep(slot, [zero, ir.Constant(ir.IntType(32), 1)]))
        return builder.add(builder.mul(sec, ir.Constant(_I64, 1_000_000_000)), nsec)

    return types.int64(fn, clock_id), codegen


@njit(cache=True, nogil=True)
def time_clock(fn, clock_id, reads):
    """Read the clock ``reads`` times (to measure what one read costs); the last reading."""
    last = 0
    for _ in range(reads):
        last = now_ns(fn, clock_id)
    return last


@njit(cache=True, nogil=True)
def run_table_profiled(table, repeats, limits, loops, fn_clock, clock_id, row_ns, row_calls):
    """``run_table``, adding each executed row's time to ``row_ns[row]`` and 1 to ``row_calls[row]``.

    The same guards as ``interpreter.run_table`` (loop cap, Ctrl-C poll; see its docstring), the same
    ``STATUS_*`` result."""
    n = table.shape[0]
    cap = limits[0]
    poll = limits[1] != 0
    counts = np.zeros(max(loops, 1), dtype=np.int64)
    ticks = 0
    for _ in range(repeats):
        ticks += 1
        if poll and (ticks & 255) == 0 and _interrupted(limits):
            return 1  # STATUS_INTERRUPTED
        i = 0
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
            elif op == 10:
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
                slot = table[i, 4]  # COL_LOOP
                if load_i32(table[i, 2]) == 0:
                    if slot and cap:
                        counts[slot - 1] = 0
                    nxt = table[i, 3]
                elif slot and cap:
                    counts[slot - 1] += 1
                    if counts[slot - 1] > cap:
                        return 2  # STATUS_LOOP_CAP
            elif op == 18:  # OP_CALL_ARGV
                call_argv20(fn, table[i, 2])
            elif op == 19:  # OP_CALL5_D2
                call5_d2(fn, table[i, 2], table[i, 3], table[i, 4], table[i, 5], table[i, 6])
            elif op == 20:  # OP_SPLIT: the splitter shares the launch's task chunks with worker threads
                call10(
                    fn, table[i, 2], table[i, 3], table[i, 4], table[i, 5], table[i, 6],
                    table[i, 7], table[i, 8], table[i, 9], table[i, 10], table[i, 11],
                )
            elif op == 21:  # OP_SEGMENTED_SORT
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
            after = now_ns(fn_clock, clock_id)
            row_ns[i] += after - before
            row_calls[i] += 1
            before = after
            i = nxt
    return 0
