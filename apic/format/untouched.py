"""Bindings of arrays the capture never touched: saved as extra graph memory, as upstream Warp does.

``capture_save(g, path, inputs={"x": x})`` where no captured operation reads or writes ``x``: the
graph has no region holding it, so apic adds one for the save (its bytes as they are now, like any
other region the graph does not own). A loaded graph then has the parameter: ``set_param`` /
``get_param`` copy into and out of that memory, which no replayed operation uses.

The live graph is not changed: the save sees a view of it with the extra regions appended.
"""

from __future__ import annotations

import dataclasses

from apic.bindings import array_facts, dtype_name, is_warp_array
from apic.errors import BindingError
from apic.record.layout import extent
from apic.record.regions import Region


@dataclasses.dataclass
class SaveView:
    """What the writer reads of a graph, with the extra regions appended after the graph's own."""

    recording: object
    region_addresses: list
    handle_ids: list
    bindings: dict
    apic: bool = True
    param_values: dict = dataclasses.field(default_factory=dict)  # named scalar parameters' current values


def _untouched_ranges(graph, named) -> list[tuple[int, int, str]]:
    """``(lo, hi, what)`` of each named array that lies in no region of the graph."""
    regions = graph.recording.regions
    found = []
    for kind, name, arr in named:
        if not is_warp_array(arr) or not arr.device.is_cpu:
            continue  # make_binding refuses it, saying why
        ptr, elem_size, shape, strides = array_facts(arr)
        if not ptr:
            continue
        lo, hi = extent(ptr, elem_size, shape, strides)
        inside = overlaps = False
        for region, base in zip(regions, graph.region_addresses):
            end = base + region.nbytes
            inside |= base <= lo and hi <= end
            overlaps |= lo < end and base < hi
        if inside:
            continue
        what = f"{kind} '{name}' ({dtype_name(arr.dtype)}, shape {shape})"
        if overlaps:
            raise BindingError(
                f"{what} lies partly in memory this graph uses and partly outside it; bind the part the "
                "captured operations use, or an array wholly outside it"
            )
        found.append((lo, hi, what))
    return found


def _merged(ranges: list[tuple[int, int, str]]) -> list[tuple[int, int]]:
    """Overlapping ranges (two names for one array, views of one allocation) become one region."""
    merged: list[list[int]] = []
    for lo, hi, _ in sorted(ranges):
        if merged and lo < merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], hi)
        else:
            merged.append([lo, hi])
    return [(lo, hi) for lo, hi in merged]


def with_untouched(graph, named) -> object:
    """``graph`` itself, or a :class:`SaveView` of it with one extra region per untouched range.

    ``named`` is the ``(kind, name, array)`` sequence of the save's bindings.
    """
    ranges = _untouched_ranges(graph, list(named))
    if not ranges:
        return graph
    regions = list(graph.recording.regions)
    addresses = list(graph.region_addresses)
    for lo, hi in _merged(ranges):
        regions.append(Region(id=len(regions), nbytes=hi - lo, owned=False, address=lo))
        addresses.append(lo)
    recording = dataclasses.replace(graph.recording, regions=tuple(regions))
    return SaveView(recording, addresses, list(getattr(graph, "handle_ids", ())), dict(getattr(graph, "bindings", {})),
                    apic=graph.apic, param_values=dict(getattr(graph, "param_values", {})))
