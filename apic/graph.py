"""``Graph``: a captured or loaded apic graph, replayed by ``wp.capture_launch``."""

from __future__ import annotations

import numpy as np

from apic import _compat
from apic.record import bindings as b
from apic.errors import ReplayError
from apic.record.params import pack
from apic.record.ops import HandleRef, launch_counts
from apic.record.active_recorder import active
from apic.record.recording import Recording
from apic.replay import backends, range_entry
from apic.replay.named_params import NamedParams
from apic.replay.threaded_launch import MIN_TASKS_PER_THREAD
from apic.replay.lowering import lower
from apic.replay.plan_costs import TIMED_REPLAYS, RowTimes
from apic.replay.profile import timed_rows
from apic.replay.program import Program, native_replay, raise_status, replay_limits, short_replay
from apic.replay.thread_count import check as _check_threads
from apic.replay.thread_count import planned as _planned_threads
from apic.targets import cpu as cpu_target


def _split_unavailable() -> str | None:
    from apic.replay.split_pool import unavailable  # imports Numba: only when a parallel replay is asked for

    return unavailable()


class Graph(NamedParams):
    """A graph apic recorded on the CPU (or loaded from a file).

    Mirrors the attributes of ``warp.Graph`` that user code reads (``device``, ``apic``,
    ``is_loaded``). It holds every Python object and compiled module its ops use, so replay stays
    correct after the user drops their own references.

    A graph loaded by ``wp.capture_load`` / ``wp.capture_load_from_bytes`` also has named
    parameters: :attr:`params`, :meth:`set_param`, :meth:`get_param` and :meth:`get_param_ptr`,
    as in Warp 1.19, which check dtype and shape as well as size. Named scalar parameters
    (``apic.param``) can be set and read on live and loaded graphs alike.
    """

    def __init__(self, recording: Recording, device, *, apic: bool, keepalive=(), is_loaded: bool = False,
                 region_addresses=None, kernel_addresses=None, bindings=(), id_arrays=None, backend=None):
        self.device = device
        self.apic = apic
        self.is_loaded = is_loaded
        self.recording = recording
        self._keepalive = list(keepalive)
        self.bindings = {b.name: b for b in bindings}  # name -> apic.record.bindings.Binding (loaded graphs)
        if region_addresses is None:
            region_addresses = [r.address for r in recording.regions]
        if kernel_addresses is None:
            kernel_addresses = [k.address for k in recording.kernels]
        self.region_addresses = list(region_addresses)
        # The ids of its native handles (Mesh, Bvh, ...): the captured objects, or those rebuilt on load.
        self.handle_ids = [int(h.obj.id) for h in recording.handles]
        # a loaded graph checks the index values its native code reads (apic.replay.guards); a live one runs as eagerly
        self.id_arrays = id_arrays or {}  # id(launch) -> arrays of handle ids it passes (apic.format.manifest)
        self.program: Program = lower(recording, self.address_of, list(kernel_addresses), checked=is_loaded,
                                      id_arrays=self.id_arrays)
        # the CPU backend that loaded it (apic.replay.backends); a live graph's is chosen at its first replay
        self.program.backend = backend
        self._checks_blocks = any(k.cpu_blocks for k in recording.kernels)
        # named scalar parameters (apic.param): their types, current values and arena bytes
        self.scalars = {p.name: p for p in recording.params}
        self.param_values = {p.name: p.value for p in recording.params}  # name -> packed bytes
        self._threads = 1
        self._min_tasks = MIN_TASKS_PER_THREAD
        self._parallel: dict[tuple[int, int], Program] = {}  # (threads, min tasks) -> parallel program
        # Each table row's time in a serial replay (ns): the median of the first plan_costs.TIMED_REPLAYS
        # replays on more threads whose plan keeps a launch serial for its size (_timed_replays, which
        # collects them in _row_times); the plans made after use it.
        self._row_ns: np.ndarray | None = None
        self._row_times: RowTimes | None = None
        self._basis: dict[tuple[int, int], dict] = {}  # key of _parallel -> table row -> what decided it
        self._to_measure: set[tuple[int, int]] = set()  # keys of _parallel whose next replay measures
        self._range_entries: dict = {}  # (kernel, thread slots) -> what _range_entry returns
        self._range_missing: dict[int, str] = {}  # kernel -> why it has no range entry
        # The plain replay as one bound native call (Program.fast_replay), made by the first launch it can
        # stand for; ``wp.capture_launch`` calls it directly: for the graph's own ``threads``, and for each
        # thread count asked for whose plan splits nothing (it runs the serial program). Dropped when what
        # it stands for changes (``threads``, ``min_tasks_per_thread``); whether a capture records is
        # checked per call.
        self._fast_replay = None
        self._fast_counts: dict[int, object] = {}
        self._serial_replay = None  # the serial program's, once made

    # --- parallel replay (docs/PARALLEL.md) -----------------------------------------------------------
    @property
    def threads(self) -> int:
        """Threads a plain ``wp.capture_launch(graph)`` splits launches over (by default 1, serial).

        An ``int`` >= 1, else ``ValueError``. Any count is accepted and bounded where it is used: launches
        are cut for at most ``apic.replay.thread_count.MAX_THREADS`` threads, and run on no more OS
        threads than the process may use (its CPU affinity; see ``apic.replay.thread_count``)."""
        return self._threads

    @threads.setter
    def threads(self, value: int) -> None:
        self._threads = _check_threads(value)
        self._fast_replay = None  # made again by the next launch whose plan splits nothing

    @property
    def min_tasks_per_thread(self) -> int:
        """A launch splits only into ranges of at least this many tasks (default 4096); smaller launches
        cost less than waking a thread, so they run serially, unless a measured replay found them long
        enough (``plan_costs``; docs/PARALLEL.md, "Measured time")."""
        return self._min_tasks

    @min_tasks_per_thread.setter
    def min_tasks_per_thread(self, value: int) -> None:
        if type(value) is not int or value < 1:
            raise ValueError(f"min_tasks_per_thread must be an integer >= 1, got {value!r}")
        self._min_tasks = value
        self._fast_replay = None  # what splits may change
        self._fast_counts.clear()

    def _range_entry(self, kernel: int, slots: int):
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
                self._range_missing[kernel] = str(error)
                found = 0
            self._range_entries[(kernel, slots)] = found
        return found

    def parallel_program(self, threads: int) -> Program:
        """The program a replay on ``threads`` threads runs (built once per thread count; counts above
        ``MAX_THREADS`` share the one built for it)."""
        threads = _planned_threads(_check_threads(threads))
        key = (threads, self._min_tasks)
        program = self._parallel.get(key)
        if program is None:
            program = self.program
            basis = self._basis[key] = {}
            if threads > 1 and self.program.splits and _split_unavailable() is None:
                program = self.program.parallel(threads, self._min_tasks, self._range_entry, self._row_ns, basis)
                if self._row_ns is None and self._kept_for_size(program) and native_replay(self.program):
                    self._to_measure.add(key)
            self._parallel[key] = program
        return program

    def _kept_for_size(self, program: Program) -> list:
        """The split launches ``program`` keeps serial though they have a range entry and two tasks: too
        few tasks for ``min_tasks_per_thread``, which their measured time may overrule."""
        chunks = program.plan.chunks if program.plan else {}
        return [split for split in self.program.splits
                if split.tasks >= 2 and split.kernel not in self._range_missing
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
        from apic.replay import split_pool  # imported already: a plan was made

        with split_pool.lock:
            if (_planned_threads(threads), self._min_tasks) not in self._to_measure:
                return repeats  # another thread ran the last timed replay while this one waited
            times = self._row_times = self._row_times or RowTimes(len(self.program.table))
            timed = min(repeats, times.needed)
            for _ in range(timed):
                row_ns, calls, _ = timed_rows(self.program, 1)
                times.add(row_ns, calls)
            if not times.needed:
                self._row_ns = times.median()
                self._parallel.clear()
                self._basis.clear()
                self._to_measure.clear()
                self._fast_replay = None
                self._fast_counts.clear()
            return repeats - timed

    def parallel_report(self, threads: int | None = None) -> list[dict]:
        """What a replay on ``threads`` threads (default :attr:`threads`) splits: one entry per distinct
        launch of a kernel proved splittable, ``{"kernel", "tasks", "chunks", "together", "count", "why",
        "basis"}``:
        ``chunks`` its tasks are cut into (1: run whole on one thread, at the same time as the independent
        launches next to it), ``together`` the launches of its ``OP_SPLIT`` row (1: split alone), ``count``
        its executions per replay; ``chunks`` and ``together`` 0 and ``why`` the reason when it runs
        serially; ``basis`` what decided either way (its tasks, or its measured time against the plan's
        boundary: ``apic.replay.plan_costs``; for a launch split by footprint, also that it runs serially at
        a replay whose index data differ from what it was judged on, and "(they differ now)" where the
        memory holds such data now). Then one entry per other kernel
        launched (``tasks`` 0, ``count`` its launches), with why it was not proved splittable.

        ``threads`` is checked and bounded as in :meth:`launch`: the report is that of the replay that runs."""
        threads = self._threads if threads is None else _check_threads(threads)
        program = self.parallel_program(threads)
        basis_of = self._basis.get((_planned_threads(threads), self._min_tasks), {})
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
                               or self._range_missing.get(split.kernel) or basis + self._pending_why(threads))
            report.append({"kernel": self.recording.kernels[split.kernel].key, "tasks": split.tasks,
                           "chunks": chunks, "together": together_of.get(row, 0),
                           "count": len(split.rows), "why": why, "basis": basis})
        for kernel, why in self.program.refusals:
            report.append({"kernel": self.recording.kernels[kernel].key, "tasks": 0, "chunks": 0, "together": 0,
                           "count": 0, "why": why, "basis": why})
        return report + self._serial_kernels()

    def _pending_why(self, threads: int) -> str:
        """What waits for timed replays, of a launch kept serial for its size (``parallel_report``)."""
        if (_planned_threads(threads), self._min_tasks) not in self._to_measure:
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

    def address_of(self, target) -> int:
        """The live address of a region reference, or the id of a ``HandleRef``'s object."""
        if isinstance(target, HandleRef):
            return self.handle_ids[target.index]
        return self.region_addresses[target.region] + target.offset

    @property
    def op_count(self) -> int:
        """Number of recorded ops (allocations included)."""
        return len(self.recording.ops)

    def launch(self, repeats: int = 1, threads: int | None = None) -> None:
        """Replay the graph ``repeats`` times with one call into the native interpreter.

        ``threads`` (default :attr:`threads`; an ``int`` >= 1, else ``ValueError``) > 1 splits each launch
        proved splittable and large enough over that many threads (docs/PARALLEL.md); the results are the
        serial replay's, bit for bit. A count above what can run is bounded: launches are cut for at most
        ``MAX_THREADS`` threads, run on at most as many OS threads as the process may use
        (``apic.replay.thread_count``).
        During a CPU capture on this thread, record its operations ``repeats`` times instead.
        """
        recorder = active()
        if recorder is not None:
            # Inside a record-only capture, launching a graph records its operations (as a CUDA graph
            # launched during stream capture becomes a child graph); nothing runs now.
            for _ in range(repeats):
                recorder.record_graph(self)
            return
        asked = threads
        if threads is None:
            threads = self._threads
        program, measure = self.program, False
        if threads != 1 or type(threads) is not int:
            program = self.parallel_program(threads)  # made first: making it decides whether timings are due
            measure = bool(self._to_measure) and (_planned_threads(threads), self._min_tasks) in self._to_measure
            if not measure:
                # Again: another Python thread may have run the last timed replay since, clearing the plans
                # (before the timings due) that ``program`` may be one of
                program = self.parallel_program(threads)
        if not self._checks_blocks:
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
                self.parallel_program(threads).run(left)

    def _keep_fast_replay(self, threads: int | None) -> None:
        """Keep the serial program's bound native call for launches with ``threads`` (None: the graph's own)."""
        if self._serial_replay is None:  # None off the main thread: only that thread makes it
            self._serial_replay = self.program.fast_replay(short_replay(self.recording.ops))
        if threads is None:
            self._fast_replay = self._serial_replay
        elif self._serial_replay is not None:
            self._fast_counts[threads] = self._serial_replay

    def fast_replay_failed(self, status: int) -> None:
        """Raise what a replay stopped with ``status`` by the fast path of ``wp.capture_launch`` means."""
        raise_status(status, replay_limits(), self.program.table)

    # --- named parameters (apic.replay.named_params): copies by the backend (host memory) -------------
    def _backend(self):
        return self.program.backend or backends.cpu_backend()

    def _write_binding(self, binding, arr) -> None:
        self._backend().write_binding(self, binding, arr)

    def _read_binding(self, binding, arr) -> None:
        self._backend().read_binding(self, binding, arr)

    def _set_scalar(self, scalar, value) -> None:
        packed = pack(scalar, value, f"set_param('{scalar.name}')")
        offsets = self.program.param_offsets.get(scalar.name)
        if offsets is not None:  # every launch argument block that received it, in the replay arena
            from apic.replay.param_slots import write_slots  # lazy: imports Numba (a jitted loop)

            write_slots(self.program.arena, offsets, np.frombuffer(packed, dtype=np.uint8))
        self.param_values[scalar.name] = packed

    def param_numpy(self, name: str):
        """A zero-copy NumPy view of the named parameter (apic only; ``shape + element shape``)."""
        binding = self._binding(name, "param_numpy")
        return b.typed_view(binding, self.region_addresses[binding.region], self)  # keeps this graph alive

    def __repr__(self) -> str:
        return f"<apic.Graph device={self.device} ops={self.op_count} regions={len(self.recording.regions)}>"
