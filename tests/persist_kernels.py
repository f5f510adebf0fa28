"""A small simulation for the save/load tests. Processes that load the saved graph never import it.

``Sim.step`` issues every kind of operation a saved graph must carry: forward and backward launches
(vectors, 2-d arrays, a struct holding an array, atomics), contiguous and strided ``wp.copy``,
``zero_``, ``fill_`` on contiguous and strided arrays, and memory allocated inside the capture.
"""

from __future__ import annotations

import numpy as np
import warp as wp

N = 32
GRID = (8, 6)


@wp.struct
class Scaled:
    data: wp.array(dtype=wp.float32)
    scale: wp.float32


@wp.kernel
def gravity(f: wp.array(dtype=wp.vec3), g: wp.vec3):
    i = wp.tid()
    f[i] = f[i] + g


@wp.kernel
def integrate(x: wp.array(dtype=wp.vec3), v: wp.array(dtype=wp.vec3), f: wp.array(dtype=wp.vec3), dt: float):
    i = wp.tid()
    v[i] = v[i] * 0.99 + f[i] * dt
    x[i] = x[i] + v[i] * dt


@wp.kernel
def kinetic(v: wp.array(dtype=wp.vec3), out: wp.array(dtype=float)):
    i = wp.tid()
    wp.atomic_add(out, 0, 0.5 * wp.dot(v[i], v[i]))


@wp.kernel
def diffuse(src: wp.array2d(dtype=float), dst: wp.array2d(dtype=float), k: float):
    i, j = wp.tid()
    left = src[i, wp.max(j - 1, 0)]
    right = src[i, wp.min(j + 1, src.shape[1] - 1)]
    dst[i, j] = src[i, j] + k * (left + right - 2.0 * src[i, j])


@wp.kernel
def apply_scaled(p: Scaled, out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = out[i] + p.data[i] * p.scale


@wp.kernel
def square(x: wp.array(dtype=float), y: wp.array(dtype=float)):
    i = wp.tid()
    y[i] = x[i] * x[i]


def make_arrays(seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    cpu = "cpu"
    return {
        "x": wp.array(rng.standard_normal((N, 3)).astype(np.float32), dtype=wp.vec3, device=cpu),
        "v": wp.array(rng.standard_normal((N, 3)).astype(np.float32), dtype=wp.vec3, device=cpu),
        "f": wp.zeros(N, dtype=wp.vec3, device=cpu),
        "x_prev": wp.zeros(N, dtype=wp.vec3, device=cpu),
        "energy": wp.zeros(1, dtype=float, device=cpu),
        "grid": wp.array(rng.standard_normal(GRID).astype(np.float32), device=cpu),
        "grid_tmp": wp.zeros(GRID, dtype=float, device=cpu),
        "column": wp.zeros(GRID[0], dtype=float, device=cpu),
        "acc": wp.zeros(N, dtype=float, device=cpu),
        "weights": wp.array(rng.standard_normal(N).astype(np.float32), device=cpu),
        "sq": wp.zeros(N, dtype=float, device=cpu),
        "sq_adj": wp.array(np.ones(N, dtype=np.float32), device=cpu),
        "w_adj": wp.zeros(N, dtype=float, device=cpu),
    }


class Sim:
    """State plus one ``step``: the same calls run eagerly or inside a capture."""

    def __init__(self, seed: int = 0) -> None:
        self.a = make_arrays(seed)

    def step(self) -> None:
        a, cpu = self.a, "cpu"
        a["f"].zero_()
        wp.launch(gravity, dim=N, inputs=[a["f"], wp.vec3(0.0, -9.8, 0.0)], device=cpu)
        wp.copy(a["x_prev"], a["x"])
        wp.launch(integrate, dim=N, inputs=[a["x"], a["v"], a["f"], 0.01], device=cpu)
        a["energy"].zero_()
        wp.launch(kinetic, dim=N, inputs=[a["v"], a["energy"]], device=cpu)
        wp.launch(diffuse, dim=GRID, inputs=[a["grid"], a["grid_tmp"], 0.1], device=cpu)
        wp.copy(a["grid"], a["grid_tmp"])
        wp.copy(a["column"], a["grid"][:, 1])  # strided source
        a["grid"][:, 0].fill_(0.25)  # strided fill
        a["acc"].fill_(1.0)
        scratch = wp.empty(N, dtype=float, device=cpu)  # graph-owned memory
        wp.copy(scratch, a["weights"])
        p = Scaled()
        p.data = scratch
        p.scale = 0.5
        wp.launch(apply_scaled, dim=N, inputs=[p, a["acc"]], device=cpu)
        wp.launch(square, dim=N, inputs=[a["weights"], a["sq"]], device=cpu)
        a["w_adj"].zero_()
        wp.launch(square, dim=N, inputs=[a["weights"], a["sq"]], adj_inputs=[a["w_adj"], a["sq_adj"]],
                  adjoint=True, device=cpu)

    def inputs(self) -> dict:
        return {"x": self.a["x"], "v": self.a["v"], "weights": self.a["weights"]}

    def outputs(self) -> dict:
        return {name: self.a[name] for name in ("x_prev", "energy", "grid", "column", "acc", "sq", "w_adj")}

    def numpy(self, name: str) -> np.ndarray:
        return self.a[name].numpy()


def capture(sim: Sim):
    with wp.ScopedCapture(device="cpu", apic=True) as cap:
        sim.step()
    return cap.graph
