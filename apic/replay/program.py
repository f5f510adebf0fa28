"""A ``Program``: what the interpreter runs (an op table and the arena it points into, built by
``lowering.lower``), how one replay of it runs, and what its status means when it stops early.

The loop cap and the Ctrl-C poll live here, as the ``limits`` array every replay passes to the
interpreter; ``Program.parallel`` gives the table a parallel replay runs (``split_planner``).
"""

from __future__ import annotations

import ctypes
import functools
import math
import operator
import os
import signal
import threading
import dataclasses
from dataclasses import dataclass
from typing import Callable

import numpy as np

from apic.errors import LoopLimitError, ReplayError
from apic.record import ops as rec
from apic.replay import backends
from apic.replay.cpu import native_interpreter
from apic.replay.parallel import split_planner
from apic.replay.cpu import table as tbl



def _c_api(name: str) -> int:
    return ctypes.cast(getattr(ctypes.pythonapi, name), ctypes.c_void_p).value or 0


# run_table's limits (table.LIMIT_*): the main thread's also polls for Ctrl-C, a worker thread's does
# not (Python handles signals only in the main thread). Both are updated in place by the setter below.
_MAIN_THREAD = threading.main_thread().ident
_get_ident = threading.get_ident
_LIMITS_MAIN = np.array([tbl.DEFAULT_MAX_LOOP_ITERATIONS, _c_api("PyGILState_Ensure"),
                         _c_api("PyOS_InterruptOccurred"), _c_api("PyGILState_Release")], dtype=np.int64)
_LIMITS_THREAD = np.array([tbl.DEFAULT_MAX_LOOP_ITERATIONS, 0, 0, 0], dtype=np.int64)
_LIMITS_MAIN_AT = _LIMITS_MAIN.ctypes.data  # their addresses, for the native interpreter
_LIMITS_THREAD_AT = _LIMITS_THREAD.ctypes.data
_NO_LOOPS = np.zeros(1, dtype=np.int64)  # the loop counts of a table without loops: never written
_NO_LOOPS_AT = _NO_LOOPS.ctypes.data
# the native interpreter's entry (``native_interpreter.SERIAL_RUN``) called without releasing the GIL
_SERIAL_RUN_HOLDING_GIL = ctypes.PYFUNCTYPE(ctypes.c_int64, ctypes.c_void_p)
# A replay of at most this many launches and memory ops, tasks and bytes in all, keeps the GIL through its
# native call (``short_replay``): a few microseconds at most for kernels that do not loop for long.
SHORT_REPLAY_OPS = 16
SHORT_REPLAY_TASKS = 1024
SHORT_REPLAY_BYTES = 64 << 10


def _after_fork_in_child() -> None:
    # A child forked from another thread has that thread as its main thread (Python delivers its
    # signals there): replays on it must poll for Ctrl-C.
    global _MAIN_THREAD
    _MAIN_THREAD = _get_ident()


if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(after_in_child=_after_fork_in_child)


def set_max_loop_iterations(count: int) -> None:
    """Cap the iterations of each replayed ``capture_while`` loop (per entry of the loop; default 2**24,
    as upstream Warp's CPU replay). A replay whose loop goes past it stops there and raises
    ``LoopLimitError``. ``0`` removes the cap (a loop whose condition never clears then runs until Ctrl-C)."""
    if type(count) is not int or not 0 <= count < 1 << 62:
        raise ValueError(f"the loop iteration cap must be an integer in [0, 2**62), got {count!r}")
    _LIMITS_MAIN[tbl.LIMIT_ITERATIONS] = count
    _LIMITS_THREAD[tbl.LIMIT_ITERATIONS] = count


def max_loop_iterations() -> int:
    """The iteration cap of each replayed loop (``set_max_loop_iterations``; 0: no cap)."""
    return int(_LIMITS_MAIN[tbl.LIMIT_ITERATIONS])


@dataclass(frozen=True)
class Split:
    """A launch the parallel replay may split: its table rows and what an ``OP_SPLIT`` row needs."""

    rows: np.ndarray  # the table rows (positions in the op sequence) that run this launch
    kernel: int  # index into the recording's kernels
    bounds: int  # address of the launch bounds in the arena
    args: int  # address of the packed arguments in the arena
    tasks: int
    writes: tuple  # (address, nbytes) of the regions it writes (split_planner.launch_spans)
    reach: tuple  # (address, nbytes) of every region its arguments point into
    # a launch split by footprint: the bytes its verdict rests on (footprint_launch.Guards), checked before it splits
    guards: object = None
    # ... and what a save seals of its verdict (sealed_claims.seal_footprints): (index offsets, its Blob, its dim)
    footprint: tuple | None = None


