"""Building kernel manifests at save (:mod:`apic.format.manifest` says what they hold): the layout every
launch of a kernel shares, with what each word held, appended to the module files the graph names."""

from __future__ import annotations

import hashlib

import msgpack

from apic.errors import CaptureError
from apic.format import schema, sealed_claims
from apic.format.manifest import (CPU_FIELD, FLAG_HANDLE_IDS, FLAG_MESH_INDICES, FLAG_NONE, FORMAT, VERSION, carry,
                                  contiguous_words, in_mesh_indices, mesh_indices, sealed_cpu)
from apic.record import ops as rec
from apic.targets import cpu


def _id_kinds(blob: rec.Blob, slot, slot_kinds: dict) -> set | None:
    """The handle kinds of the ids an array argument holds, if it is a contiguous uint64 array each of
    whose elements is a saved handle slot (``slot_kinds``: (region, offset) -> kind), else None."""
    if slot.indexed or slot.elem_size != 8 or not slot_kinds:
        return None
    data = next((r.target for r in blob.relocs if r.at == slot.at and isinstance(r.target, rec.Ref)), None)
    count = None if data is None else contiguous_words(blob.data, slot.at)
    if count and count > schema.MAX_ID_WORDS:
        lo, hi = data.offset, data.offset + 8 * count
        held = sum(1 for region, offset in slot_kinds if region == data.region and lo <= offset < hi)
        if held == count:  # every word a handle's id, too many to check per replay: fail closed
            raise CaptureError(
                f"a launch passes an array of {count:,} native handle ids (uint64 at byte {slot.at} of its "
                f"arguments); a saved graph checks the ids of such an array before each launch, up to "
                f"{schema.MAX_ID_WORDS:,} of them: split the array, or pass at most that many")
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
            if not pointers and not any(descriptor[cpu.ARRAY_T_POINTERS]):
                flags |= FLAG_NONE
                continue
            ndim = max(ndim, cpu.ARRAY_T_NDIM.unpack_from(blob.data, slot.at + cpu.ARRAY_T_NDIM_AT)[0])
            if any(in_mesh_indices(r.target, meshes) for r in pointers if r.at - slot.at in cpu.ARRAY_T_POINTER_SLOTS):
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
          slot_kinds: dict | None = None, footprints: dict | None = None, target: dict | None = None) -> bytes | None:
    """The canonical manifest bytes of module ``module`` of a recording (None if the graph launches none
    of its kernels on the CPU); ``source_sha256``: its saved generated C++ (``source_fallback=True``);
    ``slot_kinds``: (region, offset) -> kind of each saved word that holds a handle's id; ``footprints``:
    the graph's footprint verdicts to seal (``sealed_claims.seal_footprints``); ``target``: the ``.wrp``'s
    target, whose CPU and features the object was compiled for (sealed: ``manifest.cpu_refusal``)."""
    slot_kinds = slot_kinds or {}
    meshes = mesh_indices(recording.handles)
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
           "kernels": [[symbol, *kernels[symbol]] for symbol in sorted(kernels)],
           # the kernels' parallel-replay claims, sealed with the code they describe (apic.format.sealed_claims)
           sealed_claims.FIELD: sealed_claims.seal(recording, sorted(launches))}
    if target is not None:  # what the object's code needs of a CPU, where the object's own SHA-256 covers it
        doc[CPU_FIELD] = sealed_cpu(target)
    symbols = {recording.kernels[index].symbol for index in launches}
    footprint = {symbol: verdicts for symbol, verdicts in sorted((footprints or {}).items()) if symbol in symbols}
    if footprint:  # (only then: the manifests of graphs without any stay as they were)
        doc[sealed_claims.FOOTPRINT_FIELD] = footprint
    return msgpack.packb(doc, use_bin_type=True)


def add_manifests(recording, doc: dict, images: dict[str, bytes], footprints: dict | None = None) -> None:
    """Append to the object (and source) file of each CPU module of ``doc`` whose kernels the graph launches
    its manifest (with ``footprints``' verdicts of its kernels); the files take new content-addressed names,
    and ``doc`` names them."""
    slot_kinds = {(region, offset): recording.handles[handle].kind
                  for region, offset, handle in doc.get("handle_slots", [])}
    bare = dict(images)
    for index, entry in enumerate(doc["modules"]):
        source = entry.get("source")
        data = build(recording, index, entry["sha256"], None if source is None else source["sha256"], slot_kinds,
                     footprints, doc.get("target"))
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
