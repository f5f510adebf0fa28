"""CUDA graphs apic knows: captured alongside Warp's own CUDA graph, or loaded from a file.

``wp.ScopedCapture(device="cuda:0", apic=True)`` hands out a :class:`CapturedCudaGraph`: Warp's
``warp.Graph`` (which ``wp.capture_launch`` replays, exactly as without apic) plus the apic
recording of the same operations, which ``wp.capture_save`` writes. ``wp.capture_load`` of such a
file returns an ``apic.replay.cuda.loaded_graph.LoadedCudaGraph``, replayed with cuda-python alone. Both are
replayed, saved and freed through the ``cuda`` backend (``apic.replay.backends.cuda``).
"""

from __future__ import annotations

import warp as wp

from apic.record.recording import Recording
from apic.replay import backends
from apic.targets.cuda import module_arch


class CudaGraph:
    """What an apic CUDA graph made here has: its recording, its device, its backend and ``launch``."""

    recording: Recording
    device = None
    apic = True
    is_loaded = False

    @property
    def op_count(self) -> int:
        return len(self.recording.ops)

    @property
    def backend(self):
        """The ``cuda`` replay backend (``apic.replay.backends``): what ``wp.capture_launch`` replays it through."""
        return backends.get("cuda")

    def launch(self, stream=None) -> None:  # pragma: no cover - abstract
        raise NotImplementedError


class CapturedCudaGraph(CudaGraph):
    """A CUDA graph captured by Warp with apic recording alongside (``apic=True``).

    ``wp.capture_launch`` replays Warp's own graph (``warp_graph``); ``wp.capture_save`` saves the
    recording. Attributes of ``warp.Graph`` that user code reads are forwarded to it.
    """

    def __init__(self, warp_graph, recording: Recording, device, replay, keepalive=()) -> None:
        self.warp_graph = warp_graph
        self._replay = replay  # Warp's own capture_launch (apic's replaces it in warp)
        self.recording = recording
        self.device = device
        self.apic = True
        self.is_loaded = False
        self.bindings: dict = {}
        self._keepalive = list(keepalive)
        self.region_addresses = [r.address for r in recording.regions]  # device pointers

    def __getattr__(self, name):
        # only reached for attributes this class lacks: warp.Graph's own (graph_exec, ...)
        if name == "warp_graph":
            raise AttributeError(name)
        return getattr(self.warp_graph, name)

    def launch(self, stream=None) -> None:
        self._replay(self.warp_graph, stream=stream)

    # --- what saving needs --------------------------------------------------------------------------
    def read_region(self, index: int) -> bytes:
        """The current contents of region ``index`` (device to host, after the device is idle)."""
        region = self.recording.regions[index]
        if not region.nbytes:
            return b""
        wp.synchronize_device(self.device)
        view = wp.array(ptr=self.region_addresses[index], dtype=wp.uint8, shape=(region.nbytes,), device=self.device)
        return view.numpy().tobytes()

    @property
    def arch(self) -> int:
        return int(self.device.arch)

    @property
    def device_name(self) -> str:
        return str(getattr(self.device, "name", ""))

    def module_image(self, index: int) -> tuple[bytes, tuple[int, str, str]]:
        """The ``.cubin``/``.ptx`` of module ``index`` from Warp's kernel cache, and ``(arch, suffix, kind)``."""
        path = self.recording.modules[index].module_exec.binary_path()
        with open(path, "rb") as f:
            image = f.read()
        return image, module_arch(path, image)

    def __repr__(self) -> str:
        return (
            f"<apic.CapturedCudaGraph device={self.device} ops={self.op_count} "
            f"regions={len(self.recording.regions)}>"
        )

