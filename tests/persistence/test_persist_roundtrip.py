"""Save a captured graph, load it in a fresh process that never saw its kernels, replay, compare.

The oracle is the eager run: the same ``Sim.step`` run ``ITERS`` times without capture must leave
every bound output bit for bit equal to the loaded graph replayed ``ITERS`` times.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
import warp as wp

import apic
import persist_kernels as pk
from wrp_helpers import save_sim
from persist_helpers import run_child, same_bits

pytestmark = [pytest.mark.warp_version, pytest.mark.interpreter, pytest.mark.install]

ITERS = 3


def eager(seed: int = 0, iters: int = ITERS, overrides: dict | None = None) -> pk.Sim:
    sim = pk.Sim(seed)
    for name, values in (overrides or {}).items():
        sim.a[name].assign(values)
    for _ in range(iters):
        sim.step()
    return sim


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A captured (never replayed) Sim saved to disk, with its inputs and outputs bound."""
    stem = save_sim(tmp_path_factory.mktemp("saved"))
    return stem


def test_files_on_disk(saved):
    assert saved.with_suffix(".wrp").is_file()
    modules = sorted(os.listdir(str(saved) + "_modules"))
    # one Warp module, persist_kernels: its object file (its kernel manifest inside), as upstream lays it out
    assert len(modules) == 1 and modules[0].startswith("persist_kernels.") and modules[0].endswith(".o")


@pytest.mark.parametrize("mode", ["file", "bytes", "bytearray", "memoryview", "numpy"])
def test_fresh_process_replay_equals_eager(saved, tmp_path, mode):
    outputs = list(pk.Sim().outputs()) + ["x", "v"]
    job = {"mode": mode, "path": str(saved), "iters": ITERS, "get": {n: str(tmp_path / f"{n}.npy") for n in outputs}}
    report = run_child(job, cwd=tmp_path)
    assert report["before_init"], "the child should load before wp.init()"
    expected = eager()
    for name in outputs:
        assert same_bits(np.load(tmp_path / f"{name}.npy"), expected.numpy(name)), name


def test_fresh_process_set_param(saved, tmp_path):
    rng = np.random.default_rng(7)
    new = {
        "x": rng.standard_normal((pk.N, 3)).astype(np.float32),
        "weights": rng.standard_normal(pk.N).astype(np.float32),
    }
    sets = {}
    for name, values in new.items():
        np.save(tmp_path / f"in_{name}.npy", values)
        sets[name] = str(tmp_path / f"in_{name}.npy")
    outputs = ["x", "x_prev", "energy", "acc", "sq", "w_adj"]
    job = {"mode": "file", "path": str(saved), "iters": 2, "set": sets,
           "get": {n: str(tmp_path / f"{n}.npy") for n in outputs}}
    run_child(job, cwd=tmp_path)
    expected = eager(iters=2, overrides=new)
    for name in outputs:
        assert same_bits(np.load(tmp_path / f"{name}.npy"), expected.numpy(name)), name


def test_in_process_loads_are_independent(saved):
    """Two loads of one file own separate memory and modules; dropping one leaves the other working."""
    first = wp.capture_load(str(saved))
    second = wp.capture_load(str(saved) + ".wrp", device="cpu")
    assert first.get_param_ptr("x") != second.get_param_ptr("x")
    wp.capture_launch(first)
    del first
    import gc

    gc.collect()
    for _ in range(ITERS):
        wp.capture_launch(second)
    out = wp.empty(pk.N, dtype=wp.vec3, device="cpu")
    second.get_param("x", out)
    assert same_bits(out.numpy(), eager().numpy("x"))


def test_load_unload_many_times(saved):
    """Each load starts from the saved state, replays like eager, and is freed when dropped."""
    import gc
    import weakref

    expected = eager(iters=2).numpy("x")
    out = wp.empty(pk.N, dtype=wp.vec3, device="cpu")
    for _ in range(5):
        graph = wp.capture_load(str(saved))
        graph.launch(2)
        graph.get_param("x", out)
        assert same_bits(out.numpy(), expected)
        dropped = weakref.ref(graph)
        del graph
        gc.collect()
        assert dropped() is None, "a loaded graph outlived its last reference"


def test_saved_contents_are_those_at_save_time(tmp_path):
    """A graph saved after replays starts, when loaded, from the state it had when saved."""
    sim = pk.Sim(3)
    graph = pk.capture(sim)
    wp.capture_launch(graph)
    wp.capture_launch(graph)
    wp.capture_save(graph, str(tmp_path / "later.wrp"), outputs={"x": sim.a["x"]})
    loaded = wp.capture_load(str(tmp_path / "later"))
    wp.capture_launch(loaded)
    wp.capture_launch(graph)
    out = wp.empty(pk.N, dtype=wp.vec3, device="cpu")
    loaded.get_param("x", out)
    assert same_bits(out.numpy(), sim.numpy("x"))
    assert same_bits(out.numpy(), eager(3, 3).numpy("x"))