@dataclass
class Program:
    """What the interpreter runs. ``arena`` must stay alive as long as ``table`` (it points into it)."""

    table: np.ndarray
    arena: np.ndarray
    loops: int = 0  # loop heads in the table (branches a backward jump returns to)
    # named scalar parameter -> arena byte offsets of its slots (one per distinct blob that holds it)
    param_offsets: dict = dataclasses.field(default_factory=dict)
    # (splits, refusals): the launches proved splittable (``Split``, docs/PARALLEL.md) and (kernel, why) of those
    # of splittable kernels kept serial; or a function that finds them, called when first asked (only a
    # parallel replay or its report reads them, so a load that replays serially never judges its launches)
    verdicts: tuple | Callable = ((), ())
    threads: int = 1  # > 1: the table has OP_SPLIT rows, cut for this many threads (run on at most as many)
    plan: split_planner.Plan | None = None  # what those rows run (their work items live there)
    # the CPU backend whose interpreter runs it (apic.replay.backends): chosen at its first replay when None
    backend: object = None
    # the table whose address and row count the native calls use, and the call block of a plain replay
    # (``_bind``: made once per table)
    _bound: np.ndarray | None = dataclasses.field(default=None, init=False, repr=False, compare=False)
    _address: int = dataclasses.field(default=0, init=False, repr=False, compare=False)
    _rows: int = dataclasses.field(default=0, init=False, repr=False, compare=False)
    _call: np.ndarray | None = dataclasses.field(default=None, init=False, repr=False, compare=False)
    _call_at: int = dataclasses.field(default=0, init=False, repr=False, compare=False)

    @property
    def splits(self) -> tuple[Split, ...]:
        """The launches proved splittable (docs/PARALLEL.md)."""
        return self._verdicts()[0]

    @property
    def refusals(self) -> tuple[tuple[int, str], ...]:
        """``(kernel, why)`` of each launch of a splittable kernel kept serial."""
        return self._verdicts()[1]

    def _verdicts(self) -> tuple:
        if callable(self.verdicts):
            self.verdicts = self.verdicts()
        return self.verdicts

    def parallel(self, threads: int, min_tasks_per_thread: int, range_entry_of, row_ns=None,
                 basis: dict | None = None) -> Program:
        """This program on ``threads`` threads (sharing this arena): its large split launches, and its
        runs of independent split launches, become ``OP_SPLIT`` rows (``apic.replay.parallel.split_planner``); ``self``
        if nothing fans out.

        ``range_entry_of(kernel, slots)`` is the address of a kernel's range entry, or None (it stays
        serial), or a tuple of ``slots`` addresses, one per thread slot (``split_planner.plan``); ``row_ns``
        each row's measured time in a serial replay, or None; ``basis`` a dict the planner fills with what
        decided each launch (by table row).
        """
        from apic.replay.parallel import split_pool  # lazy: imports Numba, which only a parallel replay needs

        found = split_planner.plan(self.table, self.splits, threads, min_tasks_per_thread, range_entry_of,
                                   split_pool.splitter_address(), split_pool.pool().base, row_ns, basis)
        if found is None:
            return self
        return Program(found.table, self.arena, self.loops, self.param_offsets, self._verdicts(), threads,
                       found, self.backend)

    def run(self, repeats: int = 1) -> None:
        """Run every op once (``repeats`` times) in one call into the native interpreter.

        Raises ``KeyboardInterrupt`` (through the SIGINT handler) when Ctrl-C stopped the replay, and
        ``LoopLimitError`` when a loop went past the iteration cap; the graph's memory is then as the
        replay left it.
        """
        # kept to what must run per call: this is on every capture_launch's path
        table = self.table
        if table is not self._bound:
            self._bind(table)
        if not self._rows:
            return
        backend = self.backend or self._choose_backend()
        native = backend.serial_entry()
        main = _get_ident() == _MAIN_THREAD
        if native is None:  # an interpreter called from Python: the Numba dispatcher or the reference one
            return self._run_python(backend, repeats, _LIMITS_MAIN if main else _LIMITS_THREAD)
        if repeats == 1 and main and not self.loops and self.threads == 1:
            status = native(self._call_at)  # the call block made once, in _bind
        else:
            status = self._run_native(native, operator.index(repeats), main)
        if status:
            raise_status(status, _LIMITS_MAIN if main else _LIMITS_THREAD, table)

    def fast_replay(self, hold_gil: bool = False, any_thread: bool = False):
        """The common replay (once, on the main thread) as one call of a bound native function that returns
        its status (``raise_status``, with the main thread's limits); None where a replay needs more than
        that (the Python interpreters, loops, threads > 1, an empty table, another thread unless
        ``any_thread``: a caller that makes it once for every thread, as a loaded CUDA graph's rows).

        Any thread may call it: without loops, the main thread's limits are read only by the Ctrl-C poll,
        which answers no off the main thread. ``hold_gil`` (a replay of a few microseconds at most,
        ``short_replay``) keeps the GIL through the call: releasing and taking it back would cost a
        third of the call. The caller keeps it for as long as the table is this one (a program's table is
        never replaced).
        """
        backend = self.backend or self._choose_backend()
        native = backend.serial_entry()
        if native is None or self.loops or self.threads != 1 or (not any_thread and _get_ident() != _MAIN_THREAD):
            return None
        if self.table is not self._bound:
            self._bind(self.table)
        if not self._rows:
            return None
        if hold_gil:
            native = _SERIAL_RUN_HOLDING_GIL(ctypes.cast(native, ctypes.c_void_p).value)
        # a partial of the ctypes function, the call block's address bound: no argument tuple to build per call
        return functools.partial(native, self._call_at)

    def _run_native(self, native, repeats: int, main: bool) -> int:
        """A native replay with a call block of its own (repeats, another thread, loops or threads)."""
        # a loop's counts start at zero on every replay (a capped or interrupted one leaves them set)
        counts = np.zeros(max(self.loops, 1), dtype=np.int64)
        call = np.array([self._address, self._rows, repeats, _LIMITS_MAIN_AT if main else _LIMITS_THREAD_AT,
                         self.loops, counts.ctypes.data], dtype=np.int64)
        if self.threads > 1:
            from apic.replay.parallel.split_pool import workers  # imported already: Program.parallel made the table

            with workers(self.threads):
                return native(call.ctypes.data)
        return native(call.ctypes.data)

    def _bind(self, table: np.ndarray) -> None:
        """Check ``table``'s layout once (what the native interpreter reads through its address) and make
        the call block of the common replay (once, main thread, no loop counts; ``native_entry.py``)."""
        if table.dtype != np.int64 or table.ndim != 2 or table.shape[1] != tbl.OP_COLUMNS or \
                not table.flags.c_contiguous:
            raise ReplayError(f"CPU graph replay failed: an op table must be C-contiguous int64 rows of "
                              f"{tbl.OP_COLUMNS}, got {table.dtype} {table.shape}")
        self._address, self._rows = table.ctypes.data, len(table)
        self._call = np.array([self._address, self._rows, 1, _LIMITS_MAIN_AT, 0, _NO_LOOPS_AT], dtype=np.int64)
        self._call_at, self._bound = self._call.ctypes.data, table

    def _choose_backend(self):
        """The CPU backend ``APIC_REPLAY`` names, kept for this program's later replays."""
        self.backend = backends.cpu_backend()
        return self.backend

    def _run_python(self, backend, repeats: int, limits: np.ndarray) -> None:
        """A replay through the Numba dispatcher (where the native object cannot be had) or the reference
        interpreter (``APIC_REPLAY=reference``)."""
        status = backend.run_rows(self.table, repeats, limits, self.loops, self.threads)
        if status:
            raise_status(status, limits, self.table)


