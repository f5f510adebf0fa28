"""The CPU replay interpreter: one Numba-jitted loop over a flat table of native calls.

Each row of the op table is ``OP_COLUMNS`` int64 values: ``[opcode, function address, arg0 .. arg9]``.
The opcode is the number of integer arguments the native function takes; the lowering in
``program.py`` has already turned every recorded operation (kernel launch, memcpy, memset, memtile,
strided copy and fill) into such a call with every pointer resolved, so the loop below never sees a
Python object and makes no Python call per operation.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from apic.replay._intrinsics import call2, call3, call4, call5, call10

# Column layout of one op-table row.
COL_OPCODE = 0
COL_FN = 1
COL_ARG0 = 2
MAX_ARGS = 10
OP_COLUMNS = COL_ARG0 + MAX_ARGS

# Opcodes: the arity of the native call; 0 does nothing (allocations, zero-size operations).
OP_NOP = 0
OP_CALL2 = 2
OP_CALL3 = 3
OP_CALL4 = 4
OP_CALL5 = 5
OP_CALL10 = 10
CALL_OPCODES = {2: OP_CALL2, 3: OP_CALL3, 4: OP_CALL4, 5: OP_CALL5, 10: OP_CALL10}


@njit(cache=True, nogil=True)
def run_table(table, repeats):
    """Execute every row of ``table`` in order, ``repeats`` times."""
    for _ in range(repeats):
        for i in range(table.shape[0]):
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


def empty_table(rows: int) -> np.ndarray:
    """A zeroed op table (all NOPs) with ``rows`` rows."""
    return np.zeros((rows, OP_COLUMNS), dtype=np.int64)
