"""Reading the tables of a ``.wrp`` body: regions, the device (a CUDA graph), modules, kernels, the op
sequence and the bindings, every field checked. What differs between a CPU and a CUDA file (module
files and their fields, kernel entry points, which bindings it may hold) comes from its target
(``apic.targets``)."""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass

import numpy as np

from apic.record.bindings import Binding
from apic.format import cuda_source
from apic.format import manifest as kernel_manifest
from apic.format import schema
from apic.format import source as source_format
from apic.format.fields import check_bin as _bin
from apic.format.fields import check_bool as _bool
from apic.format.fields import check_int as _int
from apic.format.fields import check_ints as _ints
from apic.format.fields import check_list as _list
from apic.format.fields import check_map as _map
from apic.format.fields import check_str as _str
from apic.format.fields import fail as _fail
from apic.format.read_context import Context
from apic.record.params import COMPONENT_SIZES as PARAM_COMPONENT_SIZES
from apic.record.params import ScalarParam
from apic.record.layout import extent
from apic.targets.files import SHA256
from apic.record.recording import KernelInfo
from apic.record.regions import ArrayInfo, Region
from apic.targets.cuda import ABI as CUDA_ABI
from apic.targets.cuda import ARCH_SUFFIXES, BOUNDS_SIZES, MAX_PARAM_BYTES
from apic.targets.target import CPU, CUDA, Target

_SYMBOL = re.compile(rf"[A-Za-z_][A-Za-z0-9_]{{0,{schema.MAX_NAME - 1}}}")
# A NumPy scalar type as ``dtype.str`` writes it ("<f4", "|b1"); checked before NumPy parses it, whose
# parser for other strings (comma lists, sub-array shapes) raises SyntaxError and more.
_NP_DTYPE = re.compile(r"[<>|=]?[biufc][0-9]{1,2}")


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


def args_sizes(entries: list) -> dict:
    """kernel -> (args_size, adj_args_size): the recorded argument struct sizes (None where the entry has none,
    as in files written before they were recorded: those launches are then checked only against each other)."""
    sizes = {}
    for i, entry in enumerate(entries):
        sizes[i] = tuple(
            None if entry.get(key) is None else _int(entry[key], f"kernels[{i}].{key}", 0, schema.MAX_ARGS_BYTES)
            for key in ("args_size", "adj_args_size")
        )
    return sizes


def sequence(value, op_count: int) -> np.ndarray:
    """The order ops run in: uint32 indices into ``ops``, packed little-endian."""
    data = _bin(value, "sequence")
    if len(data) % 4:
        _fail("sequence", f"{len(data)} bytes is not a whole number of uint32 indices")
    sequence = np.frombuffer(data, dtype="<u4")
    if len(sequence) and int(sequence.max()) >= op_count:
        _fail("sequence", f"op index {int(sequence.max())} is outside the {op_count} ops")
    return sequence


def regions(value) -> tuple[list[Region], list]:
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
                _str(info["dtype"], f"{where}.array.dtype", max_len=schema.MAX_LABEL),
                _ints(info["shape"], f"{where}.array.shape"),
                _ints(info["strides"], f"{where}.array.strides", -schema.MAX_INT, schema.MAX_INT),
            )
        regions.append(Region(id=i, nbytes=nbytes, owned=owned, address=0, array=array))
        contents.append(saved)
    return regions, contents


def read_device(value, abi: str) -> dict | None:
    """The ``device`` map of a CUDA graph file, checked; None for a CPU file (no ``device``)."""
    if value is None:
        if abi == CUDA_ABI:
            _fail("device", f"a graph with kernel ABI {abi!r} must say its device")
        return None
    device = _map(value, "device", ("kind", "arch"))
    kind = _str(device["kind"], "device.kind", max_len=schema.MAX_TAG)
    if kind != CUDA.device_kind:
        _fail("device.kind", f"unknown device kind {kind!r} (this apic knows {CUDA.device_kind!r})")
    if abi != CUDA_ABI:
        _fail("abi", f"a CUDA graph's kernels use ABI {CUDA_ABI!r}, not {abi!r}")
    return {
        "kind": kind,
        "arch": _int(device["arch"], "device.arch", schema.MIN_ARCH, schema.MAX_ARCH),
        "name": _str(device.get("name", ""), "device.name", max_len=schema.MAX_LABEL),
    }


