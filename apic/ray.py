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

from apic._compat import quiet_warp
from apic.persist import capture_save_to_bytes
from apic.sweep import Replayer, describe_host
from apic.sweep_plan import Schedule, WorkerError, WorkerReply, load_worker, raise_reply, run_batch, where

__all__ = ["DEFAULT_LOAD_TIMEOUT", "GraphPool", "Replayer", "WorkerError", "WorkerReply", "put_graph"]

#: Seconds a pool waits for its workers to load the graph (a worker's first load imports Warp and
#: Numba, and compiles nothing: about a second or two) before it reports the ones that did not.
DEFAULT_LOAD_TIMEOUT = 120.0


def put_graph(graph, inputs=None, outputs=None, **save_options):
    """``ray.put`` of a graph's bytes (``capture_save_to_bytes``; ``save_options`` as ``capture_save``'s):
    an ObjectRef a ``GraphPool`` (or a task of your own, with ``Replayer(*bundle)``) takes. A ``(data,
    modules)`` pair is put as it is."""
    if isinstance(graph, tuple):
        return ray.put(graph)
    return ray.put(capture_save_to_bytes(graph, inputs, outputs, **save_options))


class _Worker:
    """The actor: one loaded graph. Its methods return a :class:`apic.sweep_plan.WorkerReply`, never raise."""

    def __init__(self, refs, threads):
        quiet_warp()  # this process is the worker's: Warp's banner would reach the driver's output
        self._host = describe_host()
        self._host["node"] = ray.get_runtime_context().get_node_id()[:12]

        def load():
            # the ref comes inside a list, so that Ray leaves it to this constructor: at every (re)start it
            # fetches the bytes from the object store, which the pool's reference keeps there
            data, modules = ray.get(refs[0])
            return Replayer(data, modules, threads)

        self._replayer, self._failed = load_worker(load, self._host)

    def ready(self) -> WorkerReply:
        return self._failed if self._failed is not None else WorkerReply(self._host)

    def run(self, batch, steps, outputs, threads) -> WorkerReply:
        """Each parameter set of ``batch`` in turn: every result, or the first error and its place."""
        return run_batch(self._replayer, self._failed, self._host, batch, steps, outputs, threads)


_Remote = ray.remote(_Worker)


def actor_options_for(threads: int | None, num_gpus: float | None, max_restarts: int, max_task_retries: int,
                  extra: Mapping | None) -> dict:
    """The Ray options each actor is made with: ``num_cpus`` (the replay's thread count), ``num_gpus`` where
    the graph replays on a GPU, Ray's restart counts, then ``extra`` (``actor_options``) over them."""
    if num_gpus is not None and (isinstance(num_gpus, bool) or not isinstance(num_gpus, (int, float))
                                 or num_gpus < 0):
        raise ValueError(f"num_gpus must be a number >= 0, got {num_gpus!r}")
    options = {"num_cpus": threads or 1, "max_restarts": max_restarts, "max_task_retries": max_task_retries}
    if num_gpus:
        options["num_gpus"] = num_gpus
    return {**options, **dict(extra or {})}


class GraphPool:
    """``actors`` Ray actors, each holding one loaded copy of ``graph``, for replays with parameter sets.

    ``graph``: a captured (or loaded) apic graph, saved to memory here with ``inputs`` / ``outputs`` as
    ``capture_save`` names them and ``save_options`` (``capture_save``'s keywords); or a ``(data, modules)``
    pair; or the ObjectRef :func:`put_graph` gave. Ray must be initialised (``ray.init``) first.
    ``threads``: each replay's thread count (and each actor's ``num_cpus``, unless ``actor_options`` says
    otherwise); above 1, a graph saved here is saved with ``source_fallback=True`` unless ``save_options``
    says otherwise: the actors' replays split only launches whose module's generated source they hold
    (docs/PARALLEL.md, "Saved graphs"). ``max_restarts`` / ``max_task_retries``:
    Ray's, for actors whose process dies. ``num_gpus``: the GPUs (a fraction shares one) Ray gives each actor,
    for a graph that replays on a GPU (a CUDA graph: each actor loads it onto the GPU Ray gave it; the
    actors' replays take no ``threads``). ``load_timeout``: seconds to wait for the actors to load the graph
    (or to be given what they asked for: a GPU the cluster lacks is reported so); a worker
    that cannot load it (another CPU, another warp-lang that refuses the file) raises apic's error naming the
    worker, and the pool is shut down.
    """

    def __init__(self, graph, actors: int = 1, *, inputs=None, outputs=None, threads: int | None = None,
                 max_restarts: int = 3, max_task_retries: int = 3, load_timeout: float = DEFAULT_LOAD_TIMEOUT,
                 actor_options: Mapping | None = None, save_options: Mapping | None = None,
                 num_gpus: float | None = None) -> None:
        if type(actors) is not int or actors < 1:
            raise ValueError(f"actors must be an int >= 1, got {actors!r}")
        if not isinstance(graph, ray.ObjectRef):
            save_options = {"source_fallback": bool(threads and threads > 1), **dict(save_options or {})}
        self.ref = graph if isinstance(graph, ray.ObjectRef) else put_graph(graph, inputs, outputs, **save_options)
        self.threads = threads
        self._load_timeout = load_timeout
        options = actor_options_for(threads, num_gpus, max_restarts, max_task_retries, actor_options)
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
            if not reply.ok:
                raise_reply(index, reply, "cannot load the graph")
            self._hosts[index] = reply.host

    def _get(self, ref, index: int, what: str, timeout: float | None = None):
        try:
            return ray.get(ref, timeout=timeout)
        except ray_errors.GetTimeoutError as error:
            raise WorkerError(f"{where(index, self._hosts[index])}: {what}: no answer within {timeout:g} s") from error
        except ray_errors.RayActorError as error:  # died and not restarted (max_restarts spent), or unreachable
            raise WorkerError(f"{where(index, self._hosts[index])}: {what}: the actor died and Ray did not bring it "
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
        self._hosts = [reply.host for reply in replies]
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
        if threads is None:
            threads = self.threads
        schedule = Schedule(len(items), len(self._actors), chunk, in_flight, self._next)
        pending: dict = {}  # ObjectRef -> (index of its first item, actor index)

        def submit(call) -> None:
            if call is not None:
                actor, first, end = call
                pending[self._actors[actor].run.remote(items[first:end], steps, outputs, threads)] = (first, actor)

        for call in schedule.first_calls():
            submit(call)
        self._next = (self._next + 1) % len(self._actors)
        try:
            while pending:
                done, _ = ray.wait(list(pending), num_returns=1, timeout=timeout)
                if not done:
                    busy = sorted({actor for _, actor in pending.values()})
                    raise WorkerError(f"no item finished within {timeout:g} s; Ray worker(s) "
                                      f"{', '.join(map(str, busy))} still running")
                first, actor = pending.pop(done[0])
                reply = self._get(done[0], actor, f"running item {first}")
                if not reply.ok:
                    self._hosts[actor] = reply.host
                    raise_reply(actor, reply, f"item {first + reply.item}")
                schedule.done(first, reply)
                submit(schedule.next_call(actor))
        finally:
            for ref in pending:  # after an error: what is still queued is not wanted
                try:
                    ray.cancel(ref)
                except Exception:  # a Ray that cannot cancel an actor call: the result is dropped all the same
                    pass
        return schedule.results

    def shutdown(self) -> None:
        """Stop the actors (idempotent); the graph's bytes leave the object store with the last reference."""
        for actor in self._actors:
            ray.kill(actor, no_restart=True)
        self._actors = []

    def __enter__(self) -> GraphPool:
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()
