"""Kernels batched over worlds (``dim[0]`` worlds, the world the first ``wp.tid()`` component), one per
form the world-split proof accepts or refuses, and a runner that replays them split and eagerly.

Sizes are odd (61 worlds of 37 tasks) so that an even cut of the tasks falls inside a world unless
the chunks are moved to world boundaries. Imported by ``test_world_split.py`` and by its child
processes (the mutation checks).
"""

from __future__ import annotations

import numpy as np
import warp as wp

from apic.replay.cpu import reference

CPU = "cpu"
WORLDS, TASKS = 61, 37
COLUMNS = 3


@wp.func
def add_at(a: wp.array2d(dtype=float), w: int, j: int, x: float):
    a[w, j] = a[w, j] + x


@wp.func
def bump_row(row: wp.array(dtype=float), j: int, x: float):
    row[j] += x


@wp.func
def bump_next_world(a: wp.array2d(dtype=float), w: int, j: int, x: float):
    a[(w + 1) % a.shape[0], j] += x


@wp.struct
class WorldState:
    x: wp.array2d(dtype=float)
    acc: wp.array2d(dtype=float)
    scale: float


@wp.struct
class Pair:
    x: wp.array2d(dtype=float)
    y: wp.array2d(dtype=float)


@wp.struct
class Nested:
    state: WorldState
    col: wp.array(dtype=int)


@wp.struct
class WithWord:
    acc: wp.array2d(dtype=float)
    seed: wp.uint64  # 64-bit: maybe a handle id, which the launch check cannot follow


@wp.func
def bump_struct_row(s: WorldState, w: int, j: int):
    row = s.acc[w]
    row[j % 3] = row[j % 3] * 0.75 + s.x[w, j] * s.scale


# --- accepted -----------------------------------------------------------------------------------------
@wp.kernel
def store(x: wp.array2d(dtype=float), y: wp.array2d(dtype=float)):
    w, j = wp.tid()
    y[w, j] = x[w, j] * 2.0 + x[(w + 1) % x.shape[0], j]  # a read-only array is read at any world


@wp.kernel
def chained_rows(x: wp.array2d(dtype=float), y: wp.array2d(dtype=float)):
    w, j = wp.tid()
    y[w][j] = y[w][j] * 0.5 + x[w][j]


@wp.kernel
def computed_columns(col: wp.array(dtype=int), x: wp.array2d(dtype=float), acc: wp.array2d(dtype=float)):
    w, j = wp.tid()
    acc[w, col[j]] += x[w, j]  # tasks of one world share columns: the float sum depends on their order


@wp.kernel
def float_atomics(x: wp.array2d(dtype=float), acc: wp.array2d(dtype=float)):
    w, j = wp.tid()
    wp.atomic_add(acc, w, j % 3, x[w, j] * x[w, j])


@wp.kernel
def row_view(x: wp.array2d(dtype=float), acc: wp.array2d(dtype=float)):
    w, j = wp.tid()
    row = acc[w]
    row[j % 3] = row[j % 3] * 0.75 + x[w, j]


@wp.kernel
def row_view_to_func(x: wp.array2d(dtype=float), acc: wp.array2d(dtype=float)):
    w, j = wp.tid()
    bump_row(acc[w], j % 3, x[w, j])


@wp.kernel
def world_to_func(x: wp.array2d(dtype=float), acc: wp.array2d(dtype=float)):
    w, j = wp.tid()
    add_at(acc, w, j % 3, x[w, j])


@wp.kernel
def smooth_in_place(src: wp.array2d(dtype=float), dst: wp.array2d(dtype=float)):
    w, j = wp.tid()
    dst[w, j] += 0.5 * src[w, (j + 1) % src.shape[1]]  # launched with one view as both


@wp.kernel
def per_world_loop(x: wp.array2d(dtype=float), total: wp.array(dtype=float)):
    w = wp.tid()
    s = float(0.0)
    for j in range(x.shape[1]):
        s += x[w, j] * float(j)
    total[w] = total[w] * 0.5 + s


@wp.kernel
def struct_atomics(s: WorldState):
    w, j = wp.tid()
    wp.atomic_add(s.acc, w, j % 3, s.x[w, j] * s.scale)  # float sums through a struct's field


@wp.kernel
def struct_to_func(s: WorldState):
    w, j = wp.tid()
    bump_struct_row(s, w, j)


@wp.kernel
def nested_struct(n: Nested, out: wp.array2d(dtype=float)):
    w, j = wp.tid()
    n.state.acc[w, n.col[j]] += n.state.x[w, j]
    out[w, j] = n.state.x[(w + 1) % n.state.x.shape[0], j]  # a read-only field is read at any world


