"""The conditional work the GPU tests capture with ``wp.capture_if`` / ``wp.capture_while``, on any device.

``step`` runs, in one step: an if / else whose condition alternates from step to step (its then-body copies,
its else-body fills), an if with no else, a while whose body counts its own condition down (with a copy
and a memset in it), a while inside an if, a while inside a while (the inner loop's counter reset by a copy
each outer pass) and a while that runs zero times. Every counter is reset by a device copy at the start of
the step, so each replay runs the same loops. The arithmetic is exact (small integers and powers of two in
float32), so any replay must agree with eager execution bit for bit. Its kernels are in ``cuda_kernels``.
"""

from __future__ import annotations

import numpy as np
import warp as wp

import cuda_kernels as ck

N = 256
INITS = {"count": 3, "outer": 2, "inner": 3}  # loop trip counts


def make_state(device: str) -> dict:
    """The arrays of one step: data, conditions, counters and their start values."""
    rng = np.random.default_rng(7)
    s = {
        "x": wp.array(rng.integers(-4, 4, N).astype(np.float32), device=device),
        "y": wp.array(rng.integers(-4, 4, N).astype(np.float32), device=device),
        "z": wp.zeros(N, dtype=wp.float32, device=device),
        "w": wp.array(rng.integers(-4, 4, N).astype(np.float32), device=device),
        "flag": wp.array([1], dtype=wp.int32, device=device),
        "one": wp.array([1], dtype=wp.int32, device=device),
        "never": wp.zeros(1, dtype=wp.int32, device=device),
    }
    for name, count in INITS.items():
        s[f"{name}_counter"] = wp.zeros(1, dtype=wp.int32, device=device)
        s[f"{name}_cond"] = wp.zeros(1, dtype=wp.int32, device=device)
        s[f"{name}_init"] = wp.array([count], dtype=wp.int32, device=device)
    return s


def _saxpy(a: float, x, y, device: str) -> None:
    wp.launch(ck.saxpy, dim=N, inputs=[a, x, y], device=device)


def _countdown(s: dict, name: str, device: str) -> None:
    wp.launch(ck.countdown, dim=1, inputs=[s[f"{name}_counter"], s[f"{name}_cond"]], device=device)


def _restart(s: dict, name: str) -> None:
    wp.copy(s[f"{name}_counter"], s[f"{name}_init"])
    wp.copy(s[f"{name}_cond"], s["one"])


def step(s: dict, device: str) -> None:
    """One step of conditional work (see the module docstring)."""
    for name in INITS:
        _restart(s, name)
    _saxpy(1.0, s["x"], s["y"], device)

    def then():
        _saxpy(0.5, s["y"], s["z"], device)
        wp.copy(s["w"], s["z"])

    def otherwise():
        s["z"].fill_(2.0)

    wp.capture_if(s["flag"], on_true=then, on_false=otherwise)  # if / else
    wp.capture_if(s["flag"], on_true=lambda: _saxpy(0.25, s["x"], s["w"], device))  # if

    def count_body():  # changes its own condition; a copy and a memset in the body
        _countdown(s, "count", device)
        _saxpy(0.125, s["w"], s["y"], device)
        wp.copy(s["z"], s["y"])
        s["w"].zero_()

    wp.capture_while(s["count_cond"], count_body)

    def inner_body():
        _countdown(s, "inner", device)
        _saxpy(2.0, s["x"], s["z"], device)

    def outer_body():  # a while in a while: the inner loop restarts on each outer pass
        _countdown(s, "outer", device)
        _restart(s, "inner")
        wp.capture_while(s["inner_cond"], inner_body)

    wp.capture_while(s["outer_cond"], outer_body)
    _restart(s, "inner")
    wp.capture_if(s["flag"], on_true=lambda: wp.capture_while(s["inner_cond"], inner_body))  # a while in an if
    wp.capture_while(s["never"], lambda: _saxpy(100.0, s["x"], s["y"], device))  # zero iterations
    wp.launch(ck.flip, dim=1, inputs=[s["flag"]], device=device)


def snapshot(s: dict, device: str) -> dict:
    """Every array of the state, on the host."""
    wp.synchronize_device(device)
    return {k: v.numpy().copy() for k, v in s.items()}
