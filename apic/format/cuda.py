"""What the ``.wrp`` format holds for CUDA graphs: writing them, and checking their CUDA fields on read.

A CUDA graph file is a CPU graph file with these differences (docs/FORMAT.md, section 8):

* ``abi`` is ``"cuda-params-v1"`` and the body has a ``device`` map: ``{"kind": "cuda", "arch": int,
  "name": str}`` (the GPU it was captured on; ``arch`` is ``10 * major + minor``);
* ``<stem>_modules/`` holds one ``.cubin`` or ``.ptx`` per Warp module, and each module entry says
  the ``arch`` (and ``arch_suffix``, ``"a"``/``"f"`` or ``""``) it was compiled for;
* kernels are ``<mangled>_cuda_kernel_forward`` / ``_backward`` entry points with ``params``: the
  ``[offset, size]`` of every parameter in the param blob, launch bounds first;
* launches are op kind 11 ``cuda_launch`` (a ``params`` blob, ``grid``, ``block``, ``smem``); the other
  ops are ``memcpy``, ``memset``, ``memtile`` and ``alloc`` on device memory;
* region contents are copied device to host when saving; graph-owned regions are saved by size.
"""

from __future__ import annotations

import hashlib
import math

import numpy as np
import warp as wp

from apic import _compat
from apic import bindings as b
from apic._version import __version__
from apic.errors import BindingError, UnsupportedOperationError
from apic.format import cuda_source, fields, schema, writer
from apic.record import ops as rec
from apic.targets import cpu as cpu_target
from apic.targets.cuda import ABI as CUDA_ABI
from apic.targets.cuda import ARCH_SUFFIXES, BOUNDS_SIZES, DEVICE_KIND, MAX_PARAM_BYTES, MAX_SMEM
from apic.targets.cuda import KERNEL_SUFFIX  # noqa: F401  (the reader reads it here with the rest)
from apic.targets.cuda import MODULE_FILE

# Op kinds a CUDA graph file may hold (host-only kinds, control flow and native calls are CPU-only).
OP_KINDS = (rec.OpKind.CUDA_LAUNCH, rec.OpKind.MEMCPY, rec.OpKind.MEMSET, rec.OpKind.MEMTILE, rec.OpKind.ALLOC)


# --- reading (called by apic.format.reader) ---------------------------------------------------------
def read_device(value, abi: str) -> dict | None:
    """The ``device`` map of a CUDA graph file, checked; None for a CPU file (no ``device``)."""
    if value is None:
        if abi == CUDA_ABI:
            fields.fail("device", f"a graph with kernel ABI {abi!r} must say its device")
        return None
    device = fields.check_map(value, "device", ("kind", "arch"))
    kind = fields.check_str(device["kind"], "device.kind", max_len=16)
    if kind != DEVICE_KIND:
        fields.fail("device.kind", f"unknown device kind {kind!r} (this apic knows {DEVICE_KIND!r})")
    if abi != CUDA_ABI:
        fields.fail("abi", f"a CUDA graph's kernels use ABI {CUDA_ABI!r}, not {abi!r}")
    return {
        "kind": kind,
        "arch": fields.check_int(device["arch"], "device.arch", 10, 10_000),
        "name": fields.check_str(device.get("name", ""), "device.name", max_len=256),
    }


def read_module_arch(entry: dict, where: str, file: str) -> tuple[int, str]:
    """``(arch, suffix)`` a module was compiled for; its file is a ``.cubin`` or a ``.ptx``."""
    arch = fields.check_int(entry.get("arch"), f"{where}.arch", 10, 10_000)
    suffix = fields.check_str(entry.get("arch_suffix", ""), f"{where}.arch_suffix", max_len=1)
    if suffix not in ARCH_SUFFIXES:
        fields.fail(f"{where}.arch_suffix", f"{suffix!r} is not one of {ARCH_SUFFIXES}")
    if not MODULE_FILE.fullmatch(file):
        fields.fail(f"{where}.file", f"{file!r} is not a CUDA module file name (<name>.cubin or <name>.ptx)")
    return arch, suffix


