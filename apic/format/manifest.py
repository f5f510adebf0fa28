"""Kernel manifests: the argument layout each kernel symbol expects, kept beside the module binaries; this
module holds their file form (:mod:`apic.format.manifest_build` builds them at save,
:mod:`apic.format.manifest_check` checks a graph against them at load).

A ``.wrp`` says which symbol a launch calls and lays out its argument blob, and a hostile ``.wrp``
can say anything there: name another kernel of the same (honest) module, hand a Mesh argument the
id of a HashGrid, point a written array at a mesh's triangle indices. What a kernel expects is a
property of its compiled code, so it must come from a file the ``.wrp`` cannot change. At save, apic
writes one manifest per CPU module into ``<stem>_modules/``, content-addressed like the module
binary (``<name>.<module sha16>.<manifest sha16>.kernels``), listing for every kernel symbol of that
module the graph launches:

* ``size``: the byte size of its packed argument struct (and of the adjoint one);
* ``arrays``: ``[at, elem_size, indexed, ndim, flags, kinds]`` of each array descriptor inside it
  (``flags``: 1, some launch passed None there; 2, some launch's array lay in a Mesh's ``indices``;
  4, every launch passed a contiguous ``uint64`` array of handle ids there, of the ``kinds`` listed:
  a replay checks, before each launch, that the array still holds ids of those kinds only);
* ``handles``: ``[at, kinds]`` of each word that held a native handle's id at capture, with the
  handle kinds it held (``""`` among them: some launch held a plain value there).

Beside the kernels, a manifest written since 2026-11-29 seals ``cpu``: ``[name, features]``, the CPU the
object was compiled for (the saving host, or a ``cpu_target`` level) and the instruction-set features
its code may use. A load checks them against this CPU (``cpu_refusal``), so the ``.wrp``'s
``target.features``, the file's word, cannot make an object run on a CPU that lacks what it was built
for: such an object is refused, or its saved source compiled here instead.

The manifest travels inside the files whose code a load runs: appended to the module's object file
and, saved with ``source_fallback=True``, to its generated source, behind a 16-byte trailer (the
manifest's size and the magic ``apicKRN1``; Warp's object loader ignores bytes after an object's
sections, and apic strips them before loading or compiling). So ``<stem>_modules/`` holds one file
per module, as upstream's does, and whichever file gives the code gives the manifest it is checked
against; the ``.wrp`` names that file's SHA-256 and cannot change either. Each copy names the bare
object's and the bare source's SHA-256, and the one it travels in must match.

Files written from 2026-11-22 to 2026-11-25 carry the manifest as a file of its own beside the binary
(``<name>.<module sha16>.<manifest sha16>.kernels``), named by ``modules[i].manifest``; such a file is
still read, and omitting its entry from the ``.wrp`` is refused while the folder holds it. A file
whose launched modules carry no manifest (written before manifests, or with the trailer cut off a module
file) is refused (``apic.format.manifest_check.without_manifest``), unless the caller sets
``apic.loading.allow_files_without_manifests`` (docs/RELIABILITY.md says what that leaves open).

CUDA graphs carry no manifest: their kernels' parameter layouts are checked against the driver's
(``cuFuncGetParamInfo``) where the driver has it (docs/FORMAT.md, section 8).
"""


from __future__ import annotations

import struct
from dataclasses import dataclass


from apic import _compat
from apic.errors import FormatError
from apic.format import schema
from apic.record import ops as rec
from apic.targets import cpu, files
from apic.targets import handle_kinds as hk

FORMAT = "apic.kernels"
VERSION = 1
FLAG_NONE = 1  # some launch passed None (an all-zero descriptor) for this array
FLAG_MESH_INDICES = 2  # some launch's array lay in a Mesh's indices
FLAG_HANDLE_IDS = 4  # every launch passed a contiguous array of uint64 whose every element held a handle's id
FILE = files.read_rule(rf"\.{files.DIGEST}\.({files.DIGEST})\.kernels", schema.MAX_FILE_STEM)
_TRAILER = struct.Struct("<Q8s")  # behind a manifest carried in a module's object or source file: its size, magic
_TRAILER_MAGIC = b"apicKRN1"


