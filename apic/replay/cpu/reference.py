"""A reference interpreter of the op table in plain Python: each row called through ``ctypes``.

It runs exactly the table ``lowering.py`` builds for the Numba interpreter (``interpreter.run_table``),
row by row, with the opcodes of ``table.py`` spelled out once more in the simplest way Python
allows. It is the second implementation the Numba loop is checked against: the test suite runs
with it selected (``APIC_REPLAY=reference``) and must leave every graph's memory bit for bit as
eager Warp does, as it must with the Numba loop. It costs microseconds of Python per op: a check,
not a way to replay.

As the Numba loop, it stops at an opcode it does not know (status ``-(row + 1)``; ``table.stop_error``
says which).
"""

from __future__ import annotations

import ctypes
import os
import struct
import threading

import numpy as np

from apic.record import natives
from apic.replay.cpu import table as tbl
from apic.replay.parallel.footprint_launch import guards_hold

_I64 = ctypes.c_int64
# Every argument is a 64-bit integer and the result is ignored, as in the Numba intrinsics
# (_intrinsics.py says why that is ABI-safe for Warp's natives).
_CALL = {arity: ctypes.CFUNCTYPE(None, *[_I64] * arity) for arity in tbl.CALL_OPCODES}
_CALL_ARGV = ctypes.CFUNCTYPE(None, *[_I64] * tbl.ARGV_ARGS)
_CALL5_D2 = ctypes.CFUNCTYPE(None, _I64, _I64, ctypes.c_double, _I64, _I64)
_RANGE = ctypes.CFUNCTYPE(None, _I64, _I64, _I64, _I64)  # a range entry: (bounds, args, begin, end)
# CUDA driver calls return a CUresult (a C int), which the CUDA rows check
_CUDA = {arity: ctypes.CFUNCTYPE(ctypes.c_int, *[_I64] * arity) for arity in (1, 2, 4, 11)}


def _cuda_row(opcode: int, args: list, function) -> tuple[int, int]:
    """Run the CUDA row ``args`` (its columns after the function's; ``function(prototype)`` the callable of its
    function address): the address of its CUDA block, and the ``CUresult`` of the call that failed or 0."""
    word = lambda cuda, k: _I64.from_address(cuda + 8 * k)  # noqa: E731
    if opcode == tbl.OP_CUDA_LAUNCH:
        cuda = args[9]
        return cuda, function(_CUDA[11])(*args[:8], word(cuda, tbl.CUDA_STREAM).value, args[8], 0)
    if opcode == tbl.OP_CUDA_CALL3:
        cuda = args[3]
        return cuda, function(_CUDA[4])(*args[:3], word(cuda, tbl.CUDA_STREAM).value)
    if opcode == tbl.OP_CUDA_CALL1:
        cuda = args[1]
        return cuda, function(_CUDA[2])(args[0], word(cuda, tbl.CUDA_STREAM).value)
    cuda = args[0]
    scratch = cuda + 8 * tbl.CUDA_SCRATCH
    pushed = word(cuda, tbl.CUDA_PUSHED)
    if opcode == tbl.OP_CUDA_ENTER:
        err = _CUDA[1](args[1])(scratch)  # cuCtxGetCurrent
        if err:
            return cuda, err
        if word(cuda, tbl.CUDA_SCRATCH).value == word(cuda, tbl.CUDA_CONTEXT).value:
            pushed.value = 0
            return cuda, 0
        err = function(_CUDA[1])(word(cuda, tbl.CUDA_CONTEXT).value)  # cuCtxPushCurrent
        if not err:
            pushed.value = 1
        return cuda, err
    return cuda, _cuda_leave(cuda, function(_CUDA[1]))  # OP_CUDA_LEAVE


def _cuda_leave(cuda: int, pop) -> int:
    """Pop the context the CUDA block ``cuda`` says its entry row pushed, if it did (never twice)."""
    pushed = _I64.from_address(cuda + 8 * tbl.CUDA_PUSHED)
    if not pushed.value:
        return 0
    pushed.value = 0
    return pop(cuda + 8 * tbl.CUDA_SCRATCH)


# One split row at a time in the process, as the Numba interpreter's pool runs them (apic.replay.parallel.split_pool):
# a kernel using tiles keeps its tile memory's address in a static of each loaded copy of its range
# object, which two Python threads replaying at once would share.
_split_lock = threading.Lock()


def _after_fork_in_child() -> None:
    global _split_lock
    _split_lock = threading.Lock()  # a holder in another thread did not come along


if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _as_double(bits: int) -> float:
    return struct.unpack("<d", struct.pack("<q", bits))[0]


