"""One loaded graph replayed for many parameter sets, each from the graph's saved state: what a worker runs.

A ``Replayer`` loads a graph from its bytes once (``capture_load_from_bytes``) and keeps a copy of
its memory as loaded. Each :meth:`Replayer.run` puts that memory (and every named scalar parameter)
back first, so that a result depends only on its own parameters, never on which items the worker ran
before: an item retried on another worker, or on a restarted one, gives the same bits. This module
uses no Ray: ``apic.ray`` runs it inside Ray actors, and it is the local replay a pool is compared with.
"""

from __future__ import annotations

import ctypes
import os
import socket
from collections.abc import Mapping

import numpy as np
import warp as wp

from apic._version import __version__
from apic.errors import BindingError
from apic.persist import capture_load_from_bytes


class Replayer:
    """A graph loaded from ``(data, modules)`` (the pair ``capture_save_to_bytes`` returns), ready to run items.

    ``threads``: the replay's default thread count (``wp.capture_launch(graph, threads=...)``); a run may
    pass its own. The graph's memory as loaded is kept (a copy as large as the graph's regions), or,
    for a graph with native handles (a Mesh, Bvh, ...: their native state is not graph memory) or whose
    memory is a device's (a CUDA graph), the bytes, and each run loads the graph again. Every replay goes
    through the graph's backend (``graph.backend.launch``), so a CUDA graph replays on its device;
    ``threads`` is for CPU graphs only (a CUDA graph's backend refuses it).
    """

    def __init__(self, data, modules: Mapping | None = None, threads: int | None = None) -> None:
        self.threads = threads
        self.graph = capture_load_from_bytes(data, modules)
        # a graph whose memory is not host memory (a CUDA graph's is the device's) is loaded again per run too
        self._reload = bool(self.graph.recording.handles) or not self.graph.backend.memory_on_host
        # a graph loaded again per item is loaded from copies: the caller may reuse or release its buffers
        # after the call, as it may after capture_load_from_bytes (the load above checked their types)
        self._data = _owned(data) if self._reload else None
        self._modules = {name: _owned(contents) for name, contents in (modules or {}).items()} if self._reload else None
        self._saved = None if self._reload else self._memory()
        self._scalars = {name: self.graph.get_param(name) for name in self.graph.scalars}
        self._changed: set[str] = set()  # scalars a run set, put back by the next
        self._fresh = True

    def _memory(self) -> list[tuple[int, bytes]]:
        regions = self.graph.recording.regions
        return [(address, ctypes.string_at(address, region.nbytes))
                for address, region in zip(self.graph.region_addresses, regions) if region.nbytes]

    def reset(self) -> None:
        """Put the graph back as it was loaded: its memory and its named scalar parameters."""
        if self._fresh:
            return
        if self._reload:
            self.graph = capture_load_from_bytes(self._data, self._modules)
        else:
            for address, contents in self._saved:
                ctypes.memmove(address, contents, len(contents))
            for name in self._changed:
                self.graph.set_param(name, self._scalars[name])
        self._changed.clear()
        self._fresh = True

    def default_outputs(self) -> list[str]:
        """The names ``run`` returns by default: the graph's outputs, else every named array."""
        bindings = self.graph.bindings
        outputs = [name for name, b in bindings.items() if b.kind == "output"]
        return outputs or list(bindings)

    def run(self, params: Mapping | None = None, steps: int = 1, outputs=None, threads: int | None = None) -> dict:
        """From the saved state: set ``params`` (name -> array or scalar value), replay ``steps`` times, and
        return ``{name: NumPy array}`` for ``outputs`` (default :meth:`default_outputs`; a named scalar
        parameter comes back as a 0-d or small array). Errors are ``set_param``'s and the replay's."""
        if type(steps) is not int or steps < 0:
            raise ValueError(f"steps must be an int >= 0, got {steps!r}")
        if params is not None and not isinstance(params, Mapping):
            raise TypeError(f"params must map parameter names to values, got {type(params).__name__}")
        names = self.default_outputs() if outputs is None else list(outputs)
        known = self.graph.params
        for name in names:  # before anything runs: a typo costs no replay
            if name not in known:
                raise BindingError(f"the graph has no parameter named {name!r} to return (its parameters: "
                               f"{', '.join(sorted(known)) or 'none'})")
        self.reset()
        self._fresh = False
        for name, value in (params or {}).items():
            if name in self.graph.scalars:
                self._changed.add(name)
            self.graph.set_param(name, value)
        threads = self.threads if threads is None else threads
        if steps:  # every device replays through its backend (a CPU graph: all steps in one native call)
            self.graph.backend.launch_many(self.graph, steps, threads)
        return {name: self._read(name) for name in names}

    def _read(self, name: str) -> np.ndarray:
        if name in self.graph.scalars:
            return np.asarray(self.graph.get_param(name))
        if self.graph.backend.memory_on_host:
            return np.array(self.graph.param_numpy(name))  # a copy: the view is the graph's memory
        binding = self.graph.bindings[name]
        dtype = getattr(wp, binding.dtype, None)  # a Warp scalar, vector or matrix type's name
        if dtype is None:
            raise BindingError(f"cannot return {name!r}: its type {binding.dtype} has no Warp type of that name")
        host = wp.empty(binding.shape, dtype=dtype, device="cpu")
        self.graph.get_param(name, host)  # a synchronous copy from the device
        return host.numpy()


def _owned(contents) -> bytes:
    """A copy of a bytes-like buffer (bytes, bytearray, memoryview, C-contiguous NumPy array) as bytes."""
    return memoryview(contents).tobytes()


def describe_host() -> dict:
    """Where this replay runs, to name a worker in an error: process, host and the versions a load depends on."""
    return {"pid": os.getpid(), "host": socket.gethostname(), "warp": wp.config.version, "apic": __version__}
