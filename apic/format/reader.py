"""Reading a ``.wrp``: bytes -> validated ``SavedGraph``. Every field is checked before use.

The file is treated as hostile: the header is checked (magic, version range, exact length,
SHA-256 of the body) before msgpack sees the body, msgpack is called with its own limits, and
then every field's type and range is checked, including each offset, size, index and relocation,
so that nothing apic itself hands to native code (memcpy/memset/memtile, strided copy and fill,
the relocated pointers in kernel arguments) can reach outside the memory the graph allocates.
Errors are ``apic.FormatError`` and say where in the file the problem is.

What the check cannot cover is what a kernel's own compiled code does with its inputs; the module
binaries are native code, checked against their SHA-256 (see docs/FORMAT.md, "Trust").
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import re
import struct
from dataclasses import dataclass

import msgpack
import numpy as np

from apic.bindings import Binding
from apic.errors import FormatError
from apic.format import cuda as cuda_format
from apic.format import cuda_source
from apic.format import fields
from apic.format import source as source_format
from apic.format import handles as wire_handles
from apic.format import manifest as kernel_manifest
from apic.format import schema
from apic.record import natives
from apic.record import ops as rec
from apic.params import COMPONENT_SIZES as PARAM_COMPONENT_SIZES
from apic.params import ScalarParam
from apic.record.handles import GRID_POINT_SIZES
from apic.record.layout import extent
from apic.record.recording import KernelInfo, ModuleInfo, Recording
from apic.replay.program import control_flow_problem
from apic.record.regions import ArrayInfo, Region
from apic.targets import cpu as cpu_target
from apic.targets.cpu import INDEXED_TAIL as _INDEXED_TAIL
from apic.targets.cpu import KERNEL_ABIS
from apic.targets.cpu import KERNEL_SUFFIX as _KERNEL_SUFFIX
from apic.targets.cpu import MODULE_FILE as _MODULE_FILE

_SYMBOL = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,1023}")
_SHA256 = re.compile(r"[0-9a-f]{64}")
# A NumPy scalar type as ``dtype.str`` writes it ("<f4", "|b1"); checked before NumPy parses it, whose
# parser for other strings (comma lists, sub-array shapes) raises SyntaxError and more.
_NP_DTYPE = re.compile(r"[<>|=]?[biufc][0-9]{1,2}")
_DESCRIPTOR = struct.Struct("<QQ4i4ii")  # data, grad, shape[4], strides[4], ndim (int32: the writer zeroes the flags)


@dataclass(frozen=True)
class ModuleEntry:
    """A module binary the graph needs: its file in ``<stem>_modules/`` and that file's SHA-256."""

    name: str
    file: str
    sha256: str
    size: int
    native_types: tuple[str, ...]  # native structs (Mesh, ...) its kernels can dereference
    arch: int = 0  # CUDA modules (.cubin/.ptx): the sm_XY architecture compiled for (10 * X + Y)
    arch_suffix: str = ""  # CUDA modules: "a" / "f" for arch-specific / family cubins
    source: object = None  # modules saved with source_fallback=True: an apic.format.source.SourceEntry
    manifest: object = None  # CPU modules: an apic.format.manifest.ManifestEntry (None in older files)


@dataclass(frozen=True)
class SavedGraph:
    """A validated ``.wrp``: the recording plus what loading it needs."""

    format_version: int
    writer: dict
    target: dict
    recording: Recording  # regions with address 0, modules with no module_exec, kernels with address 0
    modules: tuple[ModuleEntry, ...]
    contents: tuple  # per region: bytes (saved contents) or None (graph-owned)
    bindings: tuple[Binding, ...]
    body_size: int
    device: dict | None = None  # CUDA graphs: {"kind": "cuda", "arch", "name"}; None for a CPU graph
    volume_data: tuple = ()  # per handle: a Volume's NanoVDB buffer, else None
    handle_slots: tuple = ()  # (region, offset, handle): saved words that get a rebuilt handle's id


# --- header -----------------------------------------------------------------------------------------
def as_bytes(data, what: str = "data") -> memoryview:
    """A flat byte view of a bytes-like object (bytes, bytearray, memoryview, C-contiguous NumPy)."""
    try:
        view = memoryview(data)
    except TypeError:
        raise TypeError(f"{what} must be a bytes-like object, got {type(data).__name__}") from None
    if not view.c_contiguous:
        raise ValueError(f"{what} must be a C-contiguous buffer")
    return view.cast("B") if view.format != "B" or view.ndim != 1 else view


