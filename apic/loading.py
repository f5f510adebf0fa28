"""Loading a saved graph: a validated ``SavedGraph`` + module binaries -> a replayable graph.

Loading sits above both the file format (``apic.format``) and replay (``apic.replay``), so that neither
sees the other: replay never reads a file, the reader never lowers a program. :func:`load` reads forward,
once: the backend the saved ``device`` names (``apic.replay.backends.for_saved``) checks the device asked
for; the files are read and verified for the graph's device kind (``_FILES``); the backend makes the graph
live. Nothing in the format calls back into this module. A CPU graph is built by the CPU backend
``APIC_REPLAY`` names (``apic.replay.backends.cpu``: steps 3 and 4 below).

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
import os
import types

import warp as wp

from apic import _compat
from apic.errors import GraphMemoryError, IncompatibleGraphError
from apic.format import cuda_source
from apic.format import handles as wire_handles
from apic.format import manifest_check
from apic.format import sealed_claims
from apic.format import source as source_format
from apic.format.module_folder import verified_images  # noqa: F401  (public here, as before)
from apic.format.reader import SavedGraph
from apic.graph import Graph
from apic.replay import backends, budget
from apic.replay.backends.cpu import loaded_modules  # noqa: F401  (public here, as before)
from apic.targets.cpu import CPU_LEVELS, cpu_family

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


def check_compatible(saved: SavedGraph) -> None:
    """Refuse, saying why, a graph whose compiled kernels cannot run safely in this process."""
    host = _compat.host_target()
    saved_target = saved.target
    for key, what in (("system", "operating system"), ("machine", "machine architecture"),
                      ("byteorder", "byte order"), ("pointer_bits", "pointer size")):
        if key == "machine" and cpu_family(saved_target.get(key)) is not cpu_family(host[key]):
            raise IncompatibleGraphError(_other_family(saved_target.get(key), host[key]))
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


def _other_family(saved: object, here: str) -> str:
    """Why objects compiled for another CPU family (``saved``, a machine name) cannot run ``here``."""
    family, local = cpu_family(saved if isinstance(saved, str) else None), cpu_family(here)
    return (f"this graph's kernels were compiled for {family.NAME if family else 'another CPU family'} ({saved}); "
            f"this host is {local.NAME if local else 'another CPU family'} ({here}), and objects run only on the "
            f"family they were compiled for. A graph saved with its modules' source "
            f"(capture_save(..., source_fallback=True)) moves between families: its source is compiled here")


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


def objects_refused(saved: SavedGraph) -> IncompatibleGraphError | None:
    """None if the saved objects can run here; else why not, where compiling the modules' saved source
    (``source_fallback=True``) here is enough. Raises ``IncompatibleGraphError`` where it is not."""
    try:
        check_compatible(saved)
    except IncompatibleGraphError as error:
        sourced = all(m.source is not None for m in saved.modules)
        if not sourced or not _rebuild_fixes(saved):
            raise
        return error
    return None


def _rebuild_fixes(saved: SavedGraph) -> bool:
    """Whether a local build makes ``saved`` compatible: it passes once CPU features and Warp match here."""
    host = _compat.host_target()
    local = dataclasses.replace(  # modules compiled here are built for this host, not for the file's CPU level
        saved,
        target={**saved.target, "cpu": host["cpu"], "features": list(host["features"]), "machine": host["machine"]},
        writer={**saved.writer, "warp": _compat.WARP_VERSION},
    )
    try:
        check_compatible(local)
    except IncompatibleGraphError:
        return False
    return True


def load(saved: SavedGraph, fetch, origin: str, device=None, names=list):
    """Check, verify and make live, in one pass: ``fetch(file name)`` returns a module file's bytes or None,
    ``names()`` the names of every file the modules folder (or mapping) holds; ``device`` is the device asked
    for (None: the graph's kind's default)."""
    backend = backends.for_saved(saved.device)
    device = backend.device(device)
    saved, images, services = _FILES[backend.device_kind](saved, fetch, origin, names)
    return backend.load(saved, images, device, services)


def _cpu_files(saved: SavedGraph, fetch, origin: str, names):
    """A CPU graph's files: checked against this host and the memory limit, verified, bound to their manifests."""
    refused = objects_refused(saved)
    check_memory(saved)
    files, id_arrays = checked_images(saved, fetch, names, origin, refused)
    saved = dataclasses.replace(saved, recording=dataclasses.replace(saved.recording, kernels=files.kernels))
    services = types.SimpleNamespace(graph_type=Graph, sources=source_format, id_arrays=id_arrays,
                                     check_handle_data=wire_handles.check_handle_data, compiled=files.compiled)
    return saved, files.images, services


def checked_images(saved: SavedGraph, fetch, names, origin: str, refused: IncompatibleGraphError | None):
    """``(files, id_arrays)``: the module objects a load runs (``apic.format.source.images``), every launch
    checked against its kernel's manifest, and the arrays of handle ids each launch passes."""
    files = source_format.images(saved, fetch, origin, refused)
    # what each kernel expects comes from the files that give its code, which the .wrp cannot change
    id_arrays = manifest_check.checked(saved, fetch, names, origin, files.manifests, allow_files_without_manifests)
    # and so do the claims a threaded replay acts on: a .wrp's claim is the sealed one, or refused
    files.kernels = sealed_claims.bind(saved, files.manifests)
    return files, id_arrays


def _cuda_files(saved: SavedGraph, fetch, origin: str, names):
    """A CUDA graph's files: the module objects verified; a module's saved source stands in for an object this
    GPU cannot run (``apic.format.cuda_source``)."""
    return saved, cuda_source.images(saved, fetch, origin), types.SimpleNamespace(sources=cuda_source)


# How each device kind's files are read and verified: the one entry a new device kind adds here (a backend of
# an existing kind, as another CPU interpreter, adds none).
_FILES = {"cpu": _cpu_files, "cuda": _cuda_files}
