"""``@wp.func`` helpers the generated kernels of ``footprint_gen_kernels`` call: a default bound in this module
(``FAR``; the generated modules define ``FAR`` otherwise), a function returning one of two arrays, a pure
integer function, and a function whose parameter is declared ``wp.uint8``."""

from __future__ import annotations

import warp as wp

FAR = 0


@wp.func
def put_at(a: wp.array(dtype=float), i: int, value: float, spread: int = FAR):
    a[(i * spread + i) & 63] = value


@wp.func
def pick(c: bool, a: wp.array(dtype=float), b: wp.array(dtype=float)):
    if c:
        return a
    return b


@wp.func
def mix(i: int, j: int):
    return (i * 3 + j) & 63


@wp.func
def narrow(i: wp.uint8):
    return int(i + i)