def check_header(data: memoryview) -> tuple[int, memoryview]:
    """The format version and body of a ``.wrp``, or a FormatError saying what the bytes are."""
    if len(data) >= 8 and bytes(data[:4]) == schema.UPSTREAM_MAGIC:
        version = schema.UPSTREAM_VERSION.unpack_from(data, 4)[0]
        writer = schema.UPSTREAM_WRITERS.get(version)
        made_by = f"warp-lang {writer}" if writer else "an unknown warp-lang release"
        raise FormatError(
            f"this is an upstream NVIDIA Warp graph file (magic WRP1, upstream format version {version}, "
            f"written by {made_by}'s own capture_save), not an apic file; apic cannot load it. Load it with "
            "the warp-lang release that wrote it after apic.uninstall(), or capture the graph again with apic"
        )
    if len(data) < len(schema.MAGIC) or bytes(data[: len(schema.MAGIC)]) != schema.MAGIC:
        raise FormatError("not an apic graph file (bad magic; expected an apic .wrp written by wp.capture_save)")
    if len(data) < schema.HEADER.size:
        raise FormatError(
            f"truncated apic graph file: {len(data)} bytes, shorter than its {schema.HEADER.size}-byte header"
        )
    _, version, reserved, body_size, digest = schema.HEADER.unpack_from(data, 0)
    if version > schema.FORMAT_VERSION:
        raise FormatError(
            f"this graph file has format version {version}, newer than this apic reads "
            f"(versions {schema.MIN_READ_VERSION} to {schema.FORMAT_VERSION}); upgrade apic to load it"
        )
    if version < schema.MIN_READ_VERSION:
        raise FormatError(
            f"this graph file has format version {version}, older than this apic reads "
            f"(versions {schema.MIN_READ_VERSION} to {schema.FORMAT_VERSION}); save it again with an older apic"
        )
    if reserved != 0:
        raise FormatError(f"corrupt apic graph file: reserved header field is {reserved:#x}, not 0")
    actual = len(data) - schema.HEADER.size
    if actual < body_size:
        raise FormatError(f"truncated apic graph file: the body has {actual} of its {body_size} bytes")
    if actual > body_size:
        raise FormatError(f"corrupt apic graph file: {actual - body_size} unexpected bytes after the body")
    body = data[schema.HEADER.size :]
    if hashlib.sha256(body).digest() != digest:
        raise FormatError("corrupt apic graph file: the body does not match its SHA-256 checksum")
    return version, body


# --- field checks (apic.format.fields) ------------------------------------------------------------
_fail, _map, _list, _int, _ints = fields.fail, fields.check_map, fields.check_list, fields.check_int, fields.check_ints
_str, _bool, _bin = fields.check_str, fields.check_bool, fields.check_bin


