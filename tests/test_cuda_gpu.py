"""CUDA capture, save, load and replay on a real GPU (skipped, saying why, on a machine without one).

The oracle is the same as on the CPU: the same work runs eagerly and captured-then-replayed, and
the results must agree bit for bit: through Warp's own CUDA graph (a live ``apic=True`` capture),
through the cuda-python graph of a loaded file, and op by op with ``cuLaunchKernel``.
"""

from __future__ import annotations

import os
import subprocess
import sys

import msgpack
import numpy as np
import pytest
import warp as wp

import apic
import cuda_kernels as ck
from apic.cuda_graph import CapturedCudaGraph, CudaGraph
from apic.record import ops as rec

pytestmark = pytest.mark.skipif(wp.get_cuda_device_count() == 0, reason="no CUDA device on this machine")
DEV = "cuda:0"
N = 1000


def needs_cuda_python():
    from apic.replay import cuda as cuda_replay

    reason = cuda_replay.unavailable_reason()
    if reason:
        pytest.skip(f"cannot replay a saved CUDA graph here: {reason}")


def _can_allocate_in_capture() -> bool:
    return bool(getattr(wp, "is_mempool_enabled", lambda d: False)(DEV))


def make_state() -> dict:
    rng = np.random.default_rng(1)
    return {
        "x": wp.array(rng.integers(-8, 8, N).astype(np.float32), dtype=wp.float32, device=DEV),
        "y": wp.array(rng.integers(-8, 8, N).astype(np.float32), dtype=wp.float32, device=DEV),
        "z": wp.zeros(N, dtype=wp.float32, device=DEV),
        "w": wp.zeros(N, dtype=wp.float32, device=DEV),
        "v": wp.zeros(N, dtype=wp.vec3, device=DEV),
        "b": wp.zeros(N + 3, dtype=wp.int8, device=DEV),
        "h": wp.zeros(N, dtype=wp.float16, device=DEV),
        "t": wp.zeros(N, dtype=wp.float32, device=DEV),
        "acc": wp.zeros(1, dtype=wp.float32, device=DEV),
        "xg": wp.zeros(N, dtype=wp.float32, device=DEV),
        "yg": wp.ones(N, dtype=wp.float32, device=DEV),
        "m": wp.zeros((4, 5, 6), dtype=wp.float32, device=DEV),
    }


def step(s: dict) -> None:
    """Launches (grid-stride, lean, 3-D, adjoint), a device copy, a memset and fills of 1, 2, 4, 12 bytes."""
    wp.launch(ck.saxpy, dim=N, inputs=[0.5, s["x"], s["y"]], device=DEV)
    wp.copy(s["z"], s["y"])
    s["w"].zero_()
    s["w"].fill_(1.5)  # a 4-byte fill: a memset node
    s["v"].fill_(wp.vec3(1.0, 2.0, 3.0))  # a 12-byte fill: the fill kernel
    s["b"][1:].fill_(3)  # a 1-byte fill at an odd address
    s["h"].fill_(wp.float16(2.0))  # a 2-byte fill
    s["acc"].zero_()
    wp.launch(ck.square_sum, dim=N, inputs=[s["z"]], outputs=[s["acc"]], device=DEV)
    wp.launch(ck.dims3, dim=s["m"].shape, inputs=[s["m"], 2.0], device=DEV, block_dim=64)
    wp.launch(ck.saxpy, dim=N, inputs=[0.5, s["x"], s["y"]], adj_inputs=[0.0, s["xg"], s["yg"]], adjoint=True,
              device=DEV)
    if ck.lean is not None:
        wp.launch(ck.lean, dim=N, inputs=[s["t"], 3.0], device=DEV)
    if _can_allocate_in_capture():
        tmp = wp.zeros(N, dtype=wp.float32, device=DEV)  # graph-owned memory
        wp.launch(ck.saxpy, dim=N, inputs=[1.0, s["z"], tmp], device=DEV)
        wp.copy(s["t"], tmp)


def snapshot(s: dict) -> dict:
    wp.synchronize_device(DEV)
    return {k: v.numpy().copy() for k, v in s.items()}


