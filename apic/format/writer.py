"""Writing a graph: ``Recording`` (+ live memory and module binaries) -> ``.wrp`` bytes -> files.

``document`` turns a graph into the msgpack body (plain dicts, lists, ints, strings and bytes);
``encode`` puts the header in front; ``serialize`` gathers everything in memory (the bytes
``capture_save_to_bytes`` returns) and ``save`` hands them to ``apic.format.publish``, which puts
them on disk atomically. A CPU graph and a CUDA graph are written
by the same code: what differs (where region contents and module binaries come from, the module,
kernel and device fields of a CUDA file, docs/FORMAT.md section 8) is one small function per target
in ``_PARTS``, picked by the graph's target (``apic.targets``). The ops are ``apic.format.write_ops``.
"""

from __future__ import annotations

import ctypes
import gc
import hashlib
import os
import re
from dataclasses import dataclass
from typing import Callable

import msgpack
import numpy as np
import warp as wp

from apic import _compat
from apic._version import __version__
from apic.record.bindings import Binding
from apic.errors import CaptureError, UnsupportedOperationError
from apic.format import cuda_source
from apic.format import handles as wire_handles
from apic.format import manifest_build
from apic.format import publish as publication
from apic.format import schema
from apic.format import sealed_claims
from apic.format import source as source_format
from apic.format.write_bindings import binding_wire, collect_bindings, scalar_binding_wire, target_of
from apic.format.write_ops import blob as blob_wire
from apic.format.write_ops import ops_and_sequence
from apic.record import ops as rec
from apic.record import handle_words
from apic.record.cuda.conditional_tree import StructureError, conditional_tree, has_conditionals
from apic.record.control_flow import nesting_depth
from apic.targets import target as targets
from apic.targets.cpu import MODULE_EXTENSION, module_file_name
from apic.targets import handle_kinds as hk

# Native objects a kernel reaches through a u64 handle, found in a module's generated C++ source.
_HANDLE_CALL = re.compile(r"\bwp::(?:adj_)?(mesh|bvh|hash_grid|volume|marching_cubes)_\w+\s*\(")
_HANDLE_NAMES = {"mesh": hk.MESH, "bvh": hk.BVH, "hash_grid": hk.HASH_GRID, "volume": hk.VOLUME,
                 "marching_cubes": hk.MARCHING_CUBES}


def wrp_paths(path) -> tuple[str, str]:
    """``(<stem>.wrp, <stem>_modules)`` for a user path (``.wrp`` added if missing), absolute."""
    path = os.fspath(path)
    wrp = os.path.abspath(path if path.endswith(schema.EXTENSION) else path + schema.EXTENSION)
    return wrp, wrp[: -len(schema.EXTENSION)] + schema.MODULES_SUFFIX


# --- the CPU target: memory read in place, object files, native handles --------------------------------
def _module_image(info, cpu_level: str | None) -> tuple[bytes, tuple[str, ...]]:
    """The binary of one recorded module and the native handle types its kernels can dereference: the
    object Warp compiled (or a loaded graph holds), or with ``cpu_level`` one compiled for that CPU level."""
    if cpu_level is not None:
        source, options = source_format.module_source(info, f"capture_save(cpu_target={cpu_level!r})")
        try:
            image = _compat.compile_cpu_source(source, options, cpu_level)
        except Exception as error:  # Warp's compiler or the level check: reported with the module
            raise CaptureError(f"capture_save(cpu_target={cpu_level!r}): compiling Warp module '{info.name}' for "
                               f"{cpu_level} failed: {error}") from error
        return image, _native_types(source.decode("utf-8", errors="replace"))
    image = getattr(info.module_exec, "apic_image", None)  # a module of a loaded graph
    if image is not None:
        return image, tuple(info.module_exec.native_types)
    if info.module_exec is None:
        raise CaptureError(f"the graph no longer holds Warp module '{info.name}', so it cannot be saved")
    path = _compat.module_binary_path(info.name, info.module_exec)
    with open(path, "rb") as f:
        image = f.read()
    source = _compat.module_source_path(path)
    if source is None:
        return image, ()
    with open(source, encoding="utf-8", errors="replace") as f:
        return image, _native_types(f.read())


def _native_types(source: str) -> tuple[str, ...]:
    """The native handle types (Mesh, Bvh, ...) whose structs a module's generated C++ dereferences."""
    return tuple(sorted({_HANDLE_NAMES[m] for m in _HANDLE_CALL.findall(source)}))