class _Context:
    """What field checks need to know about the tables read so far."""

    def __init__(self, regions: list[Region]) -> None:
        self.regions = regions
        self.handle_count = 0  # native handles the graph rebuilds (blobs may hold their ids)
        self.handle_kinds: list[str] = []  # their kinds, by index
        # kernel-argument descriptors found valid (bytes, relocations, type, element size): the same array
        # passed to many launches is checked once; the result depends only on these and the regions
        self.checked_descriptors: set = set()
        self.legacy_bounds = True  # only warp <= 1.13's launch bounds layout (by-value ABI), else also 1.14+'s
        self.args_sizes: dict = {}  # kernel -> (args_size, adj_args_size) from its entry (None: not recorded)
        self.launch_layouts: dict = {}  # kernel -> the argument layout its first launch in the file has
        self.scalars: dict = {}  # binding index -> apic.params.ScalarParam (format 3: named scalar parameters)

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
        """
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
            slot = rec.ArraySlot(at, _int(triple[1], f"{w}[1]", 1, 1 << 20), indexed)
            inner = tuple(rec.Reloc(r.at - at, r.target) for r in blob.relocs if at <= r.at < at + size)
            data = bytearray(blob.data[at : at + size])
            data[50:56] = bytes(6)  # warp 1.13+ int16 flags (and padding) after the int16 ndim
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
        params = self.param_slots(value, blob.data, claimed, where)
        return rec.Blob(blob.data, blob.relocs + tuple(handles), tuple(slots), params)

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
        _, _, *rest = _DESCRIPTOR.unpack_from(blob.data, 0)
        shape, strides, ndim32 = rest[0:4], rest[4:8], rest[8]
        if not 1 <= ndim32 <= schema.MAX_DIMS:
            _fail(where, f"array descriptor with ndim {ndim32}")
        shape, strides = tuple(shape[:ndim32]), tuple(strides[:ndim32])
        if any(n < 0 for n in shape):
            _fail(where, f"array descriptor with negative shape {shape}")
        empty = math.prod(shape) == 0
        for at in (0, 8):  # data, grad: strided views into one region
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
        index_shape = tuple(_INDEXED_TAIL.unpack_from(blob.data, 56)[4:])[:ndim32]
        if any(n < 0 for n in index_shape):
            _fail(where, f"indexed array with negative shape {index_shape}")
        for d in range(schema.MAX_DIMS):
            at = 56 + 8 * d
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


# --- the body ---------------------------------------------------------------------------------------
class _DuplicateKey(Exception):
    """A msgpack map with a repeated key (raised out of the unpacker, turned into a FormatError)."""


def _unique_map(pairs: list) -> dict:
    """A msgpack map as a dict, refusing a repeated key: one reader keeps the first value, another the last,
    so a file with one could mean two graphs (one checked, another run)."""
    out = dict(pairs)
    if len(out) != len(pairs):
        seen = set()
        for key, _ in pairs:
            if key in seen:
                raise _DuplicateKey(key)
            seen.add(key)
    return out


def read(data) -> SavedGraph:
    """Validate a whole ``.wrp`` (bytes-like) and return what it holds; FormatError if anything is off."""
    view = as_bytes(data)
    version, body = check_header(view)
    n = len(body)
    try:
        # No declared length may exceed what the body can hold (nothing is allocated for a length the
        # bytes do not back), extension types are refused, map keys must be strings or bytes; nesting
        # is bounded by msgpack's own stack (StackError).
        doc = msgpack.unpackb(body, strict_map_key=True, raw=False, use_list=True, max_str_len=n, max_bin_len=n,
                              max_array_len=n, max_map_len=n // 2, max_ext_len=0, object_pairs_hook=_unique_map)
    except _DuplicateKey as error:
        _fail("body", f"a map has the key {error.args[0]!r} more than once (readers that keep the first or the "
                      "last value would read different graphs)")
    except (ValueError, msgpack.UnpackException) as error:  # ExtraData, FormatError, StackError, ...
        raise FormatError(f"corrupt apic graph file: the body is not valid msgpack ({error})") from None
    doc = _map(doc, "body", ("format", "format_version", "writer", "target", "abi", "regions", "modules",
                             "kernels", "ops", "sequence", "bindings"))
    if doc["format"] != schema.FORMAT_NAME:
        _fail("format", f"expected {schema.FORMAT_NAME!r}, found {doc['format']!r}")
    if _int(doc["format_version"], "format_version") != version:
        _fail("format_version", f"{doc['format_version']!r} does not match the header's {version}")

    # writer and target keep only the keys this apic knows, checked (they reach error messages and inspect)
    writer = _map(doc["writer"], "writer", ("apic", "warp"))
    writer = {key: _str(writer[key], f"writer.{key}", max_len=64) for key in ("apic", "warp", "numpy") if key in writer}
    target = _map(doc["target"], "target", ("system", "machine", "cpu", "features", "byteorder", "pointer_bits"))
    target = {
        **{key: _str(target[key], f"target.{key}", max_len=256) for key in ("system", "machine", "cpu", "byteorder")},
        "features": [_str(feature, f"target.features[{i}]", max_len=256)
                     for i, feature in enumerate(_list(target["features"], "target.features", 4096))],
        "pointer_bits": _int(target["pointer_bits"], "target.pointer_bits", 8, 128),
    }
    abi = _str(doc["abi"], "abi", max_len=64)
    device = cuda_format.read_device(doc.get("device"), abi)  # None for a CPU graph
    if device is None and abi not in KERNEL_ABIS:
        _fail("abi", f"unknown kernel ABI {abi!r} (this apic calls {', '.join(KERNEL_ABIS)})")

    regions, contents = _regions(doc["regions"])
    ctx = _Context(regions)
    if version < schema.HANDLES_VERSION and ("handles" in doc or "handle_slots" in doc):
        _fail("handles", f"native handles in a format version {version} file (they need version {schema.HANDLES_VERSION})")
    handles, volume_data = [], []
    for i, entry in enumerate(_list(doc.get("handles", []), "handles", 1 << 16)):
        handle, data = wire_handles.read_handle(entry, f"handles[{i}]", ctx)
        handles.append(handle)
        volume_data.append(data)
    ctx.handle_count = len(handles)
    ctx.handle_kinds = [h.kind for h in handles]
    handle_slots = wire_handles.read_slots(doc.get("handle_slots", []), ctx, len(handles))
    bindings, ctx.scalars = _bindings(doc["bindings"], ctx, version, device)  # before the ops, whose blobs use them
    modules = _modules(doc["modules"], device)
    kernels = _kernels(doc["kernels"], len(modules), device)
    # by value: warp <= 1.12's one bounds layout; by pointer: 1.13's (32 bytes) or 1.14+'s templated ones
    ctx.legacy_bounds = abi == cpu_target.ABI_BY_VALUE
    if device is None:
        ctx.args_sizes = _args_sizes(doc["kernels"])
    distinct = [_op(entry, f"ops[{i}]", ctx, kernels, abi) for i, entry in enumerate(_list(doc["ops"], "ops"))]
    sequence = _sequence(doc["sequence"], len(distinct))
    for i, op in enumerate(distinct):
        if isinstance(op, rec.CONTROL_TYPES) and op.target > len(sequence):
            _fail(f"ops[{i}].target", f"position {op.target} is past the end of the {len(sequence)}-op sequence")
    ops = tuple(distinct[i] for i in sequence.tolist())
    problem = control_flow_problem(ops)  # every loop passes a branch that counts it (a capped replay)
    if problem is not None:
        _fail("sequence", problem)

    recording = Recording(
        abi=abi,
        regions=tuple(regions),
        modules=tuple(ModuleInfo(m.name) for m in modules),
        kernels=kernels,
        ops=ops,
        handles=tuple(handles),
        params=tuple(ctx.scalars.values()),
    )
    return SavedGraph(version, dict(writer), dict(target), recording, modules, tuple(contents), bindings, len(body),
                      device, tuple(volume_data), handle_slots)


def _args_sizes(entries: list) -> dict:
    """kernel -> (args_size, adj_args_size): the recorded argument struct sizes (None where the entry has none,
    as in files written before they were recorded: those launches are then checked only against each other)."""
    sizes = {}
    for i, entry in enumerate(entries):
        sizes[i] = tuple(
            None if entry.get(key) is None else _int(entry[key], f"kernels[{i}].{key}", 0, 1 << 24)
            for key in ("args_size", "adj_args_size")
        )
    return sizes


def _sequence(value, op_count: int) -> np.ndarray:
    """The order ops run in: uint32 indices into ``ops``, packed little-endian."""
    data = _bin(value, "sequence")
    if len(data) % 4:
        _fail("sequence", f"{len(data)} bytes is not a whole number of uint32 indices")
    sequence = np.frombuffer(data, dtype="<u4")
    if len(sequence) and int(sequence.max()) >= op_count:
        _fail("sequence", f"op index {int(sequence.max())} is outside the {op_count} ops")
    return sequence


def _regions(value) -> tuple[list[Region], list]:
    regions, contents = [], []
    for i, entry in enumerate(_list(value, "regions")):
        where = f"regions[{i}]"
        entry = _map(entry, where, ("nbytes", "owned", "contents"))
        nbytes = _int(entry["nbytes"], f"{where}.nbytes", 0, schema.MAX_REGION_BYTES)
        owned = _bool(entry["owned"], f"{where}.owned")
        saved = entry["contents"]
        if owned:
            if saved is not None:
                _fail(f"{where}.contents", "graph-owned memory has no saved contents")
        else:
            saved = _bin(saved, f"{where}.contents")
            if len(saved) != nbytes:
                _fail(f"{where}.contents", f"{len(saved)} bytes saved for a region of {nbytes} bytes")
        array = None
        if entry.get("array") is not None:
            info = _map(entry["array"], f"{where}.array", ("dtype", "shape", "strides"))
            array = ArrayInfo(
                _str(info["dtype"], f"{where}.array.dtype", max_len=256),
                _ints(info["shape"], f"{where}.array.shape"),
                _ints(info["strides"], f"{where}.array.strides", -schema.MAX_INT, schema.MAX_INT),
            )
        regions.append(Region(id=i, nbytes=nbytes, owned=owned, address=0, array=array))
        contents.append(saved)
    return regions, contents


def _modules(value, device: dict | None = None) -> tuple[ModuleEntry, ...]:
    modules, files = [], {}
    for i, entry in enumerate(_list(value, "modules")):
        where = f"modules[{i}]"
        entry = _map(entry, where, ("name", "file", "sha256", "size"))
        module = ModuleEntry(
            name=_str(entry["name"], f"{where}.name", max_len=1024),
            file=_str(entry["file"], f"{where}.file", _MODULE_FILE if device is None else cuda_format.MODULE_FILE),
            sha256=_str(entry["sha256"], f"{where}.sha256", _SHA256),
            size=_int(entry["size"], f"{where}.size"),
            native_types=tuple(
                _str(t, f"{where}.native_types[{j}]", max_len=64)
                for j, t in enumerate(_list(entry.get("native_types", []), f"{where}.native_types", 64))
            ),
        )
        if module.file in (".", "..") or module.file.startswith("."):
            _fail(f"{where}.file", f"{module.file!r} is not a valid module file name")
        if device is not None:
            arch, arch_suffix = cuda_format.read_module_arch(entry, where, module.file)
            source = cuda_source.read_entry(entry.get("source"), f"{where}.source")
            module = dataclasses.replace(module, arch=arch, arch_suffix=arch_suffix, source=source)
        else:
            source = source_format.read_entry(entry.get("source"), f"{where}.source")
            manifest = kernel_manifest.read_entry(entry.get("manifest"), f"{where}.manifest", module.file)
            module = dataclasses.replace(module, source=source, manifest=manifest)
        if files.setdefault(module.file, module.sha256) != module.sha256:
            _fail(f"{where}.file", f"{module.file!r} is listed twice with different checksums")
        modules.append(module)
    return tuple(modules)


def _kernels(value, module_count: int, device: dict | None = None) -> tuple[KernelInfo, ...]:
    kernels = []
    for i, entry in enumerate(_list(value, "kernels")):
        where = f"kernels[{i}]"
        entry = _map(entry, where, ("module", "key", "symbol", "adjoint"))
        if not module_count:
            _fail(f"{where}.module", "the graph has no modules")
        adjoint = _bool(entry["adjoint"], f"{where}.adjoint")
        symbol = _str(entry["symbol"], f"{where}.symbol", _SYMBOL)
        # Only a kernel entry point may be called: not a C library function the JIT also resolves
        suffix = (_KERNEL_SUFFIX if device is None else cuda_format.KERNEL_SUFFIX)[adjoint]
        if not symbol.endswith(suffix) or len(symbol) == len(suffix):
            _fail(f"{where}.symbol", f"{symbol!r} is not the entry point of a Warp {'CPU' if device is None else 'CUDA'} "
                                     f"{'backward' if adjoint else 'forward'} kernel (<name>{suffix})")
        kernels.append(KernelInfo(
            module=_int(entry["module"], f"{where}.module", 0, module_count - 1),
            key=_str(entry["key"], f"{where}.key", max_len=1024),
            symbol=symbol,
            adjoint=adjoint,
            cpu_blocks=_bool(entry.get("cpu_blocks", False), f"{where}.cpu_blocks"),
            params=() if device is None else cuda_format.read_kernel_params(entry.get("params"), f"{where}.params"),
            split_writes=_split_writes(entry.get("split_writes"), f"{where}.split_writes", adjoint or device is not None),
        ))
    return tuple(kernels)


def _split_writes(value, where: str, refused: bool) -> tuple[int, ...] | None:
    """A kernel's optional ``split_writes`` (parallel replay): increasing byte offsets of written arrays.

    Only a CPU forward kernel may have it. The lowering checks each offset against every launch's
    array slots; a launch where one is not a plain array runs serially.
    """
    if value is None:
        return None
    if refused:
        _fail(where, "only a CPU forward kernel may be split")
    offsets = _ints(value, where, 0, 1 << 24, max_len=4096)
    if any(b <= a for a, b in zip(offsets, offsets[1:])):
        _fail(where, "offsets must be strictly increasing")
    return offsets


def _op(entry, where: str, ctx: _Context, kernels, abi: str):
    entry = _map(entry, where, ("kind",))
    kind_value = _int(entry["kind"], f"{where}.kind", 0, 1 << 16)
    try:
        kind = schema.WireOp(kind_value)
    except ValueError:
        _fail(f"{where}.kind", f"unknown op kind {kind_value} (this apic knows {[int(k) for k in schema.WireOp]})")
    fields = schema.OP_FIELDS.get(kind)
    if fields is None:  # a kind apic records but never writes
        _fail(f"{where}.kind", f"op kind {kind_value} ({kind.name.lower()}) cannot appear in a graph file")
    _map(entry, where, tuple(k for k, t in fields.items() if not t.endswith("?")))
    cuda = abi == cuda_format.CUDA_ABI
    if (kind not in cuda_format.OP_KINDS) if cuda else (kind == schema.WireOp.CUDA_LAUNCH):
        _fail(f"{where}.kind", f"op kind {kind_value} ({kind.name.lower()}) cannot appear in a graph with ABI {abi!r}")
    if kind == schema.WireOp.CUDA_LAUNCH:
        return cuda_format.read_launch(entry, where, ctx, kernels)

    if kind == schema.WireOp.LAUNCH:
        if not kernels:
            _fail(f"{where}.kernel", "the graph has no kernels")
        kernel = _int(entry["kernel"], f"{where}.kernel", 0, len(kernels) - 1)
        # Unsigned extents: Warp launches a kernel that never reads wp.tid() over more than 2^31 threads
        # (as upstream's format accepts). Replay runs the bounds blob; dim describes the launch.
        dim = _ints(entry["dim"], f"{where}.dim", 0, (1 << 32) - 1)
        bounds = ctx.blob(entry["bounds"], f"{where}.bounds", relocatable=False)
        sizes = (cpu_target.LEGACY_BOUNDS_SIZE,) if abi == cpu_target.ABI_BY_VALUE else cpu_target.BOUNDS_SIZES
        if len(bounds.data) not in sizes:
            expected = " or ".join(map(str, sizes))
            _fail(f"{where}.bounds", f"launch bounds of {len(bounds.data)} bytes (expected {expected})")
        _check_bounds(bounds.data, dim, ctx.legacy_bounds, f"{where}.bounds")
        bounds = rec.Blob(_padded_with_ones(bounds.data, ctx.legacy_bounds))
        args = ctx.kernel_args(entry["args"], f"{where}.args")
        adj = entry.get("adj_args")
        adj_args = None if adj is None else ctx.kernel_args(adj, f"{where}.adj_args")
        if (adj_args is not None) != kernels[kernel].adjoint:
            _fail(where, "adjoint arguments must be present exactly for a backward (adjoint) kernel")
        _check_args_layout(ctx, kernel, args, adj_args, where)
        return rec.Launch(kernel, dim, bounds, args, adj_args)
    if kind == schema.WireOp.MEMCPY:
        nbytes = _int(entry["nbytes"], f"{where}.nbytes")
        dst = ctx.ref(entry["dst"], f"{where}.dst", nbytes)
        return rec.Memcpy(dst, ctx.ref(entry["src"], f"{where}.src", nbytes), nbytes)
    if kind == schema.WireOp.MEMSET:
        nbytes = _int(entry["nbytes"], f"{where}.nbytes")
        value = _int(entry["value"], f"{where}.value", 0, 255)
        return rec.Memset(ctx.ref(entry["dst"], f"{where}.dst", nbytes), value, nbytes)
    if kind == schema.WireOp.MEMTILE:
        value = ctx.blob(entry["value"], f"{where}.value", relocatable=False)
        count = _int(entry["count"], f"{where}.count")
        if count and not value.data:
            _fail(f"{where}.value", "an empty value repeated")
        return rec.Memtile(ctx.ref(entry["dst"], f"{where}.dst", len(value.data) * count), value, count)
    if kind == schema.WireOp.ARRAY_COPY:
        dst_type = _int(entry["dst_type"], f"{where}.dst_type", 0, 1)
        src_type = _int(entry["src_type"], f"{where}.src_type", 0, 1)
        elem_size = _int(entry["elem_size"], f"{where}.elem_size", 1, 1 << 20)
        dst = ctx.blob(entry["dst"], f"{where}.dst")
        src = ctx.blob(entry["src"], f"{where}.src")
        dst_shape = ctx.descriptor(dst, dst_type, elem_size, f"{where}.dst")
        src_shape = ctx.descriptor(src, src_type, elem_size, f"{where}.src")
        if dst_shape != src_shape:
            _fail(where, f"copy between arrays of shapes {src_shape} and {dst_shape}")
        return rec.ArrayCopy(dst, src, dst_type, src_type, elem_size)
    if kind == schema.WireOp.ARRAY_FILL:
        array_type = _int(entry["array_type"], f"{where}.array_type", 0, 1)
        value = ctx.blob(entry["value"], f"{where}.value", relocatable=False)
        if not 1 <= len(value.data) <= 1 << 20:
            _fail(f"{where}.value", f"a fill value of {len(value.data)} bytes")
        dst = ctx.blob(entry["dst"], f"{where}.dst")
        ctx.descriptor(dst, array_type, len(value.data), f"{where}.dst")
        return rec.ArrayFill(dst, array_type, value)
    if kind == schema.WireOp.ALLOC:
        nbytes = _int(entry["nbytes"], f"{where}.nbytes")
        return rec.Alloc(ctx.ref(entry["dst"], f"{where}.dst", nbytes), nbytes)
    if kind == schema.WireOp.BRANCH:  # the target is checked against the sequence in read()
        return rec.Branch(ctx.ref(entry["cond"], f"{where}.cond", 4), _int(entry["target"], f"{where}.target"))
    if kind == schema.WireOp.JUMP:
        return rec.Jump(_int(entry["target"], f"{where}.target"))
    if kind == schema.WireOp.NATIVE_CALL:
        return _native_call(entry, where, ctx)
    if kind == schema.WireOp.HANDLE_CALL:
        return _handle_call(entry, where, ctx)
    raise AssertionError(kind)  # pragma: no cover - every WireOp is handled above


_LEGACY_BOUNDS = struct.Struct("<4IiIQ")  # warp <= 1.13: int shape[4] (read unsigned, as the recorder reads an
# extent past 2^31 that Warp stored in a C int), int ndim, (padding), size_t size


def _templated_bounds(dim: tuple, rank: int) -> bytes:
    """Warp 1.14+'s ``launch_bounds_<rank>d_t`` for a launch of ``dim`` (as ``wp.launch`` builds it: missing
    dimensions are 1, extra ones fold into ``coord_mult``)."""
    padded = tuple(dim) + (1,) * max(0, rank - len(dim))
    kept, folded = padded[:rank], math.prod(padded[rank:])
    if math.prod(kept) * folded >> 64:  # no launch of 2^64 threads or more: these bounds cannot be Warp's
        return b""
    shape = struct.pack(f"<{rank}I", *kept).ljust(-(-4 * rank // 8) * 8, b"\0")
    return shape + struct.pack("<QQ", math.prod(kept) * folded, folded)


def _check_bounds(data: bytes, dim: tuple, legacy: bool, where: str) -> None:
    """The launch bounds must be exactly what Warp builds for the op's ``dim``: the kernel runs as many
    threads as the bounds say, so bounds that disagree with ``dim`` would run past what was recorded."""
    if not dim:
        _fail(where, "a launch with an empty dim")
    if len(data) == _LEGACY_BOUNDS.size:
        *shape, ndim, pad, size = _LEGACY_BOUNDS.unpack(data)
        if ndim == len(dim) and tuple(shape[:ndim]) == tuple(dim) and size == math.prod(dim) and not pad:
            return
    if legacy:  # warp <= 1.12 (bounds by value) has only this layout
        _fail(where, f"launch bounds {data.hex()} (warp <= 1.13's shape[4], ndim, size) do not agree with the "
                     f"op's dim {list(dim)}")
    ranks = (1, 2) if len(data) == 24 else (3, 4)
    # A block launch (tile kernels, CPU blocks) runs block_dim threads per coordinate: Warp folds the
    # block size into coord_mult as a trailing dimension (at most 1024, Warp's largest block)
    coord_mult = struct.unpack_from("<Q", data, len(data) - 8)[0]

    def block(rank: int) -> tuple:  # the block size a coord_mult beyond dim's own folded dimensions says
        folded = math.prod(dim[rank:])
        extra = coord_mult // folded if folded and coord_mult % folded == 0 else 1
        return (extra,) if 1 < extra <= 1024 else ()

    if not any(data == _templated_bounds(tuple(dim) + (1,) * max(0, rank - len(dim)) + block(rank), rank)
               for rank in ranks):
        _fail(where, f"launch bounds {data.hex()} are not what warp-lang builds for the op's dim {list(dim)}")


def _padded_with_ones(data: bytes, legacy: bool) -> bytes:
    """The bounds with every shape slot a kernel of another rank could read set to 1, never 0.

    Which rank a kernel unravels its thread index with is compiled into it, not in the file: a 2-d
    kernel handed 1-d bounds would read the padding after ``shape[0]`` as ``shape[1]`` and divide by
    it. With 1 there, any rank reads coordinates inside the launch's own ``dim``. A kernel of the rank
    the bounds were built for never reads these slots."""
    out = bytearray(data)
    if len(out) == _LEGACY_BOUNDS.size and (legacy or _LEGACY_BOUNDS.unpack(data)[4] in (1, 2, 3, 4)):
        *shape, ndim, pad, size = _LEGACY_BOUNDS.unpack(data)
        if 1 <= ndim <= 4 and not pad and tuple(shape[:ndim]) and size == math.prod(shape[:ndim]):
            for slot in range(ndim, 4):
                struct.pack_into("<i", out, 4 * slot, 1)
            return bytes(out)
    if len(out) == 24 and not any(out[4:8]):  # launch_bounds_1d_t: the padding after shape[0]
        struct.pack_into("<I", out, 4, 1)
    if len(out) == 32 and not any(out[12:16]):  # launch_bounds_3d_t: the padding after shape[2]
        struct.pack_into("<I", out, 12, 1)
    return bytes(out)


def _check_args_layout(ctx: _Context, kernel: int, args: rec.Blob, adj_args, where: str) -> None:
    """Every launch of a kernel passes an argument struct of the size its kernel entry records (Warp's
    packed struct for that kernel), with the same array descriptors at the same places."""
    layout = (len(args.data), args.arrays, None if adj_args is None else (len(adj_args.data), adj_args.arrays))
    sizes = ctx.args_sizes.get(kernel, (None, None))
    for size, blob, name in ((sizes[0], args, "args"), (sizes[1], adj_args, "adj_args")):
        if size is not None and blob is not None and len(blob.data) != size:
            _fail(f"{where}.{name}", f"{len(blob.data)} bytes, but kernel {kernel}'s argument struct has {size} "
                                     f"(kernels[{kernel}].{name}_size)")
    first = ctx.launch_layouts.setdefault(kernel, layout)
    if first != layout:
        _fail(f"{where}.args", f"the arguments of kernel {kernel} are laid out differently from its first launch "
                               "(size or array descriptors): one kernel has one argument struct")


def _native_call(entry: dict, where: str, ctx: _Context) -> rec.NativeCall:
    """A call of an allowed native utility whose every pointer stays inside its region."""
    name = _str(entry["fn"], f"{where}.fn", max_len=64)
    args = _list(entry["args"], f"{where}.args", natives.MAX_ARGS)
    sig = natives.signature(name, len(args))
    if sig is None:
        _fail(f"{where}.fn", f"wp_{name} with {len(args)} arguments is not a native call apic makes")
    ints = tuple(
        _int(a, f"{where}.args[{i}]", -schema.MAX_INT, schema.MAX_INT) if kind == natives.INT else 0
        for i, (kind, a) in enumerate(zip(sig.params, args))
    )
    problem = sig.check(ints)
    if problem is not None:
        _fail(f"{where}.args", problem)
    null = lambda kind, a: kind == natives.OPT and type(a) is int and a == 0  # noqa: E731  (an optional pointer)
    values = tuple(
        ints[i] if kind == natives.INT or null(kind, a) else ctx.ref(a, f"{where}.args[{i}]", nbytes)
        for i, (kind, a, nbytes) in enumerate(zip(sig.params, args, sig.reach(ints)))
    )
    return rec.NativeCall(name, values)


# Native handle methods and the integers after the handle id: (lo, hi) of each.
_HANDLE_CALLS = {
    "mesh_refit_host": (),
    "bvh_refit_host": (),
    "bvh_rebuild_host": ((0, 3),),  # the BVH constructor
    "hash_grid_reserve_host": ((0, 2), (0, (1 << 31) - 1), (0, 1)),  # type, point count[, with groups]
    "hash_grid_update_host": ((0, 2),),  # type; then radius, points and groups
}


_HANDLE_CALL_KINDS = {"mesh": "Mesh", "bvh": "Bvh", "hash": "HashGrid"}


def _handle_call(entry: dict, where: str, ctx: _Context) -> rec.HandleCall:
    """A native method of a handle: a known export, its integers in range, a hash grid's points inside a region."""
    name = _str(entry["fn"], f"{where}.fn", max_len=64)
    ranges = _HANDLE_CALLS.get(name)
    if ranges is None:
        _fail(f"{where}.fn", f"wp_{name} is not a native handle method apic calls")
    if not ctx.handle_count:
        _fail(f"{where}.handle", "the graph has no handles")
    handle = rec.HandleRef(_int(entry["handle"], f"{where}.handle", 0, ctx.handle_count - 1))
    kind = _HANDLE_CALL_KINDS[name.split("_")[0]]
    if ctx.handle_kinds[handle.index] != kind:  # wp_mesh_refit_host on a hash grid reads it as a Mesh
        _fail(f"{where}.handle", f"wp_{name} is a {kind} method, but handles[{handle.index}] is a "
                                 f"{ctx.handle_kinds[handle.index]}")
    ints = _list(entry["ints"], f"{where}.ints", len(ranges))
    optional = 1 if name == "hash_grid_reserve_host" else 0  # 1.12 reserves without a groups flag
    if not len(ranges) - optional <= len(ints) <= len(ranges):
        _fail(f"{where}.ints", f"wp_{name} takes {len(ranges)} integers after the handle, found {len(ints)}")
    ints = tuple(_int(v, f"{where}.ints[{i}]", lo, hi) for i, (v, (lo, hi)) in enumerate(zip(ints, ranges)))
    if name == "bvh_rebuild_host" and ints[0] == wire_handles.CUBQL:
        # cuBQL crashes on bounds with lower > upper, and a rebuild at replay reads bounds kernels may have
        # written since the load: they cannot be checked, so the rebuild is refused
        _fail(f"{where}.ints[0]", "a Bvh rebuild with the cubql constructor at replay (its native builder crashes "
                                  "on bounds a kernel can write); rebuild with sah, median or lbvh")
    if name != "hash_grid_update_host":
        return rec.HandleCall(name, handle, ints)
    radius = entry.get("radius")
    if not isinstance(radius, float) or not math.isfinite(radius) or radius <= 0:
        _fail(f"{where}.radius", f"a hash grid cell width must be a positive number, found {radius!r}")
    points = ctx.blob(entry.get("points"), f"{where}.points")
    shape = ctx.descriptor(points, schema.ARRAY_TYPE_REGULAR, GRID_POINT_SIZES[ints[0]], f"{where}.points")
    if len(shape) != 1:
        _fail(f"{where}.points", "hash grid points must be a 1-d array")
    groups = entry.get("groups")
    if groups is not None:  # warp 1.19: an array descriptor of one int32 per point
        groups = ctx.blob(groups, f"{where}.groups")
        if ctx.descriptor(groups, schema.ARRAY_TYPE_REGULAR, 4, f"{where}.groups") != tuple(shape):
            _fail(f"{where}.groups", "hash grid groups must be a 1-d array of as many int32 as points")
    return rec.HandleCall(name, handle, ints, radius, points, groups)