def test_loaded_graph_can_be_saved_again(saved, tmp_path):
    loaded = wp.capture_load(str(saved))
    wp.capture_launch(loaded)
    x = wp.empty(pk.N, dtype=wp.vec3, device="cpu")
    wp.capture_save(loaded, str(tmp_path / "again"), outputs={"x2": _param_array(loaded, "x")})
    again = wp.capture_load(str(tmp_path / "again"))
    for _ in range(ITERS - 1):
        wp.capture_launch(again)
    again.get_param("x2", x)
    assert same_bits(x.numpy(), eager().numpy("x"))
    assert os.listdir(tmp_path / "again_modules") == os.listdir(str(saved) + "_modules")
    assert set(again.params) == set(loaded.params) | {"x2"}  # the loaded graph's parameters are kept
    again.get_param("x", x)
    assert same_bits(x.numpy(), eager().numpy("x"))


def _param_array(graph, name):
    """A Warp array aliasing a loaded graph's parameter memory (to bind it when saving again)."""
    p = graph.params[name]
    return wp.array(ptr=graph.get_param_ptr(name), dtype=wp.vec3, shape=p["shape"], device="cpu")


def test_graph_without_kernels(tmp_path):
    a = wp.array(np.arange(10, dtype=np.float32), device="cpu")
    b = wp.zeros(10, dtype=float, device="cpu")
    with wp.ScopedCapture(device="cpu", apic=True) as cap:
        wp.copy(b, a)
        a.fill_(2.0)
    wp.capture_save(cap.graph, str(tmp_path / "copy"), inputs={"a": a}, outputs={"b": b})
    assert os.listdir(tmp_path / "copy_modules") == []
    with open(tmp_path / "copy.wrp", "rb") as f:
        graph = wp.capture_load_from_bytes(f.read())
    wp.capture_launch(graph)
    wp.capture_launch(graph)
    out = wp.empty(10, dtype=float, device="cpu")
    graph.get_param("b", out)
    assert np.all(out.numpy() == 2.0)


def test_save_requires_apic_flag(tmp_path):
    a = wp.zeros(4, dtype=float, device="cpu")
    with wp.ScopedCapture(device="cpu") as cap:
        a.fill_(1.0)
    with pytest.raises(RuntimeError, match="apic=True"):
        wp.capture_save(cap.graph, str(tmp_path / "g"))
    assert not os.listdir(tmp_path)


def test_save_refuses_non_apic_graph(tmp_path):
    with pytest.raises(TypeError):
        wp.capture_save(object(), str(tmp_path / "g"))


def test_binding_arguments_are_checked(tmp_path):
    # (an array the graph does not use is saved as extra memory: tests/record/test_unrecorded_bindings.py)
    a = wp.zeros(4, dtype=float, device="cpu")
    with wp.ScopedCapture(device="cpu", apic=True) as cap:
        a.fill_(1.0)
    with pytest.raises(ValueError, match="used twice"):
        wp.capture_save(cap.graph, str(tmp_path / "g"), inputs={"a": a}, outputs={"a": a})
    with pytest.raises(TypeError, match="Warp array"):
        wp.capture_save(cap.graph, str(tmp_path / "g"), inputs={"a": np.zeros(4)})
    assert not os.listdir(tmp_path)


def test_same_array_under_two_names(tmp_path):
    a = wp.zeros(4, dtype=float, device="cpu")
    with wp.ScopedCapture(device="cpu", apic=True) as cap:
        a.fill_(1.0)
    wp.capture_save(cap.graph, str(tmp_path / "g"), inputs={"a_in": a}, outputs={"a_out": a})
    graph = wp.capture_load(str(tmp_path / "g"))
    assert graph.get_param_ptr("a_in") == graph.get_param_ptr("a_out")


def test_load_onto_non_cpu_device_is_refused(saved):
    if not wp.is_cuda_available():
        pytest.skip("no CUDA device to refuse")
    with pytest.raises(ValueError, match="CPU"):
        wp.capture_load(str(saved), device="cuda:0")


def test_uninstall_restores_warp_save_and_load():
    from warp._src import context as wp_context

    had = {name: getattr(wp, name, None) for name in ("capture_save", "capture_load", "capture_load_from_bytes")}
    assert all(v is getattr(apic, k) for k, v in had.items())
    apic.uninstall()
    try:
        for name in had:
            upstream = getattr(wp_context, name, None)
            assert getattr(wp, name, None) is upstream  # upstream's own (1.13+), or absent (1.12)
            assert upstream is None or upstream.__module__ == wp_context.__name__
    finally:
        apic.install()
    assert wp.capture_save is apic.capture_save
