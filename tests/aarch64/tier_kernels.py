"""The workload of the AArch64 tier and of the cross-family golden file (``tests/data/golden/aarch64-*``):
one Warp module (a first compile under QEMU takes about 70 s), one step holding launches, a copy, a fill, an
allocation inside the capture, a ``capture_while`` loop and a named scalar parameter, and a launch wide
enough for a threaded replay to split. Its arithmetic (``x * a + b``, ``sin``) may round differently on
another CPU family (a fused multiply-add, another libm), which is why a load is compared with the loading
machine's own eager run."""

from __future__ import annotations

import numpy as np
import warp as wp

import apic

CPU = "cpu"
WIDE = 1 << 14  # the launch a threaded replay splits into chunks
STEPS = 3  # capture_while turns, set by the `steps` input
REPLAYS = 2
INPUTS = ("steps",)
OUTPUTS = ("x", "acc", "out", "wide", "counter")
DT = apic.param("dt", wp.float32, 0.5)
SAVED_DT = 0.375  # set on the live graph before the save: a load must use it, not the captured 0.5


@wp.kernel
def axpb(x: wp.array(dtype=float), a: float, b: float):
    i = wp.tid()
    x[i] = x[i] * a + b


@wp.kernel
def accumulate(acc: wp.array(dtype=float), x: wp.array(dtype=float)):
    i = wp.tid()
    acc[i] = acc[i] + wp.sin(x[i]) * x[i]


@wp.kernel
def reload(counter: wp.array(dtype=wp.int32), steps: wp.array(dtype=wp.int32)):
    counter[0] = steps[0]


@wp.kernel
def countdown(counter: wp.array(dtype=wp.int32)):
    counter[0] = counter[0] - 1


def state() -> dict:
    """A fresh state: every array the step reads and writes."""
    return {"x": wp.array(np.linspace(-1.0, 1.0, 8, dtype=np.float32), dtype=float, device=CPU),
            "acc": wp.zeros(8, dtype=float, device=CPU), "out": wp.zeros(8, dtype=float, device=CPU),
            "wide": wp.array(np.linspace(0.0, 2.0, WIDE, dtype=np.float32), dtype=float, device=CPU),
            "counter": wp.zeros(1, dtype=wp.int32, device=CPU),
            "steps": wp.array(np.array([STEPS], dtype=np.int32), dtype=wp.int32, device=CPU)}


def step(s: dict) -> None:
    """One step: a scratch array allocated and copied into, a loop of ``steps`` turns, a fill, copies back."""
    scratch = wp.zeros(8, dtype=float, device=CPU)  # allocated inside the capture
    wp.copy(scratch, s["x"])
    wp.launch(reload, dim=1, inputs=[s["counter"], s["steps"]], device=CPU)

    def body():
        wp.launch(axpb, dim=8, inputs=[scratch, DT, 0.25], device=CPU)
        wp.launch(accumulate, dim=8, inputs=[s["acc"], scratch], device=CPU)
        wp.launch(countdown, dim=1, inputs=[s["counter"]], device=CPU)

    wp.capture_while(s["counter"], body)
    s["out"].fill_(1.5)
    wp.launch(axpb, dim=8, inputs=[s["out"], DT, -0.125], device=CPU)
    wp.launch(axpb, dim=WIDE, inputs=[s["wide"], DT, 0.75], device=CPU)
    wp.copy(s["x"], scratch)


def eager(dt: float = SAVED_DT) -> dict:
    """``REPLAYS`` eager steps from a fresh state with ``dt``: the oracle, as NumPy arrays by output name."""
    DT.value = dt
    s = state()
    for _ in range(REPLAYS):
        step(s)
    return {name: s[name].numpy() for name in OUTPUTS}


def capture():
    """``(graph, state)``: the step captured from a fresh state, ``dt`` set to ``SAVED_DT`` on the live graph."""
    DT.value = 0.5
    s = state()
    with wp.ScopedCapture(device=CPU, apic=True) as captured:
        step(s)
    captured.graph.set_param("dt", SAVED_DT)
    return captured.graph, s


def save(graph, s: dict, path: str, **options) -> None:
    """Save ``graph`` with the tier's inputs and outputs bound."""
    wp.capture_save(graph, path, inputs={n: s[n] for n in INPUTS}, outputs={n: s[n] for n in OUTPUTS}, **options)


def replayed(graph, threads: int | None = None, live: dict | None = None) -> dict:
    """``REPLAYS`` replays of ``graph`` (serial, or with ``threads``), its outputs by name: a loaded graph's
    bound outputs, or of a live graph the arrays of its state ``live``."""
    if threads is not None:
        graph.min_tasks_per_thread = 1
    for _ in range(REPLAYS):
        wp.capture_launch(graph) if threads is None else wp.capture_launch(graph, threads=threads)
    if live is not None:
        return {name: live[name].numpy() for name in OUTPUTS}
    return {name: np.ascontiguousarray(graph.param_numpy(name)) for name in OUTPUTS}


def same_bits(a: dict, b: dict) -> list:
    """The names whose arrays differ in shape or in any bit."""
    return [n for n in OUTPUTS if a[n].shape != b[n].shape or a[n].tobytes() != b[n].tobytes()]