def read_kernel_params(value, where: str) -> tuple[tuple[int, int], ...]:
    """A kernel's param layout: ``[[offset, size], ...]``, bounds first, in order, not overlapping."""
    params, end = [], 0
    for i, entry in enumerate(fields.check_list(value, where, 4096)):
        pair = fields.check_list(entry, f"{where}[{i}]", 2)
        if len(pair) != 2:
            fields.fail(f"{where}[{i}]", "expected [offset, size]")
        offset = fields.check_int(pair[0], f"{where}[{i}][0]", 0, MAX_PARAM_BYTES)
        size = fields.check_int(pair[1], f"{where}[{i}][1]", 1, MAX_PARAM_BYTES)
        if offset < end or offset + size > MAX_PARAM_BYTES:
            fields.fail(f"{where}[{i}]", f"parameter at [{offset}, {offset + size}) overlaps another or exceeds the limit")
        end = offset + size
        params.append((offset, size))
    if not params or params[0] != (0, params[0][1]) or params[0][1] not in BOUNDS_SIZES:
        fields.fail(where, "the first parameter must be the 24- or 32-byte launch bounds at offset 0")
    return tuple(params)


def read_launch(entry: dict, where: str, ctx, kernels) -> rec.CudaLaunch:
    """Op kind 11: a kernel of this file, its param blob (as its ``params`` say), grid, block, smem."""
    if not kernels:
        fields.fail(f"{where}.kernel", "the graph has no kernels")
    index = fields.check_int(entry["kernel"], f"{where}.kernel", 0, len(kernels) - 1)
    kernel = kernels[index]
    dim = fields.check_ints(entry["dim"], f"{where}.dim", 0, (1 << 31) - 1)
    params = ctx.kernel_args(entry["params"], f"{where}.params")
    end = kernel.params[-1][0] + kernel.params[-1][1]
    if len(params.data) != end:
        fields.fail(f"{where}.params", f"{len(params.data)} bytes for a kernel whose parameters take {end}")
    grid = fields.check_ints(entry["grid"], f"{where}.grid", 1, (1 << 31) - 1, 3)
    block = fields.check_ints(entry["block"], f"{where}.block", 1, 1024, 3)
    if len(grid) != 3 or len(block) != 3:
        fields.fail(where, "grid and block are [x, y, z]")
    if grid[1] > 65535 or grid[2] > 65535 or block[0] * block[1] * block[2] > 1024:
        fields.fail(where, f"grid {grid} / block {block} exceed CUDA's limits")
    smem = fields.check_int(entry["smem"], f"{where}.smem", 0, MAX_SMEM)
    return rec.CudaLaunch(kernel=index, dim=dim, params=params, grid=grid, block=block, smem=smem)


# --- writing ------------------------------------------------------------------------------------------
def _launch(op: rec.CudaLaunch) -> dict:
    return {"kind": int(rec.OpKind.CUDA_LAUNCH), "kernel": op.kernel, "dim": list(op.dim), "params": writer._blob(op.params),
            "grid": list(op.grid), "block": list(op.block), "smem": op.smem}


def _ops_and_sequence(ops) -> dict:
    index: dict[int, int] = {}
    distinct = []
    sequence = np.empty(len(ops), dtype="<u4")
    for i, op in enumerate(ops):
        j = index.get(id(op))
        if j is None:
            if op.kind not in OP_KINDS:
                raise UnsupportedOperationError(f"saving a {type(op).__name__} op in a CUDA graph")
            j = index[id(op)] = len(distinct)
            distinct.append(_launch(op) if isinstance(op, rec.CudaLaunch) else writer._op(op, {}))
        sequence[i] = j
    return {"ops": distinct, "sequence": sequence.tobytes()}


