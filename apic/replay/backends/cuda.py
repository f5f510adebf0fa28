"""The CUDA backend: a saved CUDA graph replayed with cuda-python alone
(:class:`apic.replay.cuda.loaded_graph.LoadedCudaGraph`: loading; ``cuda_run``: replay; ``cuda_binding_io``:
named-array copies), and a CUDA graph captured with ``apic=True`` (``apic.cuda_graph.CapturedCudaGraph``:
its ``launch`` replays Warp's own graph)."""

from __future__ import annotations

from apic.record.cuda.recorder import refuse_while_recording
from apic.replay.cuda import (
    binding_io as cuda_binding_io,
    loaded_graph as cuda_loaded_graph,
    resources as cuda_resources,
)
from apic.replay.backends import Backend


class Cuda(Backend):
    name = "cuda"
    device_kind = "cuda"

    def device(self, requested):
        return cuda_loaded_graph.device_ordinal(requested)

    def load(self, saved, images: dict, device, services):
        return cuda_loaded_graph.LoadedCudaGraph(saved, images, device, services.sources)

    def launch(self, graph, stream=None, threads=None) -> None:
        if threads is not None:
            raise ValueError("wp.capture_launch(threads=...) is only for apic CPU graphs")
        issue = getattr(graph, "issue", None)  # a loaded CUDA graph's common replay, in one step where it can
        if stream is None and issue is not None and issue():
            return
        refuse_while_recording("wp.capture_launch of a CUDA graph")  # it would become an unrecorded child graph
        graph.launch(stream=stream)

    def conditional_body(self, graph, stream, device):
        # one captured with apic=True: its Warp graph (a child graph node); a loaded one: a callable that
        # replays it on the stream Warp uses (``stream``, else ``device``'s current one), so that it is ordered
        # with the condition and, inside a capture, its ops become nodes of the body graph
        warp_graph = getattr(graph, "warp_graph", None)
        if warp_graph is not None:
            return warp_graph
        return lambda **_kwargs: graph.launch(stream=stream if stream is not None else device.stream)

    def write_binding(self, graph, binding, arr) -> None:
        cuda_binding_io.write_binding(graph, binding, arr)

    def read_binding(self, graph, binding, arr) -> None:
        cuda_binding_io.read_binding(graph, binding, arr)

    def free(self) -> None:
        if cuda_resources.PENDING:  # loaded graphs collected during a capture wait for its end
            cuda_resources.release_pending()


BACKEND = Cuda()
