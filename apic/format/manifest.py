"""Kernel manifests: the argument layout each kernel symbol expects, kept beside the module binaries.

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
written before manifests, with a folder without them, is loaded as before (docs/RELIABILITY.md says
what that leaves open).

CUDA graphs carry no manifest: their kernels' parameter layouts are checked against the driver's
(``cuFuncGetParamInfo``) where the driver has it (docs/FORMAT.md, section 8).
"""

from __future__ import annotations

import hashlib
import operator
import re
import struct
from dataclasses import dataclass

import msgpack

from apic.errors import FormatError
from apic.format import schema
from apic.format.module_folder import fetch_verified
from apic.record import ops as rec
from apic.targets import cpu

FORMAT = "apic.kernels"
VERSION = 1
FLAG_NONE = 1  # some launch passed None (an all-zero descriptor) for this array
FLAG_MESH_INDICES = 2  # some launch's array lay in a Mesh's indices
FLAG_HANDLE_IDS = 4  # every launch passed a contiguous array of uint64 whose every element held a handle's id
FILE = re.compile(rf"[A-Za-z0-9_][A-Za-z0-9_.-]{{0,{schema.MAX_FILE_STEM - 1}}}"
                  r"\.[0-9a-f]{16}\.([0-9a-f]{16})\.kernels")
_SHA256 = re.compile(r"[0-9a-f]{64}")
_TRAILER = struct.Struct("<Q8s")  # behind a manifest carried in a module's object or source file: its size, magic
_TRAILER_MAGIC = b"apicKRN1"


@dataclass(frozen=True)
class ManifestEntry:
    """A module's manifest file in ``<stem>_modules/``, as the ``.wrp`` names it."""

    file: str
    sha256: str
    size: int


# --- what the graph says -------------------------------------------------------------------------------
def _mesh_indices(handles) -> list[tuple[int, int, int]]:
    """``(region, lo, hi)`` byte ranges of every Mesh's ``indices``."""
    found = []
    for handle in handles:
        if handle.kind == "Mesh":
            for name, array in handle.arrays:
                if name == "indices" and isinstance(array.start, rec.Ref):
                    found.append((array.start.region, array.start.offset, array.start.offset + 4 * array.length))
    return found


def _in_mesh_indices(target, meshes) -> bool:
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


def _id_kinds(blob: rec.Blob, slot, slot_kinds: dict) -> set | None:
    """The handle kinds of the ids an array argument holds, if it is a contiguous uint64 array each of
    whose elements is a saved handle slot (``slot_kinds``: (region, offset) -> kind), else None."""
    if slot.indexed or slot.elem_size != 8 or not slot_kinds:
        return None
    data = next((r.target for r in blob.relocs if r.at == slot.at and isinstance(r.target, rec.Ref)), None)
    count = None if data is None else contiguous_words(blob.data, slot.at)
    if not count or count > schema.MAX_ID_WORDS:
        return None
    kinds = set()
    for k in range(count):
        kind = slot_kinds.get((data.region, data.offset + 8 * k))
        if kind is None:
            return None
        kinds.add(kind)
    return kinds


def _blob_layout(blobs: list[rec.Blob], handles, meshes, slot_kinds: dict) -> dict:
    """The layout every launch in ``blobs`` (of one kernel) shares, with what each word held."""
    first = blobs[0]
    arrays = []
    for slot in first.arrays:
        ndim, flags, id_kinds = 0, 0, set()
        ids = True  # every non-None launch passed an array of handle ids here
        for blob in blobs:
            size = cpu.INDEXEDARRAY_T_SIZE if slot.indexed else cpu.ARRAY_T_SIZE
            descriptor = blob.data[slot.at : slot.at + size]
            pointers = [r for r in blob.relocs if slot.at <= r.at < slot.at + size]
            if not pointers and not any(descriptor[:16]):
                flags |= FLAG_NONE
                continue
            ndim = max(ndim, cpu.ARRAY_T_NDIM.unpack_from(blob.data, slot.at + cpu.ARRAY_T_NDIM_AT)[0])
            if any(_in_mesh_indices(r.target, meshes) for r in pointers if r.at - slot.at in (0, 8)):
                flags |= FLAG_MESH_INDICES
            kinds = _id_kinds(blob, slot, slot_kinds)
            ids = ids and kinds is not None
            id_kinds |= kinds or set()
        if ids and id_kinds:
            flags |= FLAG_HANDLE_IDS
        arrays.append([slot.at, slot.elem_size, bool(slot.indexed), ndim, flags,
                       sorted(id_kinds) if flags & FLAG_HANDLE_IDS else []])
    words: dict[int, set] = {}
    for blob in blobs:
        held = {r.at: handles[r.target.index].kind for r in blob.relocs if isinstance(r.target, rec.HandleRef)}
        for at, kind in held.items():
            words.setdefault(at, set()).add(kind)
    for blob in blobs:  # a word that held a handle in one launch and a plain value in another
        held = {r.at for r in blob.relocs if isinstance(r.target, rec.HandleRef)}
        for at in words:
            if at not in held:
                words[at].add("")
    return {"size": len(first.data), "arrays": arrays,
            "handles": [[at, sorted(kinds)] for at, kinds in sorted(words.items())]}


