"""Reading the ops of a ``.wrp``: one reader per op kind (``READ``, keyed by op type), each checking every
field of its op map before it builds the op (``read_op`` picks it by the map's ``kind``, and refuses a
kind the graph's target cannot hold)."""

from __future__ import annotations

import marshal
import math

from apic.format import handles as wire_handles
from apic.format import schema
from apic.format.fields import check_int as _int
from apic.format.fields import check_ints as _ints
from apic.format.fields import check_list as _list
from apic.format.fields import check_map as _map
from apic.format.fields import check_str as _str
from apic.format.fields import fail as _fail
from apic.format.read_bounds import check_bounds, padded_with_ones
from apic.format.read_context import Context, args_structure
from apic.record import natives
from apic.record import ops as rec
from apic.record.handles import GRID_POINT_SIZES
from apic.targets import cpu as cpu_target
from apic.targets.cuda import MAX_SMEM
from apic.targets import handle_kinds as hk


_new, _set = object.__new__, object.__setattr__


def launch_alike(known: tuple, args: dict, data: bytes, ctx: Context, index: int) -> rec.Launch | None:
    """Launch ``ops[index]``, read alike the checked launch ``known`` (its ``checked_launches`` value) with the
    argument map ``args`` and argument bytes ``data``, recorded in ``ctx.alike``; None where its descriptor
    bytes differ (it is read in full). ``Context.alike_args`` and the two dataclass ``__init__``s, without
    their calls: ``read_ops`` and ``read_raw_ops`` run it once per launch."""
    descriptors_of, descriptors, relocs, slots, claimed = known[3]
    if descriptors_of is not None and descriptors_of(data) != descriptors:
        return None
    params = ctx.param_slots(args, data, set(claimed), f"ops[{index}].args") if "params" in args else ()
    blob = _new(rec.Blob)
    _set(blob, "__dict__", {"data": data, "relocs": relocs, "arrays": slots, "params": params})
    op = _new(rec.Launch)
    _set(op, "__dict__", {"kernel": known[0], "dim": known[1], "bounds": known[2], "args": blob, "adj_args": None})
    ctx.alike[id(op)] = (op, known[4])
    return op


def read_ops(entries: list, ctx: Context, kernels, target, abi: str, first: int = 0) -> list:
    """The ops of ``entries`` (the file's ``ops``, from ``first`` on) of a graph of ``target``, each checked
    (``read_op``).

    A launch with the ``launch_template`` of one found valid only has its array descriptors' bytes
    compared and its parameters checked, here, without the per-kind dispatch: a graph may hold thousands
    of launches that differ in a scalar. That step writes ``launch_template`` out in the loop (it runs once per
    launch) and makes the op with ``launch_alike``."""
    ops = []
    append = ops.append
    launch = int(schema.WireOp.LAUNCH)
    required = None  # a launch's required fields (known once read_op has read a launch)
    checked_launches, dumps = ctx.checked_launches, marshal.dumps
    for i, entry in enumerate(entries, first):
        if required is None:
            required = ctx.checked_kinds.get((launch, target.name), (None, None))[1]
        # (a launch missing a required field has no template: read_op names the field)
        if required is not None and type(entry) is dict and type(entry.get("kind")) is int and entry["kind"] == launch:
            args = entry.get("args")
            data = args.get("data") if type(args) is dict else None
            if type(data) is bytes and entry.get("adj_args") is None:
                try:  # launch_template(entry)
                    template = dumps((entry["kernel"], entry["dim"], entry["bounds"], len(data), args.get("relocs"),
                                      args.get("arrays"), args.get("handles")), 2)
                except (KeyError, ValueError):  # a field missing, or nested deeper than marshal goes: read in full
                    template = None
                known = None if template is None else checked_launches.get(template)
                op = None if known is None else launch_alike(known, args, data, ctx, i)
                if op is not None:
                    append(op)
                    continue
        append(read_op(entry, f"ops[{i}]", ctx, kernels, target, abi))
    return ops


