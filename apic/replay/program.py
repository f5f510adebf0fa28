"""A ``Program``: what the interpreter runs (an op table and the arena it points into, built by
``lowering.lower``), how one replay of it runs, and what its status means when it stops early.

The loop cap and the Ctrl-C poll live here, as the ``limits`` array every replay passes to the
interpreter; ``Program.parallel`` gives the table a parallel replay runs (``fanout``).
"""

from __future__ import annotations

import ctypes
import os
import signal
import threading
import dataclasses
from dataclasses import dataclass

import numpy as np

from apic.errors import LoopLimitError
from apic.replay import fanout
from apic.replay import table as tbl



def _c_api(name: str) -> int:
    return ctypes.cast(getattr(ctypes.pythonapi, name), ctypes.c_void_p).value or 0


# run_table's limits (table.LIMIT_*): the main thread's also polls for Ctrl-C, a worker thread's does
# not (Python handles signals only in the main thread). Both are updated in place by the setter below.
_MAIN_THREAD = threading.main_thread().ident
_get_ident = threading.get_ident
_LIMITS_MAIN = np.array([tbl.DEFAULT_MAX_LOOP_ITERATIONS, _c_api("PyGILState_Ensure"),
                         _c_api("PyOS_InterruptOccurred"), _c_api("PyGILState_Release")], dtype=np.int64)
_LIMITS_THREAD = np.array([tbl.DEFAULT_MAX_LOOP_ITERATIONS, 0, 0, 0], dtype=np.int64)


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
    writes: tuple  # (address, nbytes) of the regions it writes (fanout.launch_spans)
    reach: tuple  # (address, nbytes) of every region its arguments point into


@dataclass
class Program:
    """What the interpreter runs. ``arena`` must stay alive as long as ``table`` (it points into it)."""

    table: np.ndarray
    arena: np.ndarray
    loops: int = 0  # loop heads in the table (branches a backward jump returns to)
    # named scalar parameter -> arena byte offsets of its slots (one per distinct blob that holds it)
    param_offsets: dict = dataclasses.field(default_factory=dict)
    splits: tuple[Split, ...] = ()  # launches proved splittable (docs/PARALLEL.md)
    refusals: tuple[tuple[int, str], ...] = ()  # (kernel, why) of launches of splittable kernels kept serial
    threads: int = 1  # > 1: the table has OP_SPLIT rows, cut for this many threads (run on at most as many)
    plan: fanout.Plan | None = None  # what those rows run (their work items live there)

    def parallel(self, threads: int, min_tasks_per_thread: int, range_entry_of) -> Program:
        """This program on ``threads`` threads (sharing this arena): its large split launches, and its
        runs of independent split launches, become ``OP_SPLIT`` rows (``apic.replay.fanout``); ``self``
        if nothing fans out.

        ``range_entry_of(kernel, slots)`` is the address of a kernel's range entry, or None (it stays
        serial), or a tuple of ``slots`` addresses, one per thread slot (``fanout.plan``).
        """
        from apic.replay import split as splitter  # lazy: imports Numba, which only a parallel replay needs

        found = fanout.plan(self.table, self.splits, threads, min_tasks_per_thread, range_entry_of,
                            splitter.splitter_address(), splitter.pool().base)
        if found is None:
            return self
        return Program(found.table, self.arena, self.loops, self.param_offsets, self.splits, self.refusals, threads,
                       found)

    def run(self, repeats: int = 1) -> None:
        """Run every op once (``repeats`` times) in one call into the jitted interpreter.

        Raises ``KeyboardInterrupt`` (through the SIGINT handler) when Ctrl-C stopped the replay, and
        ``LoopLimitError`` when a loop went past the iteration cap; the graph's memory is then as the
        replay left it.
        """
        if not len(self.table):
            return
        # kept to one thread check and one status test: this is on every capture_launch's path
        limits = _LIMITS_MAIN if _get_ident() == _MAIN_THREAD else _LIMITS_THREAD
        run_table = _run_table or _load_interpreter()
        if self.threads > 1 and _run_table_pooled:
            from apic.replay.split import workers  # imported already: Program.parallel made the table

            with workers(self.threads):
                status = run_table(self.table, repeats, limits, self.loops)
        else:
            status = run_table(self.table, repeats, limits, self.loops)
        if status:
            raise_status(status, limits, self.table)


def replay_limits() -> np.ndarray:
    """The ``limits`` array a replay on this thread passes to an interpreter (``table.LIMIT_*``)."""
    return _LIMITS_MAIN if _get_ident() == _MAIN_THREAD else _LIMITS_THREAD


def raise_status(status: int, limits: np.ndarray, table: np.ndarray) -> None:
    """Turn an interpreter's ``STATUS_*`` code into what the caller sees (Ctrl-C, ``LoopLimitError``, or for
    a negative status the error of the opcode that stopped the replay: ``table.OPCODES``)."""
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


_run_table = None  # the jitted interpreter, bound on first replay
_run_table_pooled = True  # whether it runs OP_SPLIT rows on the splitter's pool (the reference one runs them itself)
def _load_interpreter():
    """Import the interpreter (and Numba) on first replay, not on import. Bound once: an import
    statement on every replay cost about 0.7 us, most of ``wp.capture_launch``'s fixed cost.

    ``APIC_REPLAY=reference`` selects the pure-Python reference interpreter instead (``reference.py``:
    a check of the Numba one, microseconds per op).
    """
    global _run_table, _run_table_pooled
    choice = os.environ.get("APIC_REPLAY", "numba")
    if choice == "reference":
        from apic.replay.reference import run_table  # no Numba: the point is a second implementation
    elif choice == "numba":
        from apic.replay.interpreter import run_table  # lazy: importing Numba costs about a second
    else:
        raise ValueError(f"APIC_REPLAY={choice!r}: expected 'numba' (the default) or 'reference'")
    _run_table, _run_table_pooled = run_table, choice == "numba"
    return run_table
