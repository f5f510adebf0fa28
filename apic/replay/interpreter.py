"""The CPU replay interpreter: one Numba-jitted loop over a flat table of native calls.

Each row of the op table (layout in ``table.py``) is ``[opcode, function address, arg0 .. arg9]``, the
opcode being the number of integer arguments of the native function, or a jump. The lowering in
``program.py`` has already turned every recorded operation (kernel launch, memcpy, memset, memtile,
strided copy and fill, native utility call, branch) into such a row with every pointer resolved, so
the loop below never sees a Python object and makes no Python call per operation.
"""

from __future__ import annotations

from numba import njit

from apic.replay import table as _table
from apic.replay._intrinsics import call2, call3, call4, call5, call5_d2, call10, call_argv20, load_i32

# Numba freezes these literals into its on-disk cache, which is keyed on this file only: keep them
# spelled out below and checked against table.py here.
assert (_table.OP_JUMP, _table.OP_BRANCH_IF_ZERO, _table.OP_CALL_ARGV, _table.ARGV_ARGS, _table.OP_CALL5_D2) == (
    16, 17, 18, 20, 19
)


@njit(cache=True, nogil=True)
def run_table(table, repeats):
    """Execute ``table`` from its first row to its end, ``repeats`` times."""
    n = table.shape[0]
    for _ in range(repeats):
        i = 0
        while i < n:
            op = table[i, 0]
            fn = table[i, 1]
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
                i = table[i, 2]
                continue
            elif op == 17:  # OP_BRANCH_IF_ZERO
                if load_i32(table[i, 2]) == 0:
                    i = table[i, 3]
                    continue
            elif op == 18:  # OP_CALL_ARGV: arguments in the arena
                call_argv20(fn, table[i, 2])
            elif op == 19:  # OP_CALL5_D2
                call5_d2(fn, table[i, 2], table[i, 3], table[i, 4], table[i, 5], table[i, 6])
            i += 1
