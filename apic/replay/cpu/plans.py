"""A CPU graph's replay state (``apic.Graph.plans``): the parallel plans made per thread count and their
cache, the timed replays that tune them and the report of what they split (docs/PARALLEL.md), and the plain
replay as one bound native call (``fast``), which ``wp.capture_launch`` calls directly.

``apic.Graph`` is what a user holds; this is what replays it on the CPU.
"""

from __future__ import annotations

import numpy as np

from apic import _compat
from apic.errors import ReplayError
from apic.record.ops import launch_counts
from apic.replay.parallel import range_entry
from apic.replay.parallel.plan_costs import TIMED_REPLAYS, RowTimes
from apic.replay.cpu.profile import timed_rows
from apic.replay.program import Program, native_replay, short_replay
from apic.replay.parallel.thread_count import check as _check_threads
from apic.replay.parallel.thread_count import planned as _planned_threads
from apic.replay.parallel.threaded_launch import MIN_TASKS_PER_THREAD
from apic.targets import cpu as cpu_target


def _split_unavailable() -> str | None:
    from apic.replay.parallel.split_pool import unavailable  # imports Numba: only when a parallel replay is asked for

    return unavailable()


class CpuPlans:
    """The replay state of one CPU graph: its serial ``program``, the programs made from it per thread count
    (``parallel``), the row times they are tuned with and the bound calls of its plain replay (``fast``)."""

    def __init__(self, recording, program: Program) -> None:
        self.recording = recording
        self.program = program
        self.checks_blocks = any(k.cpu_blocks for k in recording.kernels)
        self.threads = 1  # the graph's own (``apic.Graph.threads``), checked by the graph
        self.min_tasks = MIN_TASKS_PER_THREAD
        self.parallel: dict[tuple[int, int], Program] = {}  # (threads, min tasks) -> parallel program
        # Each table row's time in a serial replay (ns): the median of the first plan_costs.TIMED_REPLAYS
        # replays on more threads whose plan keeps a launch serial for its size (_timed_replays, which
        # collects them in _row_times); the plans made after use it.
        self.row_ns: np.ndarray | None = None
        self._row_times: RowTimes | None = None
        self._basis: dict[tuple[int, int], dict] = {}  # key of parallel -> table row -> what decided it
        self._to_measure: set[tuple[int, int]] = set()  # keys of parallel whose next replay measures
        self._range_entries: dict = {}  # (kernel, thread slots) -> what range_entry returns
        self.range_missing: dict[int, str] = {}  # kernel -> why it has no range entry
        # The plain replay as one bound native call (Program.fast_replay), made by the first launch it can
        # stand for, by thread count asked for (None: the graph's own ``threads``, and each count whose plan
        # splits nothing: it runs the serial program); ``wp.capture_launch`` calls it directly. Entries are
        # dropped when what they stand for changes (``threads``, ``min_tasks``); whether a capture records
        # is checked per call. The dict is never replaced (the graph hands it out as ``fast_replays``).
        self.fast: dict = {}
        self._serial_replay = None  # the serial program's, once made

    def set_threads(self, threads: int) -> None:
        self.threads = threads
        self.fast.pop(None, None)  # made again by the next launch whose plan splits nothing

    def set_min_tasks(self, value: int) -> None:
        self.min_tasks = value
        self.fast.clear()  # what splits may change

    def range_entry(self, kernel: int, slots: int):
        """A kernel's range entry (0: none, its launches stay serial), or, for a kernel using tiles, the
        tuple of its entries in ``slots`` loaded copies, one per thread slot."""
        found = self._range_entries.get((kernel, slots))
        if found is None:
            info = self.recording.kernels[kernel]
            module = self.recording.modules[info.module]
            try:
                symbol = info.symbol[: -len(cpu_target.KERNEL_SUFFIX[False])]
                world = info.split_world is not None
                # a loaded file's tiles flag is checked against the module's source (a wrong one could crash)
                if info.split_tiles or range_entry.module_uses_tiles(module.name, module.module_exec):
                    found = range_entry.per_thread_entries(module.name, module.module_exec, symbol, slots, world)
                else:
                    found = range_entry.range_entry(module.name, module.module_exec, symbol, world)
            except (FileNotFoundError, LookupError) as error:  # no source to build it from: serial
                self.range_missing[kernel] = str(error)
                found = 0
            self._range_entries[(kernel, slots)] = found
        return found

    def program_for(self, threads: int) -> Program:
        """The program a replay on ``threads`` threads runs (built once per thread count; counts above
        ``MAX_THREADS`` share the one built for it)."""
        threads = _planned_threads(_check_threads(threads))
        key = (threads, self.min_tasks)
        program = self.parallel.get(key)
        if program is None:
            program = self.program
            basis = self._basis[key] = {}
            if threads > 1 and self.program.splits and _split_unavailable() is None:
                program = self.program.parallel(threads, self.min_tasks, self.range_entry, self.row_ns, basis)
                if self.row_ns is None and self._kept_for_size(program) and native_replay(self.program):
                    self._to_measure.add(key)
            self.parallel[key] = program
        return program

    def _kept_for_size(self, program: Program) -> list:
        """The split launches ``program`` keeps serial though they have a range entry and two tasks: too
        few tasks for ``min_tasks_per_thread``, which their measured time may overrule."""
        chunks = program.plan.chunks if program.plan else {}
        return [split for split in self.program.splits
                if split.tasks >= 2 and split.kernel not in self.range_missing
                and any(int(row) not in chunks for row in split.rows)]

    def _timed_replays(self, threads: int, repeats: int) -> int:
        """Run the replays still to be timed of ``repeats`` (at most ``plan_costs.TIMED_REPLAYS`` in all)
        serially through the profiled interpreter, keeping each row's time; once all are in, the plans
        are made again with their medians, and a launch whose time pays for a split splits whatever its
        tasks (the same results: any plan replays bit for bit as the serial one). Returns the replays of
        ``repeats`` left to run with the plan.

        Holds the lock of replays on several threads (``split_pool.lock``): a replay on several threads
        that another Python thread starts meanwhile waits for these replays, and runs on the plan they
        lead to, instead of running in between."""
        from apic.replay.parallel import split_pool  # imported already: a plan was made

        with split_pool.lock:
            if (_planned_threads(threads), self.min_tasks) not in self._to_measure:
                return repeats  # another thread ran the last timed replay while this one waited
            times = self._row_times = self._row_times or RowTimes(len(self.program.table))
            timed = min(repeats, times.needed)
            for _ in range(timed):
                row_ns, calls, _ = timed_rows(self.program, 1)
                times.add(row_ns, calls)
            if not times.needed:
                self.row_ns = times.median()
                self.parallel.clear()
                self._basis.clear()
                self._to_measure.clear()
                self.fast.clear()
            return repeats - timed

    def report(self, threads: int | None = None) -> list[dict]:
        """What a replay on ``threads`` threads (default: the graph's) splits; ``apic.Graph.parallel_report``
        says what each entry holds."""
        threads = self.threads if threads is None else _check_threads(threads)
        program = self.program_for(threads)
        basis_of = self._basis.get((_planned_threads(threads), self.min_tasks), {})
        report = []
        chunks_of, together_of = (program.plan.chunks, program.plan.together) if program.plan else ({}, {})
        for split in self.program.splits:
            row = int(split.rows[0])
            chunks = chunks_of.get(row, 0)
            why, basis = "", basis_of.get(row, "")
            if chunks and split.guards is not None:
                basis += ("; judged by footprint on the index data and arguments it held at lowering: a replay "
                          "where they differ runs it serially")
                if not split.guards.hold():
                    basis += " (they differ now)"
            if not chunks:
                why = basis = (("threads=1" if threads == 1 else None) or _split_unavailable()
                               or self.range_missing.get(split.kernel) or basis + self._pending_why(threads))
            report.append({"kernel": self.recording.kernels[split.kernel].key, "tasks": split.tasks,
                           "chunks": chunks, "together": together_of.get(row, 0),
                           "count": len(split.rows), "why": why, "basis": basis})
        for kernel, why in self.program.refusals:
            report.append({"kernel": self.recording.kernels[kernel].key, "tasks": 0, "chunks": 0, "together": 0,
                           "count": 0, "why": why, "basis": why})
        return report + self._serial_kernels()

    def _pending_why(self, threads: int) -> str:
        """What waits for timed replays, of a launch kept serial for its size (``parallel_report``)."""
        if (_planned_threads(threads), self.min_tasks) not in self._to_measure:
            return ""
        needed = self._row_times.needed if self._row_times else TIMED_REPLAYS
        return (f"; the next {needed} replay(s) on {threads} threads run serially and time it (the plan after "
                f"them may split it)")

    def _serial_kernels(self) -> list[dict]:
        """``parallel_report`` entries of the kernels never proved splittable, one per kernel launched."""
        report = []
        for kernel, count in launch_counts(self.recording.ops).items():
            info = self.recording.kernels[kernel]
            if info.may_split:
                continue
            why = ("backward launch" if info.adjoint else "runs as cooperative CPU blocks" if info.cpu_blocks
                   else info.split_refused or "not proved splittable when captured")
            report.append({"kernel": info.key, "tasks": 0, "chunks": 0, "together": 0, "count": count, "why": why,
                           "basis": why})
        return report

    def launch(self, repeats: int, threads) -> None:
        """Replay ``repeats`` times on ``threads`` (None: ``threads``), as ``apic.Graph.launch`` says."""
        asked = threads
        if threads is None:
            threads = self.threads
        program, measure = self.program, False
        if threads != 1 or type(threads) is not int:
            program = self.program_for(threads)  # made first: making it decides whether timings are due
            measure = bool(self._to_measure) and (_planned_threads(threads), self.min_tasks) in self._to_measure
            if not measure:
                # Again: another Python thread may have run the last timed replay since, clearing the plans
                # (before the timings due) that ``program`` may be one of
                program = self.program_for(threads)
        if not self.checks_blocks:
            if measure:
                self._timed_then_planned(threads, repeats)
                return
            program.run(repeats)
            if repeats == 1 and program is self.program:
                self._keep_fast_replay(asked)
            return
        take_error = _compat.runtime().core.wp_take_cpu_block_error
        take_error()  # as eager Warp: forget a failure left over from earlier work
        if measure:
            self._timed_then_planned(threads, repeats)
        else:
            program.run(repeats)
        error = take_error()
        if error:
            # Reported after the replay, not at the failing launch (the interpreter does not stop).
            message = error.decode("utf-8", errors="replace")
            raise ReplayError(f"Error replaying a CPU graph with cooperative-block kernels: {message}")

    def _timed_then_planned(self, threads: int, repeats: int) -> None:
        """``repeats`` replays on ``threads`` threads while timed replays are still to run: those first, the
        rest on the plan they lead to. A call of zero replays runs, and times, nothing."""
        if repeats:
            left = self._timed_replays(threads, repeats)
            if left:
                self.program_for(threads).run(left)

    def _keep_fast_replay(self, threads: int | None) -> None:
        """Keep the serial program's bound native call for launches with ``threads`` (None: the graph's own)."""
        if self._serial_replay is None:  # None off the main thread: only that thread makes it
            self._serial_replay = self.program.fast_replay(short_replay(self.recording.ops))
        if threads is None:
            self.fast[None] = self._serial_replay
        elif self._serial_replay is not None:
            self.fast[threads] = self._serial_replay

