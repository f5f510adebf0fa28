"""Fuzz the ``.wrp`` loader: mutations of real saved graphs, each loaded in a child process.

Run it from the repository root (results and the inputs that found something go to ``--workdir``)::

    python tests/fuzz_wrp.py --minutes 10            # or --inputs N; --seed S makes a run repeatable

The parent process saves a few real graphs (the *seeds*), then mutates them, one input at a time:

* byte level, header left as it is: bit flips, byte edits, insertions, deletions, truncation,
  extension, header fields (magic, version, reserved, length); most of these stop at the checksum;
* byte level, header re-sealed (length and SHA-256 recomputed): the same edits inside the body, and
  msgpack-aware ones: a container, string or binary whose length field lies (up to 2^32 - 1), a type
  byte changed, a number re-encoded (uint64 max, int64 min, NaN), a node replaced by a hostile one
  (deep nesting, extension types, invalid UTF-8, integer map keys), a node copied over another;
* field level, re-encoded with ``apic.format.writer.encode`` (so the header is valid and only the
  validator stands between the input and native code): a field set to a boundary number, a swapped
  number, another type, a path-escaping module file name, a libc symbol; keys deleted or added;
  list items dropped, duplicated, swapped; binary fields grown, shrunk or patched with boundary
  int32/int64 values (array descriptors: shape, strides, ndim), relocations retargeted.

A child process (``--worker``) loads each input with ``wp.capture_load`` or
``wp.capture_load_from_bytes`` (alternately; sometimes with corrupted module binaries), replays every
graph that loads (from the command line; ``fuzz(replay_all=False)``, as the smoke test uses, replays
only graphs without kernel launches and indexed arrays), replays it again with ``threads=2`` from the
same memory and compares the two bit for bit (``tests/fuzz/threaded.py``; graphs without native handles),
and runs ``python -m apic inspect`` (text and
``--json``) on it in-process; a sample also runs the real ``python -m apic inspect`` in a fresh
process. Every input must end in an ``apic.ApicError`` or a correct load. Anything else is a
finding: another exception type (a traceback), a crash of the child (a signal), a hang (no answer
within ``--timeout`` seconds), output on the child's stderr (native code printing), or an
allocation the child's address-space limit refuses outside the regions the file declares. The child
runs under an address-space limit a few GiB above its warmed-up size, with apic's graph-memory limit
set lower, so an allocation larger than the validated regions permit fails visibly.

Every ``--fs-every``-th input is instead a seed with one odd entry in its modules folder
(``tests/fuzz/fs_odd.py``: symlinks, a FIFO, a directory, a wrong size, a symlinked folder), and every
``--edge-every``-th a seed whose CPU level or a module file's kernel-manifest trailer was changed, the
``.wrp`` re-sealed to match (``tests/fuzz/levels_trailers.py``).

The seeds' module binaries are compiled for this machine and warp-lang version, so inputs are made
afresh each run; findings are written as the raw bytes (``finding-N.wrp``) and, for field-level
edits, as a recipe (``finding-N.json``: seed name + edits) that ``apply_recipe`` replays on a freshly
saved seed. ``tests/data/fuzz_corpus/`` keeps those that found bugs; ``test_fuzz_corpus.py``
replays them.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import copy
import hashlib
import io
import json
import os
import random
import select
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field

import warp as wp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # tests/ (the fuzz package), when run as a script
from fuzz import control_seed, fs_odd, levels_trailers, threaded, trust_paths  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
for _path in (HERE, REPO):
    if _path not in sys.path:
        sys.path.insert(0, _path)

HEADER = struct.Struct("<8sIIQ32s")  # as apic.format.schema.HEADER (kept here so the worker protocol needs no apic)
SEEDS = ("memory", "sim", "indexed", "handles", "control", "alike")


# ==================================================================================================
# Seeds: real graphs, captured and saved with apic
# ==================================================================================================
@wp.kernel
def _indexed_gather(src: wp.indexedarray(dtype=float), dst: wp.array(dtype=float), scale: float):
    i = wp.tid()
    dst[i] = src[i] * scale


@wp.kernel
def _scaled_copy(src: wp.array(dtype=float), dst: wp.array(dtype=float), scale: float):
    i = wp.tid()
    dst[i] = src[i] * scale


@wp.kernel
def _mesh_and_grid(mesh: wp.uint64, grid: wp.uint64, points: wp.array(dtype=wp.vec3), out: wp.array(dtype=float)):
    i = wp.tid()
    q = wp.mesh_query_point_no_sign(mesh, points[i], 10.0)
    query = wp.hash_grid_query(grid, points[i], 0.5)
    index = int(0)
    while wp.hash_grid_query_next(query, index):
        out[i] += float(index)
    out[i] += q.u


def make_seeds(folder: str) -> dict[str, str]:
    """Capture and save the seed graphs into ``folder``; returns name -> ``.wrp`` path.

    * ``memory``: copies (contiguous, strided, with offsets), fills, ``zero_``, graph-owned memory;
      no kernels and no indexed arrays, so any file that validates is safe to replay;
    * ``sim``: tests/persist_kernels.Sim, forward and backward launches, structs, 2-d arrays;
    * ``indexed``: a launch taking an indexed array, indexed copy and fill;
    * ``handles``: a wp.Mesh (refit) and a wp.HashGrid (built) that a kernel queries: loading
      builds them again from the file's arrays and options.
    """
    import numpy as np

    import apic  # noqa: F401  (installs the capture shims)
    import persist_kernels as pk

    os.makedirs(folder, exist_ok=True)
    paths = {}
    cpu = "cpu"

    a = wp.array(np.arange(48, dtype=np.float32).reshape(8, 6), device=cpu)
    b = wp.zeros((8, 6), dtype=float, device=cpu)
    col = wp.zeros(8, dtype=float, device=cpu)
    big = wp.zeros(64, dtype=float, device=cpu)
    with wp.ScopedCapture(device=cpu, apic=True) as cap:
        wp.copy(b, a)
        wp.copy(col, a[:, 1])
        a[:, 0].fill_(2.0)
        big.fill_(1.5)
        scratch = wp.zeros(16, dtype=float, device=cpu)
        wp.copy(scratch, big, count=16)
        wp.copy(big, scratch, dest_offset=8, count=8)
        b.zero_()
    wp.capture_save(cap.graph, os.path.join(folder, "memory"), inputs={"a": a}, outputs={"b": b, "col": col})
    paths["memory"] = os.path.join(folder, "memory.wrp")

    sim = pk.Sim(0)
    graph = pk.capture(sim)
    wp.capture_save(graph, os.path.join(folder, "sim"), inputs=sim.inputs(), outputs=sim.outputs())
    paths["sim"] = os.path.join(folder, "sim.wrp")

    src = wp.array(np.arange(16, dtype=np.float32), device=cpu)
    idx = wp.array(np.array([3, 1, 4, 1, 5, 9], np.int32), device=cpu)
    dst = wp.zeros(6, dtype=float, device=cpu)
    other = wp.zeros(16, dtype=float, device=cpu)
    with wp.ScopedCapture(device=cpu, apic=True) as cap:
        view = wp.indexedarray(src, [idx])
        wp.launch(_indexed_gather, dim=6, inputs=[view, dst, 2.0], device=cpu)
        wp.copy(wp.indexedarray(other, [idx]), view)
        wp.indexedarray(other, [idx]).fill_(0.5)
    wp.capture_save(cap.graph, os.path.join(folder, "indexed"), inputs={"src": src}, outputs={"dst": dst})
    paths["indexed"] = os.path.join(folder, "indexed.wrp")

    points = wp.array(np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0], [1, 1, 0]], np.float32), dtype=wp.vec3, device=cpu)
    mesh = wp.Mesh(points=points, indices=wp.array([0, 1, 2, 1, 3, 2], dtype=wp.int32, device=cpu))
    grid = wp.HashGrid(4, 4, 4, device=cpu)
    out = wp.zeros(4, dtype=float, device=cpu)
    with wp.ScopedCapture(device=cpu, apic=True) as cap:
        mesh.refit()
        grid.build(points, 0.5)
        wp.launch(_mesh_and_grid, dim=4, inputs=[mesh.id, grid.id, points, out], device=cpu)
    wp.capture_save(cap.graph, os.path.join(folder, "handles"), inputs={"points": points}, outputs={"out": out})
    paths["handles"] = os.path.join(folder, "handles.wrp")
    paths["control"] = control_seed.save_control(folder, _scaled_copy)
    paths["alike"] = trust_paths.save_alike(folder)  # launches read alike, a claim sealed in its manifest
    return {name: paths[name] for name in SEEDS}


# ==================================================================================================
# Encoding: header, msgpack bodies, recipes
# ==================================================================================================
def seal(body: bytes, version: int | None = None) -> bytes:
    """A valid apic header (length and SHA-256 of ``body``) followed by ``body``.

    The version defaults to the one the body needs (2 with native handles, else 1), so that edits
    reach the checks past the header.
    """
    if version is None:
        version = 2 if b"\xa7handles" in body else 1
    return HEADER.pack(b"APICWRP\0", version, 0, len(body), hashlib.sha256(body).digest()) + body


def encode(doc) -> bytes:
    import msgpack

    return seal(msgpack.packb(doc, use_bin_type=True))


def decode(data: bytes):
    import msgpack

    return msgpack.unpackb(data[HEADER.size :], raw=False, strict_map_key=False)


def to_json(value):
    """A msgpack tree as JSON (bytes as ``{"$bytes": base64}``; floats as ``{"$float": repr}``)."""
    if isinstance(value, bytes):
        return {"$bytes": base64.b64encode(value).decode()}
    if isinstance(value, float):
        return {"$float": repr(value)}
    if isinstance(value, list):
        return [to_json(v) for v in value]
    if isinstance(value, dict):
        if all(isinstance(k, str) for k in value):
            return {k: to_json(v) for k, v in value.items()}
        return {"$map": [[to_json(k), to_json(v)] for k, v in value.items()]}
    return value


def from_json(value):
    if isinstance(value, list):
        return [from_json(v) for v in value]
    if isinstance(value, dict):
        if set(value) == {"$bytes"}:
            return base64.b64decode(value["$bytes"])
        if set(value) == {"$float"}:
            return float(value["$float"])
        if set(value) == {"$map"}:
            return {from_json(k): from_json(v) for k, v in value["$map"]}
        return {k: from_json(v) for k, v in value.items()}
    return value


def _parent(doc, path):
    target = doc
    for key in path[:-1]:
        target = target[key]
    return target


def apply_edit(doc, edit: dict) -> None:
    """Apply one recipe edit in place: ``set`` / ``del`` / ``insert`` / ``swap`` at ``path``, or ``copy``
    (``path`` gets the value at ``from``: a region number that differs between runs, say)."""
    op, path = edit["op"], edit["path"]
    parent = _parent(doc, path)
    last = path[-1]
    if op == "set":
        parent[last] = from_json(edit["value"])
    elif op == "del":
        del parent[last]
    elif op == "insert":
        parent.insert(last, from_json(edit["value"]))
    elif op == "copy":
        source = edit["from"]
        parent[last] = copy.deepcopy(_parent(doc, source)[source[-1]])
    elif op == "swap":
        other_parent, other = _parent(doc, edit["path2"]), edit["path2"][-1]
        parent[last], other_parent[other] = other_parent[other], parent[last]
    else:
        raise ValueError(f"unknown edit {op!r}")


def apply_recipe(recipe: dict, seeds: dict[str, str]) -> bytes:
    """The input a recipe describes, made from this process's seed ``recipe["seed"]``."""
    with open(seeds[recipe["seed"]], "rb") as f:
        doc = decode(f.read())
    for edit in recipe["edits"]:
        apply_edit(doc, edit)
    return encode(doc)


