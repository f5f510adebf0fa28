"""What the CUDA replay benchmarks share: a way of replaying a graph (``Method``) and a loaded graph's counter.

``benchmarks/cuda_replay.py`` times the methods; ``benchmarks/cuda_issue_paths.py`` and ``benchmarks/cuda_mujoco.py``
add methods of their own. Both import this module and not each other, so that no import closes a circle.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable


@dataclass
class Method:
    """One way of replaying the graph: ``launch`` replays once; ``counter`` reads the counter (exact)."""

    name: str
    launch: Callable[[], None]
    counter: Callable[[], int]
    replays: int = 0
    total: list = field(default_factory=list)
    issue: list = field(default_factory=list)
    issue_idle: list = field(default_factory=list)  # one replay issued with nothing queued on the GPU


def read_counter(graph, name: str, like) -> int:
    """The counter a loaded graph holds (read into a device array: Warp's and apic's graphs both take one)."""
    import warp as wp

    out = wp.zeros_like(like)
    graph.get_param(name, out)
    return int(out.numpy()[0])
