"""apic on Ray: a saved graph shipped once to many workers, and parameter sweeps mapped over them.

``pip install "apic-warp[ray]"``. ``import apic`` never imports Ray; ``import apic.ray`` does::

    import ray, apic.ray
    ray.init()
    with apic.ray.GraphPool(graph, actors=4, outputs={"x": x}) as pool:   # ray.put once; each actor loads once
        results = pool.map([{"dt": 0.01}, {"dt": 0.005}], steps=100)     # [{"x": ndarray}, ...], in input order

The graph travels as the bytes ``wp.capture_save_to_bytes`` makes (its ``.wrp`` and module files),
through Ray's object store; each actor loads it with ``wp.capture_load_from_bytes``. Every item
starts from the graph's saved state, so a result depends on its parameters alone: an item Ray runs
again after a worker died gives the same bits (README, "Many machines").
"""

from __future__ import annotations

try:
    import ray as _ray  # noqa: F401  (the extra's one dependency: say how to get it)
except ImportError as error:  # pragma: no cover - where Ray is installed
    raise ImportError('apic.ray needs Ray: pip install "apic-warp[ray]"') from error

from apic.ray.pool import DEFAULT_LOAD_TIMEOUT, GraphPool, WorkerError, put_graph
from apic.ray.replayer import Replayer

__all__ = ["DEFAULT_LOAD_TIMEOUT", "GraphPool", "Replayer", "WorkerError", "put_graph"]