@dataclass(frozen=True)
class ManifestEntry:
    """A module's manifest file in ``<stem>_modules/``, as the ``.wrp`` names it."""

    file: str
    sha256: str
    size: int




# --- what the graph says, read at save and at load ----------------------------------------------------
def mesh_indices(handles) -> list[tuple[int, int, int]]:
    """``(region, lo, hi)`` byte ranges of every Mesh's ``indices``."""
    found = []
    for handle in handles:
        if handle.kind == hk.MESH:
            for name, array in handle.arrays:
                if name == "indices" and isinstance(array.start, rec.Ref):
                    found.append((array.start.region, array.start.offset, array.start.offset + 4 * array.length))
    return found


def in_mesh_indices(target, meshes) -> bool:
    return isinstance(target, rec.Ref) and any(
        target.region == region and lo <= target.offset < hi for region, lo, hi in meshes)


def contiguous_words(data: bytes, at: int) -> int | None:
    """The element count of the array descriptor at ``at`` of ``data`` if it is a C-contiguous array of
    8-byte elements, else None."""
    ndim = cpu.ARRAY_T_NDIM.unpack_from(data, at + cpu.ARRAY_T_NDIM_AT)[0]
    if not 1 <= ndim <= 4:
        return None
    values = cpu.ARRAY_T_SHAPE_STRIDES.unpack_from(data, at + cpu.ARRAY_T_SHAPE_AT)
    shape, strides = values[:ndim], values[4:4 + ndim]
    expected = 8
    for n, stride in zip(reversed(shape), reversed(strides)):
        if n < 0 or (n > 1 and stride != expected):
            return None
        expected *= n
    return expected // 8


# --- the file form ----------------------------------------------------------------------------------------
def carry(contents: bytes, manifest: bytes) -> bytes:
    """A module's object or source file with its manifest appended (see the module docstring)."""
    return contents + manifest + _TRAILER.pack(len(manifest), _TRAILER_MAGIC)


def carried(contents: bytes, what: str) -> tuple[bytes, bytes | None]:
    """``(bare contents, manifest or None)`` of a module's object or source file (``what`` names it)."""
    if len(contents) < _TRAILER.size:
        return contents, None
    size, magic = _TRAILER.unpack_from(contents, len(contents) - _TRAILER.size)
    if magic != _TRAILER_MAGIC:
        return contents, None
    end = len(contents) - _TRAILER.size
    if size > min(end, schema.MAX_MANIFEST_BYTES):
        raise FormatError(f"invalid apic graph file: {what} ends in a kernel manifest trailer of {size} bytes, "
                          "more than the file holds")
    return contents[: end - size], contents[end - size : end]


def fail(where: str, message: str):
    raise FormatError(f"invalid apic graph file: {where}: {message}")


def read_entry(value, where: str, module_file: str) -> ManifestEntry | None:
    """The checked ``manifest`` map of a module entry (None where there is none)."""
    if value is None:
        return None
    if not isinstance(value, dict) or set(value) != {"file", "sha256", "size"}:
        fail(where, "expected a map of file, sha256 and size")
    file, digest, size = value["file"], value["sha256"], value["size"]
    match = FILE.fullmatch(file) if isinstance(file, str) else None
    if match is None or not file.startswith(module_file[: -len(".o")] + "."):
        fail(f"{where}.file", f"{file!r} is not the manifest file name of module file {module_file!r}")
    if not isinstance(digest, str) or not files.SHA256.fullmatch(digest) or not digest.startswith(match.group(1)):
        fail(f"{where}.sha256", "expected the 64 lowercase hex digits whose first 16 are in the file name")
    if not isinstance(size, int) or isinstance(size, bool) or not 0 < size <= schema.MAX_MANIFEST_BYTES:
        fail(f"{where}.size", f"{size!r} is not a manifest size")
    return ManifestEntry(file, digest, size)


