"""Lowering, per op kind: the op-table row each kind of op becomes (``LOWER``, keyed by op type; the
op-kind test checks it covers every kind), and the call rows they are made of. :mod:`apic.replay.lowering`
assembles the table from them."""

from __future__ import annotations

import struct

from apic import _compat
from apic.record import natives
from apic.record import ops as rec
from apic.replay.cpu import table as tbl
from apic.replay.relocate import Arena
from apic.targets.cpu import ABI_BY_VALUE

_BOUNDS_QWORDS = struct.Struct("<4q")
_I64 = struct.Struct("<q")  # signed: the table holds int64 (same bits)


def argv_blob(op: rec.NativeCall) -> rec.Blob:
    """The arguments of a wide native call as ``ARGV_ARGS`` int64 (pointers relocated, the rest zero).
    apic's own trailing arguments (``natives.Signature.extra``) are not passed."""
    args = op.args[: natives.native_arity(op.name, len(op.args))]
    if len(args) > tbl.ARGV_ARGS:
        raise ValueError(f"wp_{op.name} takes {len(args)} arguments; the interpreter passes at most {tbl.ARGV_ARGS}")
    data = bytearray(8 * tbl.ARGV_ARGS)
    relocs = []
    for i, arg in enumerate(args):
        if isinstance(arg, rec.Ref):
            relocs.append(rec.Reloc(8 * i, arg))
        else:
            struct.pack_into("<q", data, 8 * i, arg)
    return rec.Blob(bytes(data), tuple(relocs))


_CALL_ARITY: dict[int, int] = {}  # number of arguments -> the arity of the call opcode that passes them


def call(fn: int, *args: int) -> list[int]:
    # A function of another arity is called with trailing zeros: extra integer arguments are harmless
    # to a C callee on every supported ABI (the caller owns and cleans up the argument area).
    arity = _CALL_ARITY.get(len(args))
    if arity is None:
        arity = _CALL_ARITY[len(args)] = min(n for n in tbl.CALL_OPCODES if n >= len(args))
    return [tbl.CALL_OPCODES[arity], fn, *args, *[0] * (arity - len(args))]


class Lowering:
    """What lowering one op needs besides the op (the arguments of ``lower_op``). A plain class with
    slots, not a frozen dataclass: one is made per distinct op, and that costs a third as much."""

    __slots__ = ("abi", "arena", "address_of", "kernel_addresses", "row_at", "argvs")

    def __init__(self, abi: str, arena: Arena, address_of, kernel_addresses: list, row_at, argvs) -> None:
        self.abi, self.arena, self.address_of, self.kernel_addresses, self.row_at, self.argvs = (
            abi, arena, address_of, kernel_addresses, row_at, argvs)


def lower_op(op, abi: str, arena: Arena, address_of, kernel_addresses, row_at, argvs=None) -> list[int] | None:
    """One op-table row (as a list) for ``op``, or None when there is nothing to run (``LOWER``, by op kind).

    ``row_at(position)`` is the table row of a position in the op sequence (for jump targets); ``argvs``
    maps ``id(op)`` of a native call with too many arguments for a row to the blob that holds them.
    """
    lower = rec.handler(LOWER, op, "lowering a graph for CPU replay")
    return lower(op, Lowering(abi, arena, address_of, kernel_addresses, row_at, argvs or {}))


def _lower_launch(op: rec.Launch, low: Lowering) -> list[int]:
    row, column = launch_row(op, low)
    row[column] = low.arena.address(op.args)
    return row


def launch_row(op: rec.Launch, low: Lowering) -> tuple[list[int], int]:
    """The row of launch ``op`` with 0 where the address of its arguments goes, and that column: launches
    that differ in their arguments only (one kernel, bounds and adjoint arguments) share the rest."""
    fn = low.kernel_addresses[op.kernel]
    adj = low.arena.address(op.adj_args) if op.adj_args is not None else None
    if low.abi == ABI_BY_VALUE and _compat.SYSV_X86_64:
        # The 32-byte bounds struct goes on the stack after the six register arguments:
        # call f(args, [adj], 0, ..., q0, q1, q2, q3) with ten integer arguments.
        regs = [0] if adj is None else [0, adj]
        regs += [0] * (6 - len(regs))
        return call(fn, *regs, *_BOUNDS_QWORDS.unpack_from(op.bounds.data.ljust(32, b"\0"))), tbl.COL_ARG0
    # By pointer (1.13+), or by value on Win64/AArch64, where the caller passes a pointer to a copy.
    bounds = low.arena.address(op.bounds)
    return (call(fn, bounds, 0) if adj is None else call(fn, bounds, 0, adj)), tbl.COL_ARG0 + 1


