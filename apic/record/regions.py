"""Memory regions: the allocations a graph touches, merged from every address range seen in capture.

During capture the recorder notes byte ranges (``note``): whole allocations behind Warp arrays,
ranges read or written through pointers found in kernel arguments and copy/fill calls, and
allocations made inside the capture. ``RegionTableBuilder.build`` merges overlapping ranges, so two
views of one buffer always land in one region and keep their aliasing after a save and a load, and
returns the final table plus a resolver from absolute addresses to ``Ref``.
"""

from __future__ import annotations

import bisect
import ctypes
from dataclasses import dataclass

import numpy as np

from apic.errors import CaptureError
from apic.record import handle_words
from apic.record.ops import Ref


@dataclass(frozen=True)
class ArrayInfo:
    """What is known of the array that covers a whole region (for bindings and inspection)."""

    dtype: str
    shape: tuple[int, ...]
    strides: tuple[int, ...]


@dataclass
class Region:
    """One contiguous block of memory the graph uses."""

    id: int
    nbytes: int
    owned: bool  # allocated inside the capture: graph-owned, contents not part of the graph's inputs
    address: int = 0  # live base address (0 once saved)
    array: ArrayInfo | None = None


@dataclass
class _Range:
    lo: int
    hi: int
    owned: bool
    used: bool  # an op reads or writes it (ranges noted only as context are dropped unless merged)
    array: ArrayInfo | None


class RegionTableBuilder:
    """Collects address ranges during capture and merges them into regions at the end."""

    def __init__(self) -> None:
        self._ranges: dict[tuple[int, int], _Range] = {}  # keyed by (lo, hi): the same range recurs often

    def note(self, lo: int, hi: int, *, used: bool, owned: bool = False, array: ArrayInfo | None = None):
        """Note the byte range ``[lo, hi)`` (``hi == lo`` for an empty access).

        ``used`` ranges are accessed by an op; the others (whole allocations behind the arrays an op
        was given) only widen the region they fall in, so a region is always a whole allocation.
        """
        key = (lo, max(lo, hi))
        seen = self._ranges.get(key)
        if seen is not None:
            seen.owned |= owned
            seen.used |= used
            seen.array = seen.array or array
            return
        if lo <= 0:
            raise CaptureError(f"a null or invalid address ({lo:#x}) reached the recorder")
        self._ranges[key] = _Range(key[0], key[1], owned, used, array)

    def overlaps(self, lo: int, hi: int) -> bool:
        """Whether ``[lo, hi)`` shares a byte with any range noted so far."""
        return any(r.lo < hi and lo < max(r.hi, r.lo + 1) for r in self._ranges.values())

    def words_among(self, values: np.ndarray) -> list[int]:
        """Which of ``values`` (uint64) are stored as 8-byte-aligned words in the memory ops use."""
        found: set[int] = set()
        if not len(values):  # no live handle: nothing to look for (the common case)
            return []
        for rng in self._ranges.values():
            lo = -(-rng.lo // 8) * 8
            count = (rng.hi - lo) // 8
            if rng.used and count > 0:
                words = np.ctypeslib.as_array((ctypes.c_uint64 * count).from_address(lo))
                found.update(words[handle_words.id_words(words, values)].tolist())
        return sorted(found)

    def build(self) -> tuple[list[Region], callable]:
        """Merge the noted ranges into regions; return them and an ``address -> Ref`` resolver."""
        ordered = sorted(self._ranges.values(), key=lambda r: (r.lo, -r.hi))
        groups: list[list[_Range]] = []
        group_hi = 0
        for rng in ordered:
            # Overlapping ranges share a region; so does an empty access at a region's very end.
            if groups and (rng.lo < group_hi or rng.lo == rng.hi == group_hi):
                groups[-1].append(rng)
                group_hi = max(group_hi, rng.hi)
            else:
                groups.append([rng])
                group_hi = rng.hi

        regions, starts, ends = [], [], []
        for group in groups:
            if not any(r.used for r in group):
                continue
            lo = min(r.lo for r in group)
            hi = max(r.hi for r in group)
            whole = [r.array for r in group if r.array is not None and r.lo == lo and r.hi == hi]
            region = Region(
                id=len(regions),
                nbytes=hi - lo,
                owned=any(r.owned for r in group),
                address=lo,
                array=whole[0] if whole else None,
            )
            regions.append(region)
            starts.append(lo)
            ends.append(hi)

        def resolve(address: int) -> Ref:
            i = bisect.bisect_right(starts, address) - 1
            if i < 0 or address > ends[i]:
                raise CaptureError(f"address {address:#x} is not inside any memory the capture has seen")
            return Ref(i, address - starts[i])

        return regions, resolve