def _cpu_module(entry: dict, where: str, module: ModuleEntry) -> ModuleEntry:
    """A CPU module's optional fields: its source (``source_fallback=True``) and its kernel manifest."""
    source = source_format.read_entry(entry.get("source"), f"{where}.source")
    manifest = kernel_manifest.read_entry(entry.get("manifest"), f"{where}.manifest", module.file)
    return dataclasses.replace(module, source=source, manifest=manifest)


def _cuda_module(entry: dict, where: str, module: ModuleEntry) -> ModuleEntry:
    """A CUDA module's fields: the ``arch`` (and ``arch_suffix``) it was compiled for, and its optional source."""
    arch = _int(entry.get("arch"), f"{where}.arch", schema.MIN_ARCH, schema.MAX_ARCH)
    suffix = _str(entry.get("arch_suffix", ""), f"{where}.arch_suffix", max_len=schema.MAX_ARCH_SUFFIX)
    if suffix not in ARCH_SUFFIXES:
        _fail(f"{where}.arch_suffix", f"{suffix!r} is not one of {ARCH_SUFFIXES}")
    source = cuda_source.read_entry(entry.get("source"), f"{where}.source")
    return dataclasses.replace(module, arch=arch, arch_suffix=suffix, source=source)


def _kernel_params(value, where: str) -> tuple[tuple[int, int], ...]:
    """A kernel's param layout: ``[[offset, size], ...]``, bounds first, in order, not overlapping."""
    params, end = [], 0
    for i, entry in enumerate(_list(value, where, schema.MAX_KERNEL_PARAMS)):
        pair = _list(entry, f"{where}[{i}]", 2)
        if len(pair) != 2:
            _fail(f"{where}[{i}]", "expected [offset, size]")
        offset = _int(pair[0], f"{where}[{i}][0]", 0, MAX_PARAM_BYTES)
        size = _int(pair[1], f"{where}[{i}][1]", 1, MAX_PARAM_BYTES)
        if offset < end or offset + size > MAX_PARAM_BYTES:
            _fail(f"{where}[{i}]", f"parameter at [{offset}, {offset + size}) overlaps another or exceeds the limit")
        end = offset + size
        params.append((offset, size))
    if not params or params[0] != (0, params[0][1]) or params[0][1] not in BOUNDS_SIZES:
        _fail(where, "the first parameter must be the 24- or 32-byte launch bounds at offset 0")
    return tuple(params)


# What a module or kernel entry of each target holds besides the fields they share.
_MODULE_FIELDS = {CPU.name: _cpu_module, CUDA.name: _cuda_module}
_KERNEL_PARAMS = {CPU.name: lambda value, where: (), CUDA.name: _kernel_params}


def modules(value, target: Target) -> tuple[ModuleEntry, ...]:
    modules, files = [], {}
    for i, entry in enumerate(_list(value, "modules")):
        where = f"modules[{i}]"
        entry = _map(entry, where, ("name", "file", "sha256", "size"))
        module = ModuleEntry(
            name=_str(entry["name"], f"{where}.name", max_len=schema.MAX_NAME),
            file=_str(entry["file"], f"{where}.file", target.module_file),
            sha256=_str(entry["sha256"], f"{where}.sha256", SHA256),
            size=_int(entry["size"], f"{where}.size"),
            native_types=tuple(
                _str(t, f"{where}.native_types[{j}]", max_len=schema.MAX_WORD)
                for j, t in enumerate(_list(entry.get("native_types", []), f"{where}.native_types",
                                            schema.MAX_NATIVE_TYPES))
            ),
        )
        if module.file in (".", "..") or module.file.startswith("."):
            _fail(f"{where}.file", f"{module.file!r} is not a valid module file name")
        module = _MODULE_FIELDS[target.name](entry, where, module)
        if files.setdefault(module.file, module.sha256) != module.sha256:
            _fail(f"{where}.file", f"{module.file!r} is listed twice with different checksums")
        modules.append(module)
    return tuple(modules)


