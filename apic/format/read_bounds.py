"""Reading a launch's bounds (``launch_bounds_t``, the first argument of every Warp CPU kernel): they must be
exactly what warp-lang builds for the op's ``dim`` (:func:`check_bounds`), and the shape slots a kernel of
another rank could read are set to 1 (:func:`padded_with_ones`). Used by :mod:`apic.format.read_ops`."""

from __future__ import annotations

import math
import struct

from apic.format import schema
from apic.format.fields import fail as _fail

_LEGACY_BOUNDS = struct.Struct("<4IiIQ")  # warp <= 1.13: int shape[4] (read unsigned, as the recorder reads an
# extent past 2^31 that Warp stored in a C int), int ndim, (padding), size_t size


def _templated_bounds(dim: tuple, rank: int) -> bytes:
    """Warp 1.14+'s ``launch_bounds_<rank>d_t`` for a launch of ``dim`` (as ``wp.launch`` builds it: missing
    dimensions are 1, extra ones fold into ``coord_mult``)."""
    padded = tuple(dim) + (1,) * max(0, rank - len(dim))
    kept, folded = padded[:rank], math.prod(padded[rank:])
    if math.prod(kept) * folded >> 64:  # no launch of 2^64 threads or more: these bounds cannot be Warp's
        return b""
    shape = struct.pack(f"<{rank}I", *kept).ljust(-(-4 * rank // 8) * 8, b"\0")
    return shape + struct.pack("<QQ", math.prod(kept) * folded, folded)


def check_bounds(data: bytes, dim: tuple, legacy: bool, where: str) -> None:
    """The launch bounds must be exactly what Warp builds for the op's ``dim``: the kernel runs as many
    threads as the bounds say, so bounds that disagree with ``dim`` would run past what was recorded."""
    if not dim:
        _fail(where, "a launch with an empty dim")
    if len(data) == _LEGACY_BOUNDS.size:
        *shape, ndim, pad, size = _LEGACY_BOUNDS.unpack(data)
        if ndim == len(dim) and tuple(shape[:ndim]) == tuple(dim) and size == math.prod(dim) and not pad:
            return
    if legacy:  # warp <= 1.12 (bounds by value) has only this layout
        _fail(where, f"launch bounds {data.hex()} (warp <= 1.13's shape[4], ndim, size) do not agree with the "
                     f"op's dim {list(dim)}")
    ranks = (1, 2) if len(data) == 24 else (3, 4)
    # A block launch (tile kernels, CPU blocks) runs block_dim threads per coordinate: Warp folds the
    # block size into coord_mult as a trailing dimension (at most 1024, Warp's largest block)
    coord_mult = struct.unpack_from("<Q", data, len(data) - 8)[0]

    def block(rank: int) -> tuple:  # the block size a coord_mult beyond dim's own folded dimensions says
        folded = math.prod(dim[rank:])
        extra = coord_mult // folded if folded and coord_mult % folded == 0 else 1
        return (extra,) if 1 < extra <= schema.MAX_BLOCK_THREADS else ()

    if not any(data == _templated_bounds(tuple(dim) + (1,) * max(0, rank - len(dim)) + block(rank), rank)
               for rank in ranks):
        _fail(where, f"launch bounds {data.hex()} are not what warp-lang builds for the op's dim {list(dim)}")


def padded_with_ones(data: bytes, legacy: bool) -> bytes:
    """The bounds with every shape slot a kernel of another rank could read set to 1, never 0.

    Which rank a kernel unravels its thread index with is compiled into it, not in the file: a 2-d
    kernel handed 1-d bounds would read the padding after ``shape[0]`` as ``shape[1]`` and divide by
    it. With 1 there, any rank reads coordinates inside the launch's own ``dim``. A kernel of the rank
    the bounds were built for never reads these slots."""
    out = bytearray(data)
    if len(out) == _LEGACY_BOUNDS.size and (legacy or _LEGACY_BOUNDS.unpack(data)[4] in (1, 2, 3, 4)):
        *shape, ndim, pad, size = _LEGACY_BOUNDS.unpack(data)
        if 1 <= ndim <= 4 and not pad and tuple(shape[:ndim]) and size == math.prod(shape[:ndim]):
            for slot in range(ndim, 4):
                struct.pack_into("<i", out, 4 * slot, 1)
            return bytes(out)
    if len(out) == 24 and not any(out[4:8]):  # launch_bounds_1d_t: the padding after shape[0]
        struct.pack_into("<I", out, 4, 1)
    if len(out) == 32 and not any(out[12:16]):  # launch_bounds_3d_t: the padding after shape[2]
        struct.pack_into("<I", out, 12, 1)
    return bytes(out)
