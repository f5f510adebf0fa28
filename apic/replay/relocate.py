"""Blob relocation, for every target: recorded blobs laid out in one host arena, their pointers
rewritten to the live addresses of the regions (and handles) they refer to.

The CPU program (``apic.replay.program``) runs its launches from this arena; a loaded CUDA graph
(``apic.replay.cuda.lowering``) points each kernel's ``kernelParams`` into it.
"""

from __future__ import annotations

import struct

import numpy as np

from apic.record import ops as rec

ALIGN = 16  # every blob starts 16-byte aligned (a launch's argument struct may hold 16-byte members)
_U64 = struct.Struct("<Q")
_WORD = np.arange(8)  # the bytes of a pointer
_SHARED = 16  # relocations held by this many blobs are written with NumPy, fewer one by one


class Arena:
    """Lays blobs out in one aligned byte buffer, then relocates their pointers in place.

    Blobs are keyed by identity: a blob shared by several ops (a repeated launch) is stored once.
    """

    def __init__(self, blobs: list[rec.Blob]) -> None:
        offsets: dict[int, int] = {}
        kept = []
        size = 0
        for blob in blobs:
            if id(blob) not in offsets:
                offsets[id(blob)] = size
                kept.append(blob)
                size += ((len(blob.data) or 1) + ALIGN - 1) & -ALIGN
        self._offsets, self._blobs = offsets, kept  # one entry per blob, in the same order
        self.buffer = np.zeros(max(size, ALIGN), dtype=np.uint8)
        self.base = self.buffer.ctypes.data

    def fill(self, address_of) -> None:
        """Copy every blob in, each pointer rewritten to ``address_of(its target)``."""
        staging = bytearray(len(self.buffer))  # built in Python bytes, copied into the buffer once
        # the blobs that hold each tuple of relocations (blobs read alike share theirs; the blobs hold them
        # throughout, so no id is reused): id -> (the relocations, the blobs' offsets)
        holders: dict[int, tuple] = {}
        for blob, at in zip(self._blobs, self._offsets.values()):
            data = blob.data
            staging[at : at + len(data)] = data
            relocs = blob.relocs
            if relocs:
                held = holders.get(id(relocs))
                if held is None:
                    held = holders[id(relocs)] = (relocs, [])
                held[1].append(at)
        words = np.frombuffer(staging, dtype=np.uint8)  # a view: writes go to staging
        for relocs, offsets in holders.values():
            if len(offsets) < _SHARED:
                for reloc in relocs:
                    word = _U64.pack(address_of(reloc.target))
                    for at in offsets:
                        staging[at + reloc.at : at + reloc.at + 8] = word
                continue
            starts = np.array(offsets, dtype=np.intp)[:, None] + _WORD
            for reloc in relocs:  # each address resolved once, written into every blob that holds it at once
                words[starts + reloc.at] = np.frombuffer(_U64.pack(address_of(reloc.target)), dtype=np.uint8)
        self.buffer[:] = words

    def address(self, blob: rec.Blob) -> int:
        """The host address of ``blob`` in the arena."""
        return self.base + self._offsets[id(blob)]

    def addresses(self, blobs) -> np.ndarray:
        """The host addresses of ``blobs`` (an iterable) in the arena, as int64."""
        offsets = np.fromiter(map(self._offsets.__getitem__, map(id, blobs)), dtype=np.int64)
        return offsets + self.base

    def param_offsets(self) -> dict:
        """Named parameter -> the arena offsets of its slots (``Graph.set_param`` writes there)."""
        found: dict = {}
        for blob in self._blobs:
            for slot in blob.params:
                found.setdefault(slot.name, []).append(self._offsets[id(blob)] + slot.at)
        return {name: np.array(offsets, dtype=np.intp) for name, offsets in found.items()}
