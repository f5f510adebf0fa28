"""What a load takes from a module's kernel manifest rather than from the ``.wrp``: the parallel-safety claims
of its kernels and the SHA-256 of its generated source.

A ``.wrp`` is data; the module files are code, and the kernel manifest each carries (``apic.format.manifest``)
comes with that code. Two things a replay acts on describe the code, so they are sealed in the manifest at
save and a load takes them from there:

* a kernel's **split claim** (``split_writes``, ``split_world``, ``split_tiles``: proved at capture that its
  tasks, or its worlds, may run on several threads, and whether it needs a tile arena per thread). A forged
  claim on a kernel that writes across worlds would make ``threads=2`` compute other bits than a serial
  replay; a cleared tiles flag would let two threads share one tile arena. The manifest's ``split`` map
  lists ``symbol -> [writes, world rows or None, tiles]`` for each kernel proved splittable; a ``.wrp``
  whose claim for a kernel differs from it is refused. A manifest without the map (written before it, or a
  module whose file carries none) seals nothing: its kernels' claims are dropped and they replay serially.
* a kernel's **footprint verdicts** (``footprint``: ``symbol -> [writes, [[digest, index offsets], ...]]``):
  a kernel claimed by the footprint rule (``apic.record.parallel.footprint``) has no claim a load could check, since
  its verdicts rest on the index data each launch held; a save made with the generated source (which a
  threaded replay needs) seals the digest of each launch the parallel replay splits
  (``apic.record.parallel.footprint.sealed_digest``), and a load splits a launch of that kernel only where it
  has one of those digests. A manifest without the map seals none: those launches replay serially.
* the module's **generated source** (``source_fallback=True``), which a threaded replay compiles to range
  entries: the manifest names its SHA-256 (``source_sha256``). A source whose SHA-256 is another is not
  kept for the loaded module (nor compiled, nor saved again with it), whatever the ``.wrp`` says of it.
"""

from __future__ import annotations

import ctypes
import dataclasses


from apic.errors import FormatError
from apic.format import schema
from apic.record.parallel.footprint import SealedFootprint, sealed_digest
from apic.targets import files

FIELD = "split"  # the manifest key of the sealed claims
FOOTPRINT_FIELD = "footprint"  # ... and of the sealed footprint verdicts
MAX_VERDICTS = 4096  # footprint verdicts sealed for one kernel (distinct arguments and index data)
UNSEALED = ("its module's kernel manifest seals no parallel-safety claims (a file saved before they were "
            "sealed there, or a module file without a manifest): its launches replay serially")


def seal(recording, kernels) -> dict:
    """``symbol -> [writes, world rows or None, tiles]`` of each kernel index of ``kernels`` proved
    splittable (a forward kernel with ``split_writes``), for the manifest's ``split`` map."""
    sealed = {}
    for index in kernels:
        info = recording.kernels[index]
        if info.split_writes is not None and not info.adjoint:
            sealed[info.symbol] = [list(info.split_writes),
                                   None if info.split_world is None else list(info.split_world),
                                   bool(info.split_tiles)]
    return sealed


def seal_footprints(graph) -> dict:
    """``symbol -> [writes, [[digest, index offsets], ...]]`` of each kernel of ``graph`` (a CPU graph) whose
    launches the parallel replay splits by footprint, from the launches whose index data are still those
    they were judged on (for the manifest's ``footprint`` map). Judges the graph's launches where nothing
    had yet (their footprint evaluation, as a first parallel replay does); nothing for a graph without
    footprint claims."""
    if not any(info.split_footprint is not None for info in graph.recording.kernels):
        return {}
    sealed = {}
    for split in graph.program.splits:
        # guards that hold: the arguments and index data are still those the verdict was made on
        if split.footprint is None or not split.guards.hold():
            continue
        offsets, blob, dim = split.footprint
        digest = sealed_digest(ctypes.string_at(split.args, len(blob.data)), blob, dim, offsets)
        info = graph.recording.kernels[split.kernel]
        verdicts = sealed.setdefault(info.symbol, [list(info.split_footprint.writes), []])[1]
        verdict = [digest, list(offsets)]
        if verdict not in verdicts:
            verdicts.append(verdict)
    return sealed


def _offsets(value, where: str) -> tuple[int, ...]:
    if not isinstance(value, list) or len(value) > schema.MAX_SPLIT_WRITES or not all(
            type(v) is int and 0 <= v <= schema.MAX_INT for v in value):
        raise FormatError(f"invalid apic graph file: {where}: expected at most {schema.MAX_SPLIT_WRITES} "
                          "byte offsets")
    return tuple(value)


