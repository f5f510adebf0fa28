"""The tables a ``.wrp`` reader has read so far, and the checks of references, blobs and array descriptors
against them (``Context``): what every op, handle and binding reader uses to keep each pointer inside
the memory the graph allocates."""

from __future__ import annotations

import math
import operator
import struct

import msgpack

from apic.format import handles as wire_handles
from apic.format import schema
from apic.format.fields import check_bin as _bin
from apic.format.fields import check_bool as _bool
from apic.format.fields import check_int as _int
from apic.format.fields import check_list as _list
from apic.format.fields import check_map as _map
from apic.format.fields import fail as _fail
from apic.record import ops as rec
from apic.record.layout import extent
from apic.record.regions import Region
from apic.targets import cpu


def args_structure(value) -> bytes | None:
    """A key of everything in kernel arguments ``value`` but their bytes and parameters, exactly (msgpack
    tells 1 from True and 1.0), or None where ``value`` is not a map with binary data."""
    if type(value) is not dict or type(value.get("data")) is not bytes:
        return None
    return msgpack.packb([len(value["data"])] + [(k, v) for k, v in value.items() if k not in ("data", "params")])


class Context:
    """What field checks need to know about the tables read so far."""

    def __init__(self, regions: list[Region]) -> None:
        self.regions = regions
        self.handle_count = 0  # native handles the graph rebuilds (blobs may hold their ids)
        self.handle_kinds: list[str] = []  # their kinds, by index
        # kernel-argument descriptors found valid (bytes, relocations, type, element size): the same array
        # passed to many launches is checked once; the result depends only on these and the regions
        self.checked_descriptors: set = set()
        # kernel-argument structures found valid (``kernel_args``) -> what a launch sharing one needs
        self.checked_layouts: dict = {}
        self.checked_bounds: dict = {}  # (launch bounds bytes, dim) found valid -> the bounds a replay runs
        # launches found valid, keyed by all but their argument bytes (``read_ops.launch_template``) -> (kernel,
        # dim, bounds, the entry of ``checked_layouts`` their arguments share, the launch)
        self.checked_launches: dict = {}
        self.alike: dict = {}  # id(launch) -> (it, the launch of checked_launches it was read alike)
        self.checked_kinds: dict = {}  # (op kind, target name) found valid -> (its required fields, its reader)
        self.legacy_bounds = True  # only warp <= 1.13's launch bounds layout (by-value ABI), else also 1.14+'s
        self.args_sizes: dict = {}  # kernel -> (args_size, adj_args_size) from its entry (None: not recorded)
        self.launch_layouts: dict = {}  # kernel -> the argument layout its first launch in the file has
        self.scalars: dict = {}  # binding index -> apic.record.params.ScalarParam (format 3: named scalar parameters)

    def region(self, value, where: str) -> Region:
        if not self.regions:
            _fail(where, "the graph has no regions")
        return self.regions[_int(value, where, 0, len(self.regions) - 1)]

    def ref(self, value, where: str, nbytes: int = 0) -> rec.Ref:
        """A ``[region, offset]`` pair; ``[offset, offset + nbytes)`` must lie inside the region."""
        pair = _list(value, where, 2)
        if len(pair) != 2:
            _fail(where, "expected [region, offset]")
        region = self.region(pair[0], f"{where}[0]")
        offset = _int(pair[1], f"{where}[1]")
        if offset + nbytes > region.nbytes:
            _fail(where, f"bytes [{offset}, {offset + nbytes}) are outside region {region.id} ({region.nbytes} bytes)")
        return rec.Ref(region.id, offset)

    def blob(self, value, where: str, relocatable: bool = True) -> rec.Blob:
        """``{"data": bin, "relocs": [[at, region, offset], ...]}`` with every relocation in range."""
        value = _map(value, where, ("data", "relocs"))
        data = _bin(value["data"], f"{where}.data")
        relocs = []
        used = set()
        for i, entry in enumerate(_list(value["relocs"], f"{where}.relocs", len(data) // 8)):
            w = f"{where}.relocs[{i}]"
            triple = _list(entry, w, 3)
            if len(triple) != 3:
                _fail(w, "expected [at, region, offset]")
            at = _int(triple[0], f"{w}[0]", 0, max(len(data) - 8, 0))
            if at + 8 > len(data):
                _fail(w, f"a pointer at byte {at} does not fit in the {len(data)}-byte blob")
            if used & set(range(at, at + 8)):
                _fail(w, f"the pointer at byte {at} overlaps another relocation")
            used.update(range(at, at + 8))
            relocs.append(rec.Reloc(at, self.ref(triple[1:], w)))
        if relocs and not relocatable:
            _fail(where, "this value cannot hold pointers, but has relocations")
        return rec.Blob(data, tuple(relocs))

    def kernel_args(self, value, where: str) -> rec.Blob:
        """A launch's packed arguments: a blob plus ``arrays``, the array descriptors inside it.

        Every relocation must be a pointer field of a listed descriptor, and every descriptor must
        keep its arrays inside their regions, as for copies and fills.

        What these checks read is the value's structure (its length, relocations, descriptors and handles)
        and the descriptors' bytes: launches that share them (one kernel over the same arrays, differing in
        scalars) are checked once, and a later one only compares its descriptors' bytes and its parameters.
        """
        structure = args_structure(value)
        if structure is not None:
            known = self.checked_layouts.get(structure)
            if known is not None:
                found = self.alike_args(value, known, where)
                if found is not None:
                    return found
        blob = self.blob(value, where)
        handles = wire_handles.read_blob_handles(value, where, len(blob.data), self.handle_count)
        entries = _list(value.get("arrays", []), f"{where}.arrays", len(blob.data) // schema.ARRAY_T_SIZE)
        slots, claimed = [], set()
        for i, entry in enumerate(entries):
            w = f"{where}.arrays[{i}]"
            triple = _list(entry, w, 3)
            if len(triple) != 3:
                _fail(w, "expected [at, elem_size, indexed]")
            indexed = _bool(triple[2], f"{w}[2]")
            size = schema.INDEXEDARRAY_T_SIZE if indexed else schema.ARRAY_T_SIZE
            at = _int(triple[0], f"{w}[0]", 0, max(len(blob.data) - size, 0))
            if at % 8 or at + size > len(blob.data) or not claimed.isdisjoint(range(at, at + size)):
                _fail(w, f"a {size}-byte descriptor at byte {at} is misaligned, overlaps another or does not fit")
            claimed.update(range(at, at + size))
            slot = rec.ArraySlot(at, _int(triple[1], f"{w}[1]", 1, schema.MAX_ELEM_BYTES), indexed)
            inner = tuple(rec.Reloc(r.at - at, r.target) for r in blob.relocs if at <= r.at < at + size)
            data = bytearray(blob.data[at : at + size])
            data[cpu.ARRAY_T_FLAGS] = bytes(6)  # warp 1.13+ int16 flags (and padding) after the int16 ndim
            checked = (bytes(data), inner, indexed, slot.elem_size)
            # an all-zero descriptor is a None array argument; one already checked in this file passes
            if (inner or any(data)) and checked not in self.checked_descriptors:
                self.descriptor(rec.Blob(checked[0], inner), int(indexed), slot.elem_size, w)
                self.checked_descriptors.add(checked)
            slots.append(slot)
        stray = [r.at for r in blob.relocs if r.at not in claimed]
        if stray:
            _fail(where, f"relocation at byte {stray[0]} is not a pointer field of a listed array")
        # a handle id is a scalar: never inside an array descriptor, never over another handle
        for reloc in handles:
            if not claimed.isdisjoint(range(reloc.at, reloc.at + 8)):
                _fail(where, f"a handle id at byte {reloc.at} overlaps an array descriptor or another handle")
            claimed.update(range(reloc.at, reloc.at + 8))
        if structure is not None:
            # the bytes of its array descriptors, taken in one call (None: it has none)
            spans = [slice(slot.at, slot.at + (schema.INDEXEDARRAY_T_SIZE if slot.indexed else schema.ARRAY_T_SIZE))
                     for slot in slots]
            descriptors_of = operator.itemgetter(*spans) if spans else None
            self.checked_layouts[structure] = (descriptors_of, descriptors_of and descriptors_of(blob.data),
                                               blob.relocs + tuple(handles), tuple(slots), frozenset(claimed))
        params = self.param_slots(value, blob.data, claimed, where)
        return rec.Blob(blob.data, blob.relocs + tuple(handles), tuple(slots), params)

    def alike_args(self, value: dict, known: tuple, where: str) -> rec.Blob | None:
        """The arguments ``value`` as a blob, if they share a structure checked before (``known``, an entry of
        ``checked_layouts``) and its array descriptors' bytes; else None (they are checked in full)."""
        descriptors_of, descriptors, relocs, slots, claimed = known
        data = value["data"]
        if descriptors_of is None or descriptors_of(data) == descriptors:
            params = self.param_slots(value, data, set(claimed), where) if "params" in value else ()
            return rec.Blob(data, relocs, slots, params)
        return None

    def param_slots(self, value: dict, data: bytes, claimed: set, where: str) -> tuple:
        """``params``: where named scalar parameters lie in a launch's argument blob (format 3). Each slot
        holds its parameter's value and overlaps no pointer, handle or other slot: setting a parameter
        rewrites only plain scalar bytes."""
        entries = _list(value.get("params", []), f"{where}.params", len(data))
        slots = []
        for i, entry in enumerate(entries):
            w = f"{where}.params[{i}]"
            pair = _list(entry, w, 2)
            if len(pair) != 2:
                _fail(w, "expected [at, binding index]")
            index = _int(pair[1], f"{w}[1]", 0, schema.MAX_INT)
            param = self.scalars.get(index)
            if param is None:
                _fail(f"{w}[1]", f"bindings[{index}] is not a named scalar parameter")
            at = _int(pair[0], f"{w}[0]", 0, max(len(data) - param.nbytes, 0))
            if at + param.nbytes > len(data) or not claimed.isdisjoint(range(at, at + param.nbytes)):
                _fail(w, f"the {param.nbytes} bytes of parameter '{param.name}' at byte {at} do not fit in the "
                         f"{len(data)}-byte blob or overlap an array descriptor, a handle or another parameter")
            if data[at : at + param.nbytes] != param.value:
                _fail(w, f"the bytes at {at} are not the value of parameter '{param.name}' (bindings[{index}].value)")
            claimed.update(range(at, at + param.nbytes))
            slots.append(rec.ParamSlot(at, param.name))
        return tuple(sorted(slots))

    def descriptor(self, blob: rec.Blob, array_type: int, elem_size: int, where: str) -> tuple[int, ...]:
        """Check a native array descriptor (``array_t`` or ``indexedarray_t``) as Warp's copy/fill reads it.

        Returns the shape the native code iterates over.
        """
        if array_type == schema.ARRAY_TYPE_REGULAR:
            size, slots = schema.ARRAY_T_SIZE, schema.ARRAY_T_POINTER_SLOTS
        elif array_type == schema.ARRAY_TYPE_INDEXED:
            size, slots = schema.INDEXEDARRAY_T_SIZE, schema.INDEXEDARRAY_T_POINTER_SLOTS
        else:
            _fail(where, f"unknown array type {array_type}")
        if len(blob.data) != size:
            _fail(where, f"an array descriptor of type {array_type} has {size} bytes, found {len(blob.data)}")
        relocs = {r.at: r.target for r in blob.relocs}
        if set(relocs) - set(slots):
            _fail(where, f"relocation at byte {sorted(set(relocs) - set(slots))[0]}, which is not a pointer field")
        _, _, *rest = cpu.ARRAY_T_STRICT.unpack_from(blob.data, 0)
        shape, strides, ndim32 = rest[0:4], rest[4:8], rest[8]
        if not 1 <= ndim32 <= schema.MAX_DIMS:
            _fail(where, f"array descriptor with ndim {ndim32}")
        shape, strides = tuple(shape[:ndim32]), tuple(strides[:ndim32])
        if any(n < 0 for n in shape):
            _fail(where, f"array descriptor with negative shape {shape}")
        empty = math.prod(shape) == 0
        for at in cpu.ARRAY_T_POINTER_SLOTS:  # data, grad: strided views into one region
            if at in relocs:
                target = relocs[at]
                lo, hi = extent(target.offset, elem_size, shape, strides)
                if not empty and (lo < 0 or hi > self.regions[target.region].nbytes):
                    _fail(where, f"the array reaches bytes [{lo}, {hi}) of region {target.region} "
                                 f"({self.regions[target.region].nbytes} bytes)")
            elif struct.unpack_from("<Q", blob.data, at)[0] != 0:
                _fail(where, f"raw pointer at byte {at} (pointers must be relocations)")
        if 0 not in relocs and not empty:
            _fail(where, "a non-empty array descriptor without a data pointer")
        if array_type != schema.ARRAY_TYPE_INDEXED:
            return shape
        index_shape = tuple(cpu.INDEXED_TAIL.unpack_from(blob.data, cpu.INDEXED_INDICES_AT)[4:])[:ndim32]
        if any(n < 0 for n in index_shape):
            _fail(where, f"indexed array with negative shape {index_shape}")
        for d in range(schema.MAX_DIMS):
            at = cpu.INDEXED_INDICES_AT + 8 * d
            if at in relocs:
                if d >= ndim32:
                    _fail(where, f"index buffer for dimension {d} of a {ndim32}-d array")
                target = relocs[at]
                if target.offset + 4 * index_shape[d] > self.regions[target.region].nbytes:
                    _fail(where, f"index buffer {d} reaches outside region {target.region}")
            elif struct.unpack_from("<Q", blob.data, at)[0] != 0:
                _fail(where, f"raw pointer at byte {at} (pointers must be relocations)")
            elif d < ndim32 and index_shape[d] > shape[d]:
                _fail(where, f"indexed shape {index_shape} exceeds the array's shape {shape} in dimension {d}")
        return index_shape
