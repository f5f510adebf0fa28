"""Streams, events and synchronisation inside a CPU capture.

Warp's streams and events are CUDA objects: on the CPU, eagerly and in upstream Warp 1.19's own CPU
capture, ``wp.Event("cpu")``, ``wp.Stream("cpu")``, ``wp.get_stream("cpu")``, ``wp.set_stream``,
``wp.record_event``, ``wp.wait_event`` and ``wp.wait_stream`` raise ``RuntimeError("Device cpu is
not a CUDA device")``, while ``wp.synchronize()``, ``wp.synchronize_device("cpu")``,
``wp.synchronize_stream("cpu")``, ``wp.ScopedStream(None)`` and ``stream=None`` arguments do
nothing. CPU work runs in order on the calling thread, so there is nothing to order or wait for.

apic keeps exactly that behaviour inside a CPU capture: the same error (type and message) as eager
Warp, raised before anything is recorded, and no-ops that record nothing. A synchronisation is not a
flush: nothing has run during a record-only capture, so reading a captured array after
``wp.synchronize()`` is still refused. Programs that interleave these calls with launches, copies
and fills replay bit for bit as they ran eagerly, live and after a save and a load in a fresh
process, and their graphs hold the same operations as the same program without them.
"""

from __future__ import annotations

import numpy as np
import pytest
import warp as wp

import apic
from apic.record.cpu.recorder import active
from conftest import CPU, eager_vs_replay
from persist_helpers import run_child, same_bits

pytestmark = [pytest.mark.warp_version, pytest.mark.interpreter]

N = 16


@wp.kernel
def step(x: wp.array(dtype=wp.float32), y: wp.array(dtype=wp.float32), k: wp.float32):
    i = wp.tid()
    y[i] = y[i] * 0.5 + wp.sin(x[i] * k)
    x[i] = x[i] + y[i] * 0.25


def make_state():
    return {
        "x": wp.array(np.linspace(-1.0, 1.0, N, dtype=np.float32), device=CPU),
        "y": wp.zeros(N, dtype=wp.float32, device=CPU),
        "z": wp.zeros(N, dtype=wp.float32, device=CPU),
    }


def program(s, sync: bool = True):
    """Launches, a copy and a fill, with every CPU no-op Warp allows in between (``sync``)."""
    if sync:
        wp.synchronize()
    wp.launch(step, dim=N, inputs=[s["x"], s["y"], 1.5], device=CPU, stream=None)
    if sync:
        wp.synchronize_device(CPU)
        wp.synchronize_stream(CPU)
        wp.synchronize_device()  # the default device (the CPU, see the fixture)
    wp.copy(s["z"], s["y"], stream=None)
    with wp.ScopedStream(None):  # no stream: Warp changes nothing
        wp.launch(step, dim=N, inputs=[s["x"], s["z"], 0.75], device=CPU)
    if sync:
        wp.synchronize_stream()
        wp.synchronize()
    s["y"].fill_(0.125)
    wp.launch(step, dim=N, inputs=[s["z"], s["y"], 2.0], device=CPU)


# What eager Warp refuses on the CPU, each as a call made inside a program.
CUDA_ONLY = {
    "Event(cpu)": lambda: wp.Event(device=CPU),
    "Event()": lambda: wp.Event(),
    "Event(timing)": lambda: wp.Event(device=CPU, enable_timing=True),
    "Stream(cpu)": lambda: wp.Stream(CPU),
    "get_stream(cpu)": lambda: wp.get_stream(CPU),
    "get_stream()": lambda: wp.get_stream(),
    "set_stream": lambda: wp.set_stream(None, device=CPU),
    "record_event": lambda: wp.record_event(),
    "wait_event": lambda: wp.wait_event(None),
    "wait_stream": lambda: wp.wait_stream(None),
    "device.stream": lambda: wp.get_device(CPU).stream,
}


def eager_error(call) -> BaseException:
    assert active() is None
    with pytest.raises(Exception) as info:
        call()
    return info.value


@pytest.fixture(autouse=True)
def _cpu_is_the_default_device():
    """Some calls take the default device (``wp.Event()``, ``wp.record_event()``): make it the CPU."""
    with wp.ScopedDevice(CPU):
        yield


# --- no-ops ------------------------------------------------------------------------------------------
def test_synchronisation_and_null_streams_replay_as_eager():
    eager_vs_replay(program, make_state)


def test_no_op_calls_record_nothing():
    """The graph of the program is the graph of the same program without the synchronisation calls."""
    state = make_state()
    with wp.ScopedCapture(device=CPU) as with_sync:
        program(state)
    with wp.ScopedCapture(device=CPU) as without:
        program(state, sync=False)
    assert with_sync.graph.recording.ops == without.graph.recording.ops
    assert len(with_sync.graph.recording.ops) == 5  # 3 launches, a copy, a fill