def _np_dtype(value, elem_shape: tuple, elem_size: int, where: str) -> str:
    """A NumPy scalar type of numbers (``dtype.str``) whose ``elem_shape`` components make ``elem_size`` bytes."""
    np_dtype = _str(value, where, max_len=16)
    if not _NP_DTYPE.fullmatch(np_dtype):
        _fail(where, f"{np_dtype!r} is not a NumPy dtype of numbers (as '<f4', '|b1')")
    try:
        parsed = np.dtype(np_dtype)
    except (TypeError, ValueError):
        _fail(where, f"{np_dtype!r} is not a NumPy dtype")
    if parsed.kind not in "biufc" or parsed.itemsize * math.prod(elem_shape) != elem_size:
        _fail(where, f"{np_dtype!r} x {elem_shape} does not describe {elem_size}-byte elements")
    return np_dtype


def _scalar_binding(entry: dict, where: str):
    """A named scalar parameter (format 3): a Warp value type of numbers and its current value."""
    entry = _map(entry, where, ("name", "kind", "dtype", "nbytes", "np_dtype", "elem_shape", "value"))
    nbytes = _int(entry["nbytes"], f"{where}.nbytes", 1, 1 << 12)
    elem_shape = _ints(entry["elem_shape"], f"{where}.elem_shape", 1, 1 << 8, max_len=2)
    np_dtype = _np_dtype(entry["np_dtype"], elem_shape, nbytes, f"{where}.np_dtype")
    parsed = np.dtype(np_dtype)
    if parsed.itemsize not in PARAM_COMPONENT_SIZES.get(parsed.kind, ()) or parsed.byteorder == ">":
        _fail(f"{where}.np_dtype", f"{np_dtype!r} is not a component type of a Warp value (little-endian bool, "
                                   "int8 to uint64, float16 to float64)")
    value = _bin(entry["value"], f"{where}.value")
    if len(value) != nbytes:
        _fail(f"{where}.value", f"{len(value)} bytes for a {nbytes}-byte parameter")
    return ScalarParam(_str(entry["name"], f"{where}.name", max_len=1024), _str(entry["dtype"], f"{where}.dtype",
                       max_len=256), np.dtype(np_dtype).str, elem_shape, value)


