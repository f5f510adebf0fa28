"""The floor: a native loop that calls the same function pointers with the same arguments as apic.

The rows come from an apic graph's op table (``graph.program.table``), so the floor calls exactly
the kernel entry points, argument blobs, launch bounds and memory functions that apic replays,
with nothing in between: the lowest dispatch cost any replay of that graph can reach.

The loop is C, compiled once per process with the system C compiler (``$CC``, else ``cc``,
``gcc`` or ``clang``) and loaded with ctypes. The C compiler applies the real kernel ABI itself:
on warp-lang up to 1.12 the 32-byte launch bounds are a struct passed by value, declared as such
here, independently of the argument trick apic's interpreter uses. Without a C compiler the floor
is a plain Numba loop (reported as such).
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

# Row kinds of the floor's own table (stride ROW): [kind, fn, x0, x1, x2, x3, x4, x5].
ROW = 8
K_CALL2, K_CALL3, K_CALL4, K_CALL5, K_BYVALUE = 2, 3, 4, 5, 100

_SOURCE = r"""
#include <stdint.h>

typedef struct { int64_t q[4]; } bounds32_t;  /* warp <= 1.12: launch_bounds_t, 32 bytes, by value */
typedef void (*kernel_ptr_fn)(void*, void*);          /* warp >= 1.13: f(bounds*, args*) */
typedef void (*kernel_val_fn)(bounds32_t, void*);      /* warp <= 1.12: f(bounds, args*) */
typedef void (*call3_fn)(int64_t, int64_t, int64_t);
typedef void (*call4_fn)(int64_t, int64_t, int64_t, int64_t);
typedef void (*call5_fn)(int64_t, int64_t, int64_t, int64_t, int64_t);

/* Nothing: the price of one ctypes call, the reference for one wp.capture_launch */
void floor_noop(void) {}

/* Kernel launches only, bounds by pointer. rows: [fn, bounds, args] */
void floor_kernels_by_pointer(const int64_t* rows, int64_t n, int64_t repeats) {
    for (int64_t r = 0; r < repeats; ++r)
        for (const int64_t* row = rows; row < rows + 3 * n; row += 3)
            ((kernel_ptr_fn)row[0])((void*)row[1], (void*)row[2]);
}

/* Kernel launches only, bounds by value. rows: [fn, args, q0, q1, q2, q3] */
void floor_kernels_by_value(const int64_t* rows, int64_t n, int64_t repeats) {
    for (int64_t r = 0; r < repeats; ++r)
        for (const int64_t* row = rows; row < rows + 6 * n; row += 6) {
            bounds32_t b = {{row[2], row[3], row[4], row[5]}};
            ((kernel_val_fn)row[0])(b, (void*)row[1]);
        }
}

