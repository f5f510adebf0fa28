"""The benchmark workloads: what one repetition issues, and the state it reads and writes.

Every workload can issue its operations eagerly (``issue``), hand them out as prebuilt commands
(``commands``: ``Launch`` objects from ``record_cmd=True``, plus plain calls for copies and fills),
reset its state to the initial values, and take a byte snapshot of that state for the bit-for-bit
check. Each timing method builds its own instance, so methods never share memory.

All kernels are contractions towards a fixed point of moderate size, so any number of repetitions
stays finite and away from denormals: the work per repetition is the same in every round.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Callable

import numpy as np
import warp as wp

from apic import demo

DEVICE = "cpu"


# --- W1 and the ladder: tiny launches cycling through three kernels over four buffers ------------
@wp.kernel
def tiny_blend(src: wp.array(dtype=float), dst: wp.array(dtype=float), s: float):
    i = wp.tid()
    dst[i] = src[i] * 0.5 + dst[i] * 0.25 + s


@wp.kernel
def tiny_max(src: wp.array(dtype=float), dst: wp.array(dtype=float), s: float):
    i = wp.tid()
    dst[i] = wp.max(src[i], dst[i]) * 0.5 + s


@wp.kernel
def tiny_norm(src: wp.array(dtype=float), dst: wp.array(dtype=float), s: float):
    i = wp.tid()
    dst[i] = wp.sqrt(src[i] * src[i] + 1.0) * 0.5 + dst[i] * 0.125 + s


TINY_KERNELS = ((tiny_blend, 1.0), (tiny_max, 0.75), (tiny_norm, 0.25))
TINY_BUFFERS = 4
TINY_LENGTH = 16


# --- W2: compute-bound launches -------------------------------------------------------------------
@wp.kernel
def heavy(src: wp.array(dtype=float), dst: wp.array(dtype=float)):
    i = wp.tid()
    x = src[i]
    x = wp.sin(x) * 0.75 + wp.cos(x * 1.3) * 0.25
    dst[i] = x * 0.5 + dst[i] * 0.25


class Workload:
    """Base class: named state arrays, their initial values, reset and snapshot."""

    ops: int  # operations per repetition

    def __init__(self, arrays: dict[str, wp.array]) -> None:
        self.arrays = arrays
        self._initial = {name: wp.clone(arr) for name, arr in arrays.items()}

    def issue(self) -> None:
        """One repetition, eagerly through ``wp.launch`` (and ``wp.copy``/``zero_`` where used)."""
        raise NotImplementedError

    def commands(self) -> list[Callable[[], object]]:
        """One repetition as prebuilt commands: call each in order."""
        raise NotImplementedError

    def reset(self) -> None:
        for name, arr in self.arrays.items():
            wp.copy(arr, self._initial[name])

    def snapshot(self) -> dict[str, bytes]:
        return {name: arr.numpy().tobytes() for name, arr in self.arrays.items()}


class TinyLaunches(Workload):
    """``ops`` launches of ``dim`` threads; launch i runs kernel i%3 from buffer i%4 into (i+1)%4.

    The launches repeat every 12; with ``distinct`` each launch's scalar differs, so none repeats.
    """

    def __init__(self, ops: int, dim: int, distinct: bool = False) -> None:
        if not 1 <= dim <= TINY_LENGTH:
            raise ValueError(f"dim must be in 1..{TINY_LENGTH}")
        self.ops = ops
        self.dim = dim
        self.distinct = distinct
        buffers = {}
        for b in range(TINY_BUFFERS):
            values = np.arange(TINY_LENGTH, dtype=np.float32) * 0.1 + b
            buffers[f"b{b}"] = wp.array(values, dtype=float, device=DEVICE)
        super().__init__(buffers)
        self._buffers = list(buffers.values())

    def _launches(self):
        bufs = self._buffers
        for i in range(self.ops):
            kernel, s = TINY_KERNELS[i % len(TINY_KERNELS)]
            if self.distinct:
                s += (i % 65536) * 2.0**-10  # exact in float32, different for every launch up to 65,536
            yield kernel, [bufs[i % TINY_BUFFERS], bufs[(i + 1) % TINY_BUFFERS], s]

    def issue(self) -> None:
        for kernel, inputs in self._launches():
            wp.launch(kernel, dim=self.dim, inputs=inputs, device=DEVICE)

    def commands(self):
        return [
            wp.launch(kernel, dim=self.dim, inputs=inputs, device=DEVICE, record_cmd=True).launch
            for kernel, inputs in self._launches()
        ]


class HeavyLaunches(Workload):
    """Launches of the ``heavy`` kernel over ``dim`` threads, one per ``[src, dst]`` of ``_launches()``."""

    dim: int

    def issue(self) -> None:
        for inputs in self._launches():
            wp.launch(heavy, dim=self.dim, inputs=inputs, device=DEVICE)

    def commands(self):
        return [
            wp.launch(heavy, dim=self.dim, inputs=inputs, device=DEVICE, record_cmd=True).launch
            for inputs in self._launches()
        ]


class ComputeBound(HeavyLaunches):
    """``ops`` launches of ``dim`` threads of a transcendental kernel, ping-ponging two buffers."""

    def __init__(self, ops: int, dim: int) -> None:
        self.ops = ops
        self.dim = dim
        a = wp.array(np.linspace(-1.0, 1.0, dim, dtype=np.float32), dtype=float, device=DEVICE)
        b = wp.array(np.linspace(1.0, 2.0, dim, dtype=np.float32), dtype=float, device=DEVICE)
        super().__init__({"a": a, "b": b})
        self._pair = (a, b)

    def _launches(self):
        a, b = self._pair
        for i in range(self.ops):
            yield [a, b] if i % 2 == 0 else [b, a]


class Branches(HeavyLaunches):
    """``branches`` independent chains of ``ops // branches`` compute-bound launches of ``dim`` threads
    each, interleaved (chain 0, chain 1, ..., chain 0, ...): each chain ping-pongs its own two buffers."""

    def __init__(self, branches: int, ops: int, dim: int) -> None:
        self.branches, self.ops, self.dim = branches, ops, dim
        arrays = {}
        for b in range(branches):
            arrays[f"a{b}"] = wp.array(np.linspace(-1.0, 1.0, dim, dtype=np.float32) + b, dtype=float, device=DEVICE)
            arrays[f"b{b}"] = wp.array(np.linspace(1.0, 2.0, dim, dtype=np.float32) - b, dtype=float, device=DEVICE)
        super().__init__(arrays)

    def _launches(self):
        a = self.arrays
        for i in range(self.ops):
            b, step = i % self.branches, i // self.branches
            src, dst = (a[f"a{b}"], a[f"b{b}"]) if step % 2 == 0 else (a[f"b{b}"], a[f"a{b}"])
            yield [src, dst]


class DemoStep(Workload):
    """One step of the built-in mass-spring simulation (``apic.demo.Chain``): kernels, a copy, fills."""

    def __init__(self, particles: int = 64, substeps: int = 8) -> None:
        self.chain = demo.Chain(particles, substeps, device=DEVICE)
        self.ops = self.chain.ops_per_step()
        c = self.chain
        super().__init__({"x": c.x, "v": c.v, "f": c.f, "x_prev": c.x_prev})

    def issue(self) -> None:
        self.chain.step()

    def commands(self):
        # The same operations as Chain.step, in the same order; the bit-for-bit check against
        # Chain.step catches any drift between the two.
        c = self.chain
        rest = 2.0 / (c.n - 1)
        cmds = [lambda: wp.copy(c.x_prev, c.x)]
        for _ in range(c.substeps):
            cmds.append(c.f.zero_)
            for kernel, dim, inputs in (
                (demo.spring_forces, c.n - 1, [c.x, c.v, rest, 500.0, 2.0, c.f]),
                (demo.apply_gravity, c.n, [c.v, wp.vec3(0.0, -9.8, 0.0), c.dt]),
                (demo.integrate, c.n, [c.x, c.v, c.f, 1.0, c.dt]),
                (demo.ground_contact, c.n, [c.x, c.v, 0.3]),
                (demo.pin_first, 1, [c.x, c.v, wp.vec3(0.0, 1.0, 0.0)]),
            ):
                cmds.append(wp.launch(kernel, dim=dim, inputs=inputs, device=DEVICE, record_cmd=True).launch)
        return cmds


@dataclass(frozen=True)
class WorkloadSpec:
    """A named workload: ``make()`` builds a fresh instance with its own state."""

    key: str
    title: str
    ops: int
    make: Callable[[], Workload]
    kind: str  # "tiny", "compute" or "mixed"


def tiny(ops: int, dim: int, key: str | None = None, distinct: bool = False) -> WorkloadSpec:
    return WorkloadSpec(
        key or f"tiny-{ops}",
        f"{ops:,} tiny launches, dim {dim}" + (", every launch distinct" if distinct else ""),
        ops,
        lambda: TinyLaunches(ops, dim, distinct),
        "tiny",
    )


def compute_bound(ops: int, dim: int) -> WorkloadSpec:
    title = f"{ops} launches of dim {dim:,} (compute-bound)"
    return WorkloadSpec("W2", title, ops, lambda: ComputeBound(ops, dim), "compute")


def branches(count: int, ops: int, dim: int) -> WorkloadSpec:
    title = f"{count} independent branches, {ops} launches of dim {dim:,} in all (compute-bound)"
    return WorkloadSpec("W4", title, ops, lambda: Branches(count, ops, dim), "compute")


def demo_step(particles: int = 64, substeps: int = 8) -> WorkloadSpec:
    ops = 1 + 6 * substeps
    return WorkloadSpec(
        "W3",
        f"demo simulation step ({ops} ops: kernels, a copy, zero fills)",
        ops,
        lambda: DemoStep(particles, substeps),
        "mixed",
    )


def load_kernels() -> None:
    """Compile/load every kernel module used here before any capture (compilation is not captured)."""
    wp.load_module(sys.modules[__name__], device=DEVICE)
    wp.load_module(demo, device=DEVICE)
