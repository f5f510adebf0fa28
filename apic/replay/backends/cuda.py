"""The CUDA backend: a saved CUDA graph replayed with cuda-python alone
(:class:`apic.replay.cuda_loaded_graph.LoadedCudaGraph`: loading; ``cuda_run``: replay; ``cuda_binding_io``:
named-array copies)."""

from __future__ import annotations

from apic.replay import cuda_loaded_graph
from apic.replay.backends import Backend


class Cuda(Backend):
    name = "cuda"
    device_kind = "cuda"

    def load(self, saved, images: dict, device, services):
        ordinal = cuda_loaded_graph.device_ordinal(device)
        return cuda_loaded_graph.LoadedCudaGraph(saved, images, ordinal, services.sources)

    def run(self, target, repeats: int = 1) -> None:
        for _ in range(repeats):
            target.launch()

    def write_binding(self, graph, binding, arr) -> None:
        graph._write_binding(binding, arr)

    def read_binding(self, graph, binding, arr) -> None:
        graph._read_binding(binding, arr)


BACKEND = Cuda()
