"""Tile kernels batched over worlds (launched tiled, ``dim[0]`` worlds), one per form the world-split
proof accepts or refuses, and a runner that replays them split and eagerly.

Each accepted kernel's tile code goes through Warp's CPU tile memory (``tile_matmul``,
``tile_cholesky`` and ``tile_map`` results live there): run by two threads in one loaded module, the
tiles of one thread land in the other's memory (``apic.replay.parallel.range_entry.per_thread_entries``).
Imported by ``test_world_split_tiles.py`` and by its child processes.
"""

from __future__ import annotations

import numpy as np
import warp as wp

from world_kernels import arrays, replay

CPU = "cpu"
WORLDS = 301
N = 16  # a world's matrix is N x N
HALF = 8


@wp.func
def factor_row(m: wp.array2d(dtype=float), out: wp.array2d(dtype=float)):
    t = wp.tile_load(m, shape=(N, N))
    spd = wp.tile_matmul(t, wp.tile_transpose(t)) + wp.tile_diag_add(
        wp.tile_zeros(shape=(N, N), dtype=float), wp.tile_ones(shape=N, dtype=float) * float(N))
    wp.tile_store(out, wp.tile_cholesky(spd))


# --- accepted -----------------------------------------------------------------------------------------
@wp.kernel
def cholesky_rows(m: wp.array3d(dtype=float), out: wp.array3d(dtype=float)):
    w = wp.tid()
    t = wp.tile_load(m[w], shape=(N, N))
    spd = wp.tile_matmul(t, wp.tile_transpose(t)) + wp.tile_diag_add(
        wp.tile_zeros(shape=(N, N), dtype=float), wp.tile_ones(shape=N, dtype=float) * float(N))
    wp.tile_store(out[w], wp.tile_cholesky(spd))


@wp.kernel
def atomic_rows(m: wp.array3d(dtype=float), acc: wp.array2d(dtype=float)):
    w, lane = wp.tid()
    t = wp.tile_load(m[w], shape=(N, N))
    for k in range(3):  # float sums into the world's row: their order is the serial one
        wp.tile_atomic_add(acc[w], wp.tile_map(wp.sin, wp.tile_sum(t) * float(k + 1)), offset=k)


@wp.kernel
def store_at_row_and_column(m: wp.array3d(dtype=float), rows: wp.array3d(dtype=float)):
    w = wp.tid()
    for i in range(N):  # mujoco-warp's contact Jacobian form: out[world, row] at a column offset
        r = wp.tile_load(m[w, i], shape=HALF, offset=HALF)
        wp.tile_store(rows[w, i], wp.tile_map(wp.cos, r), offset=1)


@wp.kernel
def in_place_rows(m: wp.array3d(dtype=float)):
    w = wp.tid()
    t = wp.tile_load(m[w], shape=(N, N))  # reads the row it then writes
    wp.tile_store(m[w], wp.tile_matmul(t, t) * 0.125)


@wp.kernel
def rows_to_func(m: wp.array3d(dtype=float), out: wp.array3d(dtype=float)):
    w = wp.tid()
    factor_row(m[w], out[w])


# --- refused ------------------------------------------------------------------------------------------
@wp.kernel
def stores_next_world(m: wp.array3d(dtype=float), out: wp.array3d(dtype=float)):
    w = wp.tid()
    wp.tile_store(out[(w + 1) % out.shape[0]], wp.tile_load(m[w], shape=(N, N)))


@wp.kernel
def stores_whole_array_at_offset(m: wp.array3d(dtype=float), out: wp.array3d(dtype=float)):
    w = wp.tid()
    wp.tile_store(out, wp.tile_reshape(wp.tile_load(m[w], shape=(N, N)), shape=(1, N, N)), offset=(w, 0, 0))


@wp.kernel
def reads_written_next_world(m: wp.array3d(dtype=float)):
    w = wp.tid()
    t = wp.tile_load(m[(w + 1) % m.shape[0]], shape=(N, N))
    wp.tile_store(m[w], t * 0.5)


def _m(rng, worlds):
    return wp.array(rng.standard_normal((worlds, N, N)).astype(np.float32), device=CPU)


def _m_only(rng, worlds):
    return [_m(rng, worlds)]


def _m_out(rng, worlds):
    return [_m(rng, worlds), _m(rng, worlds)]


def _m_acc(rng, worlds):
    return [_m(rng, worlds), wp.array(rng.standard_normal((worlds, N)).astype(np.float32), device=CPU)]


# name -> (kernel, inputs from a Generator and a world count, expected: "split" or "kernel" (the proof
# refuses it)); each is launched tiled over the worlds, one block of one lane per world
CASES = {
    "cholesky_rows": (cholesky_rows, _m_out, "split"),
    "atomic_rows": (atomic_rows, _m_acc, "split"),
    "store_at_row_and_column": (store_at_row_and_column, _m_out, "split"),
    "in_place_rows": (in_place_rows, _m_only, "split"),
    "rows_to_func": (rows_to_func, _m_out, "split"),
    "stores_next_world": (stores_next_world, _m_out, "kernel"),
    "stores_whole_array_at_offset": (stores_whole_array_at_offset, _m_out, "kernel"),
    "reads_written_next_world": (reads_written_next_world, _m_only, "kernel"),
}


def run(name: str, threads: int, interpreter: str, replays: int = 3, seed: int = 21, worlds: int = WORLDS):
    """Launch case ``name`` tiled and eagerly ``replays`` times, and replay its capture as often on
    ``threads`` threads (``interpreter``: ``"numba"`` or ``"reference"``). Returns ``(eager arrays,
    replayed arrays, graph)``."""
    kernel, make, _ = CASES[name]
    dim = (worlds,)
    eager, replayed = make(np.random.default_rng(seed), worlds), make(np.random.default_rng(seed), worlds)
    with wp.ScopedCapture(device=CPU) as capture:
        wp.launch_tiled(kernel, dim=dim, inputs=replayed, block_dim=1, device=CPU)
    graph = capture.graph
    graph.min_tasks_per_thread = 1
    for _ in range(replays):
        wp.launch_tiled(kernel, dim=dim, inputs=eager, block_dim=1, device=CPU)
        replay(graph, threads, interpreter)
    return arrays(eager), arrays(replayed), graph
