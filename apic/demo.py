"""A small built-in simulation: a mass-spring chain falling onto the ground.

Each ``step`` issues tens of tiny operations (force reset, spring and gravity kernels, integration,
ground contact, a copy of the previous state), which is the workload apic exists for: the Python
cost of dispatch dominates the work. Used by ``python -m apic demo`` and by the benchmarks.
"""

from __future__ import annotations

import numpy as np
import warp as wp


@wp.kernel
def apply_gravity(v: wp.array(dtype=wp.vec3), gravity: wp.vec3, dt: float):
    i = wp.tid()
    v[i] = v[i] + gravity * dt


@wp.kernel
def spring_forces(
    x: wp.array(dtype=wp.vec3),
    v: wp.array(dtype=wp.vec3),
    rest: float,
    stiffness: float,
    damping: float,
    f: wp.array(dtype=wp.vec3),
):
    i = wp.tid()
    # each thread owns spring (i, i+1) and writes both ends; springs are processed one thread at a
    # time on the CPU, so the float additions happen in a fixed order
    d = x[i + 1] - x[i]
    length = wp.length(d)
    if length > 1.0e-6:
        n = d / length
        rel = wp.dot(v[i + 1] - v[i], n)
        force = n * (stiffness * (length - rest) + damping * rel)
        wp.atomic_add(f, i, force)
        wp.atomic_sub(f, i + 1, force)


@wp.kernel
def integrate(x: wp.array(dtype=wp.vec3), v: wp.array(dtype=wp.vec3), f: wp.array(dtype=wp.vec3), inv_mass: float, dt: float):
    i = wp.tid()
    v[i] = v[i] + f[i] * inv_mass * dt
    x[i] = x[i] + v[i] * dt


@wp.kernel
def ground_contact(x: wp.array(dtype=wp.vec3), v: wp.array(dtype=wp.vec3), restitution: float):
    i = wp.tid()
    p = x[i]
    if p[1] < 0.0:
        x[i] = wp.vec3(p[0], 0.0, p[2])
        u = v[i]
        v[i] = wp.vec3(u[0] * 0.9, -u[1] * restitution, u[2] * 0.9)


@wp.kernel
def pin_first(x: wp.array(dtype=wp.vec3), v: wp.array(dtype=wp.vec3), anchor: wp.vec3):
    x[0] = anchor
    v[0] = wp.vec3(0.0, 0.0, 0.0)


class Chain:
    """State and step of the mass-spring chain, on the CPU."""

    def __init__(self, particles: int = 64, substeps: int = 8, device: str = "cpu"):
        self.n = particles
        self.substeps = substeps
        self.dt = 1.0 / 60.0 / substeps
        self.device = device
        start = np.zeros((particles, 3), dtype=np.float32)
        start[:, 0] = np.linspace(0.0, 2.0, particles, dtype=np.float32)
        start[:, 1] = 1.0
        self.x = wp.array(start, dtype=wp.vec3, device=device)
        self.v = wp.zeros(particles, dtype=wp.vec3, device=device)
        self.f = wp.zeros(particles, dtype=wp.vec3, device=device)
        self.x_prev = wp.zeros(particles, dtype=wp.vec3, device=device)

    def step(self) -> None:
        """One frame: ``substeps`` x (zero forces, springs, gravity, integrate, contact, pin) + a copy."""
        wp.copy(self.x_prev, self.x)
        rest = 2.0 / (self.n - 1)
        for _ in range(self.substeps):
            self.f.zero_()
            wp.launch(
                spring_forces, dim=self.n - 1, inputs=[self.x, self.v, rest, 500.0, 2.0, self.f], device=self.device
            )
            wp.launch(apply_gravity, dim=self.n, inputs=[self.v, wp.vec3(0.0, -9.8, 0.0), self.dt], device=self.device)
            wp.launch(integrate, dim=self.n, inputs=[self.x, self.v, self.f, 1.0, self.dt], device=self.device)
            wp.launch(ground_contact, dim=self.n, inputs=[self.x, self.v, 0.3], device=self.device)
            wp.launch(pin_first, dim=1, inputs=[self.x, self.v, wp.vec3(0.0, 1.0, 0.0)], device=self.device)

    def ops_per_step(self) -> int:
        return 1 + 6 * self.substeps

    def state(self) -> dict[str, np.ndarray]:
        return {"x": self.x.numpy().copy(), "v": self.v.numpy().copy()}
