"""Repeated ``wp.launch`` calls in a capture: recorded again without Warp's launch path (apic.record.cpu.repeats).

A call seen before reuses its op only when every value that decides the packed bytes is the same;
each test below changes one such value between two otherwise identical launches and checks, against
the eager run, that the replay sees the change (bit for bit), and that real repeats do share one op.
"""

from __future__ import annotations

import numpy as np
import pytest
import warp as wp

from apic.record import ops as rec
from conftest import CPU, eager_vs_replay

pytestmark = [pytest.mark.warp_version, pytest.mark.interpreter]


@wp.kernel
def axpy(x: wp.array(dtype=float), y: wp.array(dtype=float), a: float):
    i = wp.tid()
    y[i] = y[i] * 0.5 + a * x[i]


@wp.kernel
def write_scalar(out: wp.array(dtype=float), a: float, slot: int):
    out[slot] = a


@wp.struct
class Params:
    scale: float
    x: wp.array(dtype=float)


@wp.kernel
def with_struct(p: Params, y: wp.array(dtype=float)):
    i = wp.tid()
    y[i] = y[i] + p.scale * p.x[i]


@wp.kernel
def with_vector(v: wp.vec3, y: wp.array(dtype=wp.vec3)):
    i = wp.tid()
    y[i] = y[i] + v


@wp.kernel
def square_grad(x: wp.array(dtype=float), y: wp.array(dtype=float)):
    i = wp.tid()
    y[i] = x[i] * x[i]


def state():
    return {"x": wp.array(np.linspace(1, 2, 8, dtype=np.float32), device=CPU), "y": wp.ones(8, dtype=float, device=CPU),
            "out": wp.zeros(4, dtype=float, device=CPU)}


def launches(graph) -> list:
    return [op for op in graph.recording.ops if isinstance(op, rec.Launch)]


def test_identical_calls_share_one_op():
    def program(s):
        for _ in range(50):
            wp.launch(axpy, dim=8, inputs=[s["x"], s["y"], 0.25], device=CPU)

    graph, _ = eager_vs_replay(program, state)
    ops = launches(graph)
    assert len(ops) == 50 and all(op is ops[0] for op in ops)


def test_a_changed_scalar_is_a_new_op():
    def program(s):
        for a in (0.25, 0.5, 0.25, 1, 0.5):
            wp.launch(axpy, dim=8, inputs=[s["x"], s["y"], a], device=CPU)

    graph, _ = eager_vs_replay(program, state)
    ops = launches(graph)
    assert ops[0] is ops[2] and ops[1] is ops[4] and len({id(op) for op in ops}) == 3


def test_negative_zero_is_not_zero():
    def program(s):
        for slot, last in ((0, -0.0), (1, 0.0)):
            wp.launch(write_scalar, dim=1, inputs=[s["out"], -last, slot], device=CPU)
            wp.launch(write_scalar, dim=1, inputs=[s["out"], last, slot], device=CPU)

    _, replayed = eager_vs_replay(program, state)
    assert np.signbit(replayed["out"].numpy()[:2]).tolist() == [True, False]


def test_other_arrays_views_and_dims_are_new_ops():
    def program(s):
        wp.launch(axpy, dim=8, inputs=[s["x"], s["y"], 1.0], device=CPU)
        wp.launch(axpy, dim=4, inputs=[s["x"], s["y"], 1.0], device=CPU)
        wp.launch(axpy, dim=4, inputs=[s["x"][4:], s["y"][:4], 1.0], device=CPU)
        wp.launch(axpy, dim=8, inputs=[s["y"], s["x"], 1.0], device=CPU)
        wp.launch(axpy, dim=[8], inputs=[s["x"], s["y"], 1.0], device=CPU)

    graph, _ = eager_vs_replay(program, state)
    assert len({id(op) for op in launches(graph)}) == 4  # dim=[8] packs as dim=8


def test_a_reassigned_grad_is_a_new_op():
    x = wp.array(np.arange(4, dtype=np.float32), device=CPU, requires_grad=True)
    y = wp.zeros(4, dtype=float, device=CPU, requires_grad=True)
    first_grad = x.grad
    with wp.ScopedCapture(device=CPU) as capture:
        wp.launch(square_grad, dim=4, inputs=[x, y], device=CPU)
        x.grad = wp.zeros(4, dtype=float, device=CPU)
        wp.launch(square_grad, dim=4, inputs=[x, y], device=CPU)
    first, second = launches(capture.graph)
    assert first is not second and first_grad is not x.grad


def test_structs_and_vectors_mutated_in_place_are_seen():
    def program(s):
        p = s["p"]
        for scale in (1.0, 2.0, 2.0):
            p.scale = scale
            wp.launch(with_struct, dim=8, inputs=[p, s["y"]], device=CPU)
        v = wp.vec3(1.0, 2.0, 3.0)
        for k in range(3):
            v[0] = float(k)
            wp.launch(with_vector, dim=2, inputs=[v, s["v"]], device=CPU)

    def make():
        s = state()
        s["p"] = Params()
        s["p"].x = s["x"]
        s["v"] = wp.zeros(2, dtype=wp.vec3, device=CPU)
        return s

    eager_vs_replay(program, make)


def test_a_tape_takes_warps_path_every_time():
    x = wp.array(np.arange(4, dtype=np.float32), device=CPU, requires_grad=True)
    y = wp.zeros(4, dtype=float, device=CPU, requires_grad=True)
    tape = wp.Tape()
    with wp.ScopedCapture(device=CPU) as capture:
        with tape:
            wp.launch(square_grad, dim=4, inputs=[x, y], device=CPU)
            wp.launch(square_grad, dim=4, inputs=[x, y], device=CPU)
    assert len(tape.launches) == 2
    assert len(launches(capture.graph)) == 2


@pytest.mark.parametrize("how", ["keyword", "positional"])
def test_call_forms_replay_like_eager(how):
    def program(s):
        for _ in range(3):
            if how == "keyword":
                wp.launch(kernel=axpy, dim=8, inputs=[s["x"]], outputs=[s["y"], 0.5], device=CPU)
            else:
                wp.launch(axpy, 8, [s["x"], s["y"], 0.5], [], [], [], CPU)

    graph, _ = eager_vs_replay(program, state)
    assert len({id(op) for op in launches(graph)}) == 1
