"""``@wp.func`` helpers whose default arguments name this module's globals, called from kernels of another
module that defines the same names otherwise (``footprint_attack_kernels``): Warp binds a default when the
function is defined, in this module, and so must the footprint evaluation."""

from __future__ import annotations

import warp as wp

SPREAD = 0  # every task's put() meets at element 0: no split may hold
LATER = 0  # bound into later_put's default at its definition, rebound below


@wp.func
def put(out: wp.array(dtype=float), t: int, spread: int = SPREAD):
    out[t * spread] = out[t * spread] * 0.5 + float(t)


@wp.func
def later_put(out: wp.array(dtype=float), t: int, spread: int = LATER):
    out[t * spread] = out[t * spread] * 0.5 + float(t)


LATER = 1  # noqa: F811 - after the definition: the default stays 0