# ==================================================================================================
# msgpack structure, for byte-level edits that keep the header valid
# ==================================================================================================
@dataclass
class Node:
    start: int
    end: int  # one past the last byte of the whole object, children included
    kind: str  # int, float, nil, bool, str, bin, ext, array, map
    length_at: int = -1  # where an explicit length field is (-1: none, or in the type byte)
    length_size: int = 0


_FIXED = {0xC0: ("nil", 1), 0xC2: ("bool", 1), 0xC3: ("bool", 1), 0xCA: ("float", 5), 0xCB: ("float", 9),
          0xCC: ("int", 2), 0xCD: ("int", 3), 0xCE: ("int", 5), 0xCF: ("int", 9), 0xD0: ("int", 2),
          0xD1: ("int", 3), 0xD2: ("int", 5), 0xD3: ("int", 9), 0xD4: ("ext", 3), 0xD5: ("ext", 4),
          0xD6: ("ext", 6), 0xD7: ("ext", 10), 0xD8: ("ext", 18)}
_SIZED = {0xC4: ("bin", 1, 0), 0xC5: ("bin", 2, 0), 0xC6: ("bin", 4, 0), 0xC7: ("ext", 1, 1), 0xC8: ("ext", 2, 1),
          0xC9: ("ext", 4, 1), 0xD9: ("str", 1, 0), 0xDA: ("str", 2, 0), 0xDB: ("str", 4, 0)}
_CONTAINERS = {0xDC: ("array", 2), 0xDD: ("array", 4), 0xDE: ("map", 2), 0xDF: ("map", 4)}


def msgpack_nodes(data: bytes, limit: int = 200_000) -> list[Node]:
    """Every object in a well-formed msgpack document, in order (pre-order walk)."""
    nodes: list[Node] = []

    def walk(at: int) -> int:
        if len(nodes) >= limit:
            raise ValueError("too many nodes")
        b = data[at]
        node = Node(at, at, "")
        nodes.append(node)
        if b <= 0x7F or b >= 0xE0:
            node.kind, node.end = "int", at + 1
        elif 0x80 <= b <= 0x8F or 0x90 <= b <= 0x9F:
            node.kind = "map" if b <= 0x8F else "array"
            count = (b & 0x0F) * (2 if b <= 0x8F else 1)
            pos = at + 1
            for _ in range(count):
                pos = walk(pos)
            node.end = pos
        elif 0xA0 <= b <= 0xBF:
            node.kind, node.end = "str", at + 1 + (b & 0x1F)
        elif b in _FIXED:
            node.kind, size = _FIXED[b]
            node.end = at + size
        elif b in _SIZED:
            node.kind, size, extra = _SIZED[b]
            node.length_at, node.length_size = at + 1, size
            n = int.from_bytes(data[at + 1 : at + 1 + size], "big")
            node.end = at + 1 + size + extra + n
        elif b in _CONTAINERS:
            node.kind, size = _CONTAINERS[b]
            node.length_at, node.length_size = at + 1, size
            count = int.from_bytes(data[at + 1 : at + 1 + size], "big") * (2 if node.kind == "map" else 1)
            pos = at + 1 + size
            for _ in range(count):
                pos = walk(pos)
            node.end = pos
        else:
            raise ValueError(f"bad type byte {b:#x}")
        return node.end

    walk(0)
    return nodes


