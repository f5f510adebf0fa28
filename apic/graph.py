"""``Graph``: a captured or loaded apic graph, replayed by ``wp.capture_launch``."""

from __future__ import annotations

import numpy as np

from apic.record import bindings as b
from apic.record.params import pack
from apic.record.ops import HandleRef
from apic.record.cpu.active_recorder import active
from apic.record.recording import Recording
from apic.replay import backends
from apic.replay.cpu.plans import CpuPlans
from apic.replay.named_params import NamedParams
from apic.replay.lowering import lower
from apic.replay.program import Program, raise_status, replay_limits
from apic.replay.parallel.thread_count import check as _check_threads


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
        # named scalar parameters (apic.param): their types, current values and arena bytes
        self.scalars = {p.name: p for p in recording.params}
        self.param_values = {p.name: p.value for p in recording.params}  # name -> packed bytes
        # what replays it on the CPU: its parallel plans, their timings, its plain replay as one bound call
        self.plans = CpuPlans(recording, self.program)
        # the bound calls of its plain replay by thread count asked for (None: ``threads``), which
        # ``wp.capture_launch`` calls directly (the plans' dict, filled and emptied by them)
        self.fast_replays: dict = self.plans.fast

    # --- parallel replay (docs/PARALLEL.md) -----------------------------------------------------------
    @property
    def threads(self) -> int:
        """Threads a plain ``wp.capture_launch(graph)`` splits launches over (by default 1, serial).

        An ``int`` >= 1, else ``ValueError``. Any count is accepted and bounded where it is used: launches
        are cut for at most ``apic.replay.parallel.thread_count.MAX_THREADS`` threads, and run on no more OS
        threads than the process may use (its CPU affinity; see ``apic.replay.parallel.thread_count``)."""
        return self.plans.threads

    @threads.setter
    def threads(self, value: int) -> None:
        self.plans.set_threads(_check_threads(value))

    @property
    def min_tasks_per_thread(self) -> int:
        """A launch splits only into ranges of at least this many tasks (default 4096); smaller launches
        cost less than waking a thread, so they run serially, unless a measured replay found them long
        enough (``plan_costs``; docs/PARALLEL.md, "Measured time")."""
        return self.plans.min_tasks

    @min_tasks_per_thread.setter
    def min_tasks_per_thread(self, value: int) -> None:
        if type(value) is not int or value < 1:
            raise ValueError(f"min_tasks_per_thread must be an integer >= 1, got {value!r}")
        self.plans.set_min_tasks(value)

    def parallel_program(self, threads: int) -> Program:
        """The program a replay on ``threads`` threads runs (built once per thread count; counts above
        ``MAX_THREADS`` share the one built for it)."""
        return self.plans.program_for(threads)

    def parallel_report(self, threads: int | None = None) -> list[dict]:
        """What a replay on ``threads`` threads (default :attr:`threads`) splits: one entry per distinct
        launch of a kernel proved splittable, ``{"kernel", "tasks", "chunks", "together", "count", "why",
        "basis"}``:
        ``chunks`` its tasks are cut into (1: run whole on one thread, at the same time as the independent
        launches next to it), ``together`` the launches of its ``OP_SPLIT`` row (1: split alone), ``count``
        its executions per replay; ``chunks`` and ``together`` 0 and ``why`` the reason when it runs
        serially; ``basis`` what decided either way (its tasks, or its measured time against the plan's
        boundary: ``apic.replay.parallel.plan_costs``; for a launch split by footprint, also that it runs serially at
        a replay whose index data differ from what it was judged on, and "(they differ now)" where the
        memory holds such data now). Then one entry per other kernel
        launched (``tasks`` 0, ``count`` its launches), with why it was not proved splittable.

        ``threads`` is checked and bounded as in :meth:`launch`: the report is that of the replay that runs."""
        return self.plans.report(threads)

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
        (``apic.replay.parallel.thread_count``).
        During a CPU capture on this thread, record its operations ``repeats`` times instead.
        """
        recorder = active()
        if recorder is not None:
            # Inside a record-only capture, launching a graph records its operations (as a CUDA graph
            # launched during stream capture becomes a child graph); nothing runs now.
            for _ in range(repeats):
                recorder.record_graph(self)
            return
        self.plans.launch(repeats, threads)

    def fast_replay_failed(self, status: int) -> None:
        """Raise what a replay stopped with ``status`` by the fast path of ``wp.capture_launch`` means."""
        raise_status(status, replay_limits(), self.program.table)

    # --- named parameters (apic.replay.named_params): copied by the backend (host memory) --------------
    @property
    def backend(self):
        """The CPU replay backend (``apic.replay.backends``) that replays it: the one that loaded it, else the one
        ``APIC_REPLAY`` names (kept by its program from its first replay on)."""
        return self.program.backend or backends.cpu_backend()

    def _set_scalar(self, scalar, value) -> None:
        packed = pack(scalar, value, f"set_param('{scalar.name}')")
        offsets = self.program.param_offsets.get(scalar.name)
        if offsets is not None:  # every launch argument block that received it, in the replay arena
            from apic.replay.cpu.param_slots import write_slots  # lazy: imports Numba (a jitted loop)

            write_slots(self.program.arena, offsets, np.frombuffer(packed, dtype=np.uint8))
        self.param_values[scalar.name] = packed

    def param_numpy(self, name: str):
        """A zero-copy NumPy view of the named parameter (apic only; ``shape + element shape``)."""
        binding = self._binding(name, "param_numpy")
        return b.typed_view(binding, self.region_addresses[binding.region], self)  # keeps this graph alive

    def __repr__(self) -> str:
        return f"<apic.Graph device={self.device} ops={self.op_count} regions={len(self.recording.regions)}>"