def build(recording, module: int, module_sha256: str, source_sha256: str | None = None,
          slot_kinds: dict | None = None) -> bytes | None:
    """The canonical manifest bytes of module ``module`` of a recording (None if the graph launches none
    of its kernels on the CPU); ``source_sha256``: its saved generated C++ (``source_fallback=True``);
    ``slot_kinds``: (region, offset) -> kind of each saved word that holds a handle's id."""
    slot_kinds = slot_kinds or {}
    meshes = _mesh_indices(recording.handles)
    launches: dict[int, list] = {}
    for op in rec.cpu_launches(recording.ops):
        if recording.kernels[op.kernel].module == module:
            launches.setdefault(op.kernel, []).append(op)
    if not launches:
        return None
    kernels = {}
    for index, ops in sorted(launches.items()):
        kernel = recording.kernels[index]
        adj = [op.adj_args for op in ops if op.adj_args is not None]
        kernels[kernel.symbol] = [
            bool(kernel.adjoint),
            _blob_layout([op.args for op in ops], recording.handles, meshes, slot_kinds),
            _blob_layout(adj, recording.handles, meshes, slot_kinds) if adj else None,
        ]
    doc = {"format": FORMAT, "version": VERSION, "module_sha256": module_sha256, "source_sha256": source_sha256,
           "kernels": [[symbol, *kernels[symbol]] for symbol in sorted(kernels)]}
    return msgpack.packb(doc, use_bin_type=True)


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


def add_manifests(recording, doc: dict, images: dict[str, bytes]) -> None:
    """Append to the object (and source) file of each CPU module of ``doc`` whose kernels the graph launches
    its manifest; the files take new content-addressed names, and ``doc`` names them."""
    slot_kinds = {(region, offset): recording.handles[handle].kind
                  for region, offset, handle in doc.get("handle_slots", [])}
    bare = dict(images)
    for index, entry in enumerate(doc["modules"]):
        source = entry.get("source")
        data = build(recording, index, entry["sha256"], None if source is None else source["sha256"], slot_kinds)
        if data is None:
            continue
        for field, suffix in ((entry, cpu.MODULE_EXTENSION), (source, ".cpp")):
            if field is None:
                continue
            contents = carry(bare[field["file"]], data)
            digest = hashlib.sha256(contents).hexdigest()
            images.pop(field["file"], None)
            field.update(file=cpu.module_file_name(entry["name"], digest, suffix), sha256=digest, size=len(contents))
            images[field["file"]] = contents


# --- reading ---------------------------------------------------------------------------------------------
def _fail(where: str, message: str):
    raise FormatError(f"invalid apic graph file: {where}: {message}")


def read_entry(value, where: str, module_file: str) -> ManifestEntry | None:
    """The checked ``manifest`` map of a module entry (None where there is none)."""
    if value is None:
        return None
    if not isinstance(value, dict) or set(value) != {"file", "sha256", "size"}:
        _fail(where, "expected a map of file, sha256 and size")
    file, digest, size = value["file"], value["sha256"], value["size"]
    match = FILE.fullmatch(file) if isinstance(file, str) else None
    if match is None or not file.startswith(module_file[: -len(".o")] + "."):
        _fail(f"{where}.file", f"{file!r} is not the manifest file name of module file {module_file!r}")
    if not isinstance(digest, str) or not _SHA256.fullmatch(digest) or not digest.startswith(match.group(1)):
        _fail(f"{where}.sha256", "expected the 64 lowercase hex digits whose first 16 are in the file name")
    if not isinstance(size, int) or isinstance(size, bool) or not 0 < size <= schema.MAX_MANIFEST_BYTES:
        _fail(f"{where}.size", f"{size!r} is not a manifest size")
    return ManifestEntry(file, digest, size)


def manifests_of(module_file: str, names) -> list[str]:
    """The manifest files among ``names`` (a modules folder's entries) that belong to ``module_file``."""
    stem = module_file[: -len(".o")] + "."
    return sorted(n for n in names if n.startswith(stem) and FILE.fullmatch(n) and n.count(".") == stem.count(".") + 1)