def collect_bindings(graph, inputs, outputs) -> list:
    """Named bindings of CUDA arrays (on the graph's device) inside the graph's regions."""
    found: dict = {}
    for kind, name, arr in writer.named_arrays(inputs, outputs):
        if not isinstance(name, str) or not name:
            raise BindingError(f"binding names must be non-empty strings, got {name!r}")
        if not b.is_warp_array(arr):
            raise TypeError(f"{kind} '{name}' must be a Warp array, got {type(arr).__name__}")
        if arr.device != graph.device:
            raise ValueError(f"{kind} '{name}' is on {arr.device}; the graph is on {graph.device}")
        ptr, elem_size, shape, strides = b.array_facts(arr)
        lo, hi = b.extent(ptr, elem_size, shape, strides)
        for region, base in zip(graph.recording.regions, graph.region_addresses):
            if ptr and base <= lo and hi <= base + region.nbytes:
                np_dtype, elem_shape = b.numpy_layout(arr.dtype)
                found[name] = b.Binding(
                    name=name, kind=kind, region=region.id, offset=ptr - base,
                    nbytes=math.prod(shape) * elem_size, dtype=b.dtype_name(arr.dtype), shape=shape,
                    strides=strides, elem_size=elem_size, np_dtype=np_dtype, elem_shape=elem_shape,
                )
                break
        else:
            raise BindingError(
                f"{kind} '{name}' ({b.dtype_name(arr.dtype)}, shape {shape}) is not memory this graph uses: "
                "bind only arrays that the captured operations read or write"
            )
    kept = [v for k, v in getattr(graph, "bindings", {}).items() if k not in found]
    return kept + list(found.values())


def document(graph, bindings) -> tuple[dict, dict[str, bytes]]:
    """The msgpack body of a CUDA graph and its module binaries (file name -> bytes)."""
    recording = graph.recording
    regions = []
    for region in recording.regions:
        regions.append(writer.region_wire(region, None if region.owned else graph.read_region(region.id)))

    images: dict[str, bytes] = {}
    modules = []
    for i, info in enumerate(recording.modules):
        image, (arch, suffix, kind) = graph.module_image(i)
        digest = hashlib.sha256(image).hexdigest()
        name = cpu_target.module_file_name(info.name, digest)[: -len(cpu_target.MODULE_EXTENSION)] + "." + kind
        images[name] = image
        modules.append({"name": info.name, "file": name, "sha256": digest, "size": len(image),
                        "arch": arch, "arch_suffix": suffix})

    target = dict(_compat.host_target())
    target.pop("known_features", None)
    doc = {
        "format": schema.FORMAT_NAME,
        "format_version": schema.BASE_VERSION,
        "writer": {"apic": __version__, "warp": wp.config.version, "numpy": np.__version__},
        "target": target,
        "abi": CUDA_ABI,
        "device": {"kind": DEVICE_KIND, "arch": graph.arch, "name": graph.device_name},
        "regions": regions,
        "modules": modules,
        "kernels": [
            {"module": k.module, "key": k.key, "symbol": k.symbol, "adjoint": bool(k.adjoint),
             "params": [list(p) for p in k.params]}
            for k in recording.kernels
        ],
        **_ops_and_sequence(recording.ops),
        "bindings": [writer._binding(binding) for binding in bindings],
    }
    return doc, images


def save(graph, path, inputs=None, outputs=None, source_fallback: bool = False) -> str:
    """Write a CUDA graph to ``<stem>.wrp`` + ``<stem>_modules/`` (atomically, as a CPU graph)."""
    wrp_path, modules_dir = writer.wrp_paths(path)
    if graph.recording.unsaveable:
        raise UnsupportedOperationError(
            "saving a CUDA graph whose launches pass a handle id or a device pointer as an integer",
            graph.recording.unsaveable[0] + "; it would dangle after a load (the graph still replays in this "
            "process). Pass the array itself, or capture on the CPU, where apic remaps handle ids",
            capture="CUDA (apic=True)",
        )
    doc, images = document(graph, collect_bindings(graph, inputs, outputs))
    if source_fallback:  # each module's generated .cu and build options too (apic.format.cuda_source)
        cuda_source.add_sources(graph, doc, images)
    writer.publish(wrp_path, modules_dir, writer.encode(doc), images)
    return wrp_path
