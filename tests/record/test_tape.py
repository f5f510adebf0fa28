"""Autodiff inside a CPU capture: ``wp.Tape`` forward, ``tape.backward()``, ``tape.zero()``.

A training step (forward, backward, gradient step, zero the gradients) is captured once and
replayed; after every replay the values and every gradient must equal, bit for bit, the same step
run eagerly, live and after a save and a load in a fresh process.
"""

from __future__ import annotations

import numpy as np
import pytest
import warp as wp

from apic.record import ops as rec
from conftest import CPU, eager_vs_replay
from persist_helpers import run_child, same_bits

pytestmark = [pytest.mark.warp_version, pytest.mark.interpreter]

N = 16


@wp.kernel
def energy(x: wp.array(dtype=wp.float32), v: wp.array(dtype=wp.vec3), y: wp.array(dtype=wp.float32)):
    i = wp.tid()
    y[i] = x[i] * x[i] + wp.sin(x[i]) + wp.dot(v[i], v[i]) * x[i]


@wp.kernel
def total(y: wp.array(dtype=wp.float32), loss: wp.array(dtype=wp.float32)):
    i = wp.tid()
    wp.atomic_add(loss, 0, y[i] * y[i])


@wp.kernel
def descend(x: wp.array(dtype=wp.float32), grad: wp.array(dtype=wp.float32), rate: wp.float32):
    i = wp.tid()
    x[i] = x[i] - rate * grad[i]


@wp.kernel
def descend3(v: wp.array(dtype=wp.vec3), grad: wp.array(dtype=wp.vec3), rate: wp.float32):
    i = wp.tid()
    v[i] = v[i] - rate * grad[i]


@wp.kernel
def double(src: wp.array(dtype=wp.float32), dst: wp.array(dtype=wp.float32)):
    i = wp.tid()
    dst[i] = 2.0 * src[i]


def make_state():
    gen = np.random.default_rng(3)
    x = wp.array(gen.uniform(-1, 1, N).astype(np.float32), requires_grad=True, device=CPU)
    v = wp.array(gen.uniform(-1, 1, (N, 3)).astype(np.float32), dtype=wp.vec3, requires_grad=True, device=CPU)
    y = wp.zeros(N, dtype=wp.float32, requires_grad=True, device=CPU)
    loss = wp.zeros(1, dtype=wp.float32, requires_grad=True, device=CPU)
    return {"x": x, "v": v, "y": y, "loss": loss, "x_grad": x.grad, "v_grad": v.grad, "y_grad": y.grad,
            "loss_grad": loss.grad}


def forward(s):
    wp.launch(energy, dim=N, inputs=[s["x"], s["v"]], outputs=[s["y"]], device=CPU)
    wp.launch(total, dim=N, inputs=[s["y"]], outputs=[s["loss"]], device=CPU)


def train_step(s):
    """The usual captured training step: forward, backward, descend, zero the gradients."""
    s["loss"].zero_()
    tape = wp.Tape()
    with tape:
        forward(s)
    tape.backward(loss=s["loss"])
    wp.launch(descend, dim=N, inputs=[s["x"], s["x"].grad, 0.01], device=CPU)
    wp.launch(descend3, dim=N, inputs=[s["v"], s["v"].grad, 0.01], device=CPU)
    tape.zero()


def test_train_step_eager_vs_replay():
    graph, _ = eager_vs_replay(train_step, make_state, repeats=4)
    kernels = graph.recording.kernels
    launches = [op for op in graph.recording.ops if isinstance(op, rec.Launch)]
    backward = {kernels[op.kernel].key for op in launches if kernels[op.kernel].adjoint}
    assert backward == {"energy", "total"}, "the adjoint launches were not recorded"
    assert any(isinstance(op, rec.Memset) for op in graph.recording.ops), "tape.zero() was not recorded"


def accumulate(s):
    """Backward without zeroing: gradients accumulate from one replay to the next, as eagerly."""
    s["loss"].zero_()
    tape = wp.Tape()
    with tape:
        forward(s)
    tape.backward(loss=s["loss"])


def test_gradients_accumulate_across_replays():
    eager_vs_replay(accumulate, make_state, repeats=3)


def backward_with_grads(s):
    """``backward(grads=...)``: the incoming gradient is copied into ``y.grad`` (a recorded copy)."""
    seed = wp.array(np.linspace(0.5, 2.0, N, dtype=np.float32), device=CPU)
    tape = wp.Tape()
    with tape:
        wp.launch(energy, dim=N, inputs=[s["x"], s["v"]], outputs=[s["y"]], device=CPU)
    tape.backward(grads={s["y"]: seed})
    wp.launch(descend, dim=N, inputs=[s["x"], s["x"].grad, 0.05], device=CPU)
    tape.zero()


def test_backward_with_grads_dict():
    eager_vs_replay(backward_with_grads, make_state, repeats=3)


def custom_backward(s):
    """``tape.record_func``: a Python backward function, run (and so recorded) during ``backward()``."""
    s["loss"].zero_()
    tape = wp.Tape()
    with tape:
        wp.launch(energy, dim=N, inputs=[s["x"], s["v"]], outputs=[s["y"]], device=CPU)
        tape.record_func(lambda: wp.launch(double, dim=N, inputs=[s["y"].grad, s["x"].grad], device=CPU),
                         arrays=[s["x"], s["y"]])
        wp.launch(total, dim=N, inputs=[s["y"]], outputs=[s["loss"]], device=CPU)
    tape.backward(loss=s["loss"])
    wp.launch(descend, dim=N, inputs=[s["x"], s["x"].grad, 0.01], device=CPU)
    tape.zero()


def test_record_func_eager_vs_replay():
    eager_vs_replay(custom_backward, make_state, repeats=3)


ITERS = 3


def test_fresh_process_replay_equals_eager(tmp_path):
    expected = make_state()
    for _ in range(ITERS):
        train_step(expected)
        accumulate(expected)
    state = make_state()
    with wp.ScopedCapture(device=CPU, apic=True) as capture:
        train_step(state)
        accumulate(state)
    wp.capture_save(capture.graph, str(tmp_path / "train"), outputs=dict(state))
    job = {"mode": "file", "path": str(tmp_path / "train"), "iters": ITERS,
           "get": {name: str(tmp_path / f"{name}.npy") for name in state}}
    run_child(job, cwd=tmp_path)
    for name in state:
        assert same_bits(np.load(tmp_path / f"{name}.npy"), expected[name].numpy()), name
