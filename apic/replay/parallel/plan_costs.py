"""The measured costs a parallel plan is made from, and the boundary that makes the plan stable.

A launch whose tasks are too few for ``min_tasks_per_thread`` may still split when its measured time
pays for waking a thread (docs/PARALLEL.md, "Measured time"). Two things make that decision the same on
every run of one graph on one machine, where a single timing on a busy machine is not:

* **several timings**: the first ``TIMED_REPLAYS`` replays on more threads run serially through the
  profiled interpreter, and each row's cost is the median of its times (:class:`RowTimes`): a replay the
  OS preempts inside a row, or the first, cold one, moves no median;
* **a boundary in a gap**: launches whose time sits near the nominal boundary (a row of two threads'
  worth of ``MIN_NS_PER_THREAD``) would split on one run and not on the next. :func:`boundary` moves it,
  within a factor ``WINDOW`` below and above, to the middle (in log time) of the widest gap between the
  measured rows: the nearest row is then a factor away from it, far beyond the spread of a median.

What a plan depends on, then: the graph, ``threads``, ``min_tasks_per_thread``, which range entries exist,
and the medians of ``TIMED_REPLAYS`` serial replays through the boundary put in the widest gap.
"""

from __future__ import annotations

import math

import numpy as np

# A launch measured at this long per thread splits, whatever its tasks (the nominal boundary, which
# ``boundary`` may move): waking a worker and waiting for it cost a few microseconds
MIN_NS_PER_THREAD = 25_000
TIMED_REPLAYS = 5  # serial replays timed before a plan uses their times (their median)
# ``boundary`` looks for a gap between a quarter of the nominal row boundary and twice it (a launch of a
# quarter of it gains at most some microseconds on two threads; one of twice it saves far more than a wake)
WINDOW_BELOW, WINDOW_ABOVE = 4.0, 2.0


class RowTimes:
    """Each table row's time (ns) in ``TIMED_REPLAYS`` serial replays; their median once all are in."""

    def __init__(self, rows: int):
        self.samples: list[np.ndarray] = []
        self.rows = rows

    @property
    def needed(self) -> int:
        """Timed replays still to run."""
        return max(TIMED_REPLAYS - len(self.samples), 0)

    def add(self, row_ns: np.ndarray, calls: np.ndarray) -> None:
        """One timed replay's rows: summed time and executions per row (a row in a loop runs many times)."""
        self.samples.append(row_ns // np.maximum(calls, 1))

    def median(self) -> np.ndarray:
        """Each row's median over the timed replays (int64 ns)."""
        return np.median(np.stack(self.samples), axis=0).astype(np.int64)


def boundary(totals, nominal: int = 2 * MIN_NS_PER_THREAD) -> int:
    """The time (ns) at or above which a row of launches (its measured ``totals``, ns, of the rows whose
    time decides) splits: the middle, in log time, of the widest gap between consecutive totals that
    reaches into the window ``[nominal / WINDOW_BELOW, nominal * WINDOW_ABOVE]`` (held inside it);
    ``nominal`` when no total lies near it.

    A gap's width is a ratio of times, so a machine uniformly slower or faster picks the same gap; the
    gaps below the lowest total and above the highest count as wide as they reach into the window."""
    low, high = math.log(nominal / WINDOW_BELOW), math.log(nominal * WINDOW_ABOVE)
    points = sorted(math.log(t) for t in totals if t > 0)
    gaps = [(b - a, a, b) for a, b in zip(points, points[1:]) if a < high and b > low]
    if points and points[0] > low:
        gaps.append((points[0] - low, low, points[0]))
    if points and points[-1] < high:
        gaps.append((high - points[-1], points[-1], high))
    if not gaps or all(b <= low or a >= high for _, a, b in gaps):
        return nominal
    # the widest; between equal ones, the one nearer the nominal boundary (a deterministic tie-break)
    width, a, b = max(gaps, key=lambda g: (g[0], -abs((g[1] + g[2]) / 2 - math.log(nominal))))
    return int(math.exp(min(max((a + b) / 2, low), high)))