# Hostile msgpack fragments, each a complete object (or a lie about one).
HOSTILE = [
    b"\x91" * 5000 + b"\xc0",  # deep nesting (beyond msgpack's stack)
    b"\x91" * 900 + b"\xc0",  # deep, but inside it
    b"\xdd\xff\xff\xff\xff\xc0",  # array32 claiming 2^32 - 1 items
    b"\xdf\xff\xff\xff\xff\xc0\xc0",  # map32 claiming 2^32 - 1 pairs
    b"\xc6\xff\xff\xff\xff\x00",  # bin32 claiming 4 GiB
    b"\xdb\xff\xff\xff\xf0abc",  # str32 claiming 4 GiB
    b"\xc9\x7f\xff\xff\xff\x05ab",  # ext32 claiming 2 GiB
    b"\xd6\xff\x00\x00\x00\x01",  # timestamp extension
    b"\xd7\xff" + b"\xff" * 8,  # timestamp 64 with out-of-range nanoseconds
    b"\xc7\x03\x05abc",  # ext8, application type 5
    b"\xa3\xff\xfe\xfd",  # invalid UTF-8
    b"\x81\x01\x02",  # integer map key
    b"\x81\x90\xc0",  # array map key
    b"\x81\xc0\xc0",  # nil map key
    b"\x82\xa1a\x01\xa1a\x02",  # duplicate key
    b"\xcf\xff\xff\xff\xff\xff\xff\xff\xff",  # uint64 max
    b"\xd3\x80\x00\x00\x00\x00\x00\x00\x00",  # int64 min
    b"\xcb\x7f\xf8\x00\x00\x00\x00\x00\x00",  # NaN
    b"\xcb\x7f\xf0\x00\x00\x00\x00\x00\x00",  # +inf
    b"\xca\x3f\x80\x00\x00",  # float32 1.0
    b"\xc1",  # never used
    b"\xc0", b"\xc2", b"\xc3", b"\x90", b"\x80", b"\xa0", b"\xc4\x00",
]


# ==================================================================================================
# Mutations
# ==================================================================================================
INTS = [0, 1, -1, 2, 3, 4, 7, 8, 12, 15, 16, 24, 31, 32, 48, 50, 52, 55, 56, 57, 63, 64, 65, 88, 96, 103, 104,
        127, 128, 255, 256, 4095, 4096, 2**15 - 1, 2**16, 2**20, 2**20 + 1, 2**31 - 1, 2**31, -(2**31), 2**32 - 1,
        2**32, 2**40, 2**46, 2**46 + 1, 2**47, 2**53, 2**62, 2**63 - 1, 2**63, 2**64 - 1, -(2**63)]
STRINGS = ["", "x", ".", "..", "../x.o", "../../../../etc/passwd", "/etc/passwd", "a/b.o", "a\\b.o", ".x.o", "x.o",
           "x.o\0", "X" * 201 + ".o", "X" * 5000, "\u00e9.o", "memcpy", "printf", "abort", "system", "exit",
           "wp_memcpy_h2h", "malloc", "x_cpu_forward", "x_cpu_backward", "bounds-by-value-v1", "bounds-by-pointer-v1",
           "input", "output", "float32", "vec3f", "<f4", "<f8", "|b1", "<i4", "O", "V8", "<U3", "M8[s]", "f4,f4",
           "(2,)f4", ",f4", "f4,,", "(,)f4", "((1,),)f4", "<c16", "S3", "linux", "win32", "x86_64", "aarch64", "little",
           "big", "apic.wrp", "0" * 64]
OTHER_TYPES = [None, True, False, 0, -1, 1.5, float("nan"), float("inf"), "", b"", [], {}, [0, 0], [0, 0, 0],
               {"data": b"", "relocs": []}, {"data": b"\0" * 56, "relocs": [[0, 0, 0]]}]