def sealed(manifest: bytes, where: str) -> tuple[str | None, dict | None]:
    """``(source_sha256, claims)`` a module's carried ``manifest`` (checked by ``apic.format.manifest``)
    seals: its generated source's SHA-256 (None: saved without it), and ``symbol -> (writes, world rows or
    None, tiles)`` (None: the manifest has no ``split`` map). ``where`` names the file in errors."""
    doc = schema.unpack_manifest(manifest, f"the kernel manifest of {where}")
    source, value = doc.get("source_sha256"), doc.get(FIELD)
    source = source if isinstance(source, str) else None
    if value is None:
        return source, None
    if not isinstance(value, dict):
        raise FormatError(f"invalid apic graph file: the kernel manifest of {where}: {FIELD}: expected a map")
    claims = {}
    for symbol, claim in value.items():
        at = f"the kernel manifest of {where}: {FIELD}[{str(symbol)[:64]!r}]"
        if not isinstance(symbol, str) or not isinstance(claim, list) or len(claim) != 3 or type(claim[2]) is not bool:
            raise FormatError(f"invalid apic graph file: {at}: expected [writes, rows or None, tiles]")
        world = None if claim[1] is None else _offsets(claim[1], at)
        claims[symbol] = (_offsets(claim[0], at), world, claim[2])
    return source, claims


def sealed_footprints(manifest: bytes, where: str) -> dict:
    """``symbol -> SealedFootprint`` a module's carried ``manifest`` seals (empty: no ``footprint`` map)."""
    value = schema.unpack_manifest(manifest, f"the kernel manifest of {where}").get(FOOTPRINT_FIELD)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise FormatError(f"invalid apic graph file: the kernel manifest of {where}: {FOOTPRINT_FIELD}: expected a map")
    found = {}
    for symbol, entry in value.items():
        at = f"the kernel manifest of {where}: {FOOTPRINT_FIELD}[{str(symbol)[:64]!r}]"
        if (not isinstance(symbol, str) or not isinstance(entry, list) or len(entry) != 2
                or not isinstance(entry[1], list) or len(entry[1]) > MAX_VERDICTS):
            raise FormatError(f"invalid apic graph file: {at}: expected [writes, at most {MAX_VERDICTS} verdicts]")
        verdicts = []
        for verdict in entry[1]:
            if (not isinstance(verdict, list) or len(verdict) != 2 or not isinstance(verdict[0], str)
                    or not files.SHA256.fullmatch(verdict[0])):
                raise FormatError(f"invalid apic graph file: {at}: a verdict is not [sha256, index offsets]")
            verdicts.append((verdict[0], _offsets(verdict[1], at)))
        found[symbol] = SealedFootprint(_offsets(entry[0], at), tuple(verdicts))
    return found


def bind(saved, carried: dict) -> tuple:
    """The kernels of ``saved`` (a CPU graph) with the split claims their modules' manifests seal.

    ``carried``: module index -> ``(manifest, what)`` of the manifest carried by the file whose code the
    load runs (``apic.format.source.LoadFiles.manifests``). A kernel claims what its manifest's ``split``
    map says, exactly, or the file is refused (a ``FormatError`` naming the kernel); a kernel of a module
    without that map (an older file) has its claim dropped and replays serially. A forward kernel without a
    split claim takes the footprint verdicts its manifest's ``footprint`` map seals, if any."""
    tables, footprints = {}, {}
    for index, (manifest, _) in carried.items():
        where = f"module file '{saved.modules[index].file}'"
        tables[index], footprints[index] = sealed(manifest, where)[1], sealed_footprints(manifest, where)
    kernels = []
    for index, info in enumerate(saved.recording.kernels):
        footprint = footprints.get(info.module, {}).get(info.symbol)
        if footprint is not None and info.split_writes is None and not info.adjoint:
            info = dataclasses.replace(info, split_footprint=footprint)
        claims = tables.get(info.module)
        if claims is None:
            if info.split_writes is not None:
                info = dataclasses.replace(info, split_writes=None, split_world=None, split_tiles=False,
                                           split_refused=UNSEALED)
            kernels.append(info)
            continue
        world = None if info.split_world is None else tuple(info.split_world)
        claimed = None if info.split_writes is None else (tuple(info.split_writes), world, bool(info.split_tiles))
        if claimed != claims.get(info.symbol):
            raise FormatError(
                f"invalid apic graph file: kernels[{index}]: its parallel-replay claim (split_writes / split_world "
                f"/ tiles: {_shown(claimed)}) is not the one sealed in its module's kernel manifest "
                f"({_shown(claims.get(info.symbol))}): a forged claim could make a threaded replay differ from a "
                "serial one")
        kernels.append(info)
    return tuple(kernels)


def _shown(claim) -> str:
    if claim is None:
        return "none"
    writes, world, tiles = claim
    return (f"writes {len(writes)} array(s), " + ("by task" if world is None else f"by world over {len(world)}")
            + (", tiles" if tiles else ""))
