"""The recorded operations: plain, frozen data with no live Python objects.

A recording's ops refer to memory only through region references (``Ref``) and relocatable byte
blobs (``Blob``), never through raw addresses, so the same ops serve live replay, saving and
loading. While a capture is running the recorder fills the same dataclasses with ``RawPtr`` and
``RawBlob`` (absolute addresses); :func:`apic.record.op_addresses.resolve_op` turns them into
``Ref``/``Blob`` once the region table is final.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import Callable, NamedTuple, Union


class OpKind(IntEnum):
    """Persisted op kinds: explicit values, never reused. Last used value: 12."""

    LAUNCH = 1
    MEMCPY = 2
    MEMSET = 3
    MEMTILE = 4
    ARRAY_COPY = 5
    ARRAY_FILL = 6
    ALLOC = 7
    BRANCH = 8  # control flow (wp.capture_if / capture_while): jump if an int32 in graph memory is zero
    JUMP = 9
    NATIVE_CALL = 10  # one of Warp's native host utilities (wp.utils.array_scan, radix_sort_pairs, ...)
    CUDA_LAUNCH = 11  # a CUDA kernel launch (one param blob; grid, block, dynamic shared memory)
    HANDLE_CALL = 12  # a native method of a Mesh / Bvh / HashGrid (refit, rebuild, build, reserve)


@dataclass(frozen=True)
class Ref:
    """A byte address inside a region: ``region`` id and ``offset`` from its start."""

    region: int
    offset: int


@dataclass(frozen=True)
class HandleRef:
    """The id of handle ``index`` of the recording (a Mesh, Bvh, HashGrid or Volume; see ``handles``)."""

    index: int


class RawHandle(int):
    """A handle id seen during capture; becomes a ``HandleRef`` when the capture ends."""


@dataclass(frozen=True)
class Reloc:
    """A pointer inside a blob: the u64 at ``at`` holds the address of ``target`` (or a handle's id)."""

    at: int
    target: Union[Ref, HandleRef]


class ArraySlot(NamedTuple):
    """An array descriptor at byte ``at`` of a blob: ``array_t``, or ``indexedarray_t`` if ``indexed``.

    ``elem_size`` is the byte size of the array's dtype. A loader uses these to check that every
    array a kernel receives stays inside its region.
    """

    at: int
    elem_size: int
    indexed: bool


class ParamSlot(NamedTuple):
    """A named scalar parameter (``apic.param``) packed at byte ``at`` of a launch's argument blob."""

    at: int
    name: str


@dataclass(frozen=True)
class Blob:
    """Bytes that live in the replay arena (packed kernel args, array descriptors, fill values).

    ``arrays`` lists the array descriptors inside packed kernel arguments; every relocation of such
    a blob is a pointer field of one of them. ``params`` lists the named scalar parameters in it,
    whose bytes ``Graph.set_param`` rewrites in the arena.
    """

    data: bytes
    relocs: tuple[Reloc, ...] = ()
    arrays: tuple[ArraySlot, ...] = ()
    params: tuple[ParamSlot, ...] = ()


class RawPtr(NamedTuple):  # a tuple, not a dataclass: made for every pointer of every captured op
    """An absolute address seen during capture, with the byte range ``[lo, hi)`` accessed through it."""

    address: int
    lo: int
    hi: int


@dataclass(frozen=True)
class RawBlob:
    """A blob as captured: ``pointers`` maps byte offsets in ``data`` to the ``RawPtr`` (or ``RawHandle``) there."""

    data: bytes
    pointers: tuple[tuple[int, RawPtr], ...] = ()
    arrays: tuple[ArraySlot, ...] = ()
    params: tuple[ParamSlot, ...] = ()


Pointer = Union[Ref, RawPtr]
Bytes = Union[Blob, RawBlob]


@dataclass(frozen=True)
class Launch:
    """A CPU kernel launch: ``kernel`` indexes the recording's kernel table."""

    kernel: int
    dim: tuple[int, ...]
    bounds: Bytes
    args: Bytes
    adj_args: Bytes | None = None
    kind = OpKind.LAUNCH


@dataclass(frozen=True)
class Memcpy:
    dst: Pointer
    src: Pointer
    nbytes: int
    kind = OpKind.MEMCPY


@dataclass(frozen=True)
class Memset:
    dst: Pointer
    value: int
    nbytes: int
    kind = OpKind.MEMSET


@dataclass(frozen=True)
class Memtile:
    """Repeat ``value`` ``count`` times from ``dst`` (a contiguous ``fill_``)."""

    dst: Pointer
    value: Bytes
    count: int
    kind = OpKind.MEMTILE


@dataclass(frozen=True)
class ArrayCopy:
    """A strided or indexed copy through Warp's ``wp_array_copy_host`` (descriptors as blobs)."""

    dst: Bytes
    src: Bytes
    dst_type: int
    src_type: int
    elem_size: int
    kind = OpKind.ARRAY_COPY


@dataclass(frozen=True)
class ArrayFill:
    """A strided or indexed fill through Warp's ``wp_array_fill_host``."""

    dst: Bytes
    array_type: int
    value: Bytes
    kind = OpKind.ARRAY_FILL


@dataclass(frozen=True)
class Alloc:
    """Memory allocated inside the capture; owned by the graph. Nothing to do at replay."""

    dst: Pointer
    nbytes: int
    kind = OpKind.ALLOC


@dataclass(frozen=True)
class Branch:
    """Control flow: if the int32 at ``cond`` is zero, continue at position ``target`` of the op sequence.

    Otherwise fall through. ``wp.capture_if`` and ``wp.capture_while`` become a branch over the body
    (and jumps), so the condition is read at replay time, each time the branch is reached.
    """

    cond: Pointer
    target: int
    kind = OpKind.BRANCH


@dataclass(frozen=True)
class Jump:
    """Control flow: continue at position ``target`` of the op sequence (``len(sequence)`` ends the replay)."""

    target: int
    kind = OpKind.JUMP


@dataclass(frozen=True)
class NativeCall:
    """A call of Warp's native host utility ``wp_<name>`` (see ``apic.record.natives`` for the allow-list).

    ``args`` are the call's arguments in order: an ``int`` for an integer parameter, a ``Pointer``
    for a pointer parameter.
    """

    name: str
    args: tuple
    kind = OpKind.NATIVE_CALL


@dataclass(frozen=True)
class CudaLaunch:
    """A CUDA kernel launch: ``params`` is the kernel's whole param blob ``{bounds, args...[, adj_args...]}``
    with natural alignment (see ``apic.targets.cuda``); ``grid``/``block`` are ``cuLaunchKernel``'s."""

    kernel: int
    dim: tuple[int, ...]
    params: Bytes
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    smem: int  # dynamic shared memory, bytes
    kind = OpKind.CUDA_LAUNCH


@dataclass(frozen=True)
class HandleCall:
    """A native method of a handle object, run at replay: ``wp_<name>(id, *ints)``.

    ``mesh_refit_host``, ``bvh_refit_host``, ``bvh_rebuild_host`` (constructor), ``hash_grid_reserve_host``
    (type, count[, with_groups]) and ``hash_grid_update_host`` (type, then ``radius``, the ``points``
    array descriptor and the optional ``groups`` array descriptor, of int32).
    """

    name: str
    handle: Union[RawHandle, HandleRef]
    ints: tuple[int, ...] = ()
    radius: Union[float, None] = None
    points: Union[Bytes, None] = None
    groups: Union[Bytes, None] = None
    kind = OpKind.HANDLE_CALL


Op = Union[
    Launch, Memcpy, Memset, Memtile, ArrayCopy, ArrayFill, Alloc, Branch, Jump, NativeCall, CudaLaunch, HandleCall
]


# --- what an op is: the type tests the other layers ask, each written here once ---------------------------
# (what an op reads, writes and whether it moves control are its effects: apic.record.effects.EFFECTS)
def is_cpu_launch(op) -> bool:
    """A CPU kernel launch (``Launch``: a kernel, its bounds, packed arguments and adjoint arguments)."""
    return type(op) is Launch


def is_cuda_launch(op) -> bool:
    """A CUDA kernel launch (``CudaLaunch``: one param blob, grid, block, dynamic shared memory)."""
    return type(op) is CudaLaunch


def only_cpu_launches(ops) -> bool:
    """Whether an op sequence holds CPU kernel launches and nothing else (False when empty)."""
    return set(map(type, ops)) == {Launch}


def is_byte_fill(op) -> bool:
    """A ``Memset``: ``nbytes`` bytes set to one byte value."""
    return type(op) is Memset


def is_tile_fill(op) -> bool:
    """A ``Memtile``: a value blob repeated ``count`` times."""
    return type(op) is Memtile


def moves_nbytes(op) -> bool:
    """A ``Memcpy`` or ``Memset``: it copies or sets ``op.nbytes`` bytes at replay (an ``Alloc``'s ``nbytes``
    runs nothing; a ``Memtile`` sets ``count`` values)."""
    return type(op) is Memcpy or type(op) is Memset


def is_native_call(op) -> bool:
    """A ``NativeCall`` of one of Warp's native host utilities (``args``: its arguments in order)."""
    return type(op) is NativeCall


def cpu_launches(ops) -> list[Launch]:
    """Each distinct CPU kernel launch of an op sequence once, in the order of its first position."""
    return [op for op in {id(op): op for op in ops}.values() if isinstance(op, Launch)]


def launch_counts(ops) -> dict[int, int]:
    """Kernel index -> how many positions of an op sequence launch it (repeats of a shared op counted)."""
    counts: dict[int, int] = {}
    for op in ops:
        if isinstance(op, Launch):
            counts[op.kernel] = counts.get(op.kernel, 0) + 1
    return counts


# --- the op-kind table ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class OpSpec:
    """One op kind: its dataclass, its persisted number and name, and the targets that may run it.

    Every layer that treats ops one kind at a time (the ``.wrp`` writer and reader, the CPU and CUDA
    lowerings, ``inspect``, the DOT picture) keeps its own table keyed by ``type``, with an entry or a
    :class:`Refused` for each kind here; ``tests/project/test_op_kinds.py`` checks that none is missing.
    """

    type: type
    kind: OpKind
    name: str  # on the wire (schema.OP_FIELDS has its fields) and in what apic shows: "launch", "cuda_launch", ...
    targets: tuple[str, ...]  # the ``Target.name`` of each target whose graphs may hold it (apic.targets.target)


_CPU_ONLY, _BOTH, _CUDA_ONLY = ("cpu",), ("cpu", "cuda"), ("cuda",)
OP_SPECS: tuple[OpSpec, ...] = tuple(
    OpSpec(op_type, op_type.kind, op_type.kind.name.lower(), targets)
    for op_type, targets in (
        (Launch, _CPU_ONLY), (Memcpy, _BOTH), (Memset, _BOTH), (Memtile, _BOTH), (ArrayCopy, _CPU_ONLY),
        (ArrayFill, _CPU_ONLY), (Alloc, _BOTH), (Branch, _BOTH), (Jump, _BOTH), (NativeCall, _CPU_ONLY),
        (CudaLaunch, _CUDA_ONLY), (HandleCall, _CPU_ONLY),
    )
)
SPEC_OF_TYPE: dict[type, OpSpec] = {spec.type: spec for spec in OP_SPECS}
SPEC_OF_KIND: dict[OpKind, OpSpec] = {spec.kind: spec for spec in OP_SPECS}


class Refused:
    """The entry of a handler table for a kind that layer does not handle: calling it raises ``error`` with
    ``why``, in which ``{name}`` (the kind's name) and ``{type}`` (its dataclass's) are filled in."""

    def __init__(self, why: str, error: Callable[[str], Exception] = TypeError) -> None:
        self.why, self.error = why, error

    def __call__(self, op, *args, **kwargs):
        raise self.error(self.why.format(name=op.kind.name.lower(), type=type(op).__name__))


def handler(table: dict, op, layer: str) -> Callable:
    """``table[type(op)]``: one layer's handler for ``op`` (which may be a :class:`Refused`); a ``TypeError``
    naming the op's type and ``layer`` when the table has none (not an op kind of ``OP_SPECS``)."""
    found = table.get(type(op))
    if found is None:
        known = "" if type(op) in SPEC_OF_TYPE else " (not an op kind of apic.record.ops.OP_SPECS)"
        raise TypeError(f"{layer}: no handler for an op of type {type(op).__name__}{known}")
    return found
