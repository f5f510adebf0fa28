"""Kernels that write through index data, as newton's Featherstone solver does (one task per articulation,
segments ``[start[t], end[t])`` of flat arrays, children through an index array, dense blocks at offsets),
for the footprint rule (docs/PARALLEL.md, "Splitting by footprint").

``CASES[name] = (kernel, tasks, make(rng, layout), layout, expected)``: ``layout`` names the index data
(``"segments"``, ``"overlapping"``, ``"shared_child"``), ``expected`` is ``"split"`` or the words of the
refusal ``parallel_report`` gives. Every kernel's result depends on the order of its writes where two
tasks could meet, so a wrong split differs from eager.
"""

from __future__ import annotations

import numpy as np
import warp as wp

from world_kernels import CPU, arrays, replay

TASKS = 37  # segments of 1-6 elements each


@wp.func
def dense_index(stride: int, i: int, j: int):
    return stride * i + j


@wp.func
def write_chain(i: int, parent: wp.array(dtype=int), child: wp.array(dtype=int), x: wp.array(dtype=float),
                q: wp.array(dtype=float)):
    p = parent[i]
    base = float(0.0)
    if p >= 0:
        base = q[child[p]]
    q[child[i]] = base * 0.5 + x[i]


@wp.kernel
def running_sum(start: wp.array(dtype=int), end: wp.array(dtype=int), x: wp.array(dtype=float),
                out: wp.array(dtype=float)):
    t = wp.tid()
    for i in range(start[t], end[t]):
        if i > start[t]:
            out[i] = out[i - 1] + x[i]
        else:
            out[i] = x[i]


@wp.kernel
def children(start: wp.array(dtype=int), end: wp.array(dtype=int), parent: wp.array(dtype=int),
             child: wp.array(dtype=int), x: wp.array(dtype=float), q: wp.array(dtype=float)):
    t = wp.tid()
    for i in range(start[t], end[t]):
        write_chain(i, parent, child, x, q)


@wp.kernel
def dense_blocks(offset: wp.array(dtype=int), size: wp.array(dtype=int), x: wp.array(dtype=float),
                 m: wp.array(dtype=float)):
    t = wp.tid()
    n = size[t]
    for i in range(n):
        for j in range(n):
            acc = float(0.0)
            for k in range(n):  # reads nothing it writes: skipped by the evaluation
                acc += x[t] * float(k)
            m[offset[t] + dense_index(n, i, j)] = acc + m[offset[t] + dense_index(n, j, i)]


@wp.kernel
def ancestors(start: wp.array(dtype=int), end: wp.array(dtype=int), parent: wp.array(dtype=int),
              x: wp.array(dtype=float), acc: wp.array(dtype=float)):
    t = wp.tid()
    for i in range(start[t], end[t]):
        j = i
        while j != -1:
            wp.atomic_add(acc, j, x[i])  # a float sum: its order is the serial one only within one task
            j = parent[j]


@wp.kernel
def either_branch(x: wp.array(dtype=float), a: wp.array(dtype=int), b: wp.array(dtype=int),
                  out: wp.array(dtype=float)):
    t = wp.tid()
    if x[t] > 0.5:  # unknown at lowering: both branches count
        out[a[t]] = x[t]
    else:
        out[b[t]] = -x[t]


@wp.kernel
def float_index(x: wp.array(dtype=float), out: wp.array(dtype=float)):
    t = wp.tid()
    out[int(x[t] * 3.0)] = x[t]


@wp.kernel
def prints(start: wp.array(dtype=int), end: wp.array(dtype=int), out: wp.array(dtype=float)):
    t = wp.tid()
    for i in range(start[t], end[t]):
        out[i] = float(i)
        wp.printf("%d\n", i)


@wp.struct
class Box:
    values: wp.array(dtype=float)


@wp.kernel
def through_local_struct(start: wp.array(dtype=int), end: wp.array(dtype=int), out: wp.array(dtype=float)):
    t = wp.tid()
    box = Box()
    box.values = out  # every task adds into out[0] through a struct of its own
    box.values[0] = box.values[0] + float(t)
    for i in range(start[t] + 1, end[t]):
        out[i] = float(i)


@wp.kernel
def searches_written(start: wp.array(dtype=int), end: wp.array(dtype=int), out: wp.array(dtype=float)):
    t = wp.tid()
    found = int(0)
    for k in range(3):  # a loop with no store into memory, reading out through a builtin
        found += wp.lower_bound(out, float(k))
    for i in range(start[t], end[t]):
        out[i] = float(found + i)


def segments(rng, layout: str):
    """``(start, end, parent, child)`` of ``TASKS`` segments; ``child`` a permutation (``"shared_child"``:
    two segments share one child), ``parent`` the previous element of the segment or -1; ``"overlapping"``:
    every segment reaches two elements into the next."""
    lengths = rng.integers(1, 7, size=TASKS)
    start = np.r_[0, np.cumsum(lengths)[:-1]].astype(np.int32)
    end = (start + lengths).astype(np.int32)
    total = int(end[-1])
    if layout == "overlapping":
        end = np.minimum(end + 2, total).astype(np.int32)
    parent = np.arange(-1, total - 1, dtype=np.int32)
    parent[start] = -1
    child = rng.permutation(total).astype(np.int32)
    if layout == "shared_child":
        child[start[5]] = child[start[9]]
    return start, end, parent, child, total


