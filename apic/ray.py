"""apic on Ray: a saved graph shipped once to many workers, and parameter sweeps mapped over them.

``pip install "apic-warp[ray]"``. ``import apic`` never imports Ray; ``import apic.ray`` does::

    import ray, apic.ray
    ray.init()
    with apic.ray.GraphPool(graph, actors=4, outputs={"x": x}) as pool:   # ray.put once; each actor loads once
        results = pool.map([{"dt": 0.01}, {"dt": 0.005}], steps=100)     # [{"x": ndarray}, ...], in input order

The graph's bytes (``wp.capture_save_to_bytes``: its ``.wrp`` and module files) go into Ray's object
store once (``ray.put``); each actor receives that reference and loads the graph in its constructor
(``apic.sweep.Replayer``). Ray restarts an actor whose process dies (``max_restarts``) and runs its
unfinished calls again (``max_task_retries``); the restarted actor's constructor loads the graph
again from the object store, and since every call starts from the graph's saved state, a retried item
gives the same bits. A worker never raises inside Ray: it returns what went wrong, and the pool raises
apic's error at the caller, naming the worker. Every wait on Ray has a timeout, so that a worker that
cannot start or load is reported, not waited for (docs/distributed.md).
"""

from __future__ import annotations

import time
from collections.abc import Mapping

try:
    import ray
    from ray import exceptions as ray_errors
except ImportError as error:  # pragma: no cover - where Ray is installed
    raise ImportError('apic.ray needs Ray: pip install "apic-warp[ray]"') from error

from apic import errors as apic_errors
from apic._compat import quiet_warp
from apic.errors import ApicError
from apic.persist import capture_save_to_bytes
from apic.sweep import Replayer, describe_host

__all__ = ["DEFAULT_LOAD_TIMEOUT", "GraphPool", "Replayer", "WorkerError", "put_graph"]

#: Seconds a pool waits for its workers to load the graph (a worker's first load imports Warp and
#: Numba, and compiles nothing: about a second or two) before it reports the ones that did not.
DEFAULT_LOAD_TIMEOUT = 120.0


class WorkerError(ApicError, RuntimeError):
    """A Ray worker of a ``GraphPool`` failed, died for good, or did not answer in time; the message names it."""


def put_graph(graph, inputs=None, outputs=None, **save_options):
    """``ray.put`` of a graph's bytes (``capture_save_to_bytes``; ``save_options`` as ``capture_save``'s):
    an ObjectRef a ``GraphPool`` (or a task of your own, with ``Replayer(*bundle)``) takes. A ``(data,
    modules)`` pair is put as it is."""
    if isinstance(graph, tuple):
        return ray.put(graph)
    return ray.put(capture_save_to_bytes(graph, inputs, outputs, **save_options))


class _Worker:
    """The actor: one loaded graph. Its methods return ``("ok", value)`` or ``("error", type name, message)``."""

    def __init__(self, refs, threads):
        quiet_warp()  # this process is the worker's: Warp's banner would reach the driver's output
        self._host = describe_host()
        self._host["node"] = ray.get_runtime_context().get_node_id()[:12]
        try:
            # the ref comes inside a list, so that Ray leaves it to this constructor: at every (re)start it
            # fetches the bytes from the object store, which the pool's reference keeps there
            data, modules = ray.get(refs[0])
            self._replayer, self._error = Replayer(data, modules, threads), None
        except Exception as error:  # reported by ready() and each run, raised at the caller
            self._replayer, self._error = None, (type(error).__name__, str(error))

    def ready(self):
        return ("ok", self._host) if self._error is None else ("error", *self._error, self._host)

    def run(self, batch, steps, outputs, threads):
        """Each parameter set of ``batch`` in turn: ``("ok", [results])``, or the first error and its place."""
        if self._error is not None:
            return ("error", *self._error, self._host, 0)
        done = []
        for k, params in enumerate(batch):
            try:
                done.append(self._replayer.run(params, steps, outputs, threads))
            except Exception as error:
                return ("error", type(error).__name__, str(error), self._host, k)
        return ("ok", done)


_Remote = ray.remote(_Worker)