def same(a: dict, b: dict, what: str) -> None:
    for name in a:
        assert np.array_equal(a[name].view(np.uint8), b[name].view(np.uint8)), f"{what}: '{name}' differs"


def capture(state: dict):
    step(state)  # load the modules outside the capture (as any CUDA capture needs)
    with wp.ScopedCapture(device=DEV, apic=True) as cap:
        step(state)
    return cap.graph


def test_live_capture_replays_through_warps_graph():
    eager, replay = make_state(), make_state()
    graph = capture(replay)
    assert isinstance(graph, CapturedCudaGraph)
    kinds = {op.kind for op in graph.recording.ops}
    assert {rec.OpKind.CUDA_LAUNCH, rec.OpKind.MEMCPY, rec.OpKind.MEMSET, rec.OpKind.MEMTILE} <= kinds
    step(eager)  # the warm-up before the capture (stream capture itself runs nothing)
    for run in range(3):
        wp.capture_launch(graph)
        step(eager)
        same(snapshot(eager), snapshot(replay), f"Warp graph replay {run}")


def test_capture_without_apic_is_warps_own():
    state = make_state()
    step(state)
    with wp.ScopedCapture(device=DEV) as cap:
        step(state)
    assert not isinstance(cap.graph, CudaGraph)
    wp.capture_launch(cap.graph)


def _saved(tmp_path):
    state = make_state()
    graph = capture(state)
    wp.capture_save(graph, str(tmp_path / "g"), inputs={"x": state["x"]}, outputs={"y": state["y"], "v": state["v"]})
    return state


@pytest.mark.parametrize("mode", ["graph", "launch"])
def test_saved_graph_replays_with_cuda_python(tmp_path, mode):
    needs_cuda_python()
    _saved(tmp_path)
    # the file's contents are the state at save time: an eager run from that state is the oracle
    graph = wp.capture_load(str(tmp_path / "g"), device=DEV)
    assert graph.is_loaded and type(graph).__name__ == "LoadedCudaGraph"
    _replays_as_eager(graph, mode)


def _replays_as_eager(graph, mode: str = "graph") -> None:
    """A loaded graph of ``_saved``'s capture replays as ``step`` runs eagerly, bit for bit."""
    graph.mode = mode
    eager = make_state()
    step(eager)  # the warm-up before the capture: the saved contents are the state after it
    for run in range(3):
        wp.capture_launch(graph)
        step(eager)
        graph.synchronize()
        for name in ("y", "v"):
            out = wp.empty_like(eager[name])
            graph.get_param(name, out)
            assert np.array_equal(out.numpy(), eager[name].numpy()), f"{mode} replay {run}: {name}"


def test_graph_and_launch_modes_agree(tmp_path):
    needs_cuda_python()
    _saved(tmp_path)
    results = []
    for mode in ("graph", "launch"):
        graph = wp.capture_load(str(tmp_path / "g"), device=DEV)
        for _ in range(2):
            graph.launch(mode=mode)
        out = wp.empty(N, dtype=wp.float32, device="cpu")
        graph.get_param("y", out)
        results.append(out.numpy())
    assert np.array_equal(results[0], results[1])


def test_set_and_get_param(tmp_path):
    needs_cuda_python()
    _saved(tmp_path)
    graph = wp.capture_load(str(tmp_path / "g"), device=DEV)
    x = np.arange(N, dtype=np.float32)
    graph.set_param("x", wp.array(x, dtype=wp.float32, device="cpu"))  # from the host
    back = wp.empty(N, dtype=wp.float32, device=DEV)
    graph.get_param("x", back)  # to the device
    assert np.array_equal(back.numpy(), x)
    graph.set_param("x", wp.array(x * 2, dtype=wp.float32, device=DEV))  # from the device
    host = wp.empty(N, dtype=wp.float32, device="cpu")
    graph.get_param("x", host)
    assert np.array_equal(host.numpy(), x * 2)
    assert graph.get_param_ptr("x") and graph.get_param_ptr("nope") is None
    with pytest.raises(apic.BindingError):
        graph.set_param("x", wp.zeros(N, dtype=wp.float64, device="cpu"))
    with pytest.raises(apic.BindingError):
        graph.get_param("nope", host)