def kernels(value, module_count: int, target: Target) -> tuple[KernelInfo, ...]:
    kernels = []
    for i, entry in enumerate(_list(value, "kernels")):
        where = f"kernels[{i}]"
        entry = _map(entry, where, ("module", "key", "symbol", "adjoint"))
        if not module_count:
            _fail(f"{where}.module", "the graph has no modules")
        adjoint = _bool(entry["adjoint"], f"{where}.adjoint")
        symbol = _str(entry["symbol"], f"{where}.symbol", _SYMBOL)
        # Only a kernel entry point may be called: not a C library function the JIT also resolves
        suffix = target.kernel_suffix(adjoint)
        if not symbol.endswith(suffix) or len(symbol) == len(suffix):
            _fail(f"{where}.symbol", f"{symbol!r} is not the entry point of a Warp {target.name.upper()} "
                                     f"{'backward' if adjoint else 'forward'} kernel (<name>{suffix})")
        kernels.append(KernelInfo(
            module=_int(entry["module"], f"{where}.module", 0, module_count - 1),
            key=_str(entry["key"], f"{where}.key", max_len=schema.MAX_NAME),
            symbol=symbol,
            adjoint=adjoint,
            cpu_blocks=_bool(entry.get("cpu_blocks", False), f"{where}.cpu_blocks"),
            params=_KERNEL_PARAMS[target.name](entry.get("params"), f"{where}.params"),
            **_split(entry, where, adjoint or target is not CPU),
        ))
    return tuple(kernels)


def _split(entry: dict, where: str, refused: bool) -> dict:
    """The ``KernelInfo`` fields of a kernel's optional parallel-replay keys: ``split_writes`` (split by
    task) or ``split_world`` (split by whole worlds), never both."""
    writes = _split_writes(entry.get("split_writes"), f"{where}.split_writes", refused)
    world = entry.get("split_world")
    if world is None:
        return {"split_writes": writes}
    if writes is not None:
        _fail(where, "has split_writes and split_world: a kernel is split by task or by world, not both")
    args_size = entry.get("args_size")
    if args_size is not None:
        args_size = _int(args_size, f"{where}.args_size", 0, schema.MAX_ARGS_BYTES)
    return _split_world(world, f"{where}.split_world", refused, args_size)


def _split_writes(value, where: str, refused: bool) -> tuple[int, ...] | None:
    """A kernel's optional ``split_writes`` (parallel replay): increasing byte offsets of written arrays.

    Only a CPU forward kernel may have it. The lowering checks each offset against every launch's
    array slots; a launch where one is not a plain array runs serially.
    """
    if value is None:
        return None
    if refused:
        _fail(where, "only a CPU forward kernel may be split")
    return _offsets(value, where)


def _split_world(value, where: str, refused: bool, args_size: int | None) -> dict:
    """A kernel's optional ``split_world`` (parallel replay by whole worlds): ``{"writes", "rows",
    "tiles"}``, the byte offsets of the arrays it writes and of those it accesses only at the world's
    row (every written one among them), and whether each thread must run it in its own loaded copy.

    Only a CPU forward kernel may have it; with ``args_size`` (the kernel's recorded argument struct),
    every offset must leave room for an array descriptor in it. The lowering checks each launch as for
    a kernel proved at capture (``apic.record.parallel.world_launch.world_launch_refusal``)."""
    if refused:
        _fail(where, "only a CPU forward kernel may be split")
    value = _map(value, where, ("writes", "rows"))
    writes, rows = _offsets(value["writes"], f"{where}.writes"), _offsets(value["rows"], f"{where}.rows")
    for name, offsets in (("writes", writes), ("rows", rows)):
        if args_size is not None and offsets and offsets[-1] + schema.ARRAY_T_SIZE > args_size:
            _fail(f"{where}.{name}", f"offset {offsets[-1]} leaves no array descriptor in the {args_size}-byte "
                                     "arguments (args_size)")
    outside = sorted(set(writes) - set(rows))
    if outside:
        _fail(f"{where}.writes", f"offset {outside[0]} is not in rows (a written array is accessed only at the "
                                 "world's row)")
    tiles = _bool(value.get("tiles", False), f"{where}.tiles")
    return {"split_writes": writes, "split_world": rows, "split_tiles": tiles}


def _offsets(value, where: str) -> tuple[int, ...]:
    """Strictly increasing byte offsets of array arguments in a kernel's packed argument struct."""
    offsets = _ints(value, where, 0, schema.MAX_ARGS_BYTES, max_len=schema.MAX_SPLIT_WRITES)
    if any(b <= a for a, b in zip(offsets, offsets[1:])):
        _fail(where, "offsets must be strictly increasing")
    return offsets


