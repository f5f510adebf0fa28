"""Kernels on which an earlier footprint evaluator judged tasks disjoint that meet in the compiled kernel
(docs/PARALLEL.md, "Why a footprint split cannot race"): each writes ``x[0] = x[0] * 0.5 + t`` from every task
on the way the evaluator did not follow, so a split gives other bits than the serial replay.

``CASES[name] = (kernel, make(rng), why)``: ``why`` is the words of the refusal the evaluator now gives.
"""

from __future__ import annotations

import numpy as np
import warp as wp

from footprint_far_funcs import later_put, put
from world_kernels import CPU

TASKS = 37
SPREAD = 1  # a caller-module name the far functions' defaults must not see


# --- integers: fixed width, signedness, conversions -------------------------------------------------------
@wp.kernel
def int_of_uint32(u: wp.uint32, out: wp.array(dtype=float)):
    t = wp.tid()
    if int(u) < 0:  # int() of 0xFFFFFFFF is -1 in the kernel
        out[0] = out[0] * 0.5 + float(t)
    else:
        out[t] = float(t)


@wp.kernel
def int8_wraps(small: wp.array(dtype=wp.int8), out: wp.array(dtype=float)):
    t = wp.tid()
    v = small[t] + small[t]  # 100 + 100 is -56 in int8
    if int(v) < 0:
        out[0] = out[0] * 0.5 + float(t)
    else:
        out[t] = float(t)


@wp.kernel
def uint32_wraps(u: wp.uint32, w: wp.uint32, out: wp.array(dtype=float)):
    t = wp.tid()
    if u - w > u:  # 0 - 1 wraps to 0xFFFFFFFF
        out[0] = out[0] * 0.5 + float(t)
    else:
        out[t] = float(t)


@wp.kernel
def uint8_index(small: wp.array(dtype=wp.uint8), out: wp.array(dtype=float)):
    t = wp.tid()
    k = int(small[t] + small[t])  # tasks 2j and 2j + 1 meet: (128 + j) * 2 is 2j in uint8
    out[k] = out[k] * 0.5 + float(t)


# --- arrays chosen per task -------------------------------------------------------------------------------
@wp.func
def pick(c: float, a: wp.array(dtype=float), b: wp.array(dtype=float)):
    if c > 0.5:
        return a
    return b


@wp.kernel
def chosen_in_branch(x: wp.array(dtype=float), a: wp.array(dtype=float), b: wp.array(dtype=float)):
    t = wp.tid()
    arr = a
    if x[t] > 0.5:  # unknown at lowering
        arr = b
    arr[0] = arr[0] * 0.5 + float(t)


@wp.kernel
def chosen_by_function(x: wp.array(dtype=float), a: wp.array(dtype=float), b: wp.array(dtype=float),
                       out: wp.array(dtype=float)):
    t = wp.tid()
    out[t] = float(t)
    arr = pick(x[t], a, b)
    arr[0] = arr[0] * 0.5 + float(t)


@wp.kernel
def chosen_in_loop(x: wp.array(dtype=float), a: wp.array(dtype=float), b: wp.array(dtype=float),
                   out: wp.array(dtype=float)):
    t = wp.tid()
    out[t] = float(t)
    arr = a
    for _ in range(int(x[t] * 2.0)):  # a loop the evaluator skips (its range is unknown)
        arr = b
    arr[0] = arr[0] * 0.5 + float(t)


# --- defaults bound in the function's own module ----------------------------------------------------------
@wp.kernel
def far_default(out: wp.array(dtype=float)):
    t = wp.tid()
    put(out, t)


@wp.kernel
def rebound_default(out: wp.array(dtype=float)):
    t = wp.tid()
    later_put(out, t)


# --- an array of structs holding arrays (compiled here: test_footprint_exactness's kernels are not) ---------
@wp.struct
class Holder:
    values: wp.array(dtype=float)


@wp.kernel
def through_struct_elements(holders: wp.array(dtype=Holder), out: wp.array(dtype=float)):
    t = wp.tid()
    out[t] = 1.0
    h = holders[t]
    h.values[0] = float(t)


def _floats(values):
    return wp.array(np.asarray(values, dtype=np.float32), dtype=float, device=CPU)


def _zeros(n=TASKS):
    return wp.zeros(n, dtype=float, device=CPU)


def _halves():
    t = np.arange(TASKS)
    return wp.array((128 * (t % 2) + t // 2).astype(np.uint8), dtype=wp.uint8, device=CPU)


def _mixed(rng):
    return _floats(np.where(np.arange(TASKS) % 2 == 0, 0.9, 0.1))


CASES = {
    "int_of_uint32": (int_of_uint32, lambda rng: [wp.uint32(0xFFFFFFFF), _zeros()], "two tasks touch element 0"),
    "int8_wraps": (int8_wraps, lambda rng: [wp.array(np.full(TASKS, 100, np.int8), dtype=wp.int8, device=CPU),
                                            _zeros()], "two tasks touch element 0"),
    "uint32_wraps": (uint32_wraps, lambda rng: [wp.uint32(0), wp.uint32(1), _zeros()], "two tasks touch element 0"),
    "uint8_index": (uint8_index, lambda rng: [_halves(), _zeros(512)], "not known"),
    "chosen_in_branch": (chosen_in_branch, lambda rng: [_mixed(rng), _zeros(), _zeros()], "one of several arrays"),
    "chosen_by_function": (chosen_by_function, lambda rng: [_mixed(rng), _zeros(), _zeros(), _zeros()],
                           "one of several arrays"),
    # b is now found written (an alias of arr), so the loop is not skipped
    "chosen_in_loop": (chosen_in_loop, lambda rng: [_mixed(rng), _zeros(), _zeros(), _zeros()],
                       "range is not known"),
    "far_default": (far_default, lambda rng: [_zeros()], "two tasks touch element 0"),
    "rebound_default": (rebound_default, lambda rng: [_zeros()], "two tasks touch element 0"),
}


def run(name: str, threads: int, interpreter: str, replays: int = 2, seed: int = 3):
    """Launch case ``name`` eagerly ``replays`` times and replay its capture as often on ``threads`` threads;
    ``(eager arrays, replayed arrays, graph)``."""
    from world_kernels import arrays, replay

    kernel, make, _ = CASES[name]
    eager, replayed = make(np.random.default_rng(seed)), make(np.random.default_rng(seed))
    with wp.ScopedCapture(device=CPU) as capture:
        wp.launch(kernel, dim=TASKS, inputs=replayed, device=CPU)
    graph = capture.graph
    graph.min_tasks_per_thread = 1
    for _ in range(replays):
        wp.launch(kernel, dim=TASKS, inputs=eager, device=CPU)
        replay(graph, threads, interpreter)
    return arrays(eager), arrays(replayed), graph