def read_op(entry, where: str, ctx: Context, kernels, target, abi: str):
    """The op of map ``entry`` (``ops[i]``) of a graph of ``target`` (its kernel ABI ``abi``), checked."""
    kind_value = entry.get("kind") if type(entry) is dict else None
    # what the kind decides (its required fields, its reader) is checked once per kind and target
    known = ctx.checked_kinds.get((kind_value, target.name)) if type(kind_value) is int else None
    if known is None:
        entry = _map(entry, where, ("kind",))
        kind_value = _int(kind_value, f"{where}.kind", 0, schema.MAX_OP_KIND)
        try:
            kind = schema.WireOp(kind_value)
        except ValueError:
            _fail(f"{where}.kind", f"unknown op kind {kind_value} (this apic knows {[int(k) for k in schema.WireOp]})")
        fields = schema.OP_FIELDS.get(kind)
        if fields is None:  # a kind apic records but never writes
            _fail(f"{where}.kind", f"op kind {kind_value} ({kind.name.lower()}) cannot appear in a graph file")
        required = tuple(k for k, t in fields.items() if not t.endswith("?"))
        _map(entry, where, required)
        spec = rec.SPEC_OF_KIND[kind]
        if target.name not in spec.targets:
            _fail(f"{where}.kind", f"op kind {kind_value} ({spec.name}) cannot appear in a graph with ABI {abi!r}")
        known = ctx.checked_kinds[(kind_value, target.name)] = (required, frozenset(required), READ[spec.type])
    required, keys, read = known
    if not entry.keys() >= keys:
        _map(entry, where, required)  # names the missing fields
    return read(entry, where, ctx, kernels)


def _kernel_index(entry: dict, where: str, kernels) -> int:
    index = entry["kernel"]
    if type(index) is int and 0 <= index < len(kernels):  # a valid index: no field name to build
        return index
    if not kernels:
        _fail(f"{where}.kernel", "the graph has no kernels")
    return _int(index, f"{where}.kernel", 0, len(kernels) - 1)


def launch_template(entry: dict) -> bytes | None:
    """A key of all that ``_launch`` reads of launch ``entry`` but its arguments' bytes and parameters; None
    for a backward launch, or arguments that are not a map with binary data.

    A launch with the key of one found valid (one kernel over the same arrays, another scalar) is valid
    if its array descriptors' bytes are those of that one and its parameters check: only that is checked.
    marshal keeps every type apart (1, True and 1.0 give different keys) and is faster than msgpack here;
    its version 2 writes no back-references, so equal values give equal keys.
    """
    args = entry["args"]
    if type(args) is not dict or type(args.get("data")) is not bytes or entry.get("adj_args") is not None:
        return None
    try:
        return marshal.dumps((entry["kernel"], entry["dim"], entry["bounds"], len(args["data"]), args.get("relocs"),
                              args.get("arrays"), args.get("handles")), 2)
    except ValueError:  # nested deeper than marshal goes: checked in full
        return None


def _launch(entry: dict, where: str, ctx: Context, kernels) -> rec.Launch:
    launch = _checked_launch(entry, where, ctx, kernels)
    template = launch_template(entry)
    if template is not None:  # what read_ops takes a launch of this template with
        ctx.checked_launches[template] = (launch.kernel, launch.dim, launch.bounds,
                                          ctx.checked_layouts[args_structure(entry["args"])], launch)
    return launch


