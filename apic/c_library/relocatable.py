"""A loaded graph's op table and arena made relocatable: two loads of one file differ exactly where a word
holds an address (of a region, of the arena, of a kernel), so the words that differ are the relocations, and
what each points at is read from the first load. Words equal in both are constants, except a native
function's address (Warp's own library, at one address in a process): those are the few natives the
exported runtime implements, found by address, and any other is refused.

The result (``Image``) holds no address: a table cell or arena word that is a relocation holds the offset
within its target, and ``relocs`` says which target; the runtime adds the target's address at open.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

import numpy as np

from apic import _compat
from apic.errors import ApicError
from apic.record import natives as recorded
from apic.replay.cpu import table as tbl

# what a relocation points at (the runtime's APIC_TARGET_*)
TARGET_REGION, TARGET_ARENA, TARGET_KERNEL, TARGET_NATIVE = 1, 2, 3, 4
# Warp's natives the exported runtime implements (its natives[] in this order); memset_host is the one whose
# semantics changed between Warp releases (see _memset_native)
NATIVES = ("memcpy_h2h", "memset_host", "memtile_host")
_MEMSET_WORDS = 3  # the runtime's natives[3]: warp <= 1.12's memset_host, which fills 4-byte words when it can
# Warp's host utilities (wp.utils) the runtime implements (apic_natives.inc), its natives[4...] in this order:
# (name, the argument count, the first warp-lang whose CPU code the port was checked against). A Warp whose
# export takes another count, or an older Warp (warp-lang 1.12 sorts signed keys by their unsigned bits), is
# refused: its code may differ.
_SORTS_SCANS, _SINCE_1_12 = (1, 19), (1, 12)  # rle, sum and inner: the same code in 1.12 and 1.19
UTILITIES = (
    *((f"radix_sort_pairs_{t}_host", 6, _SORTS_SCANS) for t in ("int", "uint", "float", "double", "int64", "uint64")),
    ("segmented_sort_pairs_int_host", 6, _SORTS_SCANS), ("segmented_sort_pairs_float_host", 6, _SORTS_SCANS),
    ("runlength_encode_int_host", 5, _SINCE_1_12),
    *((f"array_scan_{t}_host", 7, _SORTS_SCANS) for t in ("int", "int64", "float", "double")),
    ("array_sum_float_host", 5, _SINCE_1_12), ("array_sum_double_host", 5, _SINCE_1_12),
    ("array_inner_float_host", 7, _SINCE_1_12), ("array_inner_double_host", 7, _SINCE_1_12),
)
_FIRST_UTILITY = 4
# the opcodes the exported runtime runs
PORTED = frozenset((tbl.OP_NOP, *tbl.CALL_OPCODES.values(), tbl.OP_JUMP, tbl.OP_BRANCH_IF_ZERO,
                    tbl.OP_CHECK_INDICES, tbl.OP_SEGMENTED_SORT))
_NATIVE_ROWS = frozenset((*tbl.CALL_OPCODES.values(), tbl.OP_SEGMENTED_SORT))  # rows whose COL_FN is a function


class ExportError(ApicError, ValueError):
    """The graph cannot be exported to a C library (what in it, and why)."""


@dataclass(frozen=True)
class Image:
    """A graph with no address in it: what the generated C source holds."""

    table: np.ndarray  # int64 rows; relocated cells hold the offset within their target
    table_relocs: np.ndarray  # int64 rows (row, column, target kind, target index)
    arena: bytes
    arena_relocs: np.ndarray  # int64 rows (byte offset, target kind, target index)
    region_sizes: tuple[int, ...]
    region_contents: tuple[bytes, ...]
    loops: int


def _memset_native() -> int:
    """The runtime's native for this Warp's ``memset_host``: Warp 1.19 sets bytes (``memset``); older releases
    store ``value`` as an int into each 4-byte word when the size is a multiple of 4. Told apart by calling it."""
    probe = (ctypes.c_uint8 * 8)()
    fill = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t)(_compat.native_address("memset_host"))
    fill(ctypes.addressof(probe), 0x01020304, 8)
    if bytes(probe) == b"\x04" * 8:
        return NATIVES.index("memset_host")
    if bytes(probe) == (0x01020304).to_bytes(4, "little") * 2:
        return _MEMSET_WORDS
    raise ExportError("cannot export this graph: this Warp's memset_host behaves as no version the export knows")


def _target_of(value: int, snap, kernels: dict) -> tuple[int, int, int]:
    """(kind, index, offset) of an address of the first load, or None."""
    k = kernels.get(value)
    if k is not None:
        return TARGET_KERNEL, k, 0
    base, size = snap.arena_address, len(snap.arena)
    if base <= value <= base + size:
        return TARGET_ARENA, 0, value - base
    inside = None
    for r, (address, nbytes) in enumerate(zip(snap.region_addresses, snap.region_sizes)):
        if address <= value < address + nbytes:
            return TARGET_REGION, r, value - address
        if value == address + nbytes and inside is None:  # one past the end (an empty view's pointer)
            inside = (TARGET_REGION, r, nbytes)
    return inside


def _address_in(kind: int, index: int, offset: int, snap) -> int:
    """The address in load ``snap`` of (kind, index, offset)."""
    if kind == TARGET_KERNEL:
        return snap.kernel_addresses[index]
    if kind == TARGET_ARENA:
        return snap.arena_address + offset
    return snap.region_addresses[index] + offset


def utilities() -> tuple[tuple[str, int], ...]:
    """The (name, index in the runtime's natives[]) of the host utilities the runtime runs for this Warp: those
    whose export takes the argument count the port was written for."""
    version = tuple(int(part) for part in _compat.WARP_VERSION.split(".")[:2])
    return tuple((name, _FIRST_UTILITY + k) for k, (name, arity, since) in enumerate(UTILITIES)
                 if version >= since and recorded.host_arity(name) == arity)


def refusals(snap) -> list[str]:
    """Why the graph cannot be exported (empty: it can): handles, block kernels, ops the runtime lacks."""
    found = []
    if snap.handle_kinds:
        found.append(f"it builds native handles ({', '.join(sorted(set(snap.handle_kinds)))}), which need Warp's "
                     "native runtime at replay")
    if snap.block_kernels:
        found.append(f"kernel(s) {', '.join(snap.block_kernels)} run in CPU blocks (Warp's fiber runtime)")
    plain = ("Launch", "Memcpy", "Memset", "Memtile", "Alloc", "Branch", "Jump",
             *(f"NativeCall (wp_{name})" for name, _ in utilities()))
    others = sorted({kind for kind in snap.op_kinds if kind not in plain})
    if others:
        found.append(f"its ops include {', '.join(others)}, which the exported runtime does not run (of Warp's "
                     f"host utilities it runs ports of warp-lang {'.'.join(map(str, _SORTS_SCANS))}'s)")
    return found


def image(first, second) -> Image:
    """The relocatable ``Image`` of a graph from two loads of it (``from_graph.snapshot`` of each)."""
    problems = refusals(first)
    if problems:
        raise ExportError("cannot export this graph to a C library: " + "; ".join(problems))
    if first.table.shape != second.table.shape or len(first.arena) != len(second.arena) or \
            first.region_sizes != second.region_sizes:
        raise ExportError("cannot export this graph: two loads of the file lowered to different programs")
    kernels = {a: k for k, a in enumerate(first.kernel_addresses)}
    natives = {_compat.native_address(name): n for n, name in enumerate(NATIVES)}
    natives[_compat.native_address("memset_host")] = _memset_native()
    natives.update((_compat.native_address(name), n) for name, n in utilities())
    table = first.table.copy()
    relocs = []
    for row, col in zip(*np.nonzero(first.table != second.table)):
        target = _target_of(int(first.table[row, col]), first, kernels)
        if target is None or _address_in(*target, second) != int(second.table[row, col]):
            raise ExportError(f"cannot export this graph: op-table row {row} column {col} holds a value that "
                              "differs between two loads and is no address the export can relocate")
        relocs.append((row, col, target[0], target[1]))
        table[row, col] = target[2]
    for row in range(len(table)):
        opcode = int(table[row, tbl.COL_OPCODE])
        if opcode not in PORTED:
            name = tbl.OPCODES[opcode].name if opcode in tbl.OPCODES else str(opcode)
            raise ExportError(f"cannot export this graph: op-table row {row} is a {name!r} row, which the exported "
                              "runtime does not run")
        if opcode in _NATIVE_ROWS and not any(r[0] == row and r[1] == tbl.COL_FN for r in relocs):
            n = natives.get(int(table[row, tbl.COL_FN]))
            if n is None:
                raise ExportError(f"cannot export this graph: op-table row {row} calls a native function of Warp's "
                                  "library that the exported runtime does not implement")
            relocs.append((row, tbl.COL_FN, TARGET_NATIVE, n))
            table[row, tbl.COL_FN] = 0
    arena = first.arena.copy()
    words1, words2 = first.arena.view(np.uint64), second.arena.view(np.uint64)
    words = arena.view(np.uint64)
    arena_relocs = []
    for w in np.flatnonzero(words1 != words2).tolist():
        target = _target_of(int(words1[w]), first, kernels)
        if target is None or target[0] == TARGET_KERNEL or _address_in(*target, second) != int(words2[w]):
            raise ExportError(f"cannot export this graph: arena byte {8 * w} holds a word that differs between two "
                              "loads and is no address the export can relocate")
        arena_relocs.append((8 * w, target[0], target[1]))
        words[w] = target[2]
    contents = []
    for r in range(len(first.region_sizes)):
        data = first.region_bytes(r)
        if data != second.region_bytes(r):
            raise ExportError(f"cannot export this graph: region {r} holds values that differ between two loads "
                              "(addresses or handle ids), which the export cannot relocate")
        contents.append(data)
    return Image(table, np.array(relocs, dtype=np.int64).reshape(-1, 4), arena.tobytes(),
                 np.array(arena_relocs, dtype=np.int64).reshape(-1, 3), first.region_sizes, tuple(contents),
                 first.loops)