/* Any mix of calls. rows: [kind, fn, x0 .. x5] */
void floor_mixed(const int64_t* rows, int64_t n, int64_t repeats) {
    for (int64_t r = 0; r < repeats; ++r)
        for (const int64_t* row = rows; row < rows + 8 * n; row += 8) {
            const int64_t* x = row + 2;
            switch (row[0]) {
            case 2: ((kernel_ptr_fn)row[1])((void*)x[0], (void*)x[1]); break;
            case 3: ((call3_fn)row[1])(x[0], x[1], x[2]); break;
            case 4: ((call4_fn)row[1])(x[0], x[1], x[2], x[3]); break;
            case 5: ((call5_fn)row[1])(x[0], x[1], x[2], x[3], x[4]); break;
            case 100: {
                bounds32_t b = {{x[1], x[2], x[3], x[4]}};
                ((kernel_val_fn)row[1])(b, (void*)x[0]);
                break;
            }
            }
        }
}
"""

_library = None
_library_error: str | None = None


def _compile() -> ctypes.CDLL:
    """Compile the floor loop into a temporary shared library and load it."""
    candidates = [os.environ.get("CC"), "cc", "gcc", "clang"]
    compiler = next((shutil.which(c) for c in candidates if c and shutil.which(c)), None)
    if compiler is None or sys.platform == "win32":
        raise OSError("no C compiler found (set CC)")
    workdir = tempfile.mkdtemp(prefix="apic-bench-floor-")
    try:
        source = os.path.join(workdir, "floor.c")
        library = os.path.join(workdir, "floor.so")
        with open(source, "w") as f:
            f.write(_SOURCE)
        result = subprocess.run(
            [compiler, "-O2", "-shared", "-fPIC", "-o", library, source], capture_output=True, text=True
        )
        if result.returncode != 0:
            raise OSError(f"{compiler} failed: {result.stderr.strip()[:500]}")
        lib = ctypes.CDLL(library)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)  # the loaded library stays mapped
    for name in ("floor_kernels_by_pointer", "floor_kernels_by_value", "floor_mixed"):
        fn = getattr(lib, name)
        fn.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64]
        fn.restype = None
    lib.floor_noop.argtypes = []
    lib.floor_noop.restype = None
    return lib


def library():
    """The compiled floor library, or None (with ``library_error()`` saying why)."""
    global _library, _library_error
    if _library is None and _library_error is None:
        try:
            _library = _compile()
        except OSError as error:
            _library_error = str(error)
    return _library


def library_error() -> str | None:
    library()
    return _library_error


def floor_rows(table: np.ndarray, by_value_trick: bool) -> np.ndarray:
    """The floor's own rows for an apic op table (NOP rows dropped).

    ``by_value_trick``: apic lowered by-value kernel launches to its ten-integer call
    ``[10, fn, args, 0, 0, 0, 0, 0, q0, q1, q2, q3]``; these become real by-value calls here.
    """
    rows = []
    for op, fn, *args in table.tolist():
        if op == 0:
            continue
        if op == 10 and by_value_trick:
            rows.append([K_BYVALUE, fn, args[0], *args[6:10], 0])
        elif op in (2, 3, 4, 5):
            rows.append([op, fn, *args[:op], *([0] * (ROW - 2 - op))])
        else:
            raise ValueError(f"the floor cannot run op-table rows with opcode {op}")
    return np.ascontiguousarray(np.array(rows, dtype=np.int64).reshape(-1, ROW))


class Floor:
    """A native loop over ``rows`` (from ``floor_rows``); ``run(k)`` makes k passes in one call."""

    def __init__(self, rows: np.ndarray, keepalive=None) -> None:
        self.keepalive = keepalive  # the graph whose arena and regions the rows point into
        kinds = set(rows[:, 0].tolist())
        lib = library()
        self.native = lib is not None
        self.n = len(rows)
        if lib is not None:
            if kinds == {K_CALL2}:
                self._rows, self._fn = np.ascontiguousarray(rows[:, 1:4]), lib.floor_kernels_by_pointer
            elif kinds == {K_BYVALUE}:
                self._rows, self._fn = np.ascontiguousarray(rows[:, 1:7]), lib.floor_kernels_by_value
            else:
                self._rows, self._fn = rows, lib.floor_mixed
            self._address = self._rows.ctypes.data
        else:
            self._rows = _numba_rows(rows)

    @property
    def label(self) -> str:
        return "native floor (C)" if self.native else "native floor (Numba)"

    def run(self, repeats: int = 1) -> None:
        if self.native:
            self._fn(self._address, self.n, repeats)
        else:
            _numba_loop()(self._rows, repeats)


# --- fallback without a C compiler: a plain Numba loop ---------------------------------------------
def _numba_rows(rows: np.ndarray) -> np.ndarray:
    """Numba has no by-value struct call; use the ten-integer SysV form apic's interpreter uses."""
    out = np.zeros((len(rows), 12), dtype=np.int64)
    for i, (kind, fn, *x) in enumerate(rows.tolist()):
        if kind == K_BYVALUE:
            out[i, :3] = (10, fn, x[0])
            out[i, 8:12] = x[1:5]
        else:
            out[i, 0], out[i, 1] = kind, fn
            out[i, 2 : 2 + kind] = x[:kind]
    return out


_NUMBA_LOOP = None


def _numba_loop():
    global _NUMBA_LOOP
    if _NUMBA_LOOP is None:
        from numba import njit  # lazy: only the fallback floor (no C compiler) needs Numba

        from apic.replay.cpu._intrinsics import call2, call3, call4, call5, call10  # lazy: imports Numba

        @njit(nogil=True)
        def loop(rows, repeats):
            for _ in range(repeats):
                for i in range(rows.shape[0]):
                    k = rows[i, 0]
                    if k == 2:
                        call2(rows[i, 1], rows[i, 2], rows[i, 3])
                    elif k == 3:
                        call3(rows[i, 1], rows[i, 2], rows[i, 3], rows[i, 4])
                    elif k == 4:
                        call4(rows[i, 1], rows[i, 2], rows[i, 3], rows[i, 4], rows[i, 5])
                    elif k == 5:
                        call5(rows[i, 1], rows[i, 2], rows[i, 3], rows[i, 4], rows[i, 5], rows[i, 6])
                    elif k == 10:
                        call10(
                            rows[i, 1], rows[i, 2], rows[i, 3], rows[i, 4], rows[i, 5], rows[i, 6],
                            rows[i, 7], rows[i, 8], rows[i, 9], rows[i, 10], rows[i, 11],
                        )

        _NUMBA_LOOP = loop
    return _NUMBA_LOOP
