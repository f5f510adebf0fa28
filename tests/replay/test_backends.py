"""The replay backend interface (``apic.replay.backends``): every backend module gives a ``BACKEND`` with the
same parts, found by name; ``APIC_REPLAY`` picks the CPU one; live and loaded CPU graphs replay through the
backend they hold, each leaving the memory eager Warp leaves, bit for bit."""

from __future__ import annotations

import os
import pkgutil

import numpy as np
import pytest
import warp as wp

import apic  # noqa: F401  (installs the capture shims)
from apic.replay import backends

pytestmark = [pytest.mark.warp_version, pytest.mark.interpreter]

N = 64
PARTS = ("device", "load", "launch", "write_binding", "read_binding")  # free: optional (nothing to wait for)
CPU_BACKENDS = ("cpu_native", "cpu_reference")


@wp.kernel
def _step(x: wp.array(dtype=wp.float32), y: wp.array(dtype=wp.float32)):
    i = wp.tid()
    y[i] = y[i] * 0.5 + wp.sin(x[i]) * 3.0


def _names() -> list[str]:
    return sorted(m.name for m in pkgutil.iter_modules(backends.__path__) if not m.name.startswith("_"))


def test_every_backend_module_gives_every_part():
    names = _names()
    assert {*CPU_BACKENDS, "cuda"} <= set(names)
    for name in names:
        if name == "cpu":  # what the CPU backends share, not one itself
            continue
        backend = backends.get(name)
        assert isinstance(backend, backends.Backend) and backend.name == name
        assert backend.device_kind in ("cpu", "cuda")
        missing = [p for p in PARTS if getattr(type(backend), p) is getattr(backends.Backend, p)]
        assert missing == [], f"backend {name} lacks {missing}"
        assert backends.get(name) is backend  # one object per backend


@pytest.mark.parametrize("value, name", [(None, "cpu_native"), ("numba", "cpu_native"),
                                         ("reference", "cpu_reference"), ("cpu_reference", "cpu_reference")])
def test_apic_replay_names_the_cpu_backend(monkeypatch, value, name):
    if value is None:
        monkeypatch.delenv("APIC_REPLAY", raising=False)
    else:
        monkeypatch.setenv("APIC_REPLAY", value)
    assert backends.cpu_backend() is backends.get(name)


@pytest.mark.parametrize("value", ["cuda", "nope", "../cpu_native", "_private", "cpu"])
def test_apic_replay_refuses_what_is_no_cpu_backend(monkeypatch, value):
    monkeypatch.setenv("APIC_REPLAY", value)
    with pytest.raises(ValueError, match="APIC_REPLAY="):
        backends.cpu_backend()


def _inputs():
    x = wp.array(np.linspace(-2.0, 2.0, N, dtype=np.float32), device="cpu")
    y = wp.array(np.arange(N, dtype=np.float32), device="cpu")
    return x, y


def _eager(steps: int) -> np.ndarray:
    x, y = _inputs()
    for _ in range(steps):
        wp.launch(_step, dim=N, inputs=[x, y], device="cpu")
    return y.numpy()


@pytest.mark.parametrize("name", CPU_BACKENDS)
def test_a_live_graph_replays_through_the_backend_it_holds(name):
    x, y = _inputs()
    with wp.ScopedCapture(device="cpu", apic=True) as capture:
        wp.launch(_step, dim=N, inputs=[x, y], device="cpu")
    graph = capture.graph
    graph.program.backend = backends.get(name)
    for _ in range(2):
        wp.capture_launch(graph)
    for _ in range(2):
        backends.get(name).launch(graph)  # what wp.capture_launch calls
    assert y.numpy().tobytes() == _eager(4).tobytes()
    assert graph.program.backend is backends.get(name)


@pytest.mark.parametrize("value, name", [("numba", "cpu_native"), ("reference", "cpu_reference")])
def test_a_loaded_graph_is_built_and_replayed_by_the_chosen_backend(tmp_path, monkeypatch, value, name):
    x, y = _inputs()
    with wp.ScopedCapture(device="cpu", apic=True) as capture:
        wp.launch(_step, dim=N, inputs=[x, y], device="cpu")
    wp.capture_save(capture.graph, str(tmp_path / "g"), inputs={"y": y})
    monkeypatch.setenv("APIC_REPLAY", value)
    loaded = wp.capture_load(str(tmp_path / "g"))
    assert loaded.program.backend is backends.get(name)
    out = wp.zeros(N, dtype=wp.float32, device="cpu")
    for _ in range(3):
        wp.capture_launch(loaded)
    loaded.get_param("y", out)
    assert out.numpy().tobytes() == _eager(3).tobytes()
    # the named-array copies are the backend's: in through it, out through the graph's API
    backends.get(name).write_binding(loaded, loaded.bindings["y"], wp.array(np.ones(N, dtype=np.float32)))
    loaded.get_param("y", out)
    assert (out.numpy() == 1.0).all()


def test_a_saved_device_names_the_backend_that_loads_it(monkeypatch):
    monkeypatch.setenv("APIC_REPLAY", "reference")
    assert backends.for_saved(None) is backends.get("cpu_reference")
    assert backends.for_saved({"kind": "cuda", "arch": 90}) is backends.get("cuda")
    for device in ({"kind": "cpu_native"}, {"kind": "nope"}, {"kind": 3}, {}):
        with pytest.raises(ValueError):
            backends.for_saved(device)


def test_the_cpu_backend_checks_the_device_asked_for():
    backend = backends.get("cpu_native")
    assert backend.device(None) == wp.get_device("cpu") and backend.device("cpu") == wp.get_device("cpu")
    with pytest.raises(ValueError):  # "this is a CPU graph", or Warp's own where no such device exists
        backend.device("cuda:0")
    with pytest.raises(ValueError, match="this is a CUDA graph"):
        backends.get("cuda").device("cpu")
    assert backends.get("cuda").device("cuda:1") == 1


def test_every_graph_replays_through_its_backend():
    """``wp.capture_launch`` reaches a device only through the graph's backend: a backend standing in for the
    graph's own sees every launch the fast path does not take (here: all, a capture of no replay yet)."""
    x, y = _inputs()
    with wp.ScopedCapture(device="cpu", apic=True) as capture:
        wp.launch(_step, dim=N, inputs=[x, y], device="cpu")
    graph, seen = capture.graph, []

    class Counting(type(backends.get("cpu_native"))):
        def launch(self, graph, stream=None, threads=None):
            seen.append(threads)
            super().launch(graph, stream, threads)

    graph.program.backend = Counting()
    wp.capture_launch(graph, threads=1)
    wp.capture_launch(graph, threads=2)
    assert seen == [1, 2]
    assert y.numpy().tobytes() == _eager(2).tobytes()


def test_the_environment_is_left_as_found():
    assert os.environ.get("APIC_REPLAY") in (None, "numba", "reference")