def _checked_launch(entry: dict, where: str, ctx: Context, kernels) -> rec.Launch:
    """A launch checked in full."""
    kernel = _kernel_index(entry, where, kernels)
    # Unsigned extents: Warp launches a kernel that never reads wp.tid() over more than 2^31 threads
    # (as upstream's format accepts). Replay runs the bounds blob; dim describes the launch.
    dim = _ints(entry["dim"], f"{where}.dim", 0, schema.MAX_UINT32)
    raw = entry["bounds"]
    # launches of one dim share their bounds: checked once (a value without relocations and with the bytes
    # and dim of one checked before reads as it did)
    padded = None
    if type(raw) is dict and type(raw.get("data")) is bytes and raw.get("relocs") == []:
        padded = ctx.checked_bounds.get((raw["data"], dim))
    if padded is None:
        bounds = ctx.blob(raw, f"{where}.bounds", relocatable=False)
        sizes = (cpu_target.LEGACY_BOUNDS_SIZE,) if ctx.legacy_bounds else cpu_target.BOUNDS_SIZES
        if len(bounds.data) not in sizes:
            expected = " or ".join(map(str, sizes))
            _fail(f"{where}.bounds", f"launch bounds of {len(bounds.data)} bytes (expected {expected})")
        check_bounds(bounds.data, dim, ctx.legacy_bounds, f"{where}.bounds")
        padded = ctx.checked_bounds[(bounds.data, dim)] = rec.Blob(padded_with_ones(bounds.data, ctx.legacy_bounds))
    bounds = padded
    args = ctx.kernel_args(entry["args"], f"{where}.args")
    adj = entry.get("adj_args")
    adj_args = None if adj is None else ctx.kernel_args(adj, f"{where}.adj_args")
    if (adj_args is not None) != kernels[kernel].adjoint:
        _fail(where, "adjoint arguments must be present exactly for a backward (adjoint) kernel")
    _check_args_layout(ctx, kernel, args, adj_args, where)
    return rec.Launch(kernel, dim, bounds, args, adj_args)


def _cuda_launch(entry: dict, where: str, ctx: Context, kernels) -> rec.CudaLaunch:
    """A kernel of this file, its param blob (as its ``params`` say), grid, block, smem."""
    index = _kernel_index(entry, where, kernels)
    kernel = kernels[index]
    dim = _ints(entry["dim"], f"{where}.dim", 0, schema.MAX_INT32)
    params = ctx.kernel_args(entry["params"], f"{where}.params")
    end = kernel.params[-1][0] + kernel.params[-1][1]
    if len(params.data) != end:
        _fail(f"{where}.params", f"{len(params.data)} bytes for a kernel whose parameters take {end}")
    grid = _ints(entry["grid"], f"{where}.grid", 1, schema.MAX_INT32, 3)
    block = _ints(entry["block"], f"{where}.block", 1, schema.MAX_BLOCK_THREADS, 3)
    if len(grid) != 3 or len(block) != 3:
        _fail(where, "grid and block are [x, y, z]")
    if max(grid[1:]) > schema.MAX_GRID_YZ or math.prod(block) > schema.MAX_BLOCK_THREADS:
        _fail(where, f"grid {grid} / block {block} exceed CUDA's limits")
    smem = _int(entry["smem"], f"{where}.smem", 0, MAX_SMEM)
    return rec.CudaLaunch(kernel=index, dim=dim, params=params, grid=grid, block=block, smem=smem)


def _memcpy(entry: dict, where: str, ctx: Context, kernels) -> rec.Memcpy:
    nbytes = _int(entry["nbytes"], f"{where}.nbytes")
    dst = ctx.ref(entry["dst"], f"{where}.dst", nbytes)
    return rec.Memcpy(dst, ctx.ref(entry["src"], f"{where}.src", nbytes), nbytes)


def _memset(entry: dict, where: str, ctx: Context, kernels) -> rec.Memset:
    nbytes = _int(entry["nbytes"], f"{where}.nbytes")
    value = _int(entry["value"], f"{where}.value", 0, 255)
    return rec.Memset(ctx.ref(entry["dst"], f"{where}.dst", nbytes), value, nbytes)


def _memtile(entry: dict, where: str, ctx: Context, kernels) -> rec.Memtile:
    value = ctx.blob(entry["value"], f"{where}.value", relocatable=False)
    count = _int(entry["count"], f"{where}.count")
    if count and not value.data:
        _fail(f"{where}.value", "an empty value repeated")
    return rec.Memtile(ctx.ref(entry["dst"], f"{where}.dst", len(value.data) * count), value, count)