def _live_handle_ids() -> np.ndarray:
    """Addresses (``.id``) of every live Warp Mesh, Bvh, HashGrid, Volume... in this process."""
    types = _compat.native_handle_types()
    ids = set()
    if types:
        for obj in gc.get_objects():
            # type(), not isinstance(): isinstance may consult a proxy's __class__ (and warn)
            if issubclass(type(obj), types):
                value = getattr(obj, "id", None)
                if isinstance(value, int) and value:
                    ids.add(value)
    return np.array(sorted(ids), dtype=np.uint64)


def _holds_handle(data: bytes, handle_ids: np.ndarray) -> bool:
    return bool(len(handle_words.id_words(handle_words.as_words(data), handle_ids)))


def _cpu_regions(graph) -> tuple[list, list, np.ndarray]:
    """The regions on the wire, the saved words that hold one of the graph's handle ids (``handle_slots``),
    and the ids of every native object no launch argument may hold (every other live one, and those the save
    recorded from a binding, which no launch was given)."""
    # ids of the graph's own handles are saved as relocations; any other live one cannot be
    graph_ids = {value: i for i, value in enumerate(getattr(graph, "handle_ids", ()))}
    handle_ids = np.setdiff1d(_live_handle_ids(), np.array(list(graph_ids), dtype=np.uint64))
    typed = getattr(graph, "typed_slots", {})  # extra regions whose bindings type their handle words
    regions, slots = [], []
    for region in graph.recording.regions:
        contents = None
        if not region.owned:
            contents = ctypes.string_at(graph.region_addresses[region.id], region.nbytes) if region.nbytes else b""
            if region.id in typed:  # only the words typed as handles; a plain integer keeps its number
                contents, found = wire_handles.clear_slots(contents, typed[region.id])
            else:
                contents, found = wire_handles.find_slots(contents, region.id, graph_ids)
            slots += found
            if _holds_handle(contents, handle_ids):
                raise UnsupportedOperationError(
                    "capture_save of a graph whose memory holds the id of a native object it does not use",
                    "the object (a Mesh, Bvh, HashGrid, Volume or MarchingCubes) was never passed to the captured "
                    "work, so apic cannot save it; its address is only valid in this process",
                )
        regions.append(region_wire(region, contents))
    added = np.array(getattr(graph, "added_ids", ()), dtype=np.uint64)
    return regions, slots, np.union1d(handle_ids, added)


def _cpu_modules(graph, cpu_level: str | None) -> tuple[list, dict[str, bytes]]:
    modules, images = [], {}
    for info in graph.recording.modules:
        image, native = _module_image(info, cpu_level)
        digest = hashlib.sha256(image).hexdigest()
        name = module_file_name(info.name, digest)
        images[name] = image
        modules.append({"name": info.name, "file": name, "sha256": digest, "size": len(image),
                        "native_types": list(native)})
    return modules, images


def _check_cpu_launches(recording, params: dict, handle_ids: np.ndarray) -> None:
    """No launch argument may hold the id of a native object the capture did not record."""
    for op in rec.cpu_launches(recording.ops):
        for blob in (op.args, op.adj_args):
            # a parameter's bytes are the user's number, never a native object's id
            unnamed = None if blob is None else tuple(slice(s.at, s.at + len(params[s.name][1])) for s in blob.params)
            if blob is not None and _holds_handle(blob_wire(blob, unnamed, params)["data"], handle_ids):
                kernel = recording.kernels[op.kernel].key
                raise UnsupportedOperationError(
                    f"capture_save of a launch of '{kernel}' with an unrecorded native object id argument",
                    "the object was not known to the capture (a MarchingCubes, or one made before the capture "
                    "in a way apic did not see); its address is only valid in this process",
                )


# --- the CUDA target: memory copied from the device, CUBIN / PTX modules ----------------------------------
def _cuda_regions(graph) -> tuple[list, list, None]:
    regions = [region_wire(region, None if region.owned else graph.read_region(region.id))
               for region in graph.recording.regions]
    return regions, [], None


def _cuda_modules(graph, cpu_level: str | None) -> tuple[list, dict[str, bytes]]:
    if cpu_level is not None:
        raise ValueError("capture_save(cpu_target=...) chooses the CPU of a CPU graph's objects; this is a CUDA graph")
    modules, images = [], {}
    for i, info in enumerate(graph.recording.modules):
        image, (arch, suffix, kind) = graph.module_image(i)
        digest = hashlib.sha256(image).hexdigest()
        name = module_file_name(info.name, digest)[: -len(MODULE_EXTENSION)] + "." + kind
        images[name] = image
        modules.append({"name": info.name, "file": name, "sha256": digest, "size": len(image),
                        "arch": arch, "arch_suffix": suffix})
    return modules, images


