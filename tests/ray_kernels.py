"""A small step for the Ray tests, the benchmark and the example: the driver captures it, workers never import it."""

from __future__ import annotations

import numpy as np
import warp as wp

import apic

N = 256


@wp.kernel
def drift(x: wp.array(dtype=float), v: wp.array(dtype=float), dt: float, inner: int):
    # ``inner`` sets the work per launch, so that a test can make an item last as long as it needs
    i = wp.tid()
    for _ in range(inner):
        v[i] = v[i] * 0.999 + wp.sin(x[i]) * dt
        x[i] = x[i] + v[i] * dt


def arrays(seed: int = 0):
    rng = np.random.default_rng(seed)
    x = wp.array(rng.standard_normal(N).astype(np.float32), dtype=float, device="cpu")
    v = wp.zeros(N, dtype=float, device="cpu")
    return x, v


def capture(dt: float = 0.01, inner: int = 1):
    """The step (two launches, with named scalars ``dt`` and ``inner``) captured; returns (graph, x, v)."""
    x, v = arrays()
    p_dt, p_inner = apic.param("dt", wp.float32, dt), apic.param("inner", wp.int32, inner)
    with wp.ScopedCapture(device="cpu", apic=True) as cap:
        wp.launch(drift, dim=N, inputs=[x, v, p_dt, p_inner], device="cpu")
        wp.launch(drift, dim=N, inputs=[x, v, p_dt, p_inner], device="cpu")
    return cap.graph, x, v


def eager(steps: int, dt: float = 0.01, inner: int = 1, x0=None) -> dict:
    """The oracle: the same step run eagerly ``steps`` times from the captured state (``x0`` replaces x)."""
    x, v = arrays()
    if x0 is not None:
        x.assign(np.asarray(x0, dtype=np.float32))
    for _ in range(steps):
        for _ in range(2):
            wp.launch(drift, dim=N, inputs=[x, v, dt, inner], device="cpu")
    return {"x": x.numpy(), "v": v.numpy()}