def _array_copy(entry: dict, where: str, ctx: Context, kernels) -> rec.ArrayCopy:
    dst_type = _int(entry["dst_type"], f"{where}.dst_type", 0, 1)
    src_type = _int(entry["src_type"], f"{where}.src_type", 0, 1)
    elem_size = _int(entry["elem_size"], f"{where}.elem_size", 1, schema.MAX_ELEM_BYTES)
    dst = ctx.blob(entry["dst"], f"{where}.dst")
    src = ctx.blob(entry["src"], f"{where}.src")
    dst_shape = ctx.descriptor(dst, dst_type, elem_size, f"{where}.dst")
    src_shape = ctx.descriptor(src, src_type, elem_size, f"{where}.src")
    if dst_shape != src_shape:
        _fail(where, f"copy between arrays of shapes {src_shape} and {dst_shape}")
    return rec.ArrayCopy(dst, src, dst_type, src_type, elem_size)


def _array_fill(entry: dict, where: str, ctx: Context, kernels) -> rec.ArrayFill:
    array_type = _int(entry["array_type"], f"{where}.array_type", 0, 1)
    value = ctx.blob(entry["value"], f"{where}.value", relocatable=False)
    if not 1 <= len(value.data) <= schema.MAX_ELEM_BYTES:
        _fail(f"{where}.value", f"a fill value of {len(value.data)} bytes")
    dst = ctx.blob(entry["dst"], f"{where}.dst")
    ctx.descriptor(dst, array_type, len(value.data), f"{where}.dst")
    return rec.ArrayFill(dst, array_type, value)


def _alloc(entry: dict, where: str, ctx: Context, kernels) -> rec.Alloc:
    nbytes = _int(entry["nbytes"], f"{where}.nbytes")
    return rec.Alloc(ctx.ref(entry["dst"], f"{where}.dst", nbytes), nbytes)


def _check_args_layout(ctx: Context, kernel: int, args: rec.Blob, adj_args, where: str) -> None:
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



def _native_call(entry: dict, where: str, ctx: Context, kernels=None) -> rec.NativeCall:
    """A call of an allowed native utility whose every pointer stays inside its region."""
    name = _str(entry["fn"], f"{where}.fn", max_len=schema.MAX_WORD)
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
    "hash_grid_reserve_host": ((0, 2), (0, schema.MAX_INT32), (0, 1)),  # type, point count[, with groups]
    cpu_target.HASH_GRID_BUILD: ((0, 2),),  # type; then radius, points and groups
}


_HANDLE_CALL_KINDS = {"mesh": hk.MESH, "bvh": hk.BVH, "hash": hk.HASH_GRID}


def _handle_call(entry: dict, where: str, ctx: Context, kernels=None) -> rec.HandleCall:
    """A native method of a handle: a known export, its integers in range, a hash grid's points inside a region."""
    name = _str(entry["fn"], f"{where}.fn", max_len=schema.MAX_WORD)
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
    if name != cpu_target.HASH_GRID_BUILD:
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


READ = {
    rec.Launch: _launch,
    rec.Memcpy: _memcpy,
    rec.Memset: _memset,
    rec.Memtile: _memtile,
    rec.ArrayCopy: _array_copy,
    rec.ArrayFill: _array_fill,
    rec.Alloc: _alloc,
    # the target is checked against the sequence in apic.format.reader.read
    rec.Branch: lambda entry, where, ctx, kernels: rec.Branch(ctx.ref(entry["cond"], f"{where}.cond", 4),
                                                              _int(entry["target"], f"{where}.target")),
    rec.Jump: lambda entry, where, ctx, kernels: rec.Jump(_int(entry["target"], f"{where}.target")),
    rec.NativeCall: _native_call,
    rec.CudaLaunch: _cuda_launch,
    rec.HandleCall: _handle_call,
}