def _all_paths(value, prefix=()):
    """Every path in a msgpack tree (lists of keys and indices), the root excepted."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield prefix + (key,)
            yield from _all_paths(item, prefix + (key,))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield prefix + (i,)
            yield from _all_paths(item, prefix + (i,))


def _get(doc, path):
    for key in path:
        doc = doc[key]
    return doc


class Mutator:
    """Random mutations of the seeds (repeatable for a given ``random.Random``)."""

    BYTE_STRATEGIES = ("bitflip", "bytes", "truncate", "extend", "header")
    SEALED_STRATEGIES = ("body-bytes", "msgpack-length", "msgpack-type", "msgpack-number", "msgpack-splice",
                         "msgpack-copy", "raw-alike")
    TREE_STRATEGIES = ("tree-value", "tree-number", "tree-type", "tree-structure", "tree-blob", "tree-descriptor",
                       "tree-reloc", "tree-sequence", "tree-module", "tree-claim", "tree-multi")

    def __init__(self, rng: random.Random, seeds: dict[str, str]) -> None:
        self.rng = rng
        self.files = {}
        self.docs = {}
        self.nodes = {}
        self.paths = {}
        for name, path in seeds.items():
            with open(path, "rb") as f:
                data = f.read()
            self.files[name] = data
            self.docs[name] = decode(data)
            self.nodes[name] = msgpack_nodes(data[HEADER.size :])
            self.paths[name] = [p for p in _all_paths(self.docs[name])]
        self.weights = ([(s, 1.0) for s in self.BYTE_STRATEGIES]
                        + [(s, 4.0 if s == "raw-alike" else 1.5) for s in self.SEALED_STRATEGIES]
                        + [(s, 3.0) for s in self.TREE_STRATEGIES])

    # -- entry point -------------------------------------------------------------------------------
    def mutate(self, seed: str) -> tuple[str, bytes, dict | None]:
        """One input made from ``seed``: (strategy, bytes, recipe or None)."""
        rng = self.rng
        strategies, weights = zip(*self.weights)
        while True:
            strategy = rng.choices(strategies, weights)[0]
            try:
                if strategy.startswith("tree"):
                    edits = self.tree_edits(seed, strategy)
                    recipe = {"seed": seed, "edits": edits}
                    doc = copy.deepcopy(self.docs[seed])
                    for edit in edits:
                        apply_edit(doc, edit)
                    return strategy, encode(doc), recipe
                return strategy, getattr(self, "s_" + strategy.replace("-", "_"))(seed), None
            except (OverflowError, ValueError, TypeError, IndexError, KeyError, AttributeError, _Skip):
                continue  # a value msgpack cannot encode, or nothing to edit here: draw again

    # -- byte level --------------------------------------------------------------------------------
    def _byte_edit(self, data: bytearray) -> bytearray:
        rng = self.rng
        kind = rng.randrange(5)
        at = rng.randrange(len(data)) if data else 0
        if kind == 0:
            for _ in range(rng.choice((1, 1, 2, 4, 8))):
                i = rng.randrange(len(data))
                data[i] ^= 1 << rng.randrange(8)
        elif kind == 1:
            for _ in range(rng.choice((1, 2, 4))):
                data[rng.randrange(len(data))] = rng.choice((0, 1, 0x7F, 0x80, 0xC1, 0xFF, rng.randrange(256)))
        elif kind == 2:
            data[at:at] = bytes(rng.randrange(256) for _ in range(rng.choice((1, 2, 4, 8, 64))))
        elif kind == 3:
            del data[at : at + rng.choice((1, 2, 4, 8, 64, 1000))]
        else:
            n = rng.choice((1, 4, 8))
            data[at : at + n] = bytes([0xFF]) * n
        return data

    def s_bitflip(self, seed):
        data = bytearray(self.files[seed])
        for _ in range(self.rng.choice((1, 1, 1, 2, 3, 8))):
            i = self.rng.randrange(len(data))
            data[i] ^= 1 << self.rng.randrange(8)
        return bytes(data)

    def s_bytes(self, seed):
        return bytes(self._byte_edit(bytearray(self.files[seed])))

    def s_truncate(self, seed):
        data = self.files[seed]
        cut = self.rng.choice((0, 1, 4, 7, 8, 12, 16, 23, 24, 55, 56, 57, self.rng.randrange(len(data)), len(data) - 1))
        return data[:cut]

    def s_extend(self, seed):
        data = self.files[seed]
        return data + self.rng.choice((b"\0", b"\xc0", b"\x90", b"junk" * 100, bytes(4096)))

    def s_header(self, seed):
        rng = self.rng
        data = bytearray(self.files[seed])
        magic, version, reserved, length, digest = HEADER.unpack_from(data)
        field_ = rng.randrange(6)
        if field_ == 0:
            magic = rng.choice((b"APICWRP\x01", b"WRP1\x03\0\0\0", b"WRP1\x12\0\0\0", b"WRP1\xff\xff\0\0", b"\0" * 8))
        elif field_ == 1:
            version = rng.choice((0, 2, 3, 2**31, 2**32 - 1))
        elif field_ == 2:
            reserved = rng.choice((1, 2**32 - 1))
        elif field_ == 3:
            length = rng.choice((0, 1, length - 1, length + 1, 2**32, 2**63, 2**64 - 1))
        elif field_ == 4:
            digest = bytes(32)
        else:
            return bytes(data[: rng.choice((4, 8, 12, 16, 24))])
        return HEADER.pack(magic, version, reserved, length, digest) + bytes(data[HEADER.size :])

    # -- byte level, re-sealed ---------------------------------------------------------------------
    def _body(self, seed) -> bytearray:
        return bytearray(self.files[seed][HEADER.size :])

    def s_body_bytes(self, seed):
        return seal(bytes(self._byte_edit(self._body(seed))))

    def _node(self, seed, kinds=None) -> Node:
        nodes = [n for n in self.nodes[seed] if kinds is None or n.kind in kinds]
        if not nodes:
            raise _Skip
        return self.rng.choice(nodes)

    def s_msgpack_length(self, seed):
        body = self._body(seed)
        node = self._node(seed, ("str", "bin", "ext", "array", "map"))
        if node.length_size:
            size = node.length_size
            old = int.from_bytes(body[node.length_at : node.length_at + size], "big")
            new = self.rng.choice((0, 1, old - 1, old + 1, old * 2, 2 ** (8 * size) - 1, 2 ** (8 * size - 1)))
            body[node.length_at : node.length_at + size] = (new % 2 ** (8 * size)).to_bytes(size, "big")
        else:  # a fix type: the length is in the type byte's low bits
            b = body[node.start]
            mask = 0x1F if 0xA0 <= b <= 0xBF else 0x0F
            body[node.start] = (b & ~mask & 0xFF) | self.rng.randrange(mask + 1)
        return seal(bytes(body))

    def s_msgpack_type(self, seed):
        body = self._body(seed)
        node = self._node(seed)
        b = body[node.start]
        swaps = {0xC4: 0xD9, 0xD9: 0xC4, 0xC5: 0xDA, 0xDA: 0xC5, 0xC6: 0xDB, 0xDB: 0xC6, 0xDC: 0xDE, 0xDE: 0xDC,
                 0xDD: 0xDF, 0xDF: 0xDD, 0xCC: 0xD0, 0xCD: 0xD1, 0xCE: 0xD2, 0xCF: 0xD3, 0xD0: 0xCC, 0xD1: 0xCD,
                 0xD2: 0xCE, 0xD3: 0xCF, 0xC2: 0xC3, 0xC3: 0xC2, 0xC0: 0xC2}
        if b in swaps and self.rng.random() < 0.7:
            body[node.start] = swaps[b]
        elif 0x80 <= b <= 0x9F:
            body[node.start] = b ^ 0x10  # fixmap <-> fixarray
        else:
            body[node.start] = self.rng.choice((0xC0, 0xC1, 0xC7, 0xD4, 0xD8, 0xCA, 0xCB, 0xE0, 0x7F))
        return seal(bytes(body))

    def s_msgpack_number(self, seed):
        body = self._body(seed)
        node = self._node(seed, ("int", "float"))
        rng = self.rng
        value = rng.choice(INTS)
        if rng.random() < 0.2:
            new = rng.choice(HOSTILE[15:20])
        elif value < 0:
            new = b"\xd3" + struct.pack(">q", value) if value >= -(2**63) else b"\xc0"
        else:
            width = rng.choice([w for w in (1, 2, 4, 8) if value < 2 ** (8 * w)])  # also non-minimal encodings
            new = bytes([{1: 0xCC, 2: 0xCD, 4: 0xCE, 8: 0xCF}[width]]) + value.to_bytes(width, "big")
        body[node.start : node.end] = new
        return seal(bytes(body))

    def s_msgpack_splice(self, seed):
        body = self._body(seed)
        node = self._node(seed)
        body[node.start : node.end] = self.rng.choice(HOSTILE)
        return seal(bytes(body))

    def s_msgpack_copy(self, seed):
        body = self._body(seed)
        src, dst = self._node(seed), self._node(seed)
        if src.start <= dst.start < src.end or dst.start <= src.start < dst.end:
            raise _Skip  # one inside the other
        body[dst.start : dst.end] = bytes(body[src.start : src.end])
        return seal(bytes(body))

    # -- field level (recipes) ---------------------------------------------------------------------
    def _path(self, seed, want=None, under=None) -> tuple:
        paths = self.paths[seed]
        if under is not None:
            paths = [p for p in paths if p[: len(under)] == under]
        if want is not None:
            paths = [p for p in paths if want(_get(self.docs[seed], p))]
        if not paths:
            raise _Skip
        return self.rng.choice(paths)

    def _number_near(self, seed) -> int:
        """A number that means something in this document: another field's value, +-1."""
        ints = [v for p in self.paths[seed] if type(v := _get(self.docs[seed], p)) is int]
        return self.rng.choice(ints) + self.rng.choice((0, 0, 1, -1))

    def tree_edits(self, seed, strategy) -> list[dict]:
        if strategy == "tree-multi":
            edits = []
            for _ in range(self.rng.randint(2, 4)):
                edits += self.tree_edits(seed, self.rng.choice(self.TREE_STRATEGIES[:-1]))
            # later edits may address paths an earlier one removed: keep the ones that apply
            doc, kept = copy.deepcopy(self.docs[seed]), []
            for edit in edits:
                try:
                    apply_edit(doc, edit)
                    kept.append(edit)
                except (KeyError, IndexError, TypeError, AttributeError):
                    pass
            return kept
        return getattr(self, "t_" + strategy[5:])(seed)

    def s_raw_alike(self, seed):  # launches re-encoded: longer headers, unknown keys (tests/fuzz/trust_paths.py)
        return trust_paths.raw_alike(self.rng, self.docs[seed], seal)

    def t_claim(self, seed):  # a kernel's split claim forged, cleared or swapped (tests/fuzz/trust_paths.py)
        return trust_paths.claim_edit(self.rng, self.docs[seed])

    def t_value(self, seed):
        rng = self.rng
        path = self._path(seed)
        old = _get(self.docs[seed], path)
        if type(old) is int:
            value = rng.choice(INTS)
        elif isinstance(old, str):
            value = rng.choice(STRINGS)
        else:
            value = rng.choice(OTHER_TYPES + INTS[:8] + STRINGS[:6])
        return [{"op": "set", "path": list(path), "value": to_json(value)}]

    def t_number(self, seed):
        rng = self.rng
        path = self._path(seed, lambda v: type(v) is int)
        old = _get(self.docs[seed], path)
        choice = rng.randrange(4)
        if choice == 0:  # swap with another number
            other = self._path(seed, lambda v: type(v) is int)
            return [{"op": "swap", "path": list(path), "path2": list(other)}]
        if choice == 1:
            value = self._number_near(seed)
        elif choice == 2:
            value = rng.choice((old + 1, old - 1, old * 2, old * 8, old << 32, -old, old + 2**32, 2**46 - old))
        else:
            value = rng.choice(INTS)
        return [{"op": "set", "path": list(path), "value": value}]

    def t_type(self, seed):
        path = self._path(seed)
        return [{"op": "set", "path": list(path), "value": to_json(self.rng.choice(OTHER_TYPES))}]

    def t_structure(self, seed):
        rng = self.rng
        doc = self.docs[seed]
        path = self._path(seed, lambda v: isinstance(v, (list, dict)) and len(v) > 0)
        container = _get(doc, path)
        if isinstance(container, dict):
            key = rng.choice(list(container))
            if rng.random() < 0.6:
                return [{"op": "del", "path": [*path, key]}]
            value = rng.choice(OTHER_TYPES + [container[key]])
            return [{"op": "set", "path": [*path, rng.choice(("extra", "kind", "arrays", "adj_args", key + "_"))],
                     "value": to_json(value)}]
        i = rng.randrange(len(container))
        choice = rng.randrange(4)
        if choice == 0:
            return [{"op": "del", "path": [*path, i]}]
        if choice == 1:
            return [{"op": "insert", "path": [*path, rng.randrange(len(container) + 1)],
                     "value": to_json(container[i])}]
        if choice == 2 and len(container) > 1:
            j = rng.randrange(len(container))
            return [{"op": "swap", "path": [*path, i], "path2": [*path, j]}]
        many = [container[i]] * rng.choice((2, 16, 300))
        return [{"op": "set", "path": list(path), "value": to_json(container + many)}]

    def t_blob(self, seed):
        rng = self.rng
        path = self._path(seed, lambda v: isinstance(v, bytes))
        data = bytearray(_get(self.docs[seed], path))
        choice = rng.randrange(4)
        if choice == 0:
            data += bytes(rng.choice((1, 4, 8, 56, 4096)))
        elif choice == 1:
            del data[rng.randrange(len(data) + 1) :]
        elif choice == 2 and data:
            data = self._patch(data)
        else:
            data = bytearray(rng.choice((b"", bytes(7), bytes(24), bytes(32), bytes(56), bytes(104))))
        return [{"op": "set", "path": list(path), "value": to_json(bytes(data))}]

    def _patch(self, data: bytearray) -> bytearray:
        rng = self.rng
        if len(data) >= 8 and rng.random() < 0.4:
            at = rng.randrange(0, len(data) - 7, 8) if len(data) >= 8 else 0
            data[at : at + 8] = struct.pack("<Q", rng.choice(INTS) % 2**64)
        elif len(data) >= 4:
            at = rng.randrange(0, len(data) - 3, 4) if rng.random() < 0.8 else rng.randrange(len(data) - 3)
            data[at : at + 4] = struct.pack("<I", rng.choice(INTS) % 2**32)
        else:
            data[rng.randrange(len(data))] = rng.randrange(256)
        return data

    def _blob_paths(self, seed):
        return self._path(seed, lambda v: isinstance(v, dict) and "data" in v and "relocs" in v)

    def t_descriptor(self, seed):
        """Patch the shape / strides / ndim / pointer fields of an array descriptor in a blob."""
        rng = self.rng
        path = self._blob_paths(seed)
        blob = _get(self.docs[seed], path)
        data = bytearray(blob["data"])
        starts = [a[0] for a in blob.get("arrays", [])] or [0]
        base = rng.choice(starts)
        offset = rng.choice((0, 8, 16, 20, 24, 28, 32, 36, 40, 44, 48, 50, 56, 64, 88, 92, 96, 100))
        if base + offset + 4 > len(data):
            raise _Skip
        if offset in (0, 8, 56, 64) and base + offset + 8 <= len(data):
            data[base + offset : base + offset + 8] = struct.pack("<Q", rng.choice(INTS) % 2**64)
        elif offset == 48:
            data[base + 48 : base + 52] = struct.pack("<hh", rng.choice((0, 1, 2, 4, 5, -1, 255)),
                                                        rng.choice((0, 1, -1)))
        else:
            data[base + offset : base + offset + 4] = struct.pack("<i", rng.choice(
                (0, 1, -1, 2, 3, 4, 8, 12, 48, 64, 2**31 - 1, -(2**31), 2**16, -4, -12)))
        return [{"op": "set", "path": [*path, "data"], "value": to_json(bytes(data))}]

    def t_reloc(self, seed):
        rng = self.rng
        path = self._path(seed, lambda v: isinstance(v, list) and v and all(type(x) is int for x in v)
                          and len(v) in (2, 3))
        entry = _get(self.docs[seed], path)
        i = rng.randrange(len(entry))
        value = rng.choice(INTS[:30] + [self._number_near(seed)])
        return [{"op": "set", "path": [*path, i], "value": value}]

    def t_sequence(self, seed):
        rng = self.rng
        doc = self.docs[seed]
        seq = bytearray(doc["sequence"])
        n = len(doc["ops"])
        choice = rng.randrange(4)
        if choice == 0 and seq:
            at = rng.randrange(len(seq) // 4) * 4
            seq[at : at + 4] = struct.pack("<I", rng.choice((n, n - 1, n + 1, 2**31, 2**32 - 1, 0)))
        elif choice == 1:
            seq += seq * rng.choice((1, 10, 1000))
        elif choice == 2:
            seq = seq[: rng.randrange(len(seq) + 1)]
        else:
            seq += bytes(rng.choice((1, 2, 3)))
        return [{"op": "set", "path": ["sequence"], "value": to_json(bytes(seq))}]

    def t_module(self, seed):
        rng = self.rng
        doc = self.docs[seed]
        if not doc["modules"] and not doc["kernels"]:
            raise _Skip
        if doc["kernels"] and rng.random() < 0.5:
            k = rng.randrange(len(doc["kernels"]))
            field_ = rng.choice(("symbol", "symbol", "adjoint", "module"))
            if field_ == "symbol":
                others = [kk["symbol"] for kk in doc["kernels"]]
                value = rng.choice(others + ["memcpy", "printf", "memset", "abort", "system", "malloc", "x_cpu_forward",
                                             doc["kernels"][k]["symbol"].replace("forward", "backward")])
            elif field_ == "adjoint":
                value = not doc["kernels"][k]["adjoint"]
            else:
                value = rng.choice((0, 1, -1, len(doc["modules"])))
            return [{"op": "set", "path": ["kernels", k, field_], "value": value}]
        m = rng.randrange(len(doc["modules"]))
        field_ = rng.choice(("file", "file", "sha256", "size", "native_types", "name"))
        old = doc["modules"][m][field_]
        if field_ == "file":
            value = rng.choice(STRINGS[:14] + [old.upper(), "." + old, old + "/", "sub/" + old, old[:-2] + ".so"])
        elif field_ == "sha256":
            value = rng.choice(("0" * 64, old.upper(), old[:-1], old[:-1] + ("0" if old[-1] != "0" else "1")))
        elif field_ == "size":
            value = rng.choice((0, old - 1, old + 1, 2**63 - 1))
        elif field_ == "native_types":
            value = rng.choice((["Mesh"], ["Volume", "Bvh"], ["x" * 100], [1]))
        else:
            value = rng.choice(STRINGS)
        return [{"op": "set", "path": ["modules", m, field_], "value": to_json(value)}]


class _Skip(Exception):
    """This mutation does not apply to this seed; draw another."""


# ==================================================================================================
# The worker: loads inputs, one request at a time (a child process)
# ==================================================================================================
def _vm_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")


def worker(response_fd: int, graph_limit: int, headroom: int) -> None:
    """Answer requests (JSON lines on stdin) with results (JSON lines on ``response_fd``)."""
    import faulthandler
    import gc

    faulthandler.enable()  # a crash prints the Python stack to stderr (the parent keeps it)

    import apic
    from apic._compat import quiet_warp
    from apic.cli import main as cli_main
    from apic.record import ops as rec
    from apic import loading

    quiet_warp()
    wp.init()
    if hasattr(loading, "max_graph_bytes"):
        loading.max_graph_bytes = graph_limit
    out = os.fdopen(response_fd, "w", buffering=1)
    modules_cache: dict[str, dict[str, bytes]] = {}

    def modules_of(folder: str) -> dict[str, bytes]:
        if folder not in modules_cache:
            found = {}
            for name in sorted(os.listdir(folder)):
                with open(os.path.join(folder, name), "rb") as f:
                    found[name] = f.read()
            modules_cache[folder] = found
        return modules_cache[folder]

    def replay_safe(graph) -> bool:
        for op in graph.recording.ops:
            if isinstance(op, (rec.Launch, rec.HandleCall)):  # native code reading what the ops wrote
                return False
            if isinstance(op, rec.ArrayCopy) and (op.dst_type or op.src_type):
                return False
            if isinstance(op, rec.ArrayFill) and op.array_type:
                return False
        return True

    limited = False
    for line in sys.stdin:
        request = json.loads(line)
        if request.get("limit_memory") and not limited and headroom:
            import resource

            # warmed up: whatever is allocated from now on must fit in the regions apic allows (graph_limit)
            limit = _vm_bytes() + headroom
            resource.setrlimit(resource.RLIMIT_AS, (limit, resource.getrlimit(resource.RLIMIT_AS)[1]))
            limited = True
        result = {"id": request["id"], "outcome": None, "error": None, "replayed": False, "params": 0}
        err_before = os.fstat(2).st_size
        t0 = time.perf_counter()
        graph = None
        try:
            if request["mode"] == "file":
                graph = wp.capture_load(request["wrp"])
            else:
                with open(request["wrp"], "rb") as f:
                    data = f.read()
                if request.get("fresh"):  # a folder reused with other contents (tests/fuzz/levels_trailers.py)
                    modules_cache.pop(request["modules"], None)
                modules = dict(modules_of(request["modules"]))
                if request.get("corrupt_modules"):
                    modules = {k: v[:-1] + bytes([v[-1] ^ 1]) for k, v in modules.items()}
                graph = wp.capture_load_from_bytes(data, modules)
            result["outcome"] = "loaded"
            result["claims"] = [[k.symbol, None if k.split_writes is None else trust_paths.claim_of(k)]
                                for k in graph.recording.kernels]
            for name in graph.params:  # bound views lie inside their regions
                graph.param_numpy(name).copy()
                result["params"] += 1
            if request.get("replay") and (request.get("replay_all") or replay_safe(graph)):
                initial = threaded.snapshot(graph)  # the memory as loaded, for the threaded replay below
                wp.capture_launch(graph)
                graph.launch(2)
                result["replayed"] = True
                if initial is not None:  # the same three replays with threads=2: the serial bits, or a finding
                    problem = threaded.threaded_problem(graph, initial, 3)
                    result["threaded"] = True
                    result["split"] = problem is None and threaded.split_launches(graph) > 0
                    if problem is not None:
                        result["outcome"] = "bug"
                        result["error"] = problem
        except apic.ApicError as error:
            result["outcome"] = "refused"
            result["error"] = f"{type(error).__name__}: {error}"
        except BaseException as error:  # noqa: BLE001 - this is what the fuzzer looks for
            result["outcome"] = "bug"
            result["error"] = f"{type(error).__name__}: {error}"
            result["traceback"] = traceback.format_exc()
        del graph  # a graph is freed (and its modules unloaded) by reference counting
        if request["id"] % 500 == 499:
            gc.collect()
        if request.get("inspect"):
            for args in (["inspect", request["wrp"]], ["inspect", "--json", request["wrp"]]):
                stdout, stderr = io.StringIO(), io.StringIO()
                try:
                    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
                        rc = cli_main(args)
                except BaseException as error:  # noqa: BLE001
                    result["outcome"] = "bug"
                    result["error"] = f"inspect: {type(error).__name__}: {error}"
                    result["traceback"] = traceback.format_exc()
                    break
                if rc not in (0, 2) or (rc == 2 and not stderr.getvalue().startswith("error: ")):
                    result["outcome"] = "bug"
                    result["error"] = f"inspect exited {rc}: {stderr.getvalue()[:500]}"
                    break
                result["inspect_rc"] = rc
        result["ms"] = round((time.perf_counter() - t0) * 1e3, 3)
        result["stderr_bytes"] = os.fstat(2).st_size - err_before
        out.write(json.dumps(result) + "\n")


# ==================================================================================================
# The parent: drive the worker, classify, record
# ==================================================================================================
@dataclass
class Stats:
    inputs: int = 0
    seconds: float = 0.0
    by_strategy: dict = field(default_factory=dict)  # strategy -> {outcome: count}
    outcomes: dict = field(default_factory=dict)
    refusals: dict = field(default_factory=dict)  # normalised message -> count
    deep: int = 0  # refused after the header and msgpack parse (by the field validator or loader)
    replayed: int = 0
    threaded: int = 0  # replays also run with threads=2 and compared with serial (tests/fuzz/threaded.py)
    split: int = 0  # of those, replays in which threads=2 split a launch
    cli_runs: int = 0
    findings: list = field(default_factory=list)  # dicts: kind, strategy, error, file
    worker_restarts: int = 0
    trust_checks: int = 0  # inputs checked for one reading and sealed claims (tests/fuzz/trust_paths.py)

    def count(self, strategy: str, outcome: str) -> None:
        self.outcomes[outcome] = self.outcomes.get(outcome, 0) + 1
        per = self.by_strategy.setdefault(strategy, {})
        per[outcome] = per.get(outcome, 0) + 1

    def summary(self) -> str:
        lines = [f"{self.inputs} inputs in {self.seconds:.0f} s ({self.inputs / max(self.seconds, 1e-9):.0f}/s); "
                 f"outcomes {dict(sorted(self.outcomes.items()))}; replayed {self.replayed} "
                 f"(of them with threads=2 as well, bit for bit: {self.threaded}, a launch split in {self.split}); "
                 f"refused past the header and msgpack {self.deep}; CLI processes {self.cli_runs}; "
                 f"worker restarts {self.worker_restarts}; one-reading/claim checks {self.trust_checks}; "
                 f"findings {len(self.findings)}"]
        for strategy, per in sorted(self.by_strategy.items()):
            lines.append(f"  {strategy:16s} {dict(sorted(per.items()))}")
        for finding in self.findings:
            lines.append(f"  FINDING {finding['kind']} ({finding['strategy']}): {finding['error'][:300]}"
                         f" -> {finding['file']}")
        return "\n".join(lines)


def _normalise(message: str) -> str:
    import re

    message = re.sub(r"\[\d+\]", "[N]", message)
    message = re.sub(r"-?\d+", "N", message)
    message = re.sub(r"'[^']*'", "'S'", message)
    return message[:140]


class Worker:
    def __init__(self, workdir: str, graph_limit: int, headroom: int, timeout: float) -> None:
        self.workdir, self.graph_limit, self.headroom, self.timeout = workdir, graph_limit, headroom, timeout
        self.proc = None
        self.starts = 0

    def start(self) -> None:
        read_fd, write_fd = os.pipe()
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (REPO, env.get("PYTHONPATH", "")) if p)
        self.stderr_path = os.path.join(self.workdir, f"worker-{self.starts}.stderr")
        self.stderr = open(self.stderr_path, "wb")
        self.proc = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--worker", str(write_fd), str(self.graph_limit),
             str(self.headroom)],
            stdin=subprocess.PIPE, stdout=self.stderr, stderr=self.stderr, pass_fds=(write_fd,), env=env,
            cwd=self.workdir,
        )
        os.close(write_fd)
        self.responses = os.fdopen(read_fd, "rb", buffering=0)
        self.buffer = b""
        self.starts += 1
        self.fresh = True

    def stop(self) -> None:
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait()
            self.responses.close()
            self.stderr.close()
            self.proc = None

    def ask(self, request: dict) -> dict:
        """Send one request; the answer, or ``{"outcome": "crash"|"hang", ...}``."""
        if self.proc is None:
            self.start()
        timeout = self.timeout * (20 if self.fresh else 1)  # the first request warms Warp and Numba up
        timeout *= request.get("slow", 1)  # an input whose load may compile a saved source (seconds)
        request = dict(request, limit_memory=True)
        try:
            self.proc.stdin.write((json.dumps(request) + "\n").encode())
            self.proc.stdin.flush()
        except BrokenPipeError:
            pass
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            ready = select.select([self.responses], [], [], max(left, 0))[0] if left > 0 else []
            if not ready:
                self.stop()
                return {"outcome": "hang", "error": f"no answer within {timeout:.0f} s"}
            chunk = self.responses.read(65536)
            if not chunk:
                code = self.proc.wait()
                tail = _tail(self.stderr_path)
                self.stop()
                what = f"signal {signal.Signals(-code).name}" if code < 0 else f"exit status {code}"
                return {"outcome": "crash", "error": f"the loading process died ({what}): {tail}"}
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        self.fresh = False
        return json.loads(line)


