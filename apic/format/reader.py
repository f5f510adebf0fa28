"""Reading a ``.wrp``: bytes -> validated ``SavedGraph``. Every field is checked before use.

The file is treated as hostile: the header is checked (magic, version range, exact length,
SHA-256 of the body) before msgpack sees the body, msgpack is called with its own limits, and
then every field's type and range is checked, including each offset, size, index and relocation,
so that nothing apic itself hands to native code (memcpy/memset/memtile, strided copy and fill,
the relocated pointers in kernel arguments) can reach outside the memory the graph allocates.
Errors are ``apic.FormatError`` and say where in the file the problem is.

This module reads the header and the body's top level; the tables are ``apic.format.read_tables``,
the ops ``apic.format.read_ops``, the references and blobs they hold ``apic.format.read_context``.
A CPU and a CUDA file are read by the same code; what differs comes from the file's target.

What the check cannot cover is what a kernel's own compiled code does with its inputs; the module
binaries are native code, checked against their SHA-256 (see docs/FORMAT.md, "Trust").
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass, field

import msgpack

from apic.record.bindings import Binding
from apic.errors import FormatError
from apic.format import handles as wire_handles
from apic.format import read_tables as tables
from apic.format import schema
from apic.format.fields import check_int as _int
from apic.format.fields import check_list as _list
from apic.format.fields import check_map as _map
from apic.format.fields import check_str as _str
from apic.format.fields import fail as _fail
from apic.format.read_context import Context
from apic.format.read_ops import read_ops
from apic.format.read_raw import read_raw_ops
from apic.format.read_tables import ModuleEntry
from apic.record.cuda.conditional_tree import StructureError, conditional_tree
from apic.record.control_flow import control_flow_problem, nesting_depth
from apic.record.effects import EFFECTS, control_of
from apic.record.recording import ModuleInfo, Recording
from apic.targets import cpu as cpu_target
from apic.targets.cpu import KERNEL_ABIS
from apic.targets.target import CPU, CUDA


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
    # id(launch) -> (the launch, the launch read in full that it was read alike: ``read_ops.read_ops``): its
    # arguments have that one's length, relocations, array slots and array descriptor bytes
    alike: dict = field(default_factory=dict, repr=False, compare=False)



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



# --- the body ---------------------------------------------------------------------------------------
def _unpacked(data, options: dict, many: bool = False):
    """The msgpack object in ``data`` (``many``: the list of the objects in it), or a FormatError."""
    try:
        if many:
            unpacker = msgpack.Unpacker(None, max_buffer_size=len(data), **options)
            unpacker.feed(data)
            return list(unpacker)
        return msgpack.unpackb(data, **options)
    except schema.DuplicateKey as error:
        _fail("body", f"a map has the key {error.args[0]!r} more than once (readers that keep the first or the "
                      "last value would read different graphs)")
    except (ValueError, msgpack.UnpackException) as error:  # ExtraData, FormatError, StackError, ...
        raise FormatError(f"corrupt apic graph file: the body is not valid msgpack ({error})") from None


def _op_entries(data: bytes, options: dict, count: int | None = None):
    """The op entry in ``data`` (``count``: the list of the ``count`` entries in it), unpacked two levels
    down, where it lies in the body (in its map, in the ``ops`` array): msgpack bounds nesting by depth
    from the top, so an entry nested too deep for the whole body is refused here too, never read by one
    path and refused by another."""
    if count is None:
        return _unpacked(b"\x91\x91" + data, options)[0][0]
    return _unpacked(b"\x91\xdd" + struct.pack(">I", count) + data, options)[0]


def _split(body: memoryview, options: dict) -> tuple[dict, list] | None:
    """``(doc, bounds)``: a body whose top level is a map of string keys, each once, with ``ops`` an array,
    unpacked but for that array (``doc["ops"]`` is ``[]``), and where each entry of it lies in the body
    (entry i: ``body[bounds[i]:bounds[i + 1]]``), for ``read_raw.read_raw_ops``; None for any other body, or
    one msgpack refuses anywhere but inside an op entry (unpacked whole, it says what is wrong). The op
    entries are only skipped here: ``read_raw_ops`` unpacks each, with these checks, or finds its bytes
    those of one unpacked and read before (but for its argument bytes)."""
    try:
        unpacker = msgpack.Unpacker(None, max_buffer_size=len(body), **options)
        unpacker.feed(body)
        spans, bounds = {}, None
        for _ in range(unpacker.read_map_header()):
            key = unpacker.unpack()
            if type(key) is not str or key in spans:
                return None
            start = unpacker.tell()
            if key == "ops":
                count = unpacker.read_array_header()
                tell, skip = unpacker.tell, unpacker.skip
                bounds = [tell()]
                for _ in range(count):
                    skip()
                    bounds.append(tell())
            else:
                unpacker.skip()
            spans[key] = (start, unpacker.tell())
        if bounds is None or unpacker.tell() != len(body):
            return None
        # each value one level down, as in the body (msgpack's nesting limit counts the body's map)
        doc = {key: [] if key == "ops" else msgpack.unpackb(b"\x91" + body[start:end], **options)[0]
               for key, (start, end) in spans.items()}
    except (schema.DuplicateKey, ValueError, msgpack.UnpackException):
        return None
    return doc, bounds


def _check_level(target: dict) -> None:
    """A ``target.cpu`` that names an x86-64 level (``capture_save(cpu_target=...)``) must list that level's
    features: a load checks the features against the host, and threaded replay compiles code for the level,
    so a level above the features (x86-64-v4 with v3's) would build instructions no check let through."""
    level = target["cpu"]
    if level in cpu_target.CPU_LEVELS:
        lacking = sorted(cpu_target.CPU_LEVELS[level] - set(target["features"]))
        if lacking:
            _fail("target.cpu", f"objects built for {level} use {', '.join(lacking)}, which target.features "
                                "does not list (the file's CPU level and its features disagree)")


def read(data) -> SavedGraph:
    """Validate a whole ``.wrp`` (bytes-like) and return what it holds; FormatError if anything is off."""
    view = as_bytes(data)
    version, body = check_header(view)
    options = schema.unpack_options(len(body))
    # The op entries are unpacked one by one (read_raw.read_raw_ops) where the body's top level allows it
    split = _split(body, options)
    doc, bounds = split if split is not None else (_unpacked(body, options), None)
    doc = _map(doc, "body", ("format", "format_version", "writer", "target", "abi", "regions", "modules",
                             "kernels", "ops", "sequence", "bindings"))
    if doc["format"] != schema.FORMAT_NAME:
        _fail("format", f"expected {schema.FORMAT_NAME!r}, found {doc['format']!r}")
    if _int(doc["format_version"], "format_version") != version:
        _fail("format_version", f"{doc['format_version']!r} does not match the header's {version}")

    # writer and target keep only the keys this apic knows, checked (they reach error messages and inspect)
    writer = _map(doc["writer"], "writer", ("apic", "warp"))
    writer = {key: _str(writer[key], f"writer.{key}", max_len=schema.MAX_WORD)
              for key in ("apic", "warp", "numpy") if key in writer}
    target = _map(doc["target"], "target", ("system", "machine", "cpu", "features", "byteorder", "pointer_bits"))
    target = {
        **{key: _str(target[key], f"target.{key}", max_len=schema.MAX_LABEL)
           for key in ("system", "machine", "cpu", "byteorder")},
        "features": [_str(feature, f"target.features[{i}]", max_len=schema.MAX_LABEL)
                     for i, feature in enumerate(_list(target["features"], "target.features", schema.MAX_FEATURES))],
        "pointer_bits": _int(target["pointer_bits"], "target.pointer_bits", schema.MIN_POINTER_BITS,
                             schema.MAX_POINTER_BITS),
    }
    _check_level(target)
    abi = _str(doc["abi"], "abi", max_len=schema.MAX_WORD)
    device = tables.read_device(doc.get("device"), abi)  # None for a CPU graph
    if device is None and abi not in KERNEL_ABIS:
        _fail("abi", f"unknown kernel ABI {abi!r} (this apic calls {', '.join(KERNEL_ABIS)})")
    graph_target = CPU if device is None else CUDA  # what differs between the files of each is read from it

    regions, contents = tables.regions(doc["regions"])
    ctx = Context(regions)
    if version < schema.HANDLES_VERSION and ("handles" in doc or "handle_slots" in doc):
        _fail("handles",
              f"native handles in a format version {version} file (they need version {schema.HANDLES_VERSION})")
    handles, volume_data = [], []
    for i, entry in enumerate(_list(doc.get("handles", []), "handles", schema.MAX_HANDLES)):
        handle, data = wire_handles.read_handle(entry, f"handles[{i}]", ctx)
        handles.append(handle)
        volume_data.append(data)
    ctx.handle_count = len(handles)
    ctx.handle_kinds = [h.kind for h in handles]
    handle_slots = wire_handles.read_slots(doc.get("handle_slots", []), ctx, len(handles))
    # the bindings before the ops, whose blobs use them
    bindings, ctx.scalars = tables.bindings(doc["bindings"], ctx, version, graph_target)
    modules = tables.modules(doc["modules"], graph_target)
    kernels = tables.kernels(doc["kernels"], len(modules), graph_target)
    # by value: warp <= 1.12's one bounds layout; by pointer: 1.13's (32 bytes) or 1.14+'s templated ones
    ctx.legacy_bounds = abi == cpu_target.ABI_BY_VALUE
    if graph_target is CPU:
        ctx.args_sizes = tables.args_sizes(doc["kernels"])
    if bounds is None:
        distinct = read_ops(_list(doc["ops"], "ops"), ctx, kernels, graph_target, abi)
    else:
        buf = bytes(body)
        distinct = read_raw_ops(buf, bounds, lambda data, count=None: _op_entries(data, options, count), ctx, kernels,
                                graph_target, abi)
    sequence = tables.sequence(doc["sequence"], len(distinct))
    moves = any(EFFECTS[kind].control for kind in set(map(type, distinct)))  # a branch or jump: its target
    for i, op in enumerate(distinct if moves else ()):
        if control_of(op) and op.target > len(sequence):
            _fail(f"ops[{i}].target", f"position {op.target} is past the end of the {len(sequence)}-op sequence")
    ops = tuple(map(distinct.__getitem__, sequence.tolist()))
    problem = control_flow_problem(ops)  # every loop passes a branch that counts it (a capped replay)
    if problem is not None:
        _fail("sequence", problem)
    depth = nesting_depth(ops) if moves else 0  # what draws or lowers bodies nests this deep, no deeper
    if depth > schema.MAX_CPU_NESTING:
        _fail("sequence", f"branch and jump bodies nest {depth} deep, deeper than the {schema.MAX_CPU_NESTING} "
                          "this reader accepts")
    if graph_target is CUDA and moves:  # conditional nodes: bodies that nest, within the reader's limits
        try:
            conditional_tree(ops, schema.MAX_CONDITIONAL_DEPTH, schema.MAX_CONDITIONAL_BODY_OPS)
        except StructureError as error:
            _fail("sequence", f"{error} (a CUDA graph's branches must nest as conditional nodes)")

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
                      device, tuple(volume_data), handle_slots, ctx.alike)