def _bindings(value, ctx: _Context, version: int, device) -> tuple[tuple[Binding, ...], dict]:
    """The array bindings, and the named scalar parameters by binding index (format 3)."""
    bindings, scalars, names = [], {}, set()
    for i, entry in enumerate(_list(value, "bindings")):
        where = f"bindings[{i}]"
        entry = _map(entry, where, ("name", "kind"))
        name = _str(entry["name"], f"{where}.name", max_len=1024)
        if not name or name in names:
            _fail(f"{where}.name", f"{name!r} is empty or used twice")
        names.add(name)
        kind = _str(entry["kind"], f"{where}.kind", max_len=16)
        if kind == schema.SCALAR_KIND:
            if version < schema.PARAMS_VERSION or device is not None:
                _fail(f"{where}.kind", f"a named scalar parameter in a {'CUDA graph' if device else ''} format version "
                                       f"{version} file (they need version {schema.PARAMS_VERSION}, CPU graphs)")
            scalars[i] = _scalar_binding(entry, where)
            continue
        if kind not in schema.BINDING_KINDS:
            _fail(f"{where}.kind", f"{kind!r} is not one of {(*schema.BINDING_KINDS, schema.SCALAR_KIND)}")
        entry = _map(entry, where, ("name", "kind", "region", "offset", "nbytes", "dtype", "shape", "strides",
                                    "elem_size", "np_dtype", "elem_shape"))
        region = ctx.region(entry["region"], f"{where}.region")
        offset = _int(entry["offset"], f"{where}.offset")
        shape = _ints(entry["shape"], f"{where}.shape", 0, (1 << 31) - 1)
        strides = _ints(entry["strides"], f"{where}.strides", -(1 << 31), (1 << 31) - 1)
        if len(strides) != len(shape):
            _fail(where, f"shape {shape} and strides {strides} differ in length")
        elem_size = _int(entry["elem_size"], f"{where}.elem_size", 1, 1 << 20)
        nbytes = _int(entry["nbytes"], f"{where}.nbytes")
        if nbytes != math.prod(shape) * elem_size:
            _fail(f"{where}.nbytes", f"{nbytes} is not the size of shape {shape} of {elem_size}-byte elements")
        lo, hi = extent(offset, elem_size, shape, strides)
        if nbytes and (lo < 0 or hi > region.nbytes):
            _fail(where, f"the view reaches bytes [{lo}, {hi}) of region {region.id} ({region.nbytes} bytes)")
        elem_shape = _ints(entry["elem_shape"], f"{where}.elem_shape", 1, 1 << 16)
        np_dtype = entry["np_dtype"]
        if np_dtype is not None:
            np_dtype = _np_dtype(np_dtype, elem_shape, elem_size, f"{where}.np_dtype")
        bindings.append(Binding(
            name=name, kind=kind, region=region.id, offset=offset, nbytes=nbytes,
            dtype=_str(entry["dtype"], f"{where}.dtype", max_len=256), shape=shape, strides=strides,
            elem_size=elem_size, np_dtype=np_dtype, elem_shape=elem_shape,
        ))
    return tuple(bindings), scalars