def _check_cuda_saveable(graph) -> None:
    if graph.recording.unsaveable:
        raise UnsupportedOperationError(
            "saving a CUDA graph whose launches pass a handle id or a device pointer as an integer",
            graph.recording.unsaveable[0] + "; it would dangle after a load (the graph still replays in this "
            "process). Pass the array itself, or capture on the CPU, where apic remaps handle ids",
            capture="CUDA (apic=True)",
        )
    if has_conditionals(graph.recording.ops):  # what a reader takes (docs/FORMAT.md 8.1), refused before writing
        try:
            conditional_tree(graph.recording.ops, schema.MAX_CONDITIONAL_DEPTH, schema.MAX_CONDITIONAL_BODY_OPS)
        except StructureError as error:
            raise UnsupportedOperationError(
                "saving a CUDA graph whose wp.capture_if / wp.capture_while bodies a reader would refuse", str(error),
                capture="CUDA (apic=True)") from error


@dataclass(frozen=True)
class _Parts:
    """What a target's graph file takes from the graph, where the targets differ."""

    regions: Callable  # graph -> (regions on the wire, handle_slots, ids no saved byte may hold or None)
    modules: Callable  # (graph, cpu_level) -> (module entries, images)
    check_launches: Callable  # (recording, params, ids) -> None, raising for a launch that cannot be saved
    check_saveable: Callable  # graph -> None, raising for a graph that cannot be saved at all
    device: Callable  # graph -> the file's ``device`` map, or None (no ``device`` key)
    sources: object  # the module with ``add_sources`` for ``source_fallback=True``
    manifests: bool  # whether each module gets a kernel manifest (apic.format.manifest)


_PARTS = {
    targets.CPU.name: _Parts(_cpu_regions, _cpu_modules, _check_cpu_launches, lambda graph: None,
                             lambda graph: None, source_format, True),
    targets.CUDA.name: _Parts(_cuda_regions, _cuda_modules, lambda *_: None, _check_cuda_saveable,
                              lambda graph: {"kind": targets.CUDA.device_kind, "arch": graph.arch,
                                             "name": graph.device_name},
                              cuda_source, False),
}


# --- the body -----------------------------------------------------------------------------------------
def _args_sizes(ops, kernel: int) -> dict:
    """``args_size`` (and ``adj_args_size``) of a CPU kernel: the byte size of Warp's packed argument
    struct (``ctypes.sizeof`` of the ctypes struct its launches were packed with), which every launch's
    blob must then match exactly; empty for a kernel no CPU launch uses."""
    launch = next((op for op in ops if rec.is_cpu_launch(op) and op.kernel == kernel), None)
    if launch is None:
        return {}
    sizes = {"args_size": len(launch.args.data)}
    if launch.adj_args is not None:
        sizes["adj_args_size"] = len(launch.adj_args.data)
    return sizes


def _kernel(recording, i: int, kernel) -> dict:
    return {"module": kernel.module, "key": kernel.key, "symbol": kernel.symbol, "adjoint": bool(kernel.adjoint),
            **({"cpu_blocks": True} if kernel.cpu_blocks else {}), **_args_sizes(recording.ops, i),
            **_split(kernel),
            **({"params": [list(p) for p in kernel.params]} if kernel.params else {})}


def _split(kernel) -> dict:
    """A kernel's parallel-replay key: ``split_writes`` (proved splittable by task) or ``split_world`` (by
    whole worlds: a key of its own, which a reader that knows only ``split_writes`` ignores, rather than
    splitting the kernel by task)."""
    if kernel.split_writes is None:
        return {}
    if kernel.split_world is None:
        return {"split_writes": list(kernel.split_writes)}
    return {"split_world": {"writes": list(kernel.split_writes), "rows": list(kernel.split_world),
                            "tiles": bool(kernel.split_tiles)}}


def _cpu_of_objects(cpu_level: str | None) -> dict:
    """The file's ``target``: this host, whose CPU Warp compiled the objects for, or the level they were."""
    target = {key: value for key, value in _compat.native_target().items() if key != "known_features"}
    if cpu_level is not None:
        target.update(cpu=cpu_level, features=_compat.level_features(cpu_level))
    return target