def _where(index: int, host: dict | None) -> str:
    if not host:
        return f"Ray worker {index}"
    return (f"Ray worker {index} (pid {host['pid']} on {host['host']}, node {host.get('node', '?')}, "
            f"warp-lang {host['warp']}, apic {host['apic']})")


def _raise(index: int, kind: str, message: str, host: dict | None, what: str):
    """apic's error for what worker ``index`` reported: the same apic class (or built-in type) where the
    worker raised one, else ``WorkerError``; the message names the worker."""
    text = f"{_where(index, host)}: {what}: {kind}: {message}"
    cls = getattr(apic_errors, kind, None)
    if not (isinstance(cls, type) and issubclass(cls, ApicError)) or issubclass(cls, OSError) \
            or cls is apic_errors.UnsupportedOperationError:  # their constructors take other arguments
        cls = {"TypeError": TypeError, "ValueError": ValueError}.get(kind, WorkerError)
    raise cls(text)


class GraphPool:
    """``actors`` Ray actors, each holding one loaded copy of ``graph``, for replays with parameter sets.

    ``graph``: a captured (or loaded) apic graph, saved to memory here with ``inputs`` / ``outputs`` as
    ``capture_save`` names them and ``save_options`` (``capture_save``'s keywords); or a ``(data, modules)``
    pair; or the ObjectRef :func:`put_graph` gave. Ray must be initialised (``ray.init``) first.
    ``threads``: each replay's thread count (and each actor's ``num_cpus``, unless ``actor_options`` says
    otherwise); above 1, a graph saved here is saved with ``source_fallback=True`` unless ``save_options``
    says otherwise: the actors' replays split only launches whose module's generated source they hold
    (docs/PARALLEL.md, "Saved graphs"). ``max_restarts`` / ``max_task_retries``:
    Ray's, for actors whose process dies. ``load_timeout``: seconds to wait for the actors to load the
    graph; a worker that cannot load it (another CPU, another warp-lang that refuses the file) raises
    apic's error naming the worker, and the pool is shut down.
    """

    def __init__(self, graph, actors: int = 1, *, inputs=None, outputs=None, threads: int | None = None,
                 max_restarts: int = 3, max_task_retries: int = 3, load_timeout: float = DEFAULT_LOAD_TIMEOUT,
                 actor_options: Mapping | None = None, save_options: Mapping | None = None) -> None:
        if type(actors) is not int or actors < 1:
            raise ValueError(f"actors must be an int >= 1, got {actors!r}")
        if not isinstance(graph, ray.ObjectRef):
            save_options = {"source_fallback": bool(threads and threads > 1), **dict(save_options or {})}
        self.ref = graph if isinstance(graph, ray.ObjectRef) else put_graph(graph, inputs, outputs, **save_options)
        self.threads = threads
        self._load_timeout = load_timeout
        options = {"num_cpus": threads or 1, "max_restarts": max_restarts, "max_task_retries": max_task_retries,
                   **dict(actor_options or {})}
        self._actors = [_Remote.options(**options).remote([self.ref], threads) for _ in range(actors)]
        self._hosts: list[dict | None] = [None] * actors
        self._next = 0
        try:
            self._wait_ready(load_timeout)
        except BaseException:
            self.shutdown()
            raise

    def _wait_ready(self, timeout: float) -> None:
        pending = {actor.ready.remote(): i for i, actor in enumerate(self._actors)}
        deadline = time.monotonic() + timeout
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1, timeout=max(0.0, deadline - time.monotonic()))
            if not done:
                late = ", ".join(str(i) for i in sorted(pending.values()))
                raise WorkerError(f"Ray worker(s) {late} did not load the graph within {timeout:g} s "
                                  "(is the cluster short of CPUs for the actors' num_cpus?)")
            index = pending.pop(done[0])
            reply = self._get(done[0], index, "loading the graph")
            if reply[0] != "ok":
                _raise(index, reply[1], reply[2], reply[3], "cannot load the graph")
            self._hosts[index] = reply[1]

    def _get(self, ref, index: int, what: str, timeout: float | None = None):
        try:
            return ray.get(ref, timeout=timeout)
        except ray_errors.GetTimeoutError as error:
            raise WorkerError(f"{_where(index, self._hosts[index])}: {what}: no answer within {timeout:g} s") from error
        except ray_errors.RayActorError as error:  # died and not restarted (max_restarts spent), or unreachable
            raise WorkerError(f"{_where(index, self._hosts[index])}: {what}: the actor died and Ray did not bring it "
                              f"back (max_restarts / max_task_retries spent): {error}") from error

    @property
    def size(self) -> int:
        """The number of actors."""
        return len(self._actors)

    def workers(self) -> list[dict]:
        """Each actor's process: pid, host, Ray node, warp-lang and apic versions (asked now: a restarted actor
        has a new pid; one that does not answer within ``load_timeout`` raises ``WorkerError``)."""
        refs = [actor.ready.remote() for actor in self._actors]  # asked of all at once; a restarting one answers late
        replies = [self._get(ref, i, "asking where it runs", self._load_timeout) for i, ref in enumerate(refs)]
        self._hosts = [reply[-1] if reply[0] != "ok" else reply[1] for reply in replies]
        return list(self._hosts)

    def run(self, params: Mapping | None = None, steps: int = 1, outputs=None, threads: int | None = None,
            timeout: float | None = None) -> dict:
        """One item on the next actor: from the graph's saved state, set ``params`` (name -> array or scalar),
        replay ``steps`` times, and return ``{name: NumPy array}`` for ``outputs`` (default: the saved outputs)."""
        return self.map([params], steps, outputs, threads, timeout)[0]

    def map(self, param_sets, steps: int = 1, outputs=None, threads: int | None = None,
            timeout: float | None = None, chunk: int = 1, in_flight: int = 2) -> list[dict]:
        """Run every parameter set of ``param_sets`` (as :meth:`run`) over the actors; the results in input order.

        Items go to the actors ``chunk`` at a time (one remote call each: a larger chunk spreads the fixed
        cost of a call over more items, for items much shorter than it). Each actor has at most ``in_flight``
        calls queued and gets the next when one finishes, so a slow or restarting actor takes fewer. An actor
        whose process dies is restarted by Ray and its unfinished calls run again. ``timeout``: seconds without
        any call finishing before ``WorkerError`` (None: no limit).
        """
        items = list(param_sets)
        if type(chunk) is not int or chunk < 1:
            raise ValueError(f"chunk must be an int >= 1, got {chunk!r}")
        if threads is None:
            threads = self.threads
        results: list = [None] * len(items)
        pending: dict = {}  # ObjectRef -> (index of its first item, actor index)
        queued = iter(range(0, len(items), chunk))

        def submit(actor: int) -> bool:
            first = next(queued, None)
            if first is None:
                return False
            ref = self._actors[actor].run.remote(items[first:first + chunk], steps, outputs, threads)
            pending[ref] = (first, actor)
            return True

        start = self._next
        for k in range(len(self._actors) * max(1, in_flight)):
            if not submit((start + k) % len(self._actors)):
                break
        self._next = (start + 1) % len(self._actors)
        try:
            while pending:
                done, _ = ray.wait(list(pending), num_returns=1, timeout=timeout)
                if not done:
                    busy = sorted({actor for _, actor in pending.values()})
                    raise WorkerError(f"no item finished within {timeout:g} s; Ray worker(s) "
                                      f"{', '.join(map(str, busy))} still running")
                first, actor = pending.pop(done[0])
                reply = self._get(done[0], actor, f"running item {first}")
                if reply[0] != "ok":
                    self._hosts[actor] = reply[3]
                    _raise(actor, reply[1], reply[2], reply[3], f"item {first + reply[4]}")
                results[first:first + len(reply[1])] = reply[1]
                submit(actor)
        finally:
            for ref in pending:  # after an error: what is still queued is not wanted
                try:
                    ray.cancel(ref)
                except Exception:  # a Ray that cannot cancel an actor call: the result is dropped all the same
                    pass
        return results

    def shutdown(self) -> None:
        """Stop the actors (idempotent); the graph's bytes leave the object store with the last reference."""
        for actor in self._actors:
            ray.kill(actor, no_restart=True)
        self._actors = []

    def __enter__(self) -> GraphPool:
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()
