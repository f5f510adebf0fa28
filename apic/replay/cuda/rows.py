"""A loaded CUDA graph's replay as rows of the op table, run by the same native interpreter as CPU graphs.

The steps of a loaded graph (``cuda_lowering.lower``: kernel launches, device copies, memsets) become CUDA rows
(``table.OP_CUDA_*``) that call the driver's ``cuLaunchKernel``, ``cuMemcpyDtoDAsync`` and
``cuMemsetD8/D16/D32Async`` by address: no Python per op. A replay as one CUDA graph is three rows
(``cuGraphLaunch`` between the context's entry and exit), run by the same one native call.

The driver's entry points are looked up once, at load, in the driver library cuda-python uses (``dlsym`` of
the versioned names ``cuda.h`` maps the API names to, e.g. ``cuMemcpyDtoDAsync_v2``). The kernelParams
arrays the rows pass are the lowering's, built once at load and kept alive by the graph.

Every row checks its ``CUresult``: the first call that fails stops the replay (the rows before it were
issued; none after it), the context is popped if the rows pushed it, and ``CudaReplayError`` names the call
and the driver's error (``table.OPCODES``).
"""

from __future__ import annotations

import ctypes
import threading

import numpy as np

from apic.replay import program as prog
from apic.replay.cpu import table as tbl
from apic.targets import cuda as cuda_target

#: The driver library whose entry points the rows call (the one cuda-python loads on Linux).
DRIVER_LIBRARY = cuda_target.DRIVER_LIBRARY
#: What a row calls -> the symbol the driver library exports for it (``cuda.h``'s ``#define``s).
SYMBOLS = {
    "launch": "cuLaunchKernel",
    "memcpy": "cuMemcpyDtoDAsync_v2",
    "memset1": "cuMemsetD8Async",
    "memset2": "cuMemsetD16Async",
    "memset4": "cuMemsetD32Async",
    "graph_launch": "cuGraphLaunch",
    "get_current": "cuCtxGetCurrent",
    "push": "cuCtxPushCurrent_v2",
    "pop": "cuCtxPopCurrent_v2",
}

_LIBRARIES: dict[str, dict] = {}  # library -> its entry points (a library is opened once per process)


def driver_entries(driver, library: str | None = None) -> dict[str, int] | None:
    """The address of each entry point of ``SYMBOLS`` in ``library`` (default: ``driver.library``, the driver
    library behind cuda-python, ``DRIVER_LIBRARY``, or the one a stand-in for cuda-python names), by name.

    None where the library cannot be opened or lacks one (the graph then replays through cuda-python), and
    where the driver names none (a stand-in whose handles are no library's)."""
    library = library or getattr(driver, "library", None)
    if library is None:
        return None
    found = _LIBRARIES.get(library)
    if found is None:
        try:
            lib = ctypes.CDLL(library)
            found = {name: ctypes.cast(getattr(lib, symbol), ctypes.c_void_p).value
                     for name, symbol in SYMBOLS.items()}
        except (OSError, AttributeError):
            return None
        for name, address in found.items():
            tbl.CUDA_NAMES[address] = SYMBOLS[name]  # what a failed row's error names
        _LIBRARIES[library] = found
    return found


def lower_rows(plan: list, entries: dict[str, int], cuda: int, graph_exec=None) -> np.ndarray:
    """The op table of a replay: the ``plan``'s steps (``cuda_lowering.lower``) one row each, or where
    ``graph_exec`` is given one ``cuGraphLaunch`` of it; between the context's entry and exit rows. ``cuda`` is
    the address of the table's CUDA block (``table.CUDA_*``)."""
    rows = []
    for step in plan if graph_exec is None else ():
        if step[0] == "kernel":
            _, fn, grid, block, smem, params = step
            rows.append([tbl.OP_CUDA_LAUNCH, entries["launch"], int(fn), *grid, *block, smem, params, cuda])
        elif step[0] == "memcpy":
            _, dst, src, nbytes = step
            rows.append([tbl.OP_CUDA_CALL3, entries["memcpy"], dst, src, nbytes, cuda])
        else:
            _, dst, value, width, count = step
            rows.append([tbl.OP_CUDA_CALL3, entries[f"memset{width}"], dst, value, count, cuda])
    if graph_exec is not None:
        rows.append([tbl.OP_CUDA_CALL1, entries["graph_launch"], int(graph_exec), cuda])
    rows = [[tbl.OP_CUDA_ENTER, entries["push"], cuda, entries["get_current"]], *rows,
            [tbl.OP_CUDA_LEAVE, entries["pop"], cuda]]
    table = np.zeros((len(rows), tbl.OP_COLUMNS), dtype=np.int64)
    for i, row in enumerate(rows):
        table[i, : len(row)] = [int(v) for v in row]
    return table


