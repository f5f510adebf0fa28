"""Warp's native host utilities that a CPU capture records as ``NativeCall`` ops: the allow-list.

``wp.utils.array_scan``, ``radix_sort_pairs``, ``segmented_sort_pairs``, ``runlength_encode``,
``array_sum`` and ``array_inner``, and the ``warp.sparse`` functions that build a BSR topology
natively (``bsr_set_from_triplets``, ``bsr_axpy``, ``bsr_mm``, ``bsr_assign``, ``bsr_set_transpose``,
``bsr_compress``: see ``apic.record.cpu.sparse``), end in a call of a ``wp_*_host`` export of Warp's core
library with integer and pointer arguments only. A capture records that call (the export's name and
its arguments, pointers as region references) and replay makes it again, from the interpreter.

Each allowed export has one ``Signature`` per argument list it has had across supported warp-lang
versions (they differ: ``wp_array_scan_float_host`` takes 4 arguments in 1.12 and 7 in 1.19). A
signature says which arguments are pointers, the range of each integer, and how many bytes each
pointer reaches for given integers, read off Warp's native implementation
(``warp/native/{scan,sort,reduce,runlength_encode}.cpp``). The recorder uses it to know the memory a
call touches; the reader to refuse a file whose call would reach outside its regions; the lowering
to refuse a call whose export takes other arguments in this process's Warp.

A padded ``bsr_set_transpose`` (warp-lang 1.13+) writes into the destination's row capacity, which
its row offsets give: as upstream does, apic keeps those offsets as they are when the transpose is
captured, restores them (a ``memtile`` op) right before the call at replay, and records the call with
the capacity appended as a trailing argument of its own (``Signature.extra``; not passed to Warp), so
that the bytes it reaches are known from its arguments; the replay checks the restored offsets
against that capacity before the call (``apic.replay.cpu.table.OP_PADDED_TRANSPOSE``, whose entry in
``table.OPCODES`` names this call).

``segmented_sort_pairs`` reads its segment bounds from graph memory at replay time; the replay
checks each range first, as upstream Warp 1.19's does, and stops with a ``RuntimeError`` naming an
invalid one (``apic.replay.program``).

What the checks cannot cover: the BSR exports read counts and offsets from graph memory: a triplet
count (``count=``) replaces the triplet upper bound, a transpose takes its block count from the
source offsets, a masked build and a compression walk the existing row offsets. Warp trusts those
values (as it does eagerly); a graph built by warp.sparse keeps them consistent, a hand-edited file
need not.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Callable

from apic import _compat
from apic.errors import IncompatibleGraphError, UnsupportedOperationError

_INT_MAX = (1 << 31) - 1
PTR = "ptr"
INT = "int"
OPT = "opt"  # a pointer that may be null (recorded and saved as the integer 0 then)
MAX_ARGS = 20  # the most arguments a native call may have (apic.replay.cpu.table.ARGV_ARGS; the longest here has 17)

# Bytes per scalar of each type suffix in the export names.
_SCALAR = {"int": 4, "uint": 4, "float": 4, "double": 8, "int64": 8, "uint64": 8}


@dataclass(frozen=True)
class Signature:
    """One argument list of a native utility ``wp_<name>``."""

    name: str
    params: tuple[str, ...]  # PTR, OPT or INT, in order
    ranges: dict  # position of an INT -> (lo, hi), inclusive
    reach: Callable[[tuple], tuple]  # args -> bytes reached from each PTR argument (None at INT positions)
    multiple: dict  # position of an INT -> the value must be a multiple of this (strides in whole scalars)
    extra: int = 0  # trailing INT arguments apic records that Warp's export does not take (not passed to it)

    def check(self, args: tuple) -> str | None:
        """Why ``args`` (ints at INT positions) are not valid for this signature, or None."""
        if len(args) != len(self.params):
            return f"{len(args)} arguments, expected {len(self.params)}"
        for i, kind in enumerate(self.params):
            if kind != INT:
                continue
            lo, hi = self.ranges[i]
            if not lo <= args[i] <= hi:
                return f"argument {i} is {args[i]}, outside [{lo}, {hi}]"
            step = self.multiple.get(i)
            if step and args[i] % step:
                return f"argument {i} ({args[i]}) is not a multiple of {step}"
        for i, nbytes in enumerate(self.reach(args)):
            # The native code indexes with C ints: below 2 GiB no index can overflow.
            if nbytes is not None and nbytes > _INT_MAX:
                return f"argument {i} reaches {nbytes} bytes; apic records these calls on less than 2 GiB"
        return None


def _elements(count: int, stride_elems: int, length: int) -> int:
    """Scalars a strided walk reaches: ``(count - 1) * stride + length`` (0 when ``count`` is 0)."""
    return 0 if count <= 0 else (count - 1) * stride_elems + length


_SIGNATURES: dict[tuple[str, int], Signature] = {}


def _add(name: str, params: str, ranges: dict, reach, multiple: dict | None = None, extra: int = 0) -> None:
    kinds = tuple({"p": PTR, "q": OPT, "i": INT}[c] for c in params)
    _SIGNATURES[(name, len(kinds))] = Signature(name, kinds, ranges, reach, multiple or {}, extra)


_BOOL = (0, 1)
_COUNT = (0, _INT_MAX)
_HALF = (0, _INT_MAX // 2)  # counts of buffers that hold 2 * count elements
_LENGTH = (1, 1 << 16)  # scalars per element (vector and matrix dtypes)

for _t in ("int", "int64", "float", "double"):
    _s = _SCALAR[_t]
    # 1.13+: scan(in, out, n, in_byte_stride, out_byte_stride, type_length, inclusive)
    _add(
        f"array_scan_{_t}_host", "ppiiiii", {2: _COUNT, 3: _COUNT, 4: _COUNT, 5: _LENGTH, 6: _BOOL},
        lambda a, s=_s: (_elements(a[2], a[3] // s, a[5]) * s, _elements(a[2], a[4] // s, a[5]) * s,
                         None, None, None, None, None),
        {3: _s, 4: _s},
    )
for _t in ("int", "float"):
    # up to 1.12: scan(in, out, n, inclusive), contiguous scalars
    _add(f"array_scan_{_t}_host", "ppii", {2: _COUNT, 3: _BOOL},
         lambda a, s=_SCALAR[_t]: (a[2] * s, a[2] * s, None, None))

for _t in ("int", "uint", "float", "double", "int64", "uint64"):
    # 1.19: radix_sort(keys, values, n, begin_bit, end_bit, value_size); keys and values hold 2n elements
    _add(
        f"radix_sort_pairs_{_t}_host", "ppiiii",
        {2: _HALF, 3: (0, 8 * _SCALAR[_t]), 4: (0, 8 * _SCALAR[_t]), 5: (4, 8)},
        lambda a, s=_SCALAR[_t]: (2 * a[2] * s, 2 * a[2] * a[5], None, None, None, None),
        {5: 4},
    )
for _t in ("int", "float", "int64", "uint64"):
    # up to 1.12: radix_sort(keys, values, n) with int32 values
    _add(f"radix_sort_pairs_{_t}_host", "ppi", {2: _HALF},
         lambda a, s=_SCALAR[_t]: (2 * a[2] * s, 2 * a[2] * 4, None))

for _t in ("int", "float"):
    # segmented_sort(keys, values, n, segment_starts, segment_ends, num_segments): int32 values
    _add(f"segmented_sort_pairs_{_t}_host", "ppippi", {2: _HALF, 5: _COUNT},
         lambda a: (2 * a[2] * 4, 2 * a[2] * 4, None, 4 * a[5], 4 * a[5], None))

# runlength_encode(values, run_values, run_lengths, run_count, n): int32 values
_add("runlength_encode_int_host", "ppppi", {4: _COUNT}, lambda a: (4 * a[4], 4 * a[4], 4 * a[4], 4, None))

for _t in ("float", "double"):
    _s = _SCALAR[_t]
    # sum(a, out, count, byte_stride, type_length): out holds one element
    _add(f"array_sum_{_t}_host", "ppiii", {2: _COUNT, 3: _COUNT, 4: _LENGTH},
         lambda a, s=_s: (_elements(a[2], a[3] // s, a[4]) * s, a[4] * s, None, None, None), {3: _s})
    # inner(a, b, out, count, byte_stride_a, byte_stride_b, type_length): out holds one scalar
    _add(
        f"array_inner_{_t}_host", "pppiiii", {3: _COUNT, 4: _COUNT, 5: _COUNT, 6: _LENGTH},
        lambda a, s=_s: (_elements(a[3], a[4] // s, a[6]) * s, _elements(a[3], a[5] // s, a[6]) * s, s,
                         None, None, None, None),
        {4: _s, 5: _s},
    )

# --- warp.sparse (warp/native/sparse.cpp), reached from the functions apic.record.cpu.sparse wraps --------
_ANY64 = (-((1 << 63) - 1), (1 << 63) - 1)  # a uint64 zero-value mask, as its signed 64-bit pattern
_BLOCK = (1, 1 << 16)  # scalars per block
_SCALAR_BYTES = (0, 8)  # 0 when no values are passed


def _triplets_reach(a, n_args: int):
    """Bytes reached by bsr_matrix_from_triplets: ``a[4]`` triplets, ``a[2]`` rows of blocks."""
    n, rows, values = a[4], a[2], a[4] * a[0] * a[1]
    # block_size, scalar_size, rows, cols, n, count, tpl_rows, tpl_cols, tpl_values, mask, masked,
    # summed_offsets, summed_indices, then (1.13+) offsets, row_counts, columns / (<= 1.12) offsets,
    # columns, nnz out, nnz event
    head = (None, None, None, None, None, 4, 4 * n, 4 * n, values, None, None, 4 * n, 4 * n)
    if n_args == 16:
        return (*head, 4 * (rows + 1), 4 * rows, 4 * n)
    return (*head, 4 * (rows + 1), 4 * n, 4, None)


_TRIPLET_RANGES = {0: _BLOCK, 1: _SCALAR_BYTES, 2: _COUNT, 3: _COUNT, 4: _COUNT, 9: _ANY64, 10: _BOOL}
# 1.13+: (..., P offsets, P? row_counts, P columns)
_add("bsr_matrix_from_triplets_host", "iiiiiqppqiiqqpqp", _TRIPLET_RANGES, lambda a: _triplets_reach(a, 16))
# up to 1.12: (..., P offsets, P columns, P? nnz out, event): the event is a CUDA one, null on the CPU
_add("bsr_matrix_from_triplets_host", "iiiiiqppqiiqqppqi", {**_TRIPLET_RANGES, 16: (0, 0)},
     lambda a: _triplets_reach(a, 17))

# 1.13+: transpose(rows, cols, n, P offsets, P? row_counts, P columns, P t_offsets, t_row_counts,
# P t_columns, P block_indices, status). A compact destination: t_row_counts and status null.
_add("bsr_transpose_host", "iiipqpp" "ipp" "i", {0: _COUNT, 1: _COUNT, 2: _COUNT, 7: (0, 0), 10: (0, 0)},
     lambda a: (None, None, None, 4 * (a[0] + 1), 4 * a[0], 4 * a[2], 4 * (a[1] + 1), None, 4 * a[2], 4 * a[2],
                None))
# 1.13+, a padded destination: P t_row_counts and P status, then apic's own capacity (the destination's
# offsets[cols], restored before the call): t_columns reaches the capacity, block_indices the larger of
# it and n (Warp's native writes a gap marker into every slot of each row's capacity).
_add("bsr_transpose_host", "iiipqpp" "ppp" "p" "i", {0: _COUNT, 1: _COUNT, 2: _COUNT, 11: _COUNT},
     lambda a: (None, None, None, 4 * (a[0] + 1), 4 * a[0], 4 * a[2], 4 * (a[1] + 1), 4 * a[1], 4 * a[11],
                4 * max(a[2], a[11]), 4, None),
     extra=1)
# up to 1.12: transpose(rows, cols, n, P offsets, P columns, P t_offsets, P t_columns, P block_indices)
_add("bsr_transpose_host", "iiippppp", {0: _COUNT, 1: _COUNT, 2: _COUNT},
     lambda a: (None, None, None, 4 * (a[0] + 1), 4 * a[2], 4 * (a[1] + 1), 4 * a[2], 4 * a[2]))

# 1.13+: compress_inplace(rows, cols, block_size, scalar_size, scalar_type, n, prune, mask, compact,
# P offsets, P? row_counts, P columns, P? values, compress_values)
_add(
    "bsr_compress_inplace_host", "iiiiiiiiipqpqi",
    {0: _COUNT, 1: _COUNT, 2: (0, 1 << 16), 3: _SCALAR_BYTES, 4: (0, 1), 5: _COUNT, 6: _BOOL, 7: _ANY64, 8: _BOOL,
     13: _BOOL},
    lambda a: (None,) * 9 + (4 * (a[0] + 1), 4 * a[0], 4 * a[5], a[5] * a[2] * a[3], None),
)

NAMES: frozenset[str] = frozenset(name for name, _ in _SIGNATURES)


def api_of(name: str) -> str:
    """The Python API through which apic records ``wp_<name>`` (for error messages)."""
    if name.startswith("bsr_"):
        return "a warp.sparse function (one imported from warp.sparse before `import apic` is not apic's)"
    return "its wp.utils function"


def signed64(args: tuple) -> tuple:
    """Integer arguments as the int64 the op table holds: a uint64 above 2^63 becomes its negative twin."""
    return tuple(a - (1 << 64) if a >= 1 << 63 else a for a in args)


def signature(name: str, arity: int) -> Signature | None:
    """The signature of ``wp_<name>`` taking ``arity`` arguments, or None if apic does not allow it."""
    return _SIGNATURES.get((name, arity))


def host_arity(name: str) -> int | None:
    """How many arguments ``wp_<name>`` takes in this process's Warp, if they are all integers and pointers
    (``c_void_p`` or typed, such as ``POINTER(c_int)``)."""
    function = getattr(_compat.runtime().core, "wp_" + name, None)
    function = getattr(function, "__wrapped__", function)  # apic's native sink wraps the original
    argtypes = getattr(function, "argtypes", None)
    if argtypes is None:
        return None
    integer = (ctypes.c_bool, ctypes.c_int, ctypes.c_uint, ctypes.c_int32, ctypes.c_uint32, ctypes.c_int64,
               ctypes.c_uint64, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_long, ctypes.c_ulong)
    if not all(t in integer or issubclass(t, ctypes._Pointer) for t in argtypes):
        return None  # a float argument travels in another register class: not callable from the interpreter
    return len(argtypes)


def native_arity(name: str, arity: int) -> int:
    """How many of the ``arity`` recorded arguments of ``wp_<name>`` go to Warp (apic's trailing ones do not)."""
    sig = _SIGNATURES.get((name, arity))
    return arity - (sig.extra if sig is not None else 0)


PADDED_TRANSPOSE = "bsr_transpose_host"


def padded_transpose_layout(name: str, args: tuple) -> tuple | None:
    """For a padded BSR transpose (``wp_bsr_transpose_host`` with a destination ``t_row_counts``), the
    destination's row offsets as they are now (the capacity layout), or None for any other call.

    Warp's native reads them at replay as the rows' capacities and never writes them."""
    if name != PADDED_TRANSPOSE or len(args) != 11 or not args[7] or not args[6] or not 0 <= args[1] < _INT_MAX:
        return None
    return row_offsets(args[6], args[1])


def row_offsets(address: int, rows: int) -> tuple:
    """The ``rows + 1`` int32 row offsets of a BSR matrix at ``address``."""
    return tuple((ctypes.c_int32 * (rows + 1)).from_address(address))


def is_capacity_layout(layout, capacity: int | None = None) -> bool:
    """Whether row offsets are a row-capacity layout: non-decreasing from 0 or more (up to ``capacity``).
    A padded transpose's destination must be one when captured, and its recorded one at replay."""
    return layout[0] >= 0 and all(a <= b for a, b in zip(layout, layout[1:])) and (
        capacity is None or layout[-1] <= capacity)


def invalid_segment(count: int, starts: int, ends: int, segments: int) -> tuple[int, int, int] | None:
    """The first ``(index, start, end)`` of a segmented sort's int32 segment bounds (at addresses ``starts``
    and ``ends``) that is not a range within ``[0, count)``, on which Warp's native fails; or None."""
    for k in range(segments):
        start = ctypes.c_int32.from_address(starts + 4 * k).value
        end = ctypes.c_int32.from_address(ends + 4 * k).value
        if start < 0 or end < start or end > count:
            return k, start, end
    return None


def recorded_call(name: str, args: tuple) -> tuple[tuple, Signature, tuple | None]:
    """``(args, signature, layout)``: a call of ``wp_<name>(*args)`` as apic records it, its arguments as
    the int64 the op table holds (for a padded transpose, apic's own trailing capacity appended;
    ``layout``: the destination's row offsets, else None). Raises ``UnsupportedOperationError`` naming
    the native when apic cannot record the call."""
    args = signed64(tuple(int(a) for a in args))  # a C bool arrives as a Python bool
    layout = padded_transpose_layout(name, args)
    if layout is not None:
        if not is_capacity_layout(layout):
            raise UnsupportedOperationError(
                "warp.sparse.bsr_set_transpose(topology='padded')",
                "the destination's row offsets are not a row-capacity layout (non-decreasing, from 0 or more)",
            )
        args = (*args, layout[-1])  # apic's own trailing argument: the capacity (Signature.extra)
    sig = signature(name, len(args))
    problem = "apic does not know this argument list" if sig is None else sig.check(args)
    if problem is None and any(kind == PTR and not value for kind, value in zip(sig.params, args)):
        problem = "a null pointer argument"
    if problem is not None:
        raise UnsupportedOperationError(f"wp_{name} (native)", problem)
    return args, sig, layout


def check_host(name: str, arity: int) -> None:
    """Refuse a recorded call of ``wp_<name>`` with ``arity`` arguments that this process's Warp cannot make."""
    have = host_arity(name)
    if have != native_arity(name, arity):
        what = "does not have it" if have is None else f"takes {have}"
        raise IncompatibleGraphError(
            f"the graph calls Warp's native wp_{name} with {native_arity(name, arity)} arguments, but warp-lang "
            f"{_compat.WARP_VERSION} {what}; load it with the warp-lang release that saved it"
        )
