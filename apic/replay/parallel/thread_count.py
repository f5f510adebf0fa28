"""Thread counts of the parallel replay: what a caller may ask for, and how many OS threads run it.

Every public entry that takes a thread count (``wp.capture_launch(graph, threads=N)``,
``graph.threads``, ``graph.launch(threads=N)``, ``graph.parallel_program(N)``,
``graph.parallel_report(N)``, ``apic.replay.parallel.threaded_launch.launch`` / ``prepare``, and
``python -m apic replay --threads N``) checks it with :func:`check`: a plain ``int`` of 1 or more.

A count is then bounded twice, so that a huge one (``threads=10**6``) costs nothing more than a
sensible one:

* :func:`planned`: launches are cut for at most ``MAX_THREADS`` threads (``apic.replay.parallel.split_planner`` cuts
  4 chunks per thread; beyond this the chunks only get smaller);
* :func:`running`: the OS threads that run those chunks (the replaying thread and pooled workers)
  are at most the CPUs this process may run on (``os.sched_getaffinity``, else ``os.cpu_count()``),
  at most ``MAX_THREADS``, and never more than asked for. A replay asked for 2 or more threads keeps
  at least one worker even on a single CPU, so it still runs the code it was asked to run. Chunks
  are claimed by whichever threads are there, so fewer threads than planned change no result bit.
"""

from __future__ import annotations

import os

MAX_THREADS = 512  # a hard cap on both counts, whatever the machine reports


def check(value, name: str = "threads") -> int:
    """``value`` when it is a valid thread count (an ``int`` >= 1); else ``ValueError`` naming ``name``.

    ``bool`` (an ``int`` subclass), floats, strings and NumPy integers are refused: a thread count is
    never a truth value or a fraction, and ``int(n)`` says what is meant.
    """
    if type(value) is not int:
        raise ValueError(f"{name} must be an int >= 1, got {value!r} of type {type(value).__name__} (pass int(n))")
    if value < 1:
        raise ValueError(f"{name} must be an int >= 1, got {value}")
    return value


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity mask where the OS has one), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # no affinity API (macOS, Windows)
        return max(1, os.cpu_count() or 1)


def planned(threads: int) -> int:
    """The thread count launches are cut for: ``threads``, at most ``MAX_THREADS``."""
    return min(threads, MAX_THREADS)


def running(threads: int) -> int:
    """The OS threads (the caller included) a replay asked for ``threads`` runs on: at most the usable
    CPUs (but 2 when 2 or more were asked for) and at most ``MAX_THREADS``; 1 when ``threads`` is 1."""
    if threads <= 1:
        return 1
    return min(threads, max(2, usable_cpus()), MAX_THREADS)
