"""The CPU replay interpreter: one Numba-jitted loop over a flat table of native calls.

Each row of the op table (layout in ``table.py``) is ``[opcode, function address, arg0 .. arg9]``, the
opcode being the number of integer arguments of the native function. The lowering in
``program.py`` has already turned every recorded operation (kernel launch, memcpy, memset, memtile,
strided copy and fill) into such a call with every pointer resolved, so the loop below never sees a
Python object and makes no Python call per operation.
"""

from __future__ import annotations

from numba import njit

from apic.replay._intrinsics import call2, call3, call4, call5, call10


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