@wp.kernel
def struct_chained_rows(p: Pair):
    w, j = wp.tid()
    p.y[w][j] = p.y[w][j] * 0.5 + p.x[w][j]


# --- refused ------------------------------------------------------------------------------------------
@wp.kernel
def global_counter(x: wp.array2d(dtype=float), n: wp.array(dtype=int), slot: wp.array2d(dtype=int)):
    w, j = wp.tid()
    slot[w, j] = wp.atomic_add(n, 0, 1)


@wp.kernel
def reads_previous_world(x: wp.array2d(dtype=float), acc: wp.array2d(dtype=float)):
    w, j = wp.tid()
    if w > 0:
        acc[w, j % 3] = acc[w, j % 3] + acc[w - 1, j % 3] * 0.5 + x[w, j]


@wp.kernel
def modulo_world(x: wp.array2d(dtype=float), acc: wp.array2d(dtype=float)):
    w, j = wp.tid()
    acc[w % acc.shape[0], j % 3] += x[w, j]


@wp.kernel
def world_rebound(x: wp.array2d(dtype=float), acc: wp.array2d(dtype=float)):
    w, j = wp.tid()
    w = acc.shape[0] - 1 - w
    acc[w, j % 3] += x[w, j]


@wp.kernel
def func_writes_next_world(x: wp.array2d(dtype=float), acc: wp.array2d(dtype=float)):
    w, j = wp.tid()
    bump_next_world(acc, w, j % 3, x[w, j])


@wp.kernel
def reads_next_world(src: wp.array2d(dtype=float), dst: wp.array2d(dtype=float)):
    w, j = wp.tid()
    dst[w, j] += src[(w + 1) % src.shape[0], j] * 0.5  # launched with one view as both: refused


@wp.kernel
def struct_reads_previous_world(s: WorldState):
    w, j = wp.tid()
    if w > 0:
        s.acc[w, j % 3] = s.acc[w, j % 3] + s.acc[w - 1, j % 3] * 0.5 + s.x[w, j]


@wp.kernel
def struct_word(s: WithWord, x: wp.array2d(dtype=float)):
    w, j = wp.tid()
    s.acc[w, j % 3] += x[w, j]


def _x(rng, rows=WORLDS):
    return wp.array(rng.standard_normal((rows, TASKS)).astype(np.float32), device=CPU)


def _acc(rng):
    return wp.array(rng.standard_normal((WORLDS, COLUMNS)).astype(np.float32), device=CPU)


def _x_acc(rng):
    return [_x(rng), _acc(rng)]


def _columns(rng):
    return [wp.array(rng.integers(0, COLUMNS, TASKS).astype(np.int32), device=CPU), _x(rng), _acc(rng)]


def _one_view_twice(rng):
    a = _x(rng)
    return [a, a]


def _counter(rng):
    # one row per world, so that only the proof (not the launch check) keeps the counter serial
    return [_x(rng), wp.zeros(WORLDS, dtype=int, device=CPU), wp.zeros((WORLDS, TASKS), dtype=int, device=CPU)]


def _too_many_rows(rng):
    return [_x(rng), _x(rng, WORLDS + 1)]


def _overlapping_rows(rng):
    big = _x(rng, WORLDS + 1)
    return [big[:WORLDS], big[1:]]


def _loop(rng):
    return [_x(rng), wp.array(rng.standard_normal(WORLDS).astype(np.float32), device=CPU)]


def _state(rng):
    state = WorldState()
    state.x, state.acc, state.scale = _x(rng), _acc(rng), 0.5
    return state


def _pair(x, y):
    pair = Pair()
    pair.x, pair.y = x, y
    return pair


def _nested(rng):
    nested = Nested()
    nested.state, nested.col = _state(rng), wp.array(rng.integers(0, COLUMNS, TASKS).astype(np.int32), device=CPU)
    return [nested, _x(rng)]


def _pair_overlapping(rng):
    big = _x(rng, WORLDS + 1)
    return [_pair(big[:WORLDS], big[1:])]


def _with_word(rng):
    held = WithWord()
    held.acc, held.seed = _acc(rng), 7
    return [held, _x(rng)]


