"""A sweep over workers without the engine: what a worker replies, the order items go out in, and the
error a caller sees for a worker's reply. ``apic.ray`` runs this on Ray actors; another engine (processes,
a job queue) would need only its own remote call and wait around it.

A worker holds one :class:`apic.sweep.Replayer` (or the error its load raised) and answers every call
with a :class:`WorkerReply`, never an exception: an engine's own errors (a dead process, a timeout) stay
apart from the graph's. :func:`raise_reply` turns a failed reply into apic's error at the caller, naming
the worker and the item; :class:`Schedule` hands out items ``chunk`` at a time, at most ``in_flight``
calls per worker, and puts the results back in input order.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from apic import errors as apic_errors
from apic.errors import ApicError


class WorkerError(ApicError, RuntimeError):
    """A worker of a sweep failed, died for good, or did not answer in time; the message names it."""


@dataclass(frozen=True)
class WorkerReply:
    """A worker's answer to one call. ``error`` is None when it went well (``results``: one result per item
    of the call, in order); else the type name of what was raised, with ``message`` and ``item`` (the
    failing item's place in the call). ``host`` says where the worker runs (:func:`apic.sweep.describe_host`)."""

    host: dict | None
    results: list = field(default_factory=list)
    error: str | None = None
    message: str = ""
    item: int = 0

    @property
    def ok(self) -> bool:
        """Whether every item of the call ran."""
        return self.error is None

    @classmethod
    def failed(cls, error: BaseException, host: dict | None, item: int = 0) -> WorkerReply:
        """The reply for ``error``, raised at item ``item`` of a call."""
        return cls(host, [], type(error).__name__, str(error), item)


def load_worker(make: Callable, host: dict | None):
    """``(replayer, None)`` from ``make()``, or ``(None, the failed reply)`` when it raised: a worker that cannot
    load the graph reports that to every call instead of dying."""
    try:
        return make(), None
    except Exception as error:  # reported by each call, raised at the caller
        return None, WorkerReply.failed(error, host)


def run_batch(replayer, failed: WorkerReply | None, host: dict | None, batch, steps, outputs,
              threads) -> WorkerReply:
    """Each parameter set of ``batch`` in turn on ``replayer``: every result, or the first error and its place."""
    if failed is not None:
        return failed
    done = []
    for k, params in enumerate(batch):
        try:
            done.append(replayer.run(params, steps, outputs, threads))
        except Exception as error:
            return WorkerReply.failed(error, host, k)
    return WorkerReply(host, done)


def where(index: int, host: dict | None, engine: str = "Ray") -> str:
    """A worker's name in an error: its index, and where it runs when known."""
    if not host:
        return f"{engine} worker {index}"
    return (f"{engine} worker {index} (pid {host['pid']} on {host['host']}, node {host.get('node', '?')}, "
            f"warp-lang {host['warp']}, apic {host['apic']})")


def error_class(kind: str) -> type:
    """The class a caller gets for an error the worker raised as type ``kind``: the same apic class where one
    can be made from a message alone, ``TypeError`` / ``ValueError`` as they are, else ``WorkerError``."""
    cls = getattr(apic_errors, kind, None)
    if not (isinstance(cls, type) and issubclass(cls, ApicError)) or issubclass(cls, OSError) \
            or cls is apic_errors.UnsupportedOperationError:  # their constructors take other arguments
        cls = {"TypeError": TypeError, "ValueError": ValueError}.get(kind, WorkerError)
    return cls


def raise_reply(index: int, reply: WorkerReply, what: str, engine: str = "Ray"):
    """Raise apic's error for the failed ``reply`` of worker ``index``; the message names the worker and ``what``."""
    raise error_class(reply.error)(f"{where(index, reply.host, engine)}: {what}: {reply.error}: {reply.message}")


class Schedule:
    """The order a sweep of ``count`` items goes out in over ``workers`` workers: calls of ``chunk`` items,
    at most ``in_flight`` queued per worker, the first call on worker ``start``; the results in input order."""

    def __init__(self, count: int, workers: int, chunk: int = 1, in_flight: int = 2, start: int = 0) -> None:
        if type(chunk) is not int or chunk < 1:
            raise ValueError(f"chunk must be an int >= 1, got {chunk!r}")
        self.count, self.workers, self.chunk = count, workers, chunk
        self._in_flight, self._start = max(1, in_flight), start
        self._next_first = iter(range(0, count, chunk))
        self.results: list = [None] * count

    def first_calls(self) -> list[tuple[int, int, int]]:
        """The calls to send at once: ``(worker, first item, end)``, round robin from ``start``."""
        calls = []
        for k in range(self.workers * self._in_flight):
            call = self.next_call((self._start + k) % self.workers)
            if call is None:
                break
            calls.append(call)
        return calls

    def next_call(self, worker: int) -> tuple[int, int, int] | None:
        """The next call for ``worker`` (one of its calls finished), or None when every item went out."""
        first = next(self._next_first, None)
        return None if first is None else (worker, first, min(first + self.chunk, self.count))

    def done(self, first: int, reply: WorkerReply) -> None:
        """Keep the results of the call whose first item is ``first`` (a reply that went well)."""
        self.results[first:first + len(reply.results)] = reply.results