def test_saved_graph_replays_in_a_fresh_process(tmp_path):
    needs_cuda_python()
    _saved(tmp_path)
    code = f"""
import numpy as np, warp as wp, apic
g = wp.capture_load({str(tmp_path / 'g')!r}, device="cuda:0")
wp.capture_launch(g)
g.synchronize()
out = wp.empty({N}, dtype=wp.float32, device="cpu")
g.get_param("y", out)
np.save({str(tmp_path / 'y.npy')!r}, out.numpy())
"""
    subprocess.run([sys.executable, "-c", code], check=True, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    graph = wp.capture_load(str(tmp_path / "g"), device=DEV)
    wp.capture_launch(graph)
    out = wp.empty(N, dtype=wp.float32, device="cpu")
    graph.get_param("y", out)
    assert np.array_equal(np.load(tmp_path / "y.npy"), out.numpy())


def test_source_fallback_compiles_where_the_saved_code_cannot_run(tmp_path):
    """Saved with source_fallback=True and marked as built for a GPU this one is not: the .cu is compiled here."""
    needs_cuda_python()
    from apic.format import writer

    state = make_state()
    wp.capture_save(capture(state), str(tmp_path / "g"), inputs={"x": state["x"]},
                    outputs={"y": state["y"], "v": state["v"]}, source_fallback=True)
    path = tmp_path / "g.wrp"
    data = path.read_bytes()
    doc = msgpack.unpackb(data[56:], raw=False)
    arch = wp.get_device(DEV).arch
    assert all(module["source"]["file"].endswith(".cu") for module in doc["modules"])
    for module in doc["modules"]:
        module["arch"] = arch + 1 if module["file"].endswith(".cubin") else arch + 10
    path.write_bytes(writer.encode(doc))
    graph = wp.capture_load(str(tmp_path / "g"), device=DEV)
    assert [m.file for m in graph.saved.modules] != [m["file"] for m in doc["modules"]]  # compiled here
    _replays_as_eager(graph)


def test_saved_for_another_architecture_is_refused(tmp_path):
    needs_cuda_python()
    from apic.format import writer

    _saved(tmp_path)
    path = tmp_path / "g.wrp"
    data = path.read_bytes()
    doc = msgpack.unpackb(data[56:], raw=False)
    arch = wp.get_device(DEV).arch
    for module in doc["modules"]:
        module["arch"] = arch + 1 if module["file"].endswith(".cubin") else arch + 10
    path.write_bytes(writer.encode(doc))
    with pytest.raises(apic.IncompatibleGraphError, match=f"sm_{arch}"):
        wp.capture_load(str(tmp_path / "g"), device=DEV)


def test_loaded_graph_saves_again(tmp_path):
    needs_cuda_python()
    _saved(tmp_path)
    graph = wp.capture_load(str(tmp_path / "g"), device=DEV)
    wp.capture_launch(graph)
    wp.capture_save(graph, str(tmp_path / "again"))
    again = wp.capture_load(str(tmp_path / "again"), device=DEV)
    assert set(again.params) == {"x", "y", "v"}


def test_unrecordable_work_is_refused():
    src = wp.zeros(8, dtype=wp.float32, device="cpu")
    dst = wp.zeros(8, dtype=wp.float32, device=DEV)
    wp.launch(ck.saxpy, dim=8, inputs=[1.0, dst, dst], device=DEV)
    with pytest.raises(apic.UnsupportedOperationError, match="CUDA"):
        with wp.ScopedCapture(device=DEV, apic=True):
            wp.copy(dst, src)  # host to device: not recorded on CUDA
    from apic.record import cuda

    assert cuda.active() is None


def test_branching_or_nested_graphs_are_refused():
    state = make_state()
    graph = capture(state)
    cond = wp.ones(1, dtype=wp.int32, device=DEV)
    for body in (lambda: wp.capture_launch(graph), lambda: wp.capture_if(cond, on_true=lambda: None)):
        with pytest.raises(apic.UnsupportedOperationError, match="CUDA"):
            with wp.ScopedCapture(device=DEV, apic=True):
                body()
