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
import re

from apic.errors import UnsupportedOperationError
from apic.record import ops as rec

CUDA_ABI = "cuda-params-v1"
DEVICE_KIND = "cuda"
MODULE_FILE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,195}\.(cubin|ptx)")
KERNEL_SUFFIX = {False: "_cuda_kernel_forward", True: "_cuda_kernel_backward"}
ARCH_SUFFIXES = ("", "a", "f")
# Op kinds a CUDA graph file may hold (host-only kinds, control flow and native calls are CPU-only).
OP_KINDS = (rec.OpKind.CUDA_LAUNCH, rec.OpKind.MEMCPY, rec.OpKind.MEMSET, rec.OpKind.MEMTILE, rec.OpKind.ALLOC)
MAX_PARAM_BYTES = 32764  # the CUDA limit on a kernel's parameters (4 KiB before CUDA 12.1 / Volta)
MAX_SMEM = 1 << 24
_ARCH_IN_NAME = re.compile(r"\.sm(\d+)([a-z]?)\.(cubin|ptx)$")


# --- reading (called by apic.format.reader) ---------------------------------------------------------
def read_device(value, abi: str) -> dict | None:
    """The ``device`` map of a CUDA graph file, checked; None for a CPU file (no ``device``)."""
    from apic.format import reader as r

    if value is None:
        if abi == CUDA_ABI:
            r._fail("device", f"a graph with kernel ABI {abi!r} must say its device")
        return None
    device = r._map(value, "device", ("kind", "arch"))
    kind = r._str(device["kind"], "device.kind", max_len=16)
    if kind != DEVICE_KIND:
        r._fail("device.kind", f"unknown device kind {kind!r} (this apic knows {DEVICE_KIND!r})")
    if abi != CUDA_ABI:
        r._fail("abi", f"a CUDA graph's kernels use ABI {CUDA_ABI!r}, not {abi!r}")
    return {
        "kind": kind,
        "arch": r._int(device["arch"], "device.arch", 10, 10_000),
        "name": r._str(device.get("name", ""), "device.name", max_len=256),
    }


def read_module_arch(entry: dict, where: str, file: str) -> tuple[int, str]:
    """``(arch, suffix)`` a module was compiled for; its file is a ``.cubin`` or a ``.ptx``."""
    from apic.format import reader as r

    arch = r._int(entry.get("arch"), f"{where}.arch", 10, 10_000)
    suffix = r._str(entry.get("arch_suffix", ""), f"{where}.arch_suffix", max_len=1)
    if suffix not in ARCH_SUFFIXES:
        r._fail(f"{where}.arch_suffix", f"{suffix!r} is not one of {ARCH_SUFFIXES}")
    if not MODULE_FILE.fullmatch(file):
        r._fail(f"{where}.file", f"{file!r} is not a CUDA module file name (<name>.cubin or <name>.ptx)")
    return arch, suffix


def read_kernel_params(value, where: str) -> tuple[tuple[int, int], ...]:
    """A kernel's param layout: ``[[offset, size], ...]``, bounds first, in order, not overlapping."""
    from apic.format import reader as r

    params, end = [], 0
    for i, entry in enumerate(r._list(value, where, 4096)):
        pair = r._list(entry, f"{where}[{i}]", 2)
        if len(pair) != 2:
            r._fail(f"{where}[{i}]", "expected [offset, size]")
        offset = r._int(pair[0], f"{where}[{i}][0]", 0, MAX_PARAM_BYTES)
        size = r._int(pair[1], f"{where}[{i}][1]", 1, MAX_PARAM_BYTES)
        if offset < end or offset + size > MAX_PARAM_BYTES:
            r._fail(f"{where}[{i}]", f"parameter at [{offset}, {offset + size}) overlaps another or exceeds the limit")
        end = offset + size
        params.append((offset, size))
    if not params or params[0] != (0, params[0][1]) or params[0][1] not in (24, 32):
        r._fail(where, "the first parameter must be the 24- or 32-byte launch bounds at offset 0")
    return tuple(params)


def read_launch(entry: dict, where: str, ctx, kernels) -> rec.CudaLaunch:
    """Op kind 11: a kernel of this file, its param blob (as its ``params`` say), grid, block, smem."""
    from apic.format import reader as r

    if not kernels:
        r._fail(f"{where}.kernel", "the graph has no kernels")
    index = r._int(entry["kernel"], f"{where}.kernel", 0, len(kernels) - 1)
    kernel = kernels[index]
    dim = r._ints(entry["dim"], f"{where}.dim", 0, (1 << 31) - 1)
    params = ctx.kernel_args(entry["params"], f"{where}.params")
    end = kernel.params[-1][0] + kernel.params[-1][1]
    if len(params.data) != end:
        r._fail(f"{where}.params", f"{len(params.data)} bytes for a kernel whose parameters take {end}")
    grid = r._ints(entry["grid"], f"{where}.grid", 1, (1 << 31) - 1, 3)
    block = r._ints(entry["block"], f"{where}.block", 1, 1024, 3)
    if len(grid) != 3 or len(block) != 3:
        r._fail(where, "grid and block are [x, y, z]")
    if grid[1] > 65535 or grid[2] > 65535 or block[0] * block[1] * block[2] > 1024:
        r._fail(where, f"grid {grid} / block {block} exceed CUDA's limits")
    smem = r._int(entry["smem"], f"{where}.smem", 0, MAX_SMEM)
    return rec.CudaLaunch(kernel=index, dim=dim, params=params, grid=grid, block=block, smem=smem)


