"""Kernels and steps for the named scalar parameter tests (``test_scalar_params.py``).

A separate module: processes that load the saved graphs never import it (they check that).
Each case is a kernel with one argument of the parameter's type, a state of arrays, a step that
launches the kernel several times (in a ``capture_while`` body and a ``capture_if`` branch too) and
values to set one after another.
"""

from __future__ import annotations

import numpy as np
import warp as wp

import apic

N = 16


@wp.kernel
def axpy_f32(x: wp.array(dtype=wp.float32), p: wp.float32):
    i = wp.tid()
    x[i] = x[i] * p + wp.float32(i) * 0.5


@wp.kernel
def axpy_f64(x: wp.array(dtype=wp.float64), p: wp.float64):
    i = wp.tid()
    x[i] = x[i] * p + wp.float64(i) / wp.float64(3.0)


@wp.kernel
def add_f16(x: wp.array(dtype=wp.float16), p: wp.float16):
    i = wp.tid()
    x[i] = x[i] + p


@wp.kernel
def mix_i32(x: wp.array(dtype=wp.int32), p: wp.int32):
    i = wp.tid()
    x[i] = x[i] / 2 + p / 4 - i  # bounded: no signed overflow


@wp.kernel
def mix_u64(x: wp.array(dtype=wp.uint64), p: wp.uint64):
    i = wp.tid()
    x[i] = x[i] * wp.uint64(5) + p


@wp.kernel
def push_vec3(x: wp.array(dtype=wp.vec3), p: wp.vec3):
    i = wp.tid()
    x[i] = x[i] + p * float(i + 1)


@wp.kernel
def turn_mat22(x: wp.array(dtype=wp.vec2), p: wp.mat22):
    i = wp.tid()
    x[i] = p * x[i] + wp.vec2(0.25, float(i))


@wp.kernel
def flip_bool(x: wp.array(dtype=wp.int32), p: wp.bool):
    i = wp.tid()
    if p:
        x[i] = x[i] + 1
    else:
        x[i] = x[i] * 2


@wp.kernel
def countdown(counter: wp.array(dtype=wp.int32)):
    counter[0] = counter[0] - 1


@wp.kernel
def reload(counter: wp.array(dtype=wp.int32), steps: wp.array(dtype=wp.int32)):
    counter[0] = steps[0]


# name -> (kernel, Warp dtype of the parameter, element dtype of x, initial value, values set one after another)
CASES = {
    "float32": (axpy_f32, wp.float32, wp.float32, 0.5, [1.0 / 3.0, -2.5, 1e-40, 3.4e38, 0.1, 7]),
    "float64": (axpy_f64, wp.float64, wp.float64, 0.5, [1.0 / 3.0, -1e-310, 2.0**60 + 1, 0.1]),
    "float16": (add_f16, wp.float16, wp.float16, 0.5, [0.1, -3.0, 65504.0, 1e-7]),
    "int32": (mix_i32, wp.int32, wp.int32, 1, [-7, 2**31 - 1, -(2**31), 0]),
    "uint64": (mix_u64, wp.uint64, wp.uint64, 1, [2**64 - 1, 12345, 2**63, 0]),
    "vec3": (push_vec3, wp.vec3, wp.vec3, [0.0, -9.8, 0.0], [[0.1, 0.2, 0.3], (1, -1, 2.5),
                                                             np.array([0.0, 1e-3, -4.0])]),
    "mat22": (turn_mat22, wp.mat22, wp.vec2, [[1, 0], [0, 1]], [[[0.5, -0.25], [0.1, 2.0]], np.eye(2) * 1.5]),
    "bool": (flip_bool, wp.bool, wp.int32, True, [False, True, 0, 1]),
}


def make_state(case: str) -> dict:
    """Fresh arrays for ``case`` (same contents every call)."""
    _, _, x_dtype, _, _ = CASES[case]
    scalar = getattr(x_dtype, "_wp_scalar_type_", x_dtype)
    np_type = np.dtype(wp.dtype_to_numpy(scalar))
    width = int(np.prod(getattr(x_dtype, "_shape_", ()) or (1,)))
    values = (np.arange(N * width) % 7).astype(np_type).reshape((N, width) if width > 1 else (N,))
    return {"x": wp.array(values, dtype=x_dtype, device="cpu"),
            "counter": wp.zeros(1, dtype=wp.int32, device="cpu"),
            "steps": wp.array(np.array([2], dtype=np.int32), dtype=wp.int32, device="cpu"),
            "flag": wp.array(np.array([1], dtype=np.int32), dtype=wp.int32, device="cpu")}


def step(case: str, s: dict, p) -> None:
    """The parameter in a plain launch, twice in a ``capture_while`` body, and in a ``capture_if`` branch."""
    kernel = CASES[case][0]
    wp.launch(kernel, dim=N, inputs=[s["x"], p], device="cpu")
    wp.launch(reload, dim=1, inputs=[s["counter"], s["steps"]], device="cpu")

    def body():
        wp.launch(kernel, dim=N, inputs=[s["x"], p], device="cpu")
        wp.launch(countdown, dim=1, inputs=[s["counter"]], device="cpu")

    wp.capture_while(s["counter"], body)
    wp.capture_if(s["flag"], on_true=lambda: wp.launch(kernel, dim=N, inputs=[s["x"], p], device="cpu"))


def param(case: str):
    _, dtype, _, initial, _ = CASES[case]
    return apic.param("p", dtype, initial)