class _Replay:
    """One op table of CUDA rows and its CUDA block, run in one call of the interpreter."""

    def __init__(self, plan: list, entries: dict[str, int], context, graph_exec, stream: int) -> None:
        self.block = np.zeros(tbl.CUDA_WORDS, dtype=np.int64)
        self.block[[tbl.CUDA_STREAM, tbl.CUDA_CONTEXT, tbl.CUDA_POP]] = [stream, int(context or 0), entries["pop"]]
        self.table = lower_rows(plan, entries, self.block.ctypes.data, graph_exec)
        self.program = prog.Program(self.table, self.block)
        # A short table keeps the GIL through its native call: releasing and taking it back cost more than
        # issuing a graph launch (measured with benchmarks/cuda_issue.py). Such a call is then one step for
        # every other Python thread: it needs no lock (``CudaRows.run_own``).
        self.short = len(self.table) <= prog.SHORT_REPLAY_OPS + 2
        self.fast = None  # the native call (made at the first replay), or False: the Python interpreters run it

    def run(self) -> None:
        """Replay once (the caller holds the graph's lock, unless ``fast`` keeps the GIL)."""
        if self.fast is None:
            self.fast = self.program.fast_replay(hold_gil=self.short, any_thread=True) or False
        if self.fast:
            self.check(self.fast())
        else:  # the Numba dispatcher or the reference interpreter (which raise themselves)
            self.program.run()

    def check(self, status: int) -> None:
        """Raise what a replay's ``status`` says (a driver call failed: the interpreter popped the context
        the rows had pushed, and the block holds the call's error)."""
        if status:
            prog.raise_status(status, prog.replay_limits(), self.table)


class CudaRows:
    """A loaded CUDA graph's replays as op tables (see the module docstring).

    ``run_own(mode)`` replays on the graph's own stream, whose tables are made at load; ``run(mode, stream)``
    on another stream (tables made at its first use; the stream is written into their block, under the lock).
    ``mode`` is ``"graph"`` (one ``cuGraphLaunch``; only where a ``graph_exec`` is given) or ``"launch"``."""

    def __init__(self, plan: list, entries: dict[str, int], context, stream, graph_exec=None,
                 launch: bool = True) -> None:
        self._args = (plan, entries, context, graph_exec)
        self._launch = launch  # False: no launch-mode rows (a plan with conditional steps)
        self._own = {mode: self._replay(mode, int(stream or 0)) for mode in self._modes()}
        self._other: dict = {}
        self._lock = threading.Lock()

    def _modes(self) -> tuple[str, ...]:
        return ("graph",) * (self._args[3] is not None) + ("launch",) * self._launch

    def has(self, mode: str) -> bool:
        """Whether ``mode`` replays as rows here."""
        return mode in self._modes()

    def _replay(self, mode: str, stream: int) -> _Replay:
        plan, entries, context, graph_exec = self._args
        return _Replay(plan, entries, context, graph_exec if mode == "graph" else None, stream)

    def tables(self) -> dict[str, np.ndarray]:
        """The op table of each mode on the graph's own stream."""
        return {mode: replay.table for mode, replay in self._own.items()}

    def run_own(self, mode: str) -> bool:
        """Replay in ``mode`` on the graph's own stream, in one call of the native interpreter where it runs;
        False (nothing run) for a mode without a table here."""
        replay = self._own.get(mode)
        if replay is None:
            return False
        if replay.short and replay.fast:  # the GIL held through the call: no other thread runs on its block
            replay.check(replay.fast())
            return True
        with self._lock:  # the GIL is released (a long table, or the Numba dispatcher): one replay at a time
            replay.run()
        return True

    def fast_own(self, mode: str):
        """``(native call, its status check)`` of ``mode`` on the graph's own stream where one call replays it with
        the GIL held (a short table whose native call is made: after its first replay), else None."""
        replay = self._own.get(mode)
        if replay is None or not (replay.short and replay.fast):
            return None
        return replay.fast, replay.check

    def run(self, mode: str, stream) -> None:
        """Replay in ``mode`` on ``stream`` (a ``CUstream`` or its handle)."""
        with self._lock:
            replay = self._other.get(mode)
            if replay is None:
                replay = self._other[mode] = self._replay(mode, 0)
            replay.block[tbl.CUDA_STREAM] = int(stream or 0)
            replay.run()