def test_synchronize_does_not_flush_a_capture():
    """Nothing has run during a record-only capture: a read after wp.synchronize() is still refused."""
    state = make_state()
    before = state["y"].numpy().copy()
    with wp.ScopedCapture(device=CPU) as capture:
        wp.launch(step, dim=N, inputs=[state["x"], state["y"], 1.0], device=CPU)
        wp.synchronize()
        wp.synchronize_device(CPU)
        assert wp.get_device(CPU).is_capturing  # Warp's synchronize checks this (for CUDA devices)
        with pytest.raises(apic.CaptureError, match="before the captured work has run"):
            state["y"].numpy()
    assert same_bits(state["y"].numpy(), before)
    wp.capture_launch(capture.graph)
    assert not same_bits(state["y"].numpy(), before)


def test_synchronize_during_a_paused_capture():
    """While paused, work runs eagerly and synchronisation is as eager: the resumed capture goes on."""
    def paused_program(s):
        wp.launch(step, dim=N, inputs=[s["x"], s["y"], 1.0], device=CPU)
        handle = wp.capture_pause(device=CPU)
        try:
            wp.synchronize()
            wp.synchronize_device(CPU)
        finally:
            wp.capture_resume(handle, device=CPU)
        wp.launch(step, dim=N, inputs=[s["x"], s["y"], 2.0], device=CPU)

    def program_or_eager(s):
        if active() is None:  # eager run: no capture to pause
            wp.launch(step, dim=N, inputs=[s["x"], s["y"], 1.0], device=CPU)
            wp.synchronize()
            wp.launch(step, dim=N, inputs=[s["x"], s["y"], 2.0], device=CPU)
        else:
            paused_program(s)

    if not hasattr(wp, "capture_pause"):
        pytest.skip("this warp-lang has no wp.capture_pause")
    eager_vs_replay(program_or_eager, make_state)


# --- CUDA-only calls -----------------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(CUDA_ONLY))
def test_cuda_only_call_raises_as_eager(name):
    """Inside a capture the call raises what eager Warp raises, and the failed capture leaves nothing."""
    call = CUDA_ONLY[name]
    expected = eager_error(call)
    assert "not a CUDA device" in str(expected)
    state = make_state()
    before = {k: v.numpy().copy() for k, v in state.items()}
    scoped = wp.ScopedCapture(device=CPU)
    with pytest.raises(type(expected)) as info:
        with scoped:
            wp.launch(step, dim=N, inputs=[state["x"], state["y"], 1.0], device=CPU)
            call()
    assert str(info.value) == str(expected)
    assert scoped.graph is None and active() is None  # abandoned, as for any error in the block
    for k, v in state.items():
        assert same_bits(v.numpy(), before[k]), k  # and the recorded launch never ran


def test_caught_cuda_only_error_keeps_the_capture():
    """A program that tries an event and falls back (as on a CPU-only machine) replays as it ran eagerly."""
    def fallback(s):
        wp.launch(step, dim=N, inputs=[s["x"], s["y"], 1.0], device=CPU)
        for call in CUDA_ONLY.values():
            try:
                call()
            except RuntimeError:
                s["z"].fill_(float(len(s)))  # the fallback path is recorded like any other work
        wp.launch(step, dim=N, inputs=[s["x"], s["z"], 0.5], device=CPU)

    graph, _ = eager_vs_replay(fallback, make_state)
    assert len(graph.recording.ops) == 2 + len(CUDA_ONLY)


def test_capture_begin_end_survives_a_caught_error():
    """With capture_begin/capture_end (no context manager) a caught error leaves the capture running."""
    state, expected = make_state(), make_state()
    wp.launch(step, dim=N, inputs=[expected["x"], expected["y"], 1.0], device=CPU)
    wp.launch(step, dim=N, inputs=[expected["x"], expected["y"], 3.0], device=CPU)
    wp.capture_begin(device=CPU)
    try:
        wp.launch(step, dim=N, inputs=[state["x"], state["y"], 1.0], device=CPU)
        with pytest.raises(RuntimeError, match="not a CUDA device"):
            wp.record_event(wp.Event())
        assert active() is not None
        wp.launch(step, dim=N, inputs=[state["x"], state["y"], 3.0], device=CPU)
    finally:
        graph = wp.capture_end(device=CPU)
    wp.capture_launch(graph)
    for k in state:
        assert same_bits(state[k].numpy(), expected[k].numpy()), k


def test_capture_launch_accepts_a_null_stream():
    state, expected = make_state(), make_state()
    program(expected)
    program(expected)
    with wp.ScopedCapture(device=CPU, stream=None) as capture:
        program(state)
    wp.capture_launch(capture.graph, stream=None)
    wp.capture_launch(capture.graph, None)
    for k in state:
        assert same_bits(state[k].numpy(), expected[k].numpy()), k


# --- save, load, fresh process -----------------------------------------------------------------------
def test_fresh_process_replay_equals_eager(tmp_path):
    iters = 3
    expected = make_state()
    for _ in range(iters):
        program(expected)
    state = make_state()
    with wp.ScopedCapture(device=CPU, apic=True) as capture:
        program(state)
    wp.capture_save(capture.graph, str(tmp_path / "synced"), outputs=dict(state))
    job = {"mode": "file", "path": str(tmp_path / "synced"), "iters": iters,
           "get": {n: str(tmp_path / f"{n}.npy") for n in state}}
    run_child(job, cwd=tmp_path)
    for name in state:
        assert same_bits(np.load(tmp_path / f"{name}.npy"), expected[name].numpy()), name