def _parse(data: bytes, where: str, expected: dict) -> dict:
    """symbol -> (adjoint, args layout, adj_args layout) of a manifest apic wrote, whose ``module_sha256`` /
    ``source_sha256`` must be ``expected``'s (checked: it is trusted content, but a reader of a trusted file
    still does not crash on a damaged one)."""
    try:
        doc = msgpack.unpackb(data, raw=False, strict_map_key=True, max_ext_len=0)
        if doc["format"] != FORMAT or doc["version"] != VERSION:
            _fail(where, f"not an apic kernel manifest of version {VERSION}")
        if "module_sha256" in expected and doc["module_sha256"] != expected["module_sha256"]:
            _fail(where, "it describes another module binary than the one the graph names")
        # the source a load may compile instead of the object (source_fallback) is the one saved with it
        if "source_sha256" in expected and doc["source_sha256"] != expected["source_sha256"]:
            _fail(where, "the graph names another generated source for this module than the one saved with it")
        table = {}
        for symbol, adjoint, args, adj in doc["kernels"]:
            table[str(symbol)] = (bool(adjoint), _layout(args), None if adj is None else _layout(adj))
        return table
    except FormatError:
        raise
    except Exception as error:  # noqa: BLE001 - any shape a damaged file can take
        _fail(where, f"the kernel manifest cannot be read ({type(error).__name__})")


def _layout(value) -> tuple:
    arrays = tuple((int(a), int(e), bool(i), int(n), int(f), frozenset(str(k) for k in kinds))
                   for a, e, i, n, f, kinds in value["arrays"])
    handles = {int(at): frozenset(str(k) for k in kinds) for at, kinds in value["handles"]}
    return int(value["size"]), arrays, handles


def load(saved, fetch, names, origin: str, carried_by: dict | None = None) -> dict[int, dict]:
    """module index -> its manifest table, for every CPU module that has one.

    ``carried_by``: module index -> ``(manifest, what)``, the manifest carried in the file whose code the load
    runs (``what``: ``{"module_sha256": ...}`` or ``{"source_sha256": ...}`` of that bare file, which the
    manifest must name). Other modules: the manifest file the ``.wrp`` names (files of 2026-11-22 to -25);
    a module whose manifest the ``.wrp`` omits although the folder holds one is refused (``names()``: the
    folder's entries)."""
    carried_by = carried_by or {}
    tables: dict[int, dict] = {}
    for index, module in enumerate(saved.modules):
        where = f"modules[{index}].manifest"
        if index in carried_by:
            data, expected = carried_by[index]
            tables[index] = _parse(data, f"the kernel manifest carried by module file '{module.file}'", expected)
            continue
        entry = module.manifest
        if entry is None:
            present = manifests_of(module.file, names())
            if present:
                raise FormatError(
                    f"invalid apic graph file: {where}: absent, but {origin} holds the kernel manifest "
                    f"'{present[0]}' of module file '{module.file}': a graph of this module must name it")
            continue
        data = fetch_verified(fetch, "kernel manifest", entry.file, module.name, entry.size, entry.sha256, origin)
        expected = {"module_sha256": module.sha256,
                    "source_sha256": None if module.source is None else module.source.sha256}
        tables[index] = _parse(data, f"kernel manifest '{entry.file}'", expected)
    return tables


def _check_blob(blob: rec.Blob, layout, handles, meshes, where: str) -> list:
    """Check one launch blob against its layout; returns the arrays of handle ids it passes, as
    ``(data, count, kinds)``, whose values a replay checks."""
    size, arrays, words = layout
    id_arrays = []
    if len(blob.data) != size:
        _fail(where, f"{len(blob.data)} bytes; the kernel's manifest says its argument struct has {size}")
    if tuple((s.at, s.elem_size, bool(s.indexed)) for s in blob.arrays) != tuple(a[:3] for a in arrays):
        _fail(where, "array descriptors other than the kernel's manifest lists (offset, element size, indexed)")
    for at, _, indexed, ndim, flags, kinds in arrays:
        end = at + (cpu.INDEXEDARRAY_T_SIZE if indexed else cpu.ARRAY_T_SIZE)
        pointers = [r for r in blob.relocs if at <= r.at < end]
        if not pointers and not any(blob.data[at : at + 16]):
            if not flags & FLAG_NONE:
                _fail(where, f"the array at byte {at} is None, which the kernel never received at capture")
            continue
        found = cpu.ARRAY_T_NDIM.unpack_from(blob.data, at + cpu.ARRAY_T_NDIM_AT)[0]
        if found != ndim:
            _fail(where, f"the array at byte {at} has {found} dimensions; the kernel takes {ndim}")
        if not flags & FLAG_MESH_INDICES and any(
                _in_mesh_indices(r.target, meshes) for r in pointers if r.at - at in (0, 8)):
            _fail(where, f"the array at byte {at} lies in a Mesh's triangle indices, which this kernel argument "
                         "never did at capture (a kernel writing there corrupts a mesh its queries read)")
        if flags & FLAG_HANDLE_IDS:
            count = contiguous_words(blob.data, at)
            data = next((r.target for r in pointers if r.at == at), None)
            if count is None or data is None:
                _fail(where, f"the array at byte {at} held the ids of {'/'.join(sorted(kinds))} objects at capture; "
                             "here it is not a contiguous array of them")
            id_arrays.append((data, count, kinds))
    held = {r.at: handles[r.target.index].kind for r in blob.relocs if isinstance(r.target, rec.HandleRef)}
    for at, kind in held.items():
        if kind not in words.get(at, ()):
            expected = "/".join(sorted(k for k in words.get(at, ()) if k)) or "no handle"
            _fail(where, f"the word at byte {at} holds a {kind} id; the kernel takes {expected} there")
    for at, kinds in words.items():
        if at not in held and "" not in kinds:
            _fail(where, f"the word at byte {at} must hold the id of a {'/'.join(sorted(kinds))}")
    return id_arrays


