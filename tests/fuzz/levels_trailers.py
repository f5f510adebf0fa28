"""CPU levels and kernel-manifest trailers: what a re-sealed file may claim about its objects.

Each mutation copies a seed (its ``.wrp`` and its modules folder) into a fresh folder and changes what
the file says about its objects, re-sealing everything the change touches so that every checksum passes:

* ``level-*`` (the ``.wrp`` only): ``target.cpu`` set to an x86-64 level above the recorded features, a
  level with some of its features dropped, a level with every feature this host has, a CPU name that is
  no level (long, empty, hostile characters), the features list emptied or filled with unknown names;
* ``trailer-*`` (a module object or saved source, the ``.wrp`` naming the new file's name, size and
  SHA-256): the manifest and its trailer cut off, the trailer's size field changed (0, one off, past the
  file, 2^64-1), its magic changed, a byte of the manifest flipped, a second manifest appended behind the
  first, or the manifest of another module file carried instead.

The loader must refuse each with an ``ApicError`` naming the problem, or load it with every check the
manifest gives (a file may legitimately say less than it could), never crash, and never compile or run
code for a CPU level the file's features and this host do not both have.
"""

from __future__ import annotations

import hashlib
import os
import random
import shutil
import struct

LEVEL_STRATEGIES = ("level-above-features", "level-features-dropped", "level-not-a-level", "level-features-odd")
TRAILER_STRATEGIES = ("trailer-stripped", "trailer-size", "trailer-magic", "trailer-manifest-byte",
                      "trailer-doubled", "trailer-swapped")
STRATEGIES = LEVEL_STRATEGIES + TRAILER_STRATEGIES
_TRAILER = struct.Struct("<Q8s")  # as apic.format.manifest (kept here: a fuzzer states what it forges)


def make(rng: random.Random, seed_wrp: str, dest: str, n: int, strategy: str | None = None) -> tuple[str, str]:
    """Write one mutated copy of ``seed_wrp`` under ``dest``; returns (strategy, path of the copied ``.wrp``).
    ``strategy`` (default: drawn from ``rng``) replays a corpus entry."""
    import msgpack

    from apic.format import schema, writer

    strategy = strategy or rng.choice(STRATEGIES)
    folder = os.path.join(dest, f"edge-{n}")
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    wrp, modules = os.path.join(folder, "g.wrp"), os.path.join(folder, "g_modules")
    shutil.copytree(seed_wrp[: -len(".wrp")] + "_modules", modules)
    with open(seed_wrp, "rb") as f:
        doc = msgpack.unpackb(f.read()[schema.HEADER.size :], raw=False, strict_map_key=False)
    if strategy.startswith("level"):
        _level(rng, doc, strategy)
    else:
        _trailer(rng, doc, modules, strategy)
    with open(wrp, "wb") as f:
        f.write(writer.encode(doc))
    return strategy, wrp


def _level(rng: random.Random, doc: dict, strategy: str) -> None:
    import platform

    from apic import _compat
    from apic.targets.cpu import cpu_family

    CPU_LEVELS = cpu_family(platform.machine()).CPU_LEVELS  # this host's family's levels, lowest first
    levels = list(CPU_LEVELS)
    target = doc["target"]
    if strategy == "level-above-features":
        lower = rng.randrange(len(levels) - 1)
        target["cpu"], target["features"] = rng.choice(levels[lower + 1:]), sorted(CPU_LEVELS[levels[lower]])
    elif strategy == "level-features-dropped":
        level = rng.choice(levels)
        features = sorted(CPU_LEVELS[level])
        target["cpu"] = level
        target["features"] = rng.sample(features, rng.randrange(len(features)))
    elif strategy == "level-not-a-level":
        target["cpu"] = rng.choice(["", "x86-64-v5", "X86-64-V4", "x86-64-v4 ", "x86-64-v4\0", "native",
                                    "x" * 256, "x" * 257, "\x1b[2J", _compat.native_target()["cpu"]])
    else:  # level-features-odd
        target["cpu"] = rng.choice(levels + [target["cpu"]])
        target["features"] = rng.choice([[], ["avx512f"] * 3, ["nonsense", "+avx2", "-sse2"],
                                         sorted(_compat.native_target()["features"]), [str(i) for i in range(300)]])


def _module_files(doc: dict) -> list[tuple[dict, str]]:
    """``(entry, extension)`` of every module object and saved source the ``.wrp`` names."""
    found = []
    for module in doc["modules"]:
        found.append((module, ".o"))
        if module.get("source"):
            found.append((module["source"], ".cpp"))
    return found


def _split(data: bytes) -> tuple[bytes, bytes] | None:
    """``(bare, manifest)`` of a file carrying a manifest, else None."""
    if len(data) < _TRAILER.size:
        return None
    size, magic = _TRAILER.unpack_from(data, len(data) - _TRAILER.size)
    end = len(data) - _TRAILER.size
    if magic != b"apicKRN1" or size > end:
        return None
    return data[: end - size], data[end - size : end]


def _trailer(rng: random.Random, doc: dict, modules: str, strategy: str) -> None:
    from apic.targets import cpu

    files = [(entry, ext) for entry, ext in _module_files(doc) if os.path.isfile(os.path.join(modules, entry["file"]))]
    carried = [(entry, ext) for entry, ext in files if _split(_read(modules, entry["file"])) is not None]
    if not carried:
        return  # a seed without kernels: nothing carries a manifest (the copy loads as the seed does)
    entry, ext = rng.choice(carried)
    data = _read(modules, entry["file"])
    bare, manifest = _split(data)
    if strategy == "trailer-stripped":
        new = bare
    elif strategy == "trailer-size":
        size = rng.choice([0, 1, len(manifest) - 1, len(manifest) + 1, len(data), 2**64 - 1])
        new = bare + manifest + _TRAILER.pack(size, b"apicKRN1")
    elif strategy == "trailer-magic":
        new = bare + manifest + _TRAILER.pack(len(manifest), rng.choice([b"apicKRN2", b"APICKRN1", b"\0" * 8]))
    elif strategy == "trailer-manifest-byte":
        flipped = bytearray(manifest)
        flipped[rng.randrange(len(flipped))] ^= 1 << rng.randrange(8)
        new = bare + bytes(flipped) + _TRAILER.pack(len(flipped), b"apicKRN1")
    elif strategy == "trailer-doubled":
        new = data + manifest + _TRAILER.pack(len(manifest), b"apicKRN1")
    else:  # trailer-swapped: another carried file's manifest behind this file's bare bytes
        _, other = _split(_read(modules, rng.choice(carried)[0]["file"]))
        new = bare + other + _TRAILER.pack(len(other), b"apicKRN1")
    os.unlink(os.path.join(modules, entry["file"]))
    digest = hashlib.sha256(new).hexdigest()
    owner = next(m for m in doc["modules"] if m is entry or m.get("source") is entry)
    name = owner["name"]
    entry.update(file=cpu.module_file_name(name, digest, ext), sha256=digest, size=len(new))
    with open(os.path.join(modules, entry["file"]), "wb") as f:
        f.write(new)


def _read(folder: str, name: str) -> bytes:
    with open(os.path.join(folder, name), "rb") as f:
        return f.read()