# --- writing ------------------------------------------------------------------------------------------
def module_arch(path: str, image: bytes) -> tuple[int, str, str]:
    """``(arch, suffix, kind)`` of a compiled CUDA module, from Warp's file name (or a PTX ``.target``)."""
    match = _ARCH_IN_NAME.search(path)
    if match:
        return int(match.group(1)), match.group(2), match.group(3)
    if path.endswith(".ptx"):
        from apic.replay.cuda_params import ptx_target

        target = ptx_target(image.decode("latin-1"))
        if target:
            return target[0], target[1], "ptx"
    raise ValueError(f"cannot tell which GPU architecture the CUDA module {path} was compiled for")


def _launch(op: rec.CudaLaunch) -> dict:
    from apic.format.writer import _blob

    return {"kind": int(rec.OpKind.CUDA_LAUNCH), "kernel": op.kernel, "dim": list(op.dim), "params": _blob(op.params),
            "grid": list(op.grid), "block": list(op.block), "smem": op.smem}


def _ops_and_sequence(ops) -> dict:
    import numpy as np

    from apic.errors import UnsupportedOperationError
    from apic.format.writer import _op

    index: dict[int, int] = {}
    distinct = []
    sequence = np.empty(len(ops), dtype="<u4")
    for i, op in enumerate(ops):
        j = index.get(id(op))
        if j is None:
            if op.kind not in OP_KINDS:
                raise UnsupportedOperationError(f"saving a {type(op).__name__} op in a CUDA graph")
            j = index[id(op)] = len(distinct)
            distinct.append(_launch(op) if isinstance(op, rec.CudaLaunch) else _op(op, {}))
        sequence[i] = j
    return {"ops": distinct, "sequence": sequence.tobytes()}


def collect_bindings(graph, inputs, outputs) -> list:
    """Named bindings of CUDA arrays (on the graph's device) inside the graph's regions."""
    import math

    from apic import bindings as b
    from apic.errors import BindingError
    from apic.format.writer import named_arrays

    found: dict = {}
    for kind, name, arr in named_arrays(inputs, outputs):
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
    import numpy as np
    import warp as wp

    import apic
    from apic import _compat
    from apic.format import schema
    from apic.format.writer import _binding, module_file_name, region_wire

    recording = graph.recording
    regions = []
    for region in recording.regions:
        regions.append(region_wire(region, None if region.owned else graph.read_region(region.id)))

    images: dict[str, bytes] = {}
    modules = []
    for i, info in enumerate(recording.modules):
        image, (arch, suffix, kind) = graph.module_image(i)
        digest = hashlib.sha256(image).hexdigest()
        name = module_file_name(info.name, digest)[: -len(".o")] + "." + kind
        images[name] = image
        modules.append({"name": info.name, "file": name, "sha256": digest, "size": len(image),
                        "arch": arch, "arch_suffix": suffix})

    target = dict(_compat.host_target())
    target.pop("known_features", None)
    doc = {
        "format": schema.FORMAT_NAME,
        "format_version": schema.BASE_VERSION,
        "writer": {"apic": apic.__version__, "warp": wp.config.version, "numpy": np.__version__},
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
        "bindings": [_binding(b) for b in bindings],
    }
    return doc, images


def save(graph, path, inputs=None, outputs=None) -> str:
    """Write a CUDA graph to ``<stem>.wrp`` + ``<stem>_modules/`` (atomically, as a CPU graph)."""
    from apic.format import writer

    wrp_path, modules_dir = writer.wrp_paths(path)
    if graph.recording.unsaveable:
        raise UnsupportedOperationError(
            "saving a CUDA graph whose launches pass a handle id or a device pointer as an integer",
            graph.recording.unsaveable[0] + "; it would dangle after a load (the graph still replays in this "
            "process). Pass the array itself, or capture on the CPU, where apic remaps handle ids",
            capture="CUDA (apic=True)",
        )
    doc, images = document(graph, collect_bindings(graph, inputs, outputs))
    writer.publish(wrp_path, modules_dir, writer.encode(doc), images)
    return wrp_path
