"""A saved graph with every kind of named parameter the CLI and ``inspect`` meet, for their error tests.

Array bindings: ``x`` (float32), ``v`` (vec3f), ``pairs`` (a struct: no NumPy equivalent), ``x_out`` (the
same memory as ``x``, an output). Named scalar parameters of each component kind and shape: ``dt``
(float32), ``d`` (float64), ``h`` (float16), ``n`` (int32), ``small`` (int64), ``big`` (uint64), ``flag``
(bool), ``g`` (vec3f), ``m`` (mat22f). A separate module: the CLI processes that load the graph never
import it.
"""

from __future__ import annotations

import numpy as np
import warp as wp

import apic

N = 8

DEFAULTS = {"dt": 0.01, "d": 0.5, "h": 0.25, "n": 3, "small": -5, "big": 7, "flag": True,
            "g": (0.0, -9.8, 0.0), "m": ((1.0, 0.0), (0.0, 1.0))}
TYPES = {"dt": wp.float32, "d": wp.float64, "h": wp.float16, "n": wp.int32, "small": wp.int64, "big": wp.uint64,
         "flag": wp.bool, "g": wp.vec3, "m": wp.mat22}


@wp.struct
class Pair:
    a: float
    b: int


@wp.kernel
def step(x: wp.array(dtype=float), v: wp.array(dtype=wp.vec3), pairs: wp.array(dtype=Pair),
         dt: wp.float32, d: wp.float64, h: wp.float16, n: wp.int32, small: wp.int64, big: wp.uint64, flag: wp.bool,
         g: wp.vec3, m: wp.mat22):
    i = wp.tid()
    x[i] = x[i] + dt * float(n) + float(d) + float(h) + float(small) + float(big % wp.uint64(7)) + m[0, 0]
    v[i] = v[i] + g * dt
    if flag:
        pairs[i].a = pairs[i].a + 1.0


def save(stem: str, source_fallback: bool = False, **values) -> str:
    """Capture one launch of ``step`` and save it at ``stem``; ``values`` override the parameters' values."""
    x = wp.array(np.arange(N, dtype=np.float32), device="cpu")
    v = wp.zeros(N, dtype=wp.vec3, device="cpu")
    pairs = wp.zeros(N, dtype=Pair, device="cpu")
    params = [apic.param(name, TYPES[name], values.get(name, DEFAULTS[name])) for name in TYPES]
    with wp.ScopedCapture(device="cpu", apic=True) as capture:
        wp.launch(step, dim=N, inputs=[x, v, pairs, *params], device="cpu")
    wp.capture_save(capture.graph, stem, inputs={"x": x, "v": v, "pairs": pairs}, outputs={"x_out": x},
                    source_fallback=source_fallback)
    return stem + ".wrp"