def short_replay(ops) -> bool:
    """Whether a replay of ``ops`` is short enough to keep the GIL through its native call: at most
    ``SHORT_REPLAY_OPS`` kernel launches and plain memory ops, ``SHORT_REPLAY_TASKS`` tasks and
    ``SHORT_REPLAY_BYTES`` bytes copied or set in all (any other kind of op: no)."""
    if len(ops) > SHORT_REPLAY_OPS:
        return False
    tasks = nbytes = 0
    for op in ops:
        if rec.is_cpu_launch(op):
            tasks += math.prod(op.dim)
        elif rec.moves_nbytes(op):
            nbytes += op.nbytes
        else:
            return False
    return tasks <= SHORT_REPLAY_TASKS and nbytes <= SHORT_REPLAY_BYTES


def replay_limits() -> np.ndarray:
    """The ``limits`` array a replay on this thread passes to an interpreter (``table.LIMIT_*``)."""
    return _LIMITS_MAIN if _get_ident() == _MAIN_THREAD else _LIMITS_THREAD


def raise_status(status: int, limits: np.ndarray, table: np.ndarray) -> None:
    """Turn an interpreter's ``STATUS_*`` code into what the caller sees (Ctrl-C, ``LoopLimitError``, or for
    a negative status the error of the opcode that stopped the replay: ``table.OPCODES``)."""
    if status == native_interpreter.STATUS_NATIVE_ERROR:
        raise ReplayError("CPU graph replay failed: apic's native interpreter reported an internal error")
    if status < 0:  # a row's check failed, or the interpreter met an opcode it does not run
        raise tbl.stop_error(status, table)
    if status == tbl.STATUS_INTERRUPTED:
        # The poll consumed the signal: raise it again so that Python's SIGINT handler runs now
        signal.raise_signal(signal.SIGINT)
    elif status == tbl.STATUS_LOOP_CAP:
        raise LoopLimitError(
            f"a replayed capture_while loop ran more than {int(limits[tbl.LIMIT_ITERATIONS]):,} iterations; "
            "the replay stopped there. Raise the cap with apic.set_max_loop_iterations(n) (0: no cap)"
        )


def native_replay(program: Program | None = None) -> bool:
    """Whether ``program``'s replays (None: a new graph's) run through the native serial interpreter (not the
    Numba dispatcher's fallback, nor another backend's: ``APIC_REPLAY``, ``apic.replay.backends``)."""
    backend = (program.backend if program is not None else None) or backends.cpu_backend()
    return backend.serial_entry() is not None
