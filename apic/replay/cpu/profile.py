"""Per-op replay profile: the interpreter loop again, with a clock read after every row it executes.

``wp.capture_launch`` stays unprofiled: this is a second compiled version of the interpreter's one
loop over the op table (``table.py``; ``interpreter.run_table_profiled``), run only by
``apic.profile``. After each row it reads ``clock_gettime(CLOCK_MONOTONIC)`` through a function
pointer (no Python per op) and adds the time since the previous reading to that row's total, so a
row's time includes one clock read and the loop's own dispatch. Rows map back to the recorded ops that
produced them (``OpEffects.rows``: every op but an allocation lowers to exactly one row, in order, with
a loaded graph's check rows between them, told apart by their opcode), and the report
aggregates them by op kind and kernel over many replays.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass

import numpy as np

from apic import _compat
from apic._probes import host_os
from apic._text import escape
from apic.errors import ReplayError
from apic.record import ops as rec
from apic.record.effects import EFFECTS, effects_of
from apic.replay import program as _program
from apic.replay.cpu import table as tbl

_CLOCK = host_os.monotonic_clock()  # (the C library's clock_gettime, CLOCK_MONOTONIC's id here) or None
CLOCK_MONOTONIC = _CLOCK[1] if _CLOCK else 1  # the profile's clock, read through clock_gettime
_CHECK = ("check", "index check")  # the label of a loaded graph's index-check row


def clock_address() -> int:
    """The address of the C library's ``clock_gettime`` (the profile's clock); refused where apic does not know
    the id of its monotonic clock (``apic._probes.host_os.monotonic_clock``: Linux, macOS, FreeBSD)."""
    if _CLOCK is None:
        raise NotImplementedError(f"apic.profile reads the C library's clock_gettime(CLOCK_MONOTONIC), whose clock "
                                  f"id apic knows on Linux and macOS; this is {sys.platform}")
    return _CLOCK[0]


@dataclass(frozen=True)
class ProfileRow:
    """One line of the report: every table row of one op kind and name (a kernel or a native function)."""

    kind: str
    name: str
    ops: int  # distinct positions in the op sequence
    calls: int  # rows executed, over every replay
    total_ns: int
    share: float  # of the summed time of every row

    @property
    def mean_ns(self) -> float:
        return self.total_ns / self.calls if self.calls else 0.0


@dataclass
class ProfileReport:
    """What ``apic.profile`` measured: per-row totals and counts, and their aggregate ``rows``."""

    replays: int
    wall_ns: int  # the whole profiled run, clock reads included
    row_ns: np.ndarray  # per table row: summed nanoseconds
    row_calls: np.ndarray  # per table row: times executed
    row_labels: list  # per table row: (kind, name)
    clock_ns: float  # measured cost of one clock read, nanoseconds
    rows: list

    def table(self) -> str:
        """The report as aligned text: kind, name, ops, calls, total and mean time, share."""
        head = f"{'kind':<12} {'name':<32} {'ops':>5} {'calls':>9} {'total ms':>10} {'mean us':>9} {'share':>7}"
        lines = [head, "-" * len(head)]
        for r in self.rows:
            # a kernel's name comes from the file: escaped, so that it cannot forge a line of the table
            lines.append(f"{r.kind:<12} {escape(r.name)[:32]:<32} {r.ops:>5} {r.calls:>9} {r.total_ns / 1e6:>10.3f} "
                         f"{r.mean_ns / 1e3:>9.3f} {r.share:>6.1%}")
        total = int(self.row_ns.sum())
        lines.append(f"{self.replays} replay(s), {len(self.row_ns)} rows each; {total / 1e6:.3f} ms in rows, "
                     f"{self.wall_ns / 1e6:.3f} ms wall; one clock read costs about {self.clock_ns:.0f} ns "
                     "(included in each row's time)")
        return "\n".join(lines)

    def plot(self, path: str) -> None:
        """A horizontal bar chart of total time per row of the report, written to ``path`` (matplotlib)."""
        import matplotlib  # lazy: an optional dependency (the ``plot`` extra)

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # lazy, as above

        labels = [r.kind if r.name == r.kind else f"{r.kind} {r.name}" for r in self.rows][::-1]
        values = [r.total_ns / 1e3 / max(self.replays, 1) for r in self.rows][::-1]
        fig, ax = plt.subplots(figsize=(8, 1.2 + 0.35 * len(labels)))
        ax.barh(labels, values, color="#4c72b0")
        ax.set_xlabel(f"us per replay (each op's time includes one clock read, about {self.clock_ns:.0f} ns)")
        ax.set_title(f"apic replay profile ({self.replays} replays)")
        fig.tight_layout()
        fig.savefig(path)
        plt.close(fig)


def row_labels(graph) -> list:
    """``(kind, name)`` of each op-table row of ``graph``: a loaded graph's check rows (``table.Opcode.guard``)
    by their opcode, every other row from the next recorded op that lowers to a row (``OpEffects.rows``)."""
    recording = graph.recording
    table = graph.program.table
    ops = iter([op for op in recording.ops for _ in range(effects_of(op, "profiling a graph").rows)])
    labels = []
    for opcode in table[:, tbl.COL_OPCODE].tolist():
        spec = tbl.OPCODES.get(opcode)
        if spec is not None and spec.guard:
            labels.append(_CHECK)
            continue
        op = next(ops, None)
        if op is None:
            break
        labels.append((rec.SPEC_OF_TYPE[type(op)].name, EFFECTS[type(op)].label(op, recording.kernels)))
    if len(labels) != len(table) or next(ops, None) is not None:
        raise RuntimeError(f"profile: the ops of the graph do not match its {len(table)} table rows")
    return labels


def _aggregate(row_ns, row_calls, labels) -> list:
    groups: dict = {}
    for i, label in enumerate(labels):
        ops, calls, total = groups.get(label, (0, 0, 0))
        groups[label] = (ops + 1, calls + int(row_calls[i]), total + int(row_ns[i]))
    whole = max(sum(g[2] for g in groups.values()), 1)
    rows = [ProfileRow(kind, name, ops, calls, total, total / whole)
            for (kind, name), (ops, calls, total) in groups.items()]
    return sorted(rows, key=lambda r: -r.total_ns)


def clock_cost_ns(reads: int = 100_000, batches: int = 10) -> float:
    """The cost of one clock read from the jitted code, nanoseconds: the fastest of ``batches`` batches
    (a busy machine preempts some; the fastest is the read's own cost)."""
    from apic.replay.cpu.interpreter import time_clock  # lazy: imports Numba

    fn = clock_address()
    time_clock(fn, CLOCK_MONOTONIC, 10)
    per_batch = max(reads // batches, 1)
    best = float("inf")
    for _ in range(batches):
        start = time.perf_counter_ns()
        time_clock(fn, CLOCK_MONOTONIC, per_batch)
        best = min(best, (time.perf_counter_ns() - start) / per_batch)
    return best


def timed_rows(program, replays: int) -> tuple[np.ndarray, np.ndarray, int]:
    """Replay ``program``'s table ``replays`` times through the profiled interpreter: each row's summed
    time (ns) and executions, and the wall time of the replays (ns; the loop is compiled before it
    starts). Raises what ``wp.capture_launch`` raises for a replay stopped early (Ctrl-C, a loop past the
    cap); the memory is then as the replay left it."""
    from apic.replay.cpu.interpreter import run_table_profiled  # lazy: imports Numba

    table = program.table
    row_ns = np.zeros(len(table), dtype=np.int64)
    row_calls = np.zeros(len(table), dtype=np.int64)
    if not len(table):
        return row_ns, row_calls, 0
    fn, limits = clock_address(), _program.replay_limits()
    run_table_profiled(table, 0, limits, program.loops, fn, CLOCK_MONOTONIC, row_ns, row_calls)  # compiles
    start = time.perf_counter_ns()
    status = run_table_profiled(table, replays, limits, program.loops, fn, CLOCK_MONOTONIC, row_ns, row_calls)
    wall = time.perf_counter_ns() - start
    if status:
        _program.raise_status(status, limits, table)
    return row_ns, row_calls, wall


def profile(graph, replays: int = 100) -> ProfileReport:
    """Replay ``graph`` ``replays`` times timing every op from inside the interpreter; return the report.

    The graph's memory changes exactly as ``replays`` calls of ``wp.capture_launch`` would change it.
    A CUDA graph is refused (only apic's CPU interpreter is profiled).
    """
    if getattr(graph, "program", None) is None or not hasattr(graph, "recording"):
        raise TypeError("apic.profile: expected an apic CPU graph (from a CPU capture or wp.capture_load)")
    if replays < 0:
        raise ValueError(f"apic.profile: replays must be 0 or more, got {replays}")
    labels = row_labels(graph)
    checks_blocks = any(k.cpu_blocks for k in graph.recording.kernels)
    take_error = _compat.runtime().core.wp_take_cpu_block_error if checks_blocks else None
    if take_error:
        take_error()  # as eager Warp: forget a failure left over from earlier work
    row_ns, row_calls, wall = timed_rows(graph.program, replays)
    if take_error:
        error = take_error()
        if error:
            message = error.decode("utf-8", errors="replace")
            raise ReplayError(f"Error replaying a CPU graph with cooperative-block kernels: {message}")
    return ProfileReport(replays, wall, row_ns, row_calls, labels, clock_cost_ns(20_000),
                         _aggregate(row_ns, row_calls, labels))
