"""The native splitter of the parallel replay: one launch's task ranges run on Numba's worker threads.

``splitter_address()`` is the address of a C function ``void split(range_entry, bounds, args, tasks,
ranges)`` (a Numba ``cfunc``) that cuts tasks ``[0, tasks)`` into ``ranges`` contiguous ranges, range
``k`` being ``[tasks * k // ranges, tasks * (k + 1) // ranges)``, and runs ``range_entry(bounds, args,
begin, end)`` on each under a Numba ``prange``. The interpreter calls it from an ``OP_SPLIT`` row with
the GIL released, so a split launch costs no Python call; the cut is the one the reference
interpreter (``reference.py``) makes.

How many threads run the ranges is Numba's per-thread setting (``numba.set_num_threads``), which
:func:`workers` sets around one replay: the ranges are always the same, so the results are too.
Numba's ``workqueue`` threading layer aborts the process when two threads start parallel work at once,
so every replay with split launches holds :data:`lock`.
"""

from __future__ import annotations

import contextlib
import threading

import numba
from numba import cfunc, njit, prange, types
from numba.np.ufunc import parallel as _numba_parallel

from apic.replay._intrinsics import call4

# A cached parallel function refers to symbols of Numba's threading layer, which must be loaded before
# the cache is (else LLVM aborts the process on a missing ``allocate_sched``).
_numba_parallel._launch_threads()

lock = threading.Lock()  # one replay with split launches at a time (see the module docstring)


@njit(parallel=True, nogil=True, cache=True)
def _run_ranges(fn, bounds, args, tasks, ranges):
    for k in prange(ranges):
        call4(fn, bounds, args, tasks * k // ranges, tasks * (k + 1) // ranges)


@cfunc(types.void(types.int64, types.int64, types.int64, types.int64, types.int64), nogil=True, cache=True)
def _splitter(fn, bounds, args, tasks, ranges):
    _run_ranges(fn, bounds, args, tasks, ranges)


def splitter_address() -> int:
    """The address of the native splitter (an ``OP_SPLIT`` row's function)."""
    return _splitter.address


def max_workers() -> int:
    """The most threads a split launch can use (``numba.config.NUMBA_NUM_THREADS``: the CPU count by default)."""
    return int(numba.config.NUMBA_NUM_THREADS)


@contextlib.contextmanager
def workers(threads: int):
    """Run the enclosed replay's split launches on ``threads`` threads (capped at :func:`max_workers`)."""
    with lock:
        before = numba.get_num_threads()
        numba.set_num_threads(max(1, min(threads, max_workers())))
        try:
            yield
        finally:
            numba.set_num_threads(before)