def manifests_of(module_file: str, names) -> list[str]:
    """The manifest files among ``names`` (a modules folder's entries) that belong to ``module_file``."""
    stem = module_file[: -len(".o")] + "."
    return sorted(n for n in names if n.startswith(stem) and FILE.fullmatch(n) and n.count(".") == stem.count(".") + 1)


def parse(data: bytes, where: str, expected: dict) -> dict:
    """symbol -> (adjoint, args layout, adj_args layout) of a manifest apic wrote, whose ``module_sha256`` /
    ``source_sha256`` must be ``expected``'s (checked: it is trusted content, but a reader of a trusted file
    still does not crash on a damaged one)."""
    try:
        doc = schema.unpack_manifest(data, f"{where}: the kernel manifest")
        if doc["format"] != FORMAT or doc["version"] != VERSION:
            fail(where, f"not an apic kernel manifest of version {VERSION}")
        if "module_sha256" in expected and doc["module_sha256"] != expected["module_sha256"]:
            fail(where, "it describes another module binary than the one the graph names")
        # the source a load may compile instead of the object (source_fallback) is the one saved with it
        if "source_sha256" in expected and doc["source_sha256"] != expected["source_sha256"]:
            fail(where, "the graph names another generated source for this module than the one saved with it")
        table = {}
        for symbol, adjoint, args, adj in doc["kernels"]:
            table[str(symbol)] = (bool(adjoint), _layout(args), None if adj is None else _layout(adj))
        return table
    except FormatError:
        raise
    except Exception as error:  # noqa: BLE001 - any shape a damaged file can take
        fail(where, f"the kernel manifest cannot be read ({type(error).__name__})")


def _layout(value) -> tuple:
    arrays = tuple((int(a), int(e), bool(i), int(n), int(f), frozenset(str(k) for k in kinds))
                   for a, e, i, n, f, kinds in value["arrays"])
    handles = {int(at): frozenset(str(k) for k in kinds) for at, kinds in value["handles"]}
    return int(value["size"]), arrays, handles


CPU_FIELD = "cpu"  # the manifest's [CPU name, features its object may use] (module docstring)


def sealed_cpu(target: dict) -> list:
    """What a manifest seals of a ``.wrp``'s ``target`` as written: ``[cpu name, sorted features]``."""
    return [str(target["cpu"]), sorted(set(map(str, target["features"])))]


def cpu_refusal(manifest: bytes | None, where: str) -> str | None:
    """Why the object carrying ``manifest`` cannot run on this CPU (the features its manifest seals that this
    CPU lacks, among those this machine's LLVM knows, as ``apic.loading.check_compatible`` counts them), or
    None: it can, or its manifest predates the seal. ``where`` names the object."""
    if manifest is None:
        return None
    value = schema.unpack_manifest(manifest, f"the kernel manifest of {where}").get(CPU_FIELD)
    if value is None:
        return None
    if (not isinstance(value, list) or len(value) != 2 or not isinstance(value[0], str)
            or len(value[0]) > schema.MAX_LABEL or not isinstance(value[1], list)
            or len(value[1]) > schema.MAX_FEATURES
            or not all(isinstance(f, str) and len(f) <= schema.MAX_LABEL for f in value[1])):
        fail(f"the kernel manifest of {where}", f"{CPU_FIELD}: expected [CPU name, features]")
    host = _compat.host_target()
    known, have = set(host["known_features"]), set(host["features"])
    lacking = sorted(f for f in value[1] if f in known and f not in have)
    if not lacking:
        return None
    return (f"{where} was compiled for a CPU ({value[0]}) with instruction-set features this CPU "
            f"({host['cpu']}) lacks: {', '.join(lacking)} (sealed in its kernel manifest, whatever the .wrp's "
            "target.features says). Running it could crash with an illegal instruction; capture and save the "
            "graph again on this kind of CPU")
