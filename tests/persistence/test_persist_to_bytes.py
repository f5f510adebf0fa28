"""Saving to memory: ``wp.capture_save_to_bytes`` gives what ``capture_save`` writes, and loads anywhere.

The oracle is the eager run, as in tests/test_persist_roundtrip.py: the bytes, handed to a fresh
process that never saw the kernels, load with ``wp.capture_load_from_bytes`` and replay bit for bit
as the same step run eagerly.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
import warp as wp

import apic
import persist_kernels as pk
from persist_helpers import run_child, same_bits

pytestmark = [pytest.mark.warp_version, pytest.mark.interpreter, pytest.mark.install]

ITERS = 3


@pytest.fixture(scope="module")
def captured():
    sim = pk.Sim(0)
    return sim, pk.capture(sim)


def _write(folder, data, modules) -> str:
    """The bytes as a ``.wrp`` and its modules folder, for the child (which reads them into memory)."""
    stem = os.path.join(str(folder), "sent")
    with open(stem + ".wrp", "wb") as f:
        f.write(data)
    os.mkdir(stem + "_modules")
    for name, contents in modules.items():
        with open(os.path.join(stem + "_modules", name), "wb") as f:
            f.write(contents)
    return stem


def test_the_bytes_are_the_files_capture_save_writes(captured, tmp_path):
    sim, graph = captured
    data, modules = wp.capture_save_to_bytes(graph, inputs=sim.inputs(), outputs=sim.outputs())
    assert isinstance(data, bytes) and isinstance(modules, dict)
    wp.capture_save(graph, str(tmp_path / "g"), inputs=sim.inputs(), outputs=sim.outputs())
    with open(tmp_path / "g.wrp", "rb") as f:
        assert f.read() == data
    folder = tmp_path / "g_modules"
    on_disk = {name: (folder / name).read_bytes() for name in os.listdir(folder)}
    assert on_disk == modules and len(modules) == 1


def test_fresh_process_replay_from_the_bytes_equals_eager(captured, tmp_path):
    sim, graph = captured
    data, modules = wp.capture_save_to_bytes(graph, inputs=sim.inputs(), outputs=sim.outputs())
    outputs = list(sim.outputs()) + ["x", "v"]
    job = {"mode": "bytes", "path": _write(tmp_path, data, modules), "iters": ITERS,
           "get": {n: str(tmp_path / f"{n}.npy") for n in outputs}}
    run_child(job, cwd=tmp_path)
    expected = pk.Sim(0)
    for _ in range(ITERS):
        expected.step()
    for name in outputs:
        assert same_bits(np.load(tmp_path / f"{name}.npy"), expected.numpy(name)), name


def test_in_process_round_trip_and_each_call_is_its_own(captured):
    sim, graph = captured
    data, modules = wp.capture_save_to_bytes(graph, inputs=sim.inputs(), outputs=sim.outputs())
    loaded = wp.capture_load_from_bytes(data, modules)
    assert sorted(loaded.params) == sorted(list(sim.inputs()) + list(sim.outputs()))
    modules.clear()  # the caller owns the dict it got: the next call makes a new one
    again = apic.capture_save_to_bytes(graph, inputs=sim.inputs(), outputs=sim.outputs())
    assert again[0] == data and len(again[1]) == 1


def _falling(dt):
    x, v = wp.zeros(pk.N, dtype=wp.vec3, device="cpu"), wp.zeros(pk.N, dtype=wp.vec3, device="cpu")
    f = wp.full(pk.N, wp.vec3(0.0, -9.8, 0.5), dtype=wp.vec3, device="cpu")
    wp.launch(pk.integrate, dim=pk.N, inputs=[x, v, f, dt], device="cpu")
    return x


def test_named_scalar_parameters_travel_in_the_bytes():
    dt = apic.param("to_bytes_dt", wp.float32, 0.25)
    with wp.ScopedCapture(device="cpu", apic=True) as cap:
        x = _falling(dt)
    loaded = wp.capture_load_from_bytes(*wp.capture_save_to_bytes(cap.graph, outputs={"x": x}))
    assert loaded.params["to_bytes_dt"]["kind"] == "scalar" and loaded.get_param("to_bytes_dt") == 0.25
    loaded.set_param("to_bytes_dt", 0.125)
    wp.capture_launch(loaded)
    out = np.empty((pk.N, 3), dtype=np.float32)
    loaded.get_param("x", out)
    assert same_bits(out, _falling(0.125).numpy())


@pytest.mark.parametrize("case", ["not_apic", "not_a_graph", "cpu_target", "name_twice", "not_an_array"])
def test_a_failure_raises_and_returns_nothing(captured, case):
    sim, graph = captured
    if case == "not_apic":
        a = wp.zeros(4, dtype=float, device="cpu")
        with wp.ScopedCapture(device="cpu") as cap:
            a.fill_(1.0)
        call, error = (lambda: wp.capture_save_to_bytes(cap.graph)), "Pass apic=True"
    elif case == "not_a_graph":
        call, error = (lambda: wp.capture_save_to_bytes(object())), "capture_save_to_bytes"
    elif case == "cpu_target":
        call, error = (lambda: wp.capture_save_to_bytes(graph, cpu_target="z80")), "z80"
    elif case == "name_twice":
        call, error = (lambda: wp.capture_save_to_bytes(graph, inputs={"x": sim.a["x"]},
                                                        outputs={"x": sim.a["v"]})), "twice"
    else:  # a binding that is not an array, after the graph's checks passed
        call, error = (lambda: wp.capture_save_to_bytes(graph, inputs={"x": sim.a["x"], "h": 3})), "h"
    result = None
    with pytest.raises((TypeError, ValueError, RuntimeError), match=error):
        result = call()
    assert result is None


def test_uninstall_removes_the_name_and_install_puts_it_back():
    assert wp.capture_save_to_bytes is apic.capture_save_to_bytes
    apic.uninstall()
    try:
        assert not hasattr(wp, "capture_save_to_bytes")  # upstream Warp has no such call
    finally:
        apic.install()
    assert wp.capture_save_to_bytes is apic.capture_save_to_bytes
