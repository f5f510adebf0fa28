"""``Graph``: a captured or loaded apic graph, replayed by ``wp.capture_launch``."""

from __future__ import annotations

from apic.record.recording import Recording
from apic.replay.program import Program, lower


class Graph:
    """A graph apic recorded on the CPU (or loaded from a file).

    Mirrors the attributes of ``warp.Graph`` that user code reads (``device``, ``apic``,
    ``is_loaded``). It holds every Python object and compiled module its ops use, so replay stays
    correct after the user drops their own references.
    """

    def __init__(self, recording: Recording, device, *, apic: bool, keepalive=(), is_loaded: bool = False,
                 region_addresses=None, kernel_addresses=None):
        self.device = device
        self.apic = apic
        self.is_loaded = is_loaded
        self.recording = recording
        self._keepalive = list(keepalive)
        if region_addresses is None:
            region_addresses = [r.address for r in recording.regions]
        if kernel_addresses is None:
            kernel_addresses = [k.address for k in recording.kernels]
        self.region_addresses = list(region_addresses)
        self.program: Program = lower(recording, self.region_addresses, list(kernel_addresses))

    @property
    def op_count(self) -> int:
        """Number of recorded ops (allocations included)."""
        return len(self.recording.ops)

    def launch(self, repeats: int = 1) -> None:
        """Replay the graph ``repeats`` times with one call into the native interpreter."""
        self.program.run(repeats)

    def __repr__(self) -> str:
        return f"<apic.Graph device={self.device} ops={self.op_count} regions={len(self.recording.regions)}>"