def run_table(table: np.ndarray, repeats: int, limits=None, loops: int = 0) -> int:
    """Execute ``table`` from its first row to its end, ``repeats`` times; returns a ``STATUS_*`` code.

    The same contract as ``interpreter.run_table``: ``limits[LIMIT_ITERATIONS]`` caps each loop's
    iterations (per entry of the loop); ``loops`` is the number of loop heads. Ctrl-C needs no poll
    here: Python raises ``KeyboardInterrupt`` between two ``ctypes`` calls.
    """
    rows = table.tolist()
    cap = int(limits[tbl.LIMIT_ITERATIONS]) if limits is not None else 0
    counts = [0] * max(loops, 1)
    functions: dict[tuple[int, int], object] = {}  # (opcode, address) -> ctypes function, made once

    def function(opcode: int, address: int, prototype):
        found = functions.get((opcode, address))
        if found is None:
            found = functions[(opcode, address)] = prototype(address)
        return found

    for _ in range(repeats):
        i = 0
        while i < len(rows):
            opcode, address, *args = rows[i]
            if opcode in _CALL:
                function(opcode, address, _CALL[opcode])(*args[:opcode])
            elif opcode == tbl.OP_JUMP:
                i = args[0]
                continue
            elif opcode == tbl.OP_BRANCH_IF_ZERO:
                slot = rows[i][tbl.COL_LOOP]  # 0, or 1 + the loop's slot when this branch heads a loop
                if ctypes.c_int32.from_address(args[0]).value == 0:
                    if slot and cap:  # counted only under a cap (the two-argument call passes no loops)
                        counts[slot - 1] = 0  # the loop ends: its next entry counts from zero
                    i = args[1]
                    continue
                if slot and cap:
                    counts[slot - 1] += 1
                    if counts[slot - 1] > cap:
                        return tbl.STATUS_LOOP_CAP
            elif opcode == tbl.OP_CALL_ARGV:
                argv = (_I64 * tbl.ARGV_ARGS).from_address(args[0])
                function(opcode, address, _CALL_ARGV)(*argv)
            elif opcode == tbl.OP_SEGMENTED_SORT:
                if natives.invalid_segment(*args[2:6]) is not None:
                    return -(i + 1)
                function(opcode, address, _CALL[tbl.OP_CALL10])(*args[: tbl.OP_CALL10])  # the row's trailing zeros
            elif opcode == tbl.OP_PADDED_TRANSPOSE:
                offsets, nrows, capacity = args[1:4]
                if not natives.is_capacity_layout(natives.row_offsets(offsets, nrows), capacity):
                    return -(i + 1)
                function(opcode, address, _CALL_ARGV)(*(_I64 * tbl.ARGV_ARGS).from_address(args[0]))
            elif opcode == tbl.OP_CHECK_INDICES:
                address, count, bound = args[:3]
                values = np.frombuffer((ctypes.c_int32 * count).from_address(address), dtype=np.int32) if count else ()
                if len(values) and (int(values.min()) < 0 or int(values.max()) >= bound):
                    return -(i + 1)
            elif opcode == tbl.OP_CHECK_IDS:
                address, count, ids, n = args[:4]
                values = np.frombuffer((ctypes.c_uint64 * count).from_address(address), np.uint64) if count else ()
                known = np.frombuffer((ctypes.c_uint64 * n).from_address(ids), np.uint64) if n else ()
                if len(values) and not np.isin(values, known).all():
                    return -(i + 1)
            elif opcode == tbl.OP_CALL5_D2:
                a0, a1, radius, a3, a4 = args[:5]
                function(opcode, address, _CALL5_D2)(a0, a1, _as_double(radius), a3, a4)
            elif opcode == tbl.OP_SPLIT:
                # The cut of apic.replay.parallel.split_pool, the chunks run here one after the other, last first:
                # the tasks of a split launch, and the launches of a row, must not depend on their
                # order, and this order is not Warp's. An item with per-thread entries runs chunk c
                # through slot c % slots's, so every loaded copy runs some.
                _control, items, count, _chunks, slots, guards, guard_count = args[:7]
                words = (_I64 * (count * tbl.ITEM_WORDS)).from_address(items)[:]
                held = (_I64 * (3 * guard_count)).from_address(guards)[:] if guard_count else []
                # a footprint launch whose index data or arguments changed runs serially: in order, in task order
                serial = not guards_hold(zip(held[0::3], held[1::3], held[2::3]))
                with _split_lock:  # the copies' tile memory is one thread's at a time
                    for k in (range(count) if serial else reversed(range(count))):
                        entry, bounds, args_ptr, tasks, chunks, _first, per_thread = (
                            words[k * tbl.ITEM_WORDS : (k + 1) * tbl.ITEM_WORDS])
                        entries = (_I64 * slots).from_address(per_thread)[:] if per_thread else [entry]
                        for c in (range(chunks) if serial else reversed(range(chunks))):
                            run_range = function(opcode, entries[c % len(entries)], _RANGE)
                            run_range(bounds, args_ptr, tasks * c // chunks, tasks * (c + 1) // chunks)
            elif tbl.OP_CUDA_LAUNCH <= opcode <= tbl.OP_CUDA_LEAVE:
                # B023: _cuda_row calls the lambda before it returns, in this iteration
                cuda, err = _cuda_row(opcode, args, lambda prototype: function(opcode, address, prototype))  # noqa: B023
                if err:  # kept for the caller's error; the pushed context popped as the replay stops
                    _I64.from_address(cuda + 8 * tbl.CUDA_ERROR).value = err
                    _cuda_leave(cuda, _CUDA[1](_I64.from_address(cuda + 8 * tbl.CUDA_POP).value))
                    return -(i + 1)
            elif opcode != tbl.OP_NOP:  # as the Numba loop: the caller raises, naming the opcode
                return -(i + 1)
            i += 1
    return tbl.STATUS_DONE
