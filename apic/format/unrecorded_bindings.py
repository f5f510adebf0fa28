"""Bindings of arrays the capture never touched: saved as extra graph memory, as upstream Warp does.

``capture_save(g, path, inputs={"x": x})`` where no captured operation reads or writes ``x``: the
graph has no region holding it, so apic adds one for the save (its bytes as they are now, like any
other region the graph does not own). A loaded graph then has the parameter: ``set_param`` /
``get_param`` copy into and out of that memory, which no replayed operation uses.

A binding whose dtype types a word as ``wp.handle`` (``apic.format.bound_handles``) may hold the id of
an object the capture never reached: the save records it too, with its arrays as extra regions, and
the typed words of the extra regions become its handle relocations.

The live graph is not changed: the save sees a view of it with the extra regions (and handles) appended.
"""

from __future__ import annotations

import dataclasses

from apic.record.bindings import array_facts, dtype_name, is_warp_array
from apic.errors import BindingError, UnsupportedOperationError
from apic.format import bound_handles
from apic.record import handles as rec_handles
from apic.record.layout import extent
from apic.record.ops import Ref
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
    # region -> its [[region, offset, handle]] slots, for each extra region some binding types as handles:
    # there the types decide which words are handles (the writer's untyped search does not run)
    typed_slots: dict = dataclasses.field(default_factory=dict)
    added_ids: tuple = ()  # ids of the handles the save records (reached only through a binding)


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
        where = _placement(regions, graph.region_addresses, lo, hi)
        if where == "inside":
            continue
        what = f"{kind} '{name}' ({dtype_name(arr.dtype)}, shape {shape})"
        if where == "partly":
            raise BindingError(
                f"{what} lies partly in memory this graph uses and partly outside it; bind the part the "
                "captured operations use, or an array wholly outside it"
            )
        found.append((lo, hi, what))
    return found


def _placement(regions, addresses, lo: int, hi: int) -> str:
    """Whether ``[lo, hi)`` lies ``"inside"`` one region, ``"partly"`` in some, or ``"outside"`` all of them."""
    inside = overlaps = False
    for region, base in zip(regions, addresses):
        end = base + region.nbytes
        inside |= base <= lo and hi <= end
        overlaps |= lo < end and base < hi
    return "inside" if inside else "partly" if overlaps else "outside"


def _handle_ranges(graph, objects) -> list[tuple[int, int, str]]:
    """``(lo, hi, what)`` of the arrays of handles the save records that lie in no region of the graph."""
    found = []
    for obj in objects:
        for lo, hi, what in bound_handles.array_ranges(obj):
            where = _placement(graph.recording.regions, graph.region_addresses, lo, hi)
            if where == "partly":
                raise UnsupportedOperationError(
                    f"capture_save of {what}",
                    "the array lies partly in memory this graph uses and partly outside it, so the object cannot "
                    "be rebuilt from the saved graph's memory",
                )
            if where == "outside":
                found.append((lo, hi, what))
    return found


def _resolver(regions, addresses):
    """Address -> ``Ref`` into the region that holds it."""
    def resolve(address: int) -> Ref:
        for region, base in zip(regions, addresses):
            # an empty handle array starts a region of 0 bytes: its start still names that region
            if base <= address < base + max(region.nbytes, 1):
                return Ref(region.id, address - base)
        raise UnsupportedOperationError(f"capture_save of a native handle over memory at {address:#x}",
                                        "the memory lies in no region of the saved graph")
    return resolve


def _merged(ranges: list[tuple[int, int, str]]) -> list[tuple[int, int]]:
    """Overlapping ranges (two names for one array, views of one allocation) become one region."""
    merged: list[list[int]] = []
    for lo, hi, _ in sorted(ranges):
        if merged and lo < merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], hi)
        else:
            merged.append([lo, hi])
    return [(lo, hi) for lo, hi in merged]


def _extra_regions(graph, ranges) -> tuple[list, list]:
    """The graph's regions and their addresses, with one extra region per merged range appended."""
    regions = list(graph.recording.regions)
    addresses = list(graph.region_addresses)
    for lo, hi in _merged(ranges):
        regions.append(Region(id=len(regions), nbytes=hi - lo, owned=False, address=lo))
        addresses.append(lo)
    return regions, addresses


def _typed_slots(extra, region_addresses, typed_words, ids: list) -> dict:
    """region -> its ``[[region, offset, handle]]`` slots, for each extra region a binding types handles in."""
    index = {value: i for i, value in enumerate(ids)}
    typed = {}
    for region in extra:
        slots = bound_handles.slots_in(region, region_addresses[region.id], *typed_words, index)
        if slots is not None:
            typed[region.id] = slots
    return typed


def with_untouched(graph, named) -> object:
    """``graph`` itself, or a :class:`SaveView` of it with one extra region per untouched range and the
    handles that only the bindings' ``wp.handle`` fields reach.

    ``named`` is the ``(kind, name, array)`` sequence of the save's bindings.
    """
    named = list(named)
    known = list(getattr(graph, "handle_ids", ()))
    typed_words = bound_handles.typed_words(named)
    added = bound_handles.unknown_objects(typed_words[1], known)
    ranges = _untouched_ranges(graph, named) + _handle_ranges(graph, added)
    if not ranges and not added:
        return graph  # typed words only in memory the operations use, where the untyped rule finds them
    regions, region_addresses = _extra_regions(graph, ranges)
    resolve = _resolver(regions, region_addresses)
    handles = tuple(graph.recording.handles) + tuple(rec_handles.describe(obj, resolve) for obj in added)
    ids = known + [int(obj.id) for obj in added]
    typed = _typed_slots(regions[len(graph.recording.regions):], region_addresses, typed_words, ids)
    recording = dataclasses.replace(graph.recording, regions=tuple(regions), handles=handles)
    return SaveView(recording, region_addresses, ids, dict(getattr(graph, "bindings", {})), apic=graph.apic,
                    param_values=dict(getattr(graph, "param_values", {})), typed_slots=typed,
                    added_ids=tuple(int(obj.id) for obj in added))