GRID = (WORLDS, TASKS)
# name -> (kernel, launch dim, inputs from a Generator, expected: "split", "kernel" (the proof refuses
# it) or "launch" (a launch check refuses it))
CASES = {
    "store": (store, GRID, lambda rng: [_x(rng), _x(rng)], "split"),
    "chained_rows": (chained_rows, GRID, lambda rng: [_x(rng), _x(rng)], "split"),
    "computed_columns": (computed_columns, GRID, _columns, "split"),
    "float_atomics": (float_atomics, GRID, _x_acc, "split"),
    "row_view": (row_view, GRID, _x_acc, "split"),
    "row_view_to_func": (row_view_to_func, GRID, _x_acc, "split"),
    "world_to_func": (world_to_func, GRID, _x_acc, "split"),
    "one_view_in_and_out": (smooth_in_place, GRID, _one_view_twice, "split"),
    "per_world_loop": (per_world_loop, (WORLDS,), _loop, "split"),
    "struct_atomics": (struct_atomics, GRID, lambda rng: [_state(rng)], "split"),
    "struct_to_func": (struct_to_func, GRID, lambda rng: [_state(rng)], "split"),
    "nested_struct": (nested_struct, GRID, _nested, "split"),
    "struct_chained_rows": (struct_chained_rows, GRID, lambda rng: [_pair(_x(rng), _x(rng))], "split"),
    "global_counter": (global_counter, GRID, _counter, "kernel"),
    "reads_previous_world": (reads_previous_world, GRID, _x_acc, "kernel"),
    "modulo_world": (modulo_world, GRID, _x_acc, "kernel"),
    "world_rebound": (world_rebound, GRID, _x_acc, "kernel"),
    "func_writes_next_world": (func_writes_next_world, GRID, _x_acc, "kernel"),
    "one_view_read_at_next_world": (reads_next_world, GRID, _one_view_twice, "launch"),
    "more_rows_than_worlds": (chained_rows, GRID, _too_many_rows, "launch"),
    "overlapping_rows": (chained_rows, GRID, _overlapping_rows, "launch"),
    "struct_reads_previous_world": (struct_reads_previous_world, GRID, lambda rng: [_state(rng)], "kernel"),
    "struct_more_rows_than_worlds": (struct_chained_rows, GRID, lambda rng: [_pair(_x(rng), _x(rng, WORLDS + 1))],
                                     "launch"),
    "struct_overlapping_rows": (struct_chained_rows, GRID, _pair_overlapping, "launch"),
}
# Proved splittable by world, but its launches carry a 64-bit integer the launch check cannot follow
WORD_CASE = (struct_word, GRID, _with_word)


def arrays(inputs) -> list[np.ndarray]:
    """The contents of the arrays among ``inputs``, and of the array fields of the ``wp.struct`` values among them."""
    found = []
    for value in inputs:
        if isinstance(value, wp.array):
            found.append(value.numpy().copy())
        elif hasattr(value, "_cls"):  # a wp.struct value
            found += arrays([getattr(value, name) for name in value._cls.vars])
    return found


def same_bits(eager, replayed) -> bool:
    """Whether each array of ``replayed`` equals its counterpart in ``eager`` bit for bit."""
    return all(np.array_equal(a.view(np.uint8), b.view(np.uint8)) for a, b in zip(eager, replayed))


def replay(graph, threads: int, interpreter: str) -> None:
    """One replay of ``graph`` on ``threads`` threads: ``wp.capture_launch`` (``interpreter`` "numba") or the
    reference interpreter running the parallel table itself ("reference")."""
    if interpreter == "numba":
        wp.capture_launch(graph, threads=threads)
    else:
        program = graph.parallel_program(threads)
        reference.run_table(program.table, 1, None, program.loops)


def run(name: str, threads: int, interpreter: str, replays: int = 3, seed: int = 21):
    """Launch case ``name`` eagerly ``replays`` times, and replay its capture as often on ``threads``
    threads (``interpreter``: ``"numba"`` or ``"reference"``, which runs a row's chunks last first).
    Returns ``(eager arrays, replayed arrays, graph)``."""
    kernel, dim, make, _ = CASES[name]
    eager, replayed = make(np.random.default_rng(seed)), make(np.random.default_rng(seed))
    with wp.ScopedCapture(device=CPU) as capture:
        wp.launch(kernel, dim=dim, inputs=replayed, device=CPU)
    graph = capture.graph
    graph.min_tasks_per_thread = 1
    for _ in range(replays):
        wp.launch(kernel, dim=dim, inputs=eager, device=CPU)
        replay(graph, threads, interpreter)
    return arrays(eager), arrays(replayed), graph


@wp.struct
class Holder:
    values: wp.array(dtype=float)


@wp.kernel
def writes_through_struct_element(holders: wp.array(dtype=Holder), acc: wp.array2d(dtype=float)):
    w, j = wp.tid()
    h = holders[w]
    h.values[0] = acc[w, j % 3]  # memory behind a struct field: not followed, refused
