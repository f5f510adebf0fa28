"""Checking a loaded graph against its kernel manifests (:mod:`apic.format.manifest`): every kernel a module's
manifest lists, every launch's argument blob the layout its kernel was saved with."""

from __future__ import annotations

import operator

from apic.errors import FormatError
from apic.format.manifest import (FLAG_HANDLE_IDS, FLAG_MESH_INDICES, FLAG_NONE, contiguous_words, fail,
                                  in_mesh_indices, manifests_of, mesh_indices, parse)
from apic.format.module_folder import fetch_verified
from apic.record import ops as rec
from apic.targets import cpu


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
            tables[index] = parse(data, f"the kernel manifest carried by module file '{module.file}'", expected)
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
        tables[index] = parse(data, f"kernel manifest '{entry.file}'", expected)
    return tables


def _check_blob(blob: rec.Blob, layout, handles, meshes, where: str) -> list:
    """Check one launch blob against its layout; returns the arrays of handle ids it passes, as
    ``(data, count, kinds)``, whose values a replay checks."""
    size, arrays, words = layout
    id_arrays = []
    if len(blob.data) != size:
        fail(where, f"{len(blob.data)} bytes; the kernel's manifest says its argument struct has {size}")
    if tuple((s.at, s.elem_size, bool(s.indexed)) for s in blob.arrays) != tuple(a[:3] for a in arrays):
        fail(where, "array descriptors other than the kernel's manifest lists (offset, element size, indexed)")
    for at, _, indexed, ndim, flags, kinds in arrays:
        end = at + (cpu.INDEXEDARRAY_T_SIZE if indexed else cpu.ARRAY_T_SIZE)
        pointers = [r for r in blob.relocs if at <= r.at < end]
        if not pointers and not any(blob.data[at + cpu.ARRAY_T_POINTERS.start : at + cpu.ARRAY_T_POINTERS.stop]):
            if not flags & FLAG_NONE:
                fail(where, f"the array at byte {at} is None, which the kernel never received at capture")
            continue
        found = cpu.ARRAY_T_NDIM.unpack_from(blob.data, at + cpu.ARRAY_T_NDIM_AT)[0]
        if found != ndim:
            fail(where, f"the array at byte {at} has {found} dimensions; the kernel takes {ndim}")
        if not flags & FLAG_MESH_INDICES and any(
                in_mesh_indices(r.target, meshes) for r in pointers if r.at - at in cpu.ARRAY_T_POINTER_SLOTS):
            fail(where, f"the array at byte {at} lies in a Mesh's triangle indices, which this kernel argument "
                         "never did at capture (a kernel writing there corrupts a mesh its queries read)")
        if flags & FLAG_HANDLE_IDS:
            count = contiguous_words(blob.data, at)
            data = next((r.target for r in pointers if r.at == at), None)
            if count is None or data is None:
                fail(where, f"the array at byte {at} held the ids of {'/'.join(sorted(kinds))} objects at capture; "
                             "here it is not a contiguous array of them")
            id_arrays.append((data, count, kinds))
    held = {r.at: handles[r.target.index].kind for r in blob.relocs if isinstance(r.target, rec.HandleRef)}
    for at, kind in held.items():
        if kind not in words.get(at, ()):
            expected = "/".join(sorted(k for k in words.get(at, ()) if k)) or "no handle"
            fail(where, f"the word at byte {at} holds a {kind} id; the kernel takes {expected} there")
    for at, kinds in words.items():
        if at not in held and "" not in kinds:
            fail(where, f"the word at byte {at} must hold the id of a {'/'.join(sorted(kinds))}")
    return id_arrays


def without_manifest(saved, tables: dict[int, dict]) -> list[int]:
    """The modules whose kernels the graph launches and that have no manifest (``load``'s ``tables``): a file
    saved before manifests, or one whose module file had its manifest cut off (the bare object is as honest
    a module file as the one that carried it, so the two cannot be told apart)."""
    kernels = saved.recording.kernels
    return sorted({kernels[op.kernel].module for op in rec.cpu_launches(saved.recording.ops)} - set(tables))


def check(saved, tables: dict[int, dict]) -> dict[int, list]:
    """Every kernel of a module with a manifest is listed there, and every launch of it matches its layout.

    Returns id(launch op) -> its arrays of handle ids ``(data, count, kinds)``: the ids are graph
    memory (a kernel or a copy may change them), so a replay checks them before the launch."""
    recording = saved.recording
    meshes = mesh_indices(recording.handles)
    for index, kernel in enumerate(recording.kernels):
        table = tables.get(kernel.module)
        if table is None:
            continue
        found = table.get(kernel.symbol)
        if found is None or found[0] != bool(kernel.adjoint):
            fail(f"kernels[{index}].symbol", f"{kernel.symbol} is not a kernel the module's manifest lists "
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
        if not rec.is_cpu_launch(op):
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
            fail(where(op, "adj_args"), "present or absent against the kernel's manifest")
        if op.adj_args is not None:
            found += check_blob(op.adj_args, adj, op, "adj_args")
        results[id(op)] = found  # read only (copied for each launch alike it)
        if found:
            id_arrays[id(op)] = found
    return id_arrays


def checked(saved, fetch, names, origin: str, carried_by: dict | None, allow_bare: bool) -> dict[int, list]:
    """The whole check of a load, in one pass: each module's manifest found (``load``), a module the graph
    launches without one refused unless ``allow_bare`` (``apic.loading.allow_files_without_manifests``), and
    every launch checked against its kernel's layout (``check``). Returns ``check``'s arrays of handle ids."""
    tables = load(saved, fetch, names, origin, carried_by)
    bare = without_manifest(saved, tables)
    if bare and not allow_bare:
        module = saved.modules[bare[0]]
        raise FormatError(
            f"module '{module.name}' (file '{module.file}' in {origin}) carries no kernel manifest, so nothing "
            "binds the graph's launches to what its kernels expect: the file was saved before manifests "
            "(2026-11-22), or its manifest was cut off. Load it, if you trust it, with "
            "apic.loading.allow_files_without_manifests = True (without those checks), and save it again")
    return check(saved, tables)