def _tail(path: str, n: int = 1500) -> str:
    try:
        with open(path, "rb") as f:
            return f.read()[-n:].decode(errors="replace")
    except OSError:
        return ""


def run_cli(path: str) -> tuple[str | None, str]:
    """``python -m apic inspect PATH`` in a fresh process: (problem or None, output)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (REPO, env.get("PYTHONPATH", "")) if p)
    try:
        done = subprocess.run([sys.executable, "-m", "apic", "inspect", path], capture_output=True, text=True,
                              env=env, timeout=120)
    except subprocess.TimeoutExpired:
        return "hang", ""
    output = done.stdout + done.stderr
    if done.returncode < 0:
        return f"crash (signal {-done.returncode})", output
    if done.returncode not in (0, 2):
        return f"exit status {done.returncode}", output
    if "Traceback" in done.stderr:
        return "traceback", output
    if done.returncode == 2 and not any(line.startswith("error: ") for line in done.stderr.splitlines()):
        return "exit 2 without an 'error:' line", output
    return None, output


def fuzz(workdir: str, seconds: float | None = None, inputs: int | None = None, seed: int = 0,
         seeds: dict[str, str] | None = None, timeout: float = 10.0, cli_every: int = 0, cli_first: int = 0,
         graph_limit: int = 256 << 20, headroom: int = 4 << 30, log=None, replay_all: bool = False,
         fs_every: int = 0, edge_every: int = 0) -> Stats:
    """Fuzz for ``seconds`` or ``inputs`` (whichever ends first); findings are written to ``workdir/findings``.

    ``replay_all`` replays every graph that loads (kernel launches and handles included), not only those
    safe by construction; ``fs_every``: every N-th input is a seed with an odd entry in its modules folder
    (tests/fuzz/fs_odd.py) instead of a mutated file; ``edge_every``: every N-th input (offset from those) is
    a seed whose CPU level or a module file's kernel-manifest trailer was changed and re-sealed
    (tests/fuzz/levels_trailers.py)."""
    os.makedirs(workdir, exist_ok=True)
    if seeds is None:
        seeds = make_seeds(os.path.join(workdir, "seeds"))
        seeds["split"] = threaded.save_split(os.path.join(workdir, "seeds"))  # launches threads=2 splits
    rng = random.Random(seed)
    mutator = Mutator(rng, seeds)
    sealed = trust_paths.sealed_claims_of(seeds)  # the honest seeds' claims, those their manifests seal
    inputs_dir = _inputs_dir(workdir, seeds)
    findings_dir = os.path.join(workdir, "findings")
    os.makedirs(findings_dir, exist_ok=True)

    stats = Stats()
    worker = Worker(workdir, graph_limit, headroom, timeout)
    started = time.monotonic()
    last_report = started
    names = list(seeds)
    # the seeds without saved source: a module file damaged or missing makes a load compile a saved source
    # (seconds, past --timeout: a "hang" that is only slow), so odd folders, edges and corrupted modules
    # are made of these; an edit of the one with source may make it compile (given 6 times --timeout)
    unsourced = [name for name in names if name != "split"]
    try:
        while True:
            elapsed = time.monotonic() - started
            if (seconds is not None and elapsed >= seconds) or (inputs is not None and stats.inputs >= inputs):
                break
            name = names[stats.inputs % len(names)]
            if fs_every and stats.inputs % fs_every == fs_every - 1:
                name = rng.choice(unsourced)
                strategy, path = fs_odd.make(rng, seeds[name], os.path.join(workdir, "odd"), stats.inputs % 8)
                with open(path, "rb") as f:
                    data, recipe = f.read(), {"seed": name, "fs": strategy, "edits": []}
                mode = "file"
            elif edge_every and stats.inputs % edge_every == edge_every // 2:
                name = rng.choice(unsourced)
                strategy, path = levels_trailers.make(rng, seeds[name], os.path.join(workdir, "edges"),
                                                      stats.inputs % 8)
                with open(path, "rb") as f:
                    data, recipe = f.read(), {"seed": name, "edge": strategy, "edits": []}
                mode = "file" if stats.inputs % 4 < 2 else "bytes"
            else:
                strategy, data, recipe = mutator.mutate(name)
                path = os.path.join(inputs_dir, name + ".wrp")
                with open(path, "wb") as f:
                    f.write(data)
                mode = "file" if stats.inputs % 2 else "bytes"
            request = {"id": stats.inputs, "wrp": path, "modules": path[:-4] + "_modules", "mode": mode,
                       "fresh": bool(recipe and recipe.get("edge")),
                       "corrupt_modules": mode == "bytes" and rng.random() < 0.05 and name in unsourced, "replay": True,
                       "replay_all": replay_all, "inspect": True, "slow": 1 if name in unsourced else 6}
            answer = worker.ask(request)
            outcome = answer["outcome"]
            if worker.proc is None:
                stats.worker_restarts += 1
            stats.count(strategy, outcome)
            if answer.get("stderr_bytes") and outcome in ("loaded", "refused"):
                stats.findings.append(_record(findings_dir, len(stats.findings), "noise", strategy, {
                    "error": f"{outcome}, but printed {answer['stderr_bytes']} bytes on stderr: "
                             f"{_tail(worker.stderr_path, min(answer['stderr_bytes'], 300))}"}, data, recipe))
            stats.inputs += 1
            stats.replayed += bool(answer.get("replayed"))
            stats.threaded += bool(answer.get("threaded"))
            stats.split += bool(answer.get("split"))
            if outcome == "refused":
                message = answer["error"]
                stats.refusals[_normalise(message)] = stats.refusals.get(_normalise(message), 0) + 1
                if "invalid apic graph file" in message or not message.startswith("FormatError"):
                    stats.deep += 1
            if outcome in ("bug", "crash", "hang"):
                stats.findings.append(_record(findings_dir, len(stats.findings), outcome, strategy, answer, data,
                                              recipe))
            # one file, one graph: the reader's fast path and a full unpacking agree; claims kept are sealed
            problem = trust_paths.one_reading(data) or trust_paths.claim_problem(answer.get("claims"), sealed)
            stats.trust_checks += 1
            if problem:
                stats.findings.append(_record(findings_dir, len(stats.findings), "trust", strategy,
                                              {"error": problem}, data, recipe))
            cli_due = (cli_every and stats.inputs % cli_every == 0) or stats.inputs <= cli_first
            if cli_due or outcome in ("bug", "crash", "hang"):
                problem, output = run_cli(path)
                stats.cli_runs += 1
                if problem:
                    stats.findings.append(_record(findings_dir, len(stats.findings), "cli " + problem, strategy,
                                                  {"error": output[-1500:]}, data, recipe))
            if log is not None and time.monotonic() - last_report > 30:
                last_report = time.monotonic()
                stats.seconds = last_report - started
                log(stats.summary().splitlines()[0])
    finally:
        worker.stop()
        stats.seconds = time.monotonic() - started
    with open(os.path.join(workdir, "stats.json"), "w") as f:
        json.dump({"inputs": stats.inputs, "seconds": stats.seconds, "seed": seed, "outcomes": stats.outcomes,
                   "by_strategy": stats.by_strategy, "deep": stats.deep, "replayed": stats.replayed,
                   "threaded": stats.threaded, "split": stats.split,
                   "cli_runs": stats.cli_runs, "findings": stats.findings,
                   "refusals": dict(sorted(stats.refusals.items(), key=lambda kv: -kv[1]))}, f, indent=1)
    return stats


def _inputs_dir(workdir: str, seeds: dict[str, str]) -> str:
    """``workdir/inputs``, where ``<seed>.wrp`` sits next to ``<seed>_modules`` (the seed's modules)."""
    inputs_dir = os.path.join(workdir, "inputs")
    os.makedirs(inputs_dir, exist_ok=True)
    for name, path in seeds.items():
        link = os.path.join(inputs_dir, name + "_modules")
        if not os.path.lexists(link):
            source = path[: -len(".wrp")] + "_modules"
            shutil.copytree(source, link)  # a copy: a load refuses a modules folder that is a symlink
    return inputs_dir


def corpus_inputs(corpus_dir: str, seeds: dict[str, str]) -> list[tuple[str, str, bytes, dict]]:
    """The corpus as inputs: (entry name, seed name, bytes, recipe or {}) for each ``*.json`` recipe,
    made from this process's seeds, and each raw ``*.wrp`` (a self-contained file of the memory seed)."""
    entries = []
    for name in sorted(os.listdir(corpus_dir)):
        path = os.path.join(corpus_dir, name)
        if name.endswith(".json"):
            with open(path) as f:
                recipe = json.load(f)
            if recipe.get("fs"):  # an odd modules folder: made again by check_inputs
                entries.append((name, recipe["seed"], b"", recipe))
                continue
            entries.append((name, recipe["seed"], apply_recipe(recipe, seeds), recipe))
        elif name.endswith(".wrp"):
            with open(path, "rb") as f:
                entries.append((name, "memory", f.read(), {}))
    return entries


def check_inputs(workdir: str, seeds: dict[str, str], inputs, timeout: float = 30.0) -> dict[str, list[dict]]:
    """Load each input (name, seed, bytes, ...) in a child process, from its file and from bytes, with
    inspect; returns name -> the two answers (``outcome`` loaded / refused / bug / crash / hang, and
    ``stderr_bytes``, what native code printed)."""
    inputs_dir = _inputs_dir(workdir, seeds)
    worker = Worker(workdir, 256 << 20, 4 << 30, timeout)
    results = {}
    try:
        for i, (name, seed, data, *rest) in enumerate(inputs):
            recipe = rest[0] if rest else {}
            if recipe.get("fs") or recipe.get("edge"):
                if recipe.get("fs"):
                    _, path = fs_odd.make(random.Random(0), seeds[seed], os.path.join(workdir, "odd"), i, recipe["fs"])
                else:
                    _, path = levels_trailers.make(random.Random(0), seeds[seed], os.path.join(workdir, "edges"), i,
                                                   recipe["edge"])
                results[name] = [worker.ask({"id": 2 * i, "wrp": path, "modules": path[:-4] + "_modules",
                                             "mode": "file", "replay": True, "replay_all": True, "inspect": True})]
                continue
            path = os.path.join(inputs_dir, seed + ".wrp")
            with open(path, "wb") as f:
                f.write(data)
            results[name] = [worker.ask({"id": 2 * i + k, "wrp": path, "modules": path[:-4] + "_modules",
                                         "mode": mode, "replay": True, "replay_all": bool(recipe.get("replay_all")),
                                         "inspect": True})
                             for k, mode in enumerate(("file", "bytes"))]
    finally:
        worker.stop()
    return results


def _record(folder: str, n: int, kind: str, strategy: str, answer: dict, data: bytes, recipe: dict | None) -> dict:
    stem = os.path.join(folder, f"finding-{n}")
    with open(stem + ".wrp", "wb") as f:
        f.write(data)
    info = {"kind": kind, "strategy": strategy, "error": answer.get("error") or "",
            "traceback": answer.get("traceback", ""), "file": stem + ".wrp"}
    if recipe is not None:
        with open(stem + ".json", "w") as f:
            json.dump(dict(recipe, finding=info["error"][:500]), f, indent=1)
    return info


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=None, help="how long to fuzz (default 1)")
    parser.add_argument("--inputs", type=int, default=None, help="or how many inputs")
    parser.add_argument("--seed", type=int, default=None, help="random seed (default: time-based, printed)")
    parser.add_argument("--workdir", default=None,
                        help="where inputs, findings and stats.json go (default: a temp folder)")
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds one input may take (hang detection)")
    parser.add_argument("--cli-every", type=int, default=250,
                        help="run `python -m apic inspect` in a fresh process every N inputs")
    parser.add_argument("--safe-replay-only", action="store_true",
                        help="replay only graphs without launches or handles (default: replay every graph that loads)")
    parser.add_argument("--fs-every", type=int, default=10,
                        help="every N-th input has an odd modules folder (0: never)")
    parser.add_argument("--edge-every", type=int, default=10,
                        help="every N-th input has a changed CPU level or manifest trailer, re-sealed (0: never)")
    parser.add_argument("--memory-gib", type=float, default=2.0, help="address space a child may add after warming up")
    parser.add_argument("--worker", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(int(args.worker[0]), int(args.worker[1]), int(args.worker[2]))
        return 0

    import warp as wp

    import apic  # noqa: F401
    from apic._compat import quiet_warp

    quiet_warp()
    wp.init()
    seed = args.seed if args.seed is not None else int(time.time())
    workdir = args.workdir or tempfile.mkdtemp(prefix="apic-fuzz-")
    seconds = None if args.inputs and args.minutes is None else 60 * (args.minutes or 1)
    print(f"fuzzing the .wrp loader (warp-lang {wp.config.version}, seed {seed}, workdir {workdir})", flush=True)
    stats = fuzz(workdir, seconds=seconds, inputs=args.inputs, seed=seed, timeout=args.timeout,
                 cli_every=args.cli_every, log=lambda line: print(line, flush=True),
                 replay_all=not args.safe_replay_only, fs_every=args.fs_every, edge_every=args.edge_every,
                 headroom=int(args.memory_gib * (1 << 30)))
    print(stats.summary())
    print("most frequent refusals:")
    for message, count in sorted(stats.refusals.items(), key=lambda kv: -kv[1])[:25]:
        print(f"  {count:7d}  {message}")
    return 1 if stats.findings else 0


if __name__ == "__main__":
    sys.exit(main())
