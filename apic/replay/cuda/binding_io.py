"""Named-parameter I/O of a loaded CUDA graph (:class:`apic.replay.cuda.loaded_graph.LoadedCudaGraph`), which the
CUDA backend's ``write_binding`` / ``read_binding`` are: synchronous copies between Warp arrays (CPU or CUDA) and
the graph's device memory, and the region reads that saving it again needs."""

from __future__ import annotations

import numpy as np
import warp as wp

from apic.record import bindings as b


def _read_span(graph, binding) -> tuple[np.ndarray, int]:
    """The device bytes the binding can reach, on the host, and where its first element is in them."""
    lo, hi = binding.extent()
    host = np.empty(max(hi - lo, 1), dtype=np.uint8)
    if hi > lo:
        graph.driver("cuMemcpyDtoH", host.ctypes.data, graph.region_addresses[binding.region] + lo, hi - lo)
    return host, binding.offset - lo


def write_binding(graph, binding, arr) -> None:
    """Copy the Warp array ``arr`` (CPU or CUDA) into the binding's device memory, synchronously."""
    b.check_array(binding, arr, "set_param", cpu_only=False)
    graph.refuse_in_capture(f"set_param('{binding.name}')")
    if not binding.nbytes:
        return
    source = np.ascontiguousarray(arr.numpy()).view(np.uint8).reshape(-1)
    cu = graph.driver
    with graph.current():
        cu("cuCtxSynchronize")
        host, start = _read_span(graph, binding)
        view = b.raw_view(host.ctypes.data + start, binding.elem_size, binding.shape, binding.strides)
        view[...] = source.view(np.dtype((np.void, binding.elem_size))).reshape(binding.shape)
        lo, hi = binding.extent()
        cu("cuMemcpyHtoD", graph.region_addresses[binding.region] + lo, host.ctypes.data, hi - lo)
        cu("cuCtxSynchronize")  # landed before a replay on the non-blocking stream reads it


def read_binding(graph, binding, arr) -> None:
    """Copy the binding's device memory into the Warp array ``arr`` (CPU or CUDA), synchronously."""
    b.check_writable(arr, f"get_param('{binding.name}')")
    b.check_array(binding, arr, "get_param", cpu_only=False)
    graph.refuse_in_capture(f"get_param('{binding.name}')")
    if not binding.nbytes:
        return
    with graph.current():
        graph.driver("cuCtxSynchronize")
        host, start = _read_span(graph, binding)
    elements = b.raw_view(host.ctypes.data + start, binding.elem_size, binding.shape, binding.strides)
    packed = np.ascontiguousarray(elements)
    if arr.device.is_cpu:
        b.array_view(arr)[...] = packed
        return
    staging = wp.array(ptr=packed.ctypes.data, dtype=arr.dtype, shape=arr.shape, device="cpu")
    wp.copy(arr, staging)
    wp.synchronize_device(arr.device)


class CudaBindingIO:
    """The region reads a save of a loaded CUDA graph needs; the loader sets ``_cu``, ``region_addresses`` and
    ``recording``; the replay half gives ``current`` and ``refuse_in_capture``."""

    @property
    def driver(self):
        """The graph's driver calls (``apic.replay.cuda.driver.Driver``): what the binding copies call."""
        return self._cu

    def read_region(self, index: int) -> bytes:
        self.refuse_in_capture("capture_save()")
        nbytes = self.recording.regions[index].nbytes
        host = np.empty(max(nbytes, 1), dtype=np.uint8)
        with self.current():
            self._cu("cuCtxSynchronize")
            if nbytes:
                self._cu("cuMemcpyDtoH", host.ctypes.data, self.region_addresses[index], nbytes)
        return host[:nbytes].tobytes()
