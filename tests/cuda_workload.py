"""The work the GPU tests capture, save, load and replay, on any device (the offline tests run it on the CPU).

``step`` issues every kind of operation an ``apic=True`` CUDA capture records: launches over 1-4-D grids
(grid-stride and, from warp 1.15, lean), an adjoint launch, structs holding arrays, indexed arrays of 1-4
dimensions, a device copy, a memset, fills of 1, 2, 4, 8, 12 and 16-byte values (one at an odd address),
and an allocation inside the capture (where the device can allocate during a capture). The sums of
``square_sum``'s float atomics stay multiples of 0.25 below 2**22 for the first 15 steps (more than any test
runs on one state), so every partial sum is exact and the result has the same bits in any order.
All its kernels are in one Warp module (``cuda_kernels``): a GPU compiles it once.
"""

from __future__ import annotations

import numpy as np
import warp as wp

import cuda_kernels as ck

N = 1000
HALF = N // 2


def can_allocate_in_capture(device: str) -> bool:
    """Whether ``step`` allocates inside a capture on ``device`` (CUDA: only with its memory pool on)."""
    if wp.get_device(device).is_cpu:
        return True
    return bool(getattr(wp, "is_mempool_enabled", lambda d: False)(device))


def make_state(device: str) -> dict:
    """Fresh arrays for ``step`` (the same values on every call)."""
    rng = np.random.default_rng(1)

    def ints(shape, dtype=np.float32):
        return rng.integers(-8, 8, shape).astype(dtype)

    return {
        "x": wp.array(ints(N), dtype=wp.float32, device=device),
        "y": wp.array(ints(N), dtype=wp.float32, device=device),
        "z": wp.zeros(N, dtype=wp.float32, device=device),
        "w": wp.zeros(N, dtype=wp.float32, device=device),
        "v": wp.zeros(N, dtype=wp.vec3, device=device),
        "b": wp.zeros(N + 3, dtype=wp.int8, device=device),
        "h": wp.zeros(N, dtype=wp.float16, device=device),
        "d": wp.zeros(N, dtype=wp.float64, device=device),
        "q": wp.zeros(N, dtype=wp.vec4, device=device),
        "t": wp.zeros(N, dtype=wp.float32, device=device),
        "acc": wp.zeros(1, dtype=wp.float32, device=device),
        "xg": wp.zeros(N, dtype=wp.float32, device=device),
        "yg": wp.ones(N, dtype=wp.float32, device=device),
        "m2": wp.array(ints((8, 16)), dtype=wp.float32, device=device),
        "m3": wp.array(ints((4, 5, 6)), dtype=wp.float32, device=device),
        "m4": wp.array(ints((2, 3, 4, 5)), dtype=wp.float32, device=device),
        "idx": wp.array(rng.permutation(N)[:HALF].astype(np.int32), dtype=wp.int32, device=device),
        "idx2": wp.array(np.array([1, 0], dtype=np.int32), dtype=wp.int32, device=device),
        "i2": wp.array(ints((2, 4)), dtype=wp.float32, device=device),
        "i3": wp.array(ints((2, 3, 4, 2)), dtype=wp.vec2, device=device),
        "i4": wp.array(ints((2, 2, 2, 2), np.int32), dtype=wp.int32, device=device),
        "ix": wp.zeros(HALF, dtype=wp.float32, device=device),
        "sx": wp.array(ints((2, 2, 3)), dtype=wp.vec3, device=device),
        "sids": wp.array(np.arange(3, dtype=np.int32), dtype=wp.int32, device=device),
        "so": wp.zeros(N, dtype=wp.float32, device=device),
    }


def _structs(s: dict) -> tuple:
    """The struct arguments of ``ck.structs`` (built in Python: no device work), pointing at the state's arrays."""
    inner = ck.Inner()
    inner.h = wp.float16(0.5)
    inner.v = wp.vec3d(2.0, 0.0, 0.0)
    inner.ids = s["sids"]
    outer = ck.Outer()
    outer.flag = 3
    outer.inner = inner
    outer.xs = s["sx"]
    outer.scale = 1.5
    return outer, inner


def _indexed(s: dict) -> list:
    """Indexed views of 1-4 dimensions over the state's arrays (views only: no device work)."""
    return [
        wp.indexedarray(s["z"], [s["idx"]]),
        wp.indexedarray(s["i2"], [s["idx2"], None]),
        wp.indexedarray(s["i3"], [None, None, s["idx2"]]),
        wp.indexedarray(s["i4"], [None, s["idx2"], None, None]),
    ]


def step(s: dict, device: str) -> None:
    """One step of every recorded operation kind (see the module docstring)."""
    wp.launch(ck.saxpy, dim=N, inputs=[0.5, s["x"], s["y"]], device=device)  # 1-D
    wp.copy(s["z"], s["y"])  # a device-to-device copy
    s["w"].zero_()  # a memset
    s["w"].fill_(1.5)  # a 4-byte fill
    s["v"].fill_(wp.vec3(1.0, 2.0, 3.0))  # 12 bytes
    s["b"][1:].fill_(3)  # 1 byte, at an odd address
    s["h"].fill_(wp.float16(2.0))  # 2 bytes
    s["d"].fill_(2.5)  # 8 bytes
    s["q"].fill_(wp.vec4(1.0, 2.0, 3.0, 4.0))  # 16 bytes
    s["acc"].zero_()
    wp.launch(ck.square_sum, dim=N, inputs=[s["z"]], outputs=[s["acc"]], device=device)
    wp.launch(ck.dims2, dim=s["m2"].shape, inputs=[s["m2"], -1.0], device=device)  # 2-D
    wp.launch(ck.dims3, dim=s["m3"].shape, inputs=[s["m3"], 2.0], device=device, block_dim=64)  # 3-D
    wp.launch(ck.dims4, dim=s["m4"].shape, inputs=[s["m4"], -1.0], device=device)  # 4-D
    wp.launch(ck.saxpy, dim=N, inputs=[0.5, s["x"], s["y"]], adj_inputs=[0.0, s["xg"], s["yg"]], adjoint=True,
              device=device)
    outer, inner = _structs(s)
    wp.launch(ck.structs, dim=N, inputs=[outer, 7, inner, s["so"]], device=device)
    wp.launch(ck.indexed, dim=HALF, inputs=_indexed(s), outputs=[s["ix"]], device=device)
    if ck.lean is not None:
        wp.launch(ck.lean, dim=N, inputs=[s["t"], 3.0], device=device)
    if can_allocate_in_capture(device):
        tmp = wp.zeros(N, dtype=wp.float32, device=device)  # memory the graph owns
        wp.launch(ck.saxpy, dim=N, inputs=[1.0, s["z"], tmp], device=device)
        wp.copy(s["t"], tmp)


def snapshot(s: dict, device: str) -> dict:
    """Every array of the state, on the host."""
    wp.synchronize_device(device)
    return {k: v.numpy().copy() for k, v in s.items()}


def same(a: dict, b: dict, what: str) -> None:
    """``a`` and ``b`` hold the same bits in every array."""
    assert a.keys() == b.keys(), what
    for name in a:
        assert np.array_equal(a[name].view(np.uint8), b[name].view(np.uint8)), f"{what}: '{name}' differs"