def _array(values, dtype=None):
    return wp.array(values, dtype=dtype, device=CPU)


def _make_running_sum(rng, layout):
    start, end, _, _, total = segments(rng, layout)
    return [_array(start, int), _array(end, int), _array(rng.random(total).astype(np.float32), float),
            wp.zeros(total, dtype=float, device=CPU)]


def _make_children(rng, layout):
    start, end, parent, child, total = segments(rng, layout)
    return [_array(start, int), _array(end, int), _array(parent, int), _array(child, int),
            _array(rng.random(total).astype(np.float32), float), wp.zeros(total, dtype=float, device=CPU)]


def _make_dense(rng, layout):
    size = rng.integers(1, 5, size=TASKS).astype(np.int32)
    offset = np.r_[0, np.cumsum(size * size)[:-1]].astype(np.int32)
    if layout == "overlapping":
        offset[7] = offset[6] + 1
    total = int(offset[-1] + size[-1] ** 2)
    return [_array(offset, int), _array(size, int), _array(rng.random(TASKS).astype(np.float32), float),
            _array(rng.random(total).astype(np.float32), float)]


def _make_ancestors(rng, layout):
    start, end, parent, _, total = segments(rng, layout)
    if layout == "shared_child":  # a segment's root hangs from the previous segment's last element
        parent[start[5]] = start[5] - 1
    return [_array(start, int), _array(end, int), _array(parent, int),
            _array(rng.random(total).astype(np.float32), float), wp.zeros(total, dtype=float, device=CPU)]


def _make_either(rng, layout):
    a = np.arange(TASKS, dtype=np.int32)
    b = (a + (1 if layout == "overlapping" else 0)) % TASKS
    return [_array(rng.random(TASKS).astype(np.float32), float), _array(a, int), _array(b, int),
            wp.zeros(TASKS, dtype=float, device=CPU)]


def _make_float_index(rng, layout):
    return [_array(rng.random(TASKS).astype(np.float32), float), wp.zeros(3 * TASKS, dtype=float, device=CPU)]


def _make_prints(rng, layout):
    start, end, _, _, total = segments(rng, layout)
    return [_array(start, int), _array(end, int), wp.zeros(total, dtype=float, device=CPU)]


CASES = {
    "running_sum": (running_sum, TASKS, _make_running_sum, "segments", "split"),
    "children": (children, TASKS, _make_children, "segments", "split"),
    "dense_blocks": (dense_blocks, TASKS, _make_dense, "segments", "split"),
    "ancestors": (ancestors, TASKS, _make_ancestors, "segments", "split"),
    "either_branch": (either_branch, TASKS, _make_either, "segments", "split"),
    "running_sum_overlapping": (running_sum, TASKS, _make_running_sum, "overlapping", "two tasks touch element"),
    "children_shared": (children, TASKS, _make_children, "shared_child", "two tasks touch element"),
    "dense_overlapping": (dense_blocks, TASKS, _make_dense, "overlapping", "two tasks touch element"),
    "ancestors_across": (ancestors, TASKS, _make_ancestors, "shared_child", "two tasks touch element"),
    # the branch not taken counts too: a[t] and b[t - 1] meet
    "either_branch_meets": (either_branch, TASKS, _make_either, "overlapping", "two tasks touch element"),
    "float_index": (float_index, TASKS, _make_float_index, "segments", "not known from the launch's index data"),
    "prints": (prints, TASKS, _make_prints, "segments", "calls printf"),
    "through_local_struct": (through_local_struct, TASKS, _make_prints, "segments",
                             "stores an array into a field or an element"),
    "searches_written": (searches_written, TASKS, _make_prints, "segments", "passes an array to lower_bound"),
}


def run(name: str, threads: int, interpreter: str, replays: int = 3, seed: int = 5, mutate=None):
    """Launch case ``name`` eagerly ``replays`` times and replay its capture as often on ``threads`` threads
    (``interpreter`` ``"numba"`` or ``"reference"``: chunks last first). ``mutate(inputs)``, when given,
    changes the index data of both after the first replay (the plan was made on the first contents).
    Returns ``(eager arrays, replayed arrays, graph)``."""
    kernel, tasks, make, layout, _ = CASES[name]
    eager, replayed = make(np.random.default_rng(seed), layout), make(np.random.default_rng(seed), layout)
    with wp.ScopedCapture(device=CPU) as capture:
        wp.launch(kernel, dim=tasks, inputs=replayed, device=CPU)
    graph = capture.graph
    graph.min_tasks_per_thread = 1
    for k in range(replays):
        if k == 1 and mutate is not None:
            mutate(eager)
            mutate(replayed)
        wp.launch(kernel, dim=tasks, inputs=eager, device=CPU)
        replay(graph, threads, interpreter)
    return arrays(eager), arrays(replayed), graph