def document(graph, bindings: list[Binding], cpu_level: str | None = None) -> tuple[dict, dict[str, bytes]]:
    """The msgpack body of ``graph`` and its module binaries (file name -> bytes); ``cpu_level``: the CPU
    level to compile the modules for (None: the objects as Warp compiled them, for this host)."""
    recording = graph.recording
    target = target_of(recording)
    parts = _PARTS[target.name]
    regions, slots, handle_ids = parts.regions(graph)
    modules, images = parts.modules(graph, cpu_level)
    # each named scalar parameter: (index in "bindings", its value now), after the array bindings
    values = getattr(graph, "param_values", {})
    params = {p.name: (len(bindings) + i, values.get(p.name, p.value)) for i, p in enumerate(recording.params)}
    parts.check_launches(recording, params, handle_ids)

    device = parts.device(graph)
    doc = {
        "format": schema.FORMAT_NAME,
        "format_version": schema.BASE_VERSION,  # raised below for a graph with handles or parameters
        "writer": {"apic": __version__, "warp": wp.config.version, "numpy": np.__version__},
        "target": _cpu_of_objects(cpu_level),
        "abi": recording.abi,
        **({"device": device} if device is not None else {}),
        "regions": regions,
        "modules": modules,
        "kernels": [_kernel(recording, i, k) for i, k in enumerate(recording.kernels)],
        **ops_and_sequence(recording.ops, params, target.name),
        "bindings": [binding_wire(b) for b in bindings]
        + [scalar_binding_wire(p, params[p.name][1]) for p in recording.params],
    }
    if recording.handles:  # a graph without handles stays readable by apic releases that predate them
        doc["handles"] = [wire_handles.handle_wire(h) for h in recording.handles]
        doc["handle_slots"] = slots
    doc["format_version"] = required_version(doc)
    return doc, images


def region_wire(region, contents: bytes | None) -> dict:
    """A region on the wire: size, ownership, the array that covers it (if one does) and its bytes."""
    array = None
    if region.array is not None:
        array = {"dtype": region.array.dtype, "shape": list(region.array.shape), "strides": list(region.array.strides)}
    return {"nbytes": region.nbytes, "owned": region.owned, "array": array, "contents": contents}


def required_version(doc) -> int:
    """The format version a body needs: the oldest that holds it, so older apic releases keep reading it:
    3 if it has named scalar parameters, 2 if it holds native handles, else 1."""
    if not isinstance(doc, dict):
        return schema.BASE_VERSION
    bindings = doc.get("bindings")
    if isinstance(bindings, list) and any(
        isinstance(b, dict) and b.get("kind") == schema.SCALAR_KIND for b in bindings
    ):
        return schema.PARAMS_VERSION
    return schema.HANDLES_VERSION if "handles" in doc else schema.BASE_VERSION


def encode(doc: dict) -> bytes:
    """Header + msgpack body."""
    body = msgpack.packb(doc, use_bin_type=True)
    header = schema.HEADER.pack(schema.MAGIC, required_version(doc), 0, len(body), hashlib.sha256(body).digest())
    return header + body


def save(graph, path, inputs=None, outputs=None, source_fallback: bool = False, cpu_level: str | None = None) -> str:
    """Serialize ``graph`` (CPU or CUDA) to ``<stem>.wrp`` + ``<stem>_modules/``; returns the ``.wrp`` path."""
    wrp_path, modules_dir = wrp_paths(path)
    data, images = serialize(graph, inputs, outputs, source_fallback, cpu_level)
    publication.publish(wrp_path, modules_dir, data, images)
    return wrp_path


def serialize(graph, inputs=None, outputs=None, source_fallback: bool = False,
              cpu_level: str | None = None) -> tuple[bytes, dict[str, bytes]]:
    """``graph`` (CPU or CUDA) as the ``.wrp`` bytes and its module files (file name -> contents), in memory.

    Everything is made before anything is returned, so a failure raises and leaves nothing behind;
    ``save`` hands the result to ``apic.format.publish``."""
    parts = _PARTS[target_of(graph.recording).name]
    depth = nesting_depth(graph.recording.ops)  # what a reader takes, refused before writing
    if depth > schema.MAX_CPU_NESTING:
        raise UnsupportedOperationError(
            "saving a graph whose wp.capture_if / wp.capture_while bodies nest deeper than a reader accepts",
            f"they nest {depth} deep; a reader takes at most {schema.MAX_CPU_NESTING}")
    parts.check_saveable(graph)
    doc, images = document(graph, collect_bindings(graph, inputs, outputs), cpu_level)
    if source_fallback:  # each module's generated source (C++, or CUDA .cu) and build options too
        parts.sources.add_sources(graph, doc, images)
    if parts.manifests:
        # each module's kernel manifest (the argument layouts its kernels expect, and its source's SHA-256),
        # beside the module binary: what a load checks the file's launches against
        # and, saved with the source a threaded replay compiles, the footprint verdicts of its split launches
        footprints = sealed_claims.seal_footprints(graph) if source_fallback else None
        manifest_build.add_manifests(graph.recording, doc, images, footprints)
    return encode(doc), images