def _lower_native_call(op: rec.NativeCall, low: Lowering) -> list[int]:
    """A call row; a call with too many arguments for a row passes them in the arena (``OP_CALL_ARGV``); a
    call the opcode table checks first (``table.CHECKED_CALLS``) gets that opcode: the same call's columns,
    then the arguments its check reads."""
    natives.check_host(op.name, len(op.args))
    fn = _compat.native_address(op.name)

    def value(arg):
        return low.address_of(arg) if isinstance(arg, rec.Ref) else arg

    argv = low.argvs.get(id(op))
    if argv is not None:
        row = [tbl.OP_CALL_ARGV, fn, low.arena.address(argv)]
    else:
        passed = op.args[: natives.native_arity(op.name, len(op.args))]  # apic's own trailing arguments are not
        row = call(fn, *[value(a) for a in passed])
    check = tbl.CHECKED_CALLS.get((op.name, len(op.args)))
    if check is None:
        return row
    if row[tbl.COL_OPCODE] != check.calls:
        raise ValueError(f"wp_{op.name} lowers to opcode {row[tbl.COL_OPCODE]}, not the {check.calls} its check "
                         f"{check.name!r} calls")
    call_columns = tbl.COL_ARG0 + len(tbl.OPCODES[check.calls].columns)
    return [check.number, *row[tbl.COL_FN : call_columns], *[value(op.args[k]) for k in check.check_args]]


def _lower_handle_call(op: rec.HandleCall, low: Lowering) -> list[int]:
    """``wp_<name>(id, ...)``; a hash grid build passes its radius as a C double (argument 2)."""
    fn = _compat.native_address(op.name)
    handle = low.address_of(op.handle)
    if op.points is None:  # every handle method but a hash grid build
        return call(fn, handle, *op.ints)
    groups = low.arena.address(op.groups) if op.groups is not None else 0  # an array descriptor (warp 1.19)
    radius_bits = _I64.unpack(struct.pack("<d", op.radius))[0]
    # warp <= 1.12 takes no groups argument: the extra integer is harmless to a C callee (see call)
    return [tbl.OP_CALL5_D2, fn, handle, op.ints[0], radius_bits, low.arena.address(op.points), groups]


LOWER = {  # op type -> (op, Lowering) -> one table row, or None for an op of no rows (OpEffects.rows)
    rec.Launch: _lower_launch,
    rec.Memcpy: lambda op, low: call(_compat.native_address("memcpy_h2h"), low.address_of(op.dst),
                                      low.address_of(op.src), op.nbytes),
    rec.Memset: lambda op, low: call(_compat.native_address("memset_host"), low.address_of(op.dst), op.value,
                                      op.nbytes),
    rec.Memtile: lambda op, low: call(_compat.native_address("memtile_host"), low.address_of(op.dst),
                                       low.arena.address(op.value), len(op.value.data), op.count),
    rec.ArrayCopy: lambda op, low: call(_compat.native_address("array_copy_host"), low.arena.address(op.dst),
                                         low.arena.address(op.src), op.dst_type, op.src_type, op.elem_size),
    rec.ArrayFill: lambda op, low: call(_compat.native_address("array_fill_host"), low.arena.address(op.dst),
                                         op.array_type, low.arena.address(op.value), len(op.value.data)),
    rec.Alloc: lambda op, low: None,
    rec.Branch: lambda op, low: [tbl.OP_BRANCH_IF_ZERO, 0, low.address_of(op.cond), low.row_at(op.target)],
    rec.Jump: lambda op, low: [tbl.OP_JUMP, 0, low.row_at(op.target)],
    rec.NativeCall: _lower_native_call,
    rec.HandleCall: _lower_handle_call,
    rec.CudaLaunch: rec.Refused("cannot lower op {type}: a CUDA graph replays through apic.replay.cuda.loaded_graph"),
}
