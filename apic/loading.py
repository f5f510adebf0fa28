"""Loading a saved graph: a validated ``SavedGraph`` + module binaries -> a replayable graph.

Loading sits above both the file format (``apic.format``) and replay (``apic.replay``), so that neither
sees the other: replay never reads a file, the reader never lowers a program. A CUDA graph is handed to
``apic.replay.cuda_loaded_graph`` with the module images checked here (``load_cuda``); a CPU graph is built here.

For a CPU graph, order matters, and nothing native runs before the checks that protect it:

1. the saving host's OS, CPU and instruction-set features, and the kernels' native dependencies,
   are compared with this process (``check_compatible``); a graph that cannot run safely here is
   refused with the reason;
2. every module binary is read and checked against its size and SHA-256 from the file;
3. regions are allocated (zeroed, 64-byte aligned, owned by the graph) and filled with the saved
   contents; their total must fit in ``memory_limit()`` (checked before anything is allocated:
   graph-owned regions are not in the file, so a small file can ask for any amount);
4. each module is loaded through Warp's LLVM backend under a name unique to this load, and each
   kernel symbol is looked up (a missing one is an error; a symbol must be a kernel entry point
   defined in its module's object file). The module stays loaded as long as the graph lives and
   is unloaded as soon as the graph is freed; nothing looks symbols up after.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import re
import weakref

import numpy as np
import warp as wp

from apic import _compat
from apic.errors import FormatError, GraphMemoryError, IncompatibleGraphError
from apic.format import cuda_source
from apic.format import handles as wire_handles
from apic.format import manifest_check
from apic.format import source as source_format
from apic.format.module_folder import fetch_verified
from apic.format.reader import SavedGraph
from apic.graph import Graph
from apic.record import handles
from apic.record.recording import ModuleInfo
from apic.replay import budget
from apic.replay import cuda_loaded_graph as cuda_replay
from apic.targets.cpu import CPU_LEVELS

_ALIGN = 64
_load_ids = itertools.count()
_loaded: set[str] = set()  # LLVM module names loaded for graphs and not unloaded yet

#: The most memory one load may allocate, in bytes: its regions, its handles' native memory and its
#: replay program (``apic.replay.budget``). A graph needing more is refused with ``apic.GraphMemoryError``
#: before anything is allocated. ``None`` means this machine's physical memory.
DEFAULT_MAX_GRAPH_BYTES = 1 << 30
max_graph_bytes: int | None = DEFAULT_MAX_GRAPH_BYTES

#: Whether a CPU graph whose modules carry no kernel manifest loads (files saved before manifests, before
#: 2026-11-22). False, the default, refuses it: a module file with its manifest cut off and the ``.wrp``
#: re-sealed looks exactly like such a file, and would load without the manifest's checks. True loads it
#: without them (docs/RELIABILITY.md, section 1, says what that leaves open): only for files you trust.
allow_files_without_manifests: bool = False


def memory_limit() -> int | None:
    """``max_graph_bytes``, or the physical memory of this machine (None where it cannot be read)."""
    if max_graph_bytes is not None:
        return int(max_graph_bytes)
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):  # pragma: no cover - platforms without sysconf
        return None


def loaded_modules() -> frozenset[str]:
    """The LLVM names of the module objects loaded for graphs that are still alive."""
    return frozenset(_loaded)


def _unload(handle: str) -> None:
    _loaded.discard(handle)
    _compat.unload_object(handle)


class LoadedModule:
    """A module binary loaded for a loaded graph; holds the code in place like a live ``ModuleExec``."""

    def __init__(self, name: str, image: bytes, native_types: tuple[str, ...], cpu_level: str | None = None) -> None:
        safe = re.sub(r"[^A-Za-z0-9_]", "_", name)[:64]
        self.handle = f"apic_load_{next(_load_ids)}_{safe}"
        self.apic_image = image  # kept so that a loaded graph can be saved again
        self.native_types = tuple(native_types)
        # the CPU level the object was compiled for (None: a host's): code built again from the module's
        # source for this graph (range entries) is built for it too, so it computes the same bits
        self.apic_cpu_level = cpu_level
        _compat.load_object(image, self.handle)
        _loaded.add(self.handle)
        self._unload = weakref.finalize(self, _unload, self.handle)
        self._unload.atexit = False  # at interpreter exit Warp may already be gone

    def lookup(self, symbol: str) -> int:
        """The address of ``symbol``; never asked of an unloaded module (warp <= 1.12 would crash)."""
        if not self._unload.alive or self.handle not in _loaded:
            raise RuntimeError(f"module {self.handle} was unloaded")
        return _compat.lookup_symbol(self.handle, symbol)


def check_compatible(saved: SavedGraph) -> None:
    """Refuse, saying why, a graph whose compiled kernels cannot run safely in this process."""
    host = _compat.host_target()
    saved_target = saved.target
    for key, what in (("system", "operating system"), ("machine", "machine architecture"),
                      ("byteorder", "byte order"), ("pointer_bits", "pointer size")):
        if saved_target.get(key) != host[key]:
            raise IncompatibleGraphError(
                f"this graph was saved on a different {what} ({saved_target.get(key)}; this host: {host[key]}); "
                "its compiled kernels cannot run here. Capture and save it again on this kind of machine"
            )
    known = set(host["known_features"])
    missing = sorted(f for f in saved_target.get("features", ()) if f in known and f not in host["features"])
    if missing and saved.modules:
        raise IncompatibleGraphError(
            f"this graph's kernels were compiled for the saving host's CPU ({saved_target.get('cpu')}), which has "
            f"instruction-set features this CPU ({host['cpu']}) lacks: {', '.join(missing)}. Running them could "
            "crash with an illegal instruction; capture and save the graph again on this kind of CPU"
        )
    level = saved_target.get("cpu")
    lacking = sorted(CPU_LEVELS[level] - set(host["features"])) if level in CPU_LEVELS else ()
    if lacking and saved.modules:  # threaded replay builds code for the level: every feature of it, known or not
        raise IncompatibleGraphError(
            f"this graph's kernels were compiled for {level}, whose instruction-set features this CPU "
            f"({host['cpu']}) lacks: {', '.join(lacking)}. Running them could crash with an illegal instruction; "
            "save the graph again for a lower level (capture_save(..., cpu_target=...))"
        )
    for kernel in saved.recording.kernels:  # a feature this warp-lang lacks is refused now, not at replay
        if kernel.cpu_blocks and not _compat.CPU_BLOCKS:
            raise IncompatibleGraphError(
                f"kernel '{kernel.key}' runs as cooperative CPU blocks (kernels[].cpu_blocks), which warp-lang "
                f"{wp.config.version} does not have; load this graph with the warp-lang that saved it"
            )
    saved_warp = saved.writer.get("warp")
    if saved_warp != wp.config.version:
        for module in saved.modules:
            if module.native_types:
                raise IncompatibleGraphError(
                    f"module '{module.name}' has kernels that read native Warp {'/'.join(module.native_types)} "
                    f"structs, whose memory layout is compiled into the module and can differ between warp-lang "
                    f"{saved_warp} (which saved this graph) and {wp.config.version} (running here). Load it with "
                    f"warp-lang {saved_warp}, or save it again with {wp.config.version}"
                )


def verified_images(saved: SavedGraph, fetch, origin: str) -> dict[str, bytes]:
    """The module binaries the graph needs, each checked against its size and SHA-256."""
    images: dict[str, bytes] = {}
    for module in saved.modules:
        if module.file in images:
            continue
        images[module.file] = fetch_verified(fetch, "module file", module.file, module.name, module.size,
                                             module.sha256, origin)
    return images


def check_memory(saved: SavedGraph) -> None:
    """Refuse a graph whose load needs more memory than ``memory_limit()``, before allocating any."""
    limit = memory_limit()
    parts = budget.needs(saved)
    needed = sum(nbytes for _, nbytes in parts)
    if limit is not None and needed > limit:
        where = ("apic.loading.max_graph_bytes" if max_graph_bytes is not None
                 else "this machine's memory, apic.loading.max_graph_bytes = None")
        detail = ", ".join(f"{what} {nbytes:,}" for what, nbytes in parts if nbytes)
        raise GraphMemoryError(
            f"loading this graph needs {needed:,} bytes ({detail}), more than a load may allocate here "
            f"({limit:,} bytes, {where}); to allow it, set apic.loading.max_graph_bytes to a larger number "
            "of bytes (None: this machine's memory)"
        )


def _allocate(nbytes: int, index: int) -> tuple[np.ndarray, int, np.ndarray]:
    """A zeroed buffer with ``nbytes`` usable bytes at a 64-byte aligned address; (owner, address, view)."""
    try:
        owner = np.zeros(nbytes + _ALIGN, dtype=np.uint8)
    except (MemoryError, ValueError):
        raise GraphMemoryError(f"cannot allocate {nbytes:,} bytes for region {index} of the graph") from None
    pad = -owner.ctypes.data % _ALIGN
    return owner, owner.ctypes.data + pad, owner[pad : pad + nbytes]


def build_graph(saved: SavedGraph, images: dict[str, bytes], device, id_arrays=None, compiled=frozenset()):
    """Allocate, fill, load and lower: the loaded ``apic.Graph``; ``id_arrays`` (from
    ``apic.format.manifest_check.check``): the arrays of handle ids each launch passes, checked at replay;
    ``compiled``: the module files whose object was compiled here rather than saved."""
    recording = saved.recording
    buffers, addresses, views, regions = [], [], [], []
    for region, contents in zip(recording.regions, saved.contents):
        owner, address, view = _allocate(region.nbytes, region.id)
        if contents:
            view[:] = np.frombuffer(contents, dtype=np.uint8)
        buffers.append(owner)
        addresses.append(address)
        views.append(view)
        regions.append(dataclasses.replace(region, address=address))

    loaded: dict[str, LoadedModule] = {}
    modules = []
    level = saved.target.get("cpu") if saved.target.get("cpu") in CPU_LEVELS else None
    for entry in saved.modules:
        if entry.file not in loaded:
            try:
                loaded[entry.file] = LoadedModule(entry.name, images[entry.file], entry.native_types,
                                                  None if entry.file in compiled else level)
            except RuntimeError as error:  # Warp's loader rejected the object: its source, if saved
                images[entry.file] = source_format.rebuilt_after_rejection(entry, images, error,
                                                                           saved.writer.get("warp"))
                loaded[entry.file] = LoadedModule(entry.name, images[entry.file], entry.native_types)
            loaded[entry.file].apic_source = source_format.kept_source(entry, images)  # for a later save
        modules.append(ModuleInfo(entry.name, loaded[entry.file]))

    kernels = []
    for kernel in recording.kernels:
        file = saved.modules[kernel.module].file
        # Every symbol name is in the object file's string table, NUL-terminated (ELF, COFF, Mach-O);
        # checking there first keeps names the JIT would not find (and would complain about) from it.
        found = kernel.symbol.encode() + b"\0" in images[file]
        address = modules[kernel.module].module_exec.lookup(kernel.symbol) if found else 0
        if not address:
            raise FormatError(f"kernel '{kernel.key}': symbol {kernel.symbol} is not in module file '{file}'")
        kernels.append(dataclasses.replace(kernel, address=address))

    rebuilt = _rebuild_handles(saved, addresses, views)
    live = dataclasses.replace(recording, regions=tuple(regions), modules=tuple(modules), kernels=tuple(kernels),
                               handles=rebuilt)
    return Graph(
        live, device, apic=True, keepalive=buffers, is_loaded=True, region_addresses=addresses,
        kernel_addresses=[k.address for k in kernels], bindings=saved.bindings, id_arrays=id_arrays,
    )


def _rebuild_handles(saved: SavedGraph, addresses: list[int], views: list[np.ndarray]) -> tuple:
    """Build every native handle again over the loaded regions; write the new ids into saved memory.

    What the native builders read is checked first (``apic.format.handles.check_handle_data``).
    """
    rebuilt = []
    for index, (handle, data) in enumerate(zip(saved.recording.handles, saved.volume_data)):
        wire_handles.check_handle_data(index, handle, views)  # before Warp's native builder reads it
        try:
            obj = handles.rebuild(handle, lambda ref: addresses[ref.region] + ref.offset, data)
        except (RuntimeError, ValueError, TypeError) as error:  # Warp's own checks of what the file holds
            raise FormatError(f"invalid apic graph file: handles[{index}]: Warp could not build the "
                              f"wp.{handle.kind} it describes: {error}") from error
        rebuilt.append(dataclasses.replace(handle, obj=obj))
    for region, offset, index in saved.handle_slots:
        views[region][offset : offset + 8].view(np.uint64)[0] = rebuilt[index].obj.id
    return tuple(rebuilt)


def objects_refused(saved: SavedGraph) -> IncompatibleGraphError | None:
    """None if the saved objects can run here; else why not, where compiling the modules' saved source
    (``source_fallback=True``) here is enough. Raises ``IncompatibleGraphError`` where it is not."""
    try:
        check_compatible(saved)
    except IncompatibleGraphError as error:
        sourced = all(m.source is not None for m in saved.modules)
        if not sourced or not source_format.rebuild_fixes(saved, check_compatible):
            raise
        return error
    return None


def load(saved: SavedGraph, fetch, origin: str, device, names=list):
    """Check, verify and build: ``fetch(file name)`` returns a module binary's bytes or None, ``names()``
    the names of every file the modules folder (or mapping) holds."""
    refused = objects_refused(saved)
    check_memory(saved)
    files, id_arrays = checked_images(saved, fetch, names, origin, refused)
    return build_graph(saved, files.images, device, id_arrays, files.compiled)


def checked_images(saved: SavedGraph, fetch, names, origin: str, refused: IncompatibleGraphError | None):
    """``(files, id_arrays)``: the module objects a load runs (``apic.format.source.images``), every launch
    checked against its kernel's manifest, and the arrays of handle ids each launch passes."""
    files = source_format.images(saved, fetch, origin, verified_images, refused)
    # what each kernel expects comes from the files that give its code, which the .wrp cannot change
    tables = manifest_check.load(saved, fetch, names, origin, files.manifests)
    bare = manifest_check.without_manifest(saved, tables)
    if bare and not allow_files_without_manifests:
        module = saved.modules[bare[0]]
        raise FormatError(
            f"module '{module.name}' (file '{module.file}' in {origin}) carries no kernel manifest, so nothing "
            "binds the graph's launches to what its kernels expect: the file was saved before manifests "
            "(2026-11-22), or its manifest was cut off. Load it, if you trust it, with "
            "apic.loading.allow_files_without_manifests = True (without those checks), and save it again")
    return files, manifest_check.check(saved, tables)



def load_cuda(saved, fetch, origin: str, device):
    """A loaded CUDA graph (``apic.replay.cuda_loaded_graph.LoadedCudaGraph``): ``fetch(file name)`` returns a module's
    bytes or None; a module's saved source stands in for an object this GPU cannot run."""
    ordinal = cuda_replay.device_ordinal(device)
    images = cuda_source.images(saved, fetch, origin, verified_images)  # verified_images unless sources can stand in
    return cuda_replay.LoadedCudaGraph(saved, images, ordinal, cuda_source)