def _np_dtype(value, elem_shape: tuple, elem_size: int, where: str) -> str:
    """A NumPy scalar type of numbers (``dtype.str``) whose ``elem_shape`` components make ``elem_size`` bytes."""
    np_dtype = _str(value, where, max_len=schema.MAX_TAG)
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
    nbytes = _int(entry["nbytes"], f"{where}.nbytes", 1, schema.MAX_SCALAR_BYTES)
    elem_shape = _ints(entry["elem_shape"], f"{where}.elem_shape", 1, schema.MAX_SCALAR_ELEM_DIM,
                        max_len=schema.MAX_SCALAR_RANK)
    np_dtype = _np_dtype(entry["np_dtype"], elem_shape, nbytes, f"{where}.np_dtype")
    parsed = np.dtype(np_dtype)
    if parsed.itemsize not in PARAM_COMPONENT_SIZES.get(parsed.kind, ()) or parsed.byteorder == ">":
        _fail(f"{where}.np_dtype", f"{np_dtype!r} is not a component type of a Warp value (little-endian bool, "
                                   "int8 to uint64, float16 to float64)")
    value = _bin(entry["value"], f"{where}.value")
    if len(value) != nbytes:
        _fail(f"{where}.value", f"{len(value)} bytes for a {nbytes}-byte parameter")
    return ScalarParam(_str(entry["name"], f"{where}.name", max_len=schema.MAX_NAME),
                       _str(entry["dtype"], f"{where}.dtype", max_len=schema.MAX_LABEL), np.dtype(np_dtype).str,
                       elem_shape, value)


def bindings(value, ctx: Context, version: int, target: Target) -> tuple[tuple[Binding, ...], dict]:
    """The array bindings, and the named scalar parameters by binding index (format 3)."""
    bindings, scalars, names = [], {}, set()
    for i, entry in enumerate(_list(value, "bindings")):
        where = f"bindings[{i}]"
        entry = _map(entry, where, ("name", "kind"))
        name = _str(entry["name"], f"{where}.name", max_len=schema.MAX_NAME)
        if not name or name in names:
            _fail(f"{where}.name", f"{name!r} is empty or used twice")
        names.add(name)
        kind = _str(entry["kind"], f"{where}.kind", max_len=schema.MAX_TAG)
        if kind == schema.SCALAR_KIND:
            if version < schema.PARAMS_VERSION or target is not CPU:
                _fail(f"{where}.kind",
                      f"a named scalar parameter in a {'' if target is CPU else target.name.upper() + ' graph'} "
                      f"format version {version} file (they need version {schema.PARAMS_VERSION}, CPU graphs)")
            scalars[i] = _scalar_binding(entry, where)
            continue
        if kind not in schema.BINDING_KINDS:
            _fail(f"{where}.kind", f"{kind!r} is not one of {(*schema.BINDING_KINDS, schema.SCALAR_KIND)}")
        entry = _map(entry, where, ("name", "kind", "region", "offset", "nbytes", "dtype", "shape", "strides",
                                    "elem_size", "np_dtype", "elem_shape"))
        region = ctx.region(entry["region"], f"{where}.region")
        offset = _int(entry["offset"], f"{where}.offset")
        shape = _ints(entry["shape"], f"{where}.shape", 0, schema.MAX_INT32)
        strides = _ints(entry["strides"], f"{where}.strides", -schema.MAX_INT32 - 1, schema.MAX_INT32)
        if len(strides) != len(shape):
            _fail(where, f"shape {shape} and strides {strides} differ in length")
        elem_size = _int(entry["elem_size"], f"{where}.elem_size", 1, schema.MAX_ELEM_BYTES)
        nbytes = _int(entry["nbytes"], f"{where}.nbytes")
        if nbytes != math.prod(shape) * elem_size:
            _fail(f"{where}.nbytes", f"{nbytes} is not the size of shape {shape} of {elem_size}-byte elements")
        lo, hi = extent(offset, elem_size, shape, strides)
        if nbytes and (lo < 0 or hi > region.nbytes):
            _fail(where, f"the view reaches bytes [{lo}, {hi}) of region {region.id} ({region.nbytes} bytes)")
        elem_shape = _ints(entry["elem_shape"], f"{where}.elem_shape", 1, schema.MAX_ELEM_DIM)
        np_dtype = entry["np_dtype"]
        if np_dtype is not None:
            np_dtype = _np_dtype(np_dtype, elem_shape, elem_size, f"{where}.np_dtype")
        bindings.append(Binding(
            name=name, kind=kind, region=region.id, offset=offset, nbytes=nbytes,
            dtype=_str(entry["dtype"], f"{where}.dtype", max_len=schema.MAX_LABEL), shape=shape, strides=strides,
            elem_size=elem_size, np_dtype=np_dtype, elem_shape=elem_shape,
        ))
    return tuple(bindings), scalars