def check(saved, tables: dict[int, dict]) -> dict[int, list]:
    """Every kernel of a module with a manifest is listed there, and every launch of it matches its layout.

    Returns id(launch op) -> its arrays of handle ids ``(data, count, kinds)``: the ids are graph
    memory (a kernel or a copy may change them), so a replay checks them before the launch."""
    recording = saved.recording
    meshes = _mesh_indices(recording.handles)
    for index, kernel in enumerate(recording.kernels):
        table = tables.get(kernel.module)
        if table is None:
            continue
        found = table.get(kernel.symbol)
        if found is None or found[0] != bool(kernel.adjoint):
            _fail(f"kernels[{index}].symbol", f"{kernel.symbol} is not a kernel the module's manifest lists "
                                              "(the graph saved with this module never launched it)")
    ops, id_arrays = recording.ops, {}
    checked: dict = {}  # what _check_blob reads -> its result: launches that differ in scalars only check once
    descriptors_of: dict = {}  # id(layout) -> what takes the bytes of its array descriptors from a blob's data

    first: dict = {}  # id(op) -> its first position (found when a blob is first checked)

    def where(op, field: str) -> str:  # what a message calls the launch: its first position
        if not first:
            first.update(zip(map(id, reversed(ops)), range(len(ops) - 1, -1, -1)))
        return f"the launch at position {first[id(op)]} (kernels[{op.kernel}]).{field}"

    def check_blob(blob: rec.Blob, layout, op, field: str) -> list:
        # relocations and slots by identity, not hashed per launch: launches read alike share them, and the
        # ops hold them throughout (no id is reused); equal ones not shared are only checked again
        take = descriptors_of.get(id(layout))
        if take is None:
            spans = [slice(a[0], a[0] + (cpu.INDEXEDARRAY_T_SIZE if a[2] else cpu.ARRAY_T_SIZE)) for a in layout[1]]
            take = descriptors_of[id(layout)] = (lambda data: ()) if not spans else operator.itemgetter(*spans)
        key = (id(layout), len(blob.data), id(blob.relocs), id(blob.arrays), take(blob.data))
        found = checked.get(key)
        if found is None:
            found = checked[key] = _check_blob(blob, layout, recording.handles, meshes, where(op, field))
        return list(found)

    listed = {}  # kernel index -> its manifest entry (None: its module has no manifest)
    for index, kernel in enumerate(recording.kernels):
        table = tables.get(kernel.module)
        listed[index] = None if table is None else table[kernel.symbol]
    # A launch the reader read alike one it read in full (``saved.alike``: same kernel, argument length,
    # relocations, array slots and descriptor bytes, all that _check_blob reads) has that one's result, once
    # that one is checked here: a loaded graph may hold ten thousand launches that differ in a scalar only.
    alike = saved.alike
    results: dict = {}  # id(launch) -> its result, of the launches checked in full (the ops hold them)
    # each distinct op once (ops repeat)
    for op in dict(zip(map(id, ops), ops)).values():
        if not isinstance(op, rec.Launch):
            continue
        entry = listed[op.kernel]
        if entry is None:
            continue
        pair = alike.get(id(op))
        if pair is not None and pair[0] is op:
            found = results.get(id(pair[1]))
            if found is not None:
                if found:
                    id_arrays[id(op)] = list(found)
                continue
        _, args, adj = entry
        found = check_blob(op.args, args, op, "args")
        if (op.adj_args is None) != (adj is None):
            _fail(where(op, "adj_args"), "present or absent against the kernel's manifest")
        if op.adj_args is not None:
            found += check_blob(op.adj_args, adj, op, "adj_args")
        results[id(op)] = found  # read only (copied for each launch alike it)
        if found:
            id_arrays[id(op)] = found
    return id_arrays
