"""CUDA capture, save, load and replay on a real GPU (skipped, saying why, on a machine without one).

The oracle is the same as on the CPU: the same work (``cuda_workload.step``) runs eagerly and
captured-then-replayed, and every array must agree bit for bit: through Warp's own CUDA graph (a live
``apic=True`` capture), through the cuda-python graph of a loaded file and op by op with ``cuLaunchKernel``
(in this process and in a fresh one), after the saved CUBIN was refused and the kept source compiled here
with NVRTC, inside a caller's own capture (Warp's, an external one, a plain cuda-python stream capture,
the bodies of Warp's conditional nodes). What an ``apic=True`` CUDA capture does not record (handle updates,
named scalar parameters, host copies, graphs launched inside) is refused with an apic error that says why.

Every kernel is in one Warp module (``cuda_kernels``), which the GPU compiles once.
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys

import numpy as np
import pytest
import warp as wp

import apic
import cuda_kernels as ck
import cuda_workload as cw
from apic.cuda_graph import CapturedCudaGraph, CudaGraph
from apic.errors import BindingError, CaptureError
from apic.record.cuda import recorder as cuda_record
from apic.record import ops as rec
from persist_helpers import child_env, rewrite_wrp, wrp_body

NO_DEVICE = "no CUDA device on this machine"
pytestmark = pytest.mark.skipif(wp.get_cuda_device_count() == 0, reason=NO_DEVICE)
pytestmark = [pytestmark, pytest.mark.warp_version]
DEV = "cuda:0"
N = cw.N
ALTERNATING = ("graph", "launch", "graph")  # both replay paths on one loaded graph, each after the other


# --- helpers -----------------------------------------------------------------------------------------------
def needs_cuda_python() -> None:
    """Skip, saying why, where a saved CUDA graph cannot be replayed (no cuda-python or driver)."""
    from apic.replay.cuda import loaded_graph as cuda_replay

    reason = cuda_replay.unavailable_reason()
    if reason:
        pytest.skip(f"cannot replay a saved CUDA graph here: {reason}")


def needs_conditional_nodes() -> None:
    """Skip, saying why, where Warp cannot build conditional graph nodes (CUDA 12.4+ driver and toolkit)."""
    if not wp.is_conditional_graph_supported():
        from apic import _compat

        rt = _compat.runtime()
        pytest.skip(f"conditional graph nodes need a CUDA 12.4+ driver and toolkit (driver {rt.driver_version}, "
                    f"Warp's toolkit {rt.toolkit_version})")


def driver():
    """cuda-python's driver bindings (the tests that capture with them alone)."""
    needs_cuda_python()
    from apic import _compat

    return _compat.cuda_driver()


def cu_call(cu, name: str, *args):
    """Call the driver, failing the test with the error's name on anything but success."""
    result = getattr(cu, name)(*args)
    err, values = (result[0], result[1:]) if isinstance(result, tuple) else (result, ())
    assert int(err) == 0, f"{name}: {err}"
    return values[0] if len(values) == 1 else values


def capture(state: dict):
    """An ``apic=True`` capture of one step (after one eager step: modules load outside the capture)."""
    cw.step(state, DEV)
    with wp.ScopedCapture(device=DEV, apic=True) as cap:
        cw.step(state, DEV)
    return cap.graph


def save(tmp_path, name: str = "g", **options) -> str:
    """Capture a step and save it, every array of the state bound by name (``x`` as the input)."""
    state = cw.make_state(DEV)
    stem = str(tmp_path / name)
    outputs = {k: v for k, v in state.items() if k != "x"}
    wp.capture_save(capture(state), stem, inputs={"x": state["x"]}, outputs=outputs, **options)
    return stem


def outputs_of(graph) -> dict:
    """Every bound array of a loaded graph of ``save``'s, on the host."""
    found = {}
    for name, like in cw.make_state("cpu").items():
        out = wp.empty_like(like)
        graph.get_param(name, out)
        found[name] = out.numpy().copy()
    return found


def replays_as_eager(graph, modes=ALTERNATING, eager=None) -> dict:
    """A loaded graph of ``save``'s replays (in ``modes``, one replay each) as ``step`` runs eagerly, bit for bit.

    The file's contents are the state after the warm-up step, so the eager oracle starts from there."""
    if eager is None:
        eager = cw.make_state(DEV)
        cw.step(eager, DEV)
    for run, mode in enumerate(modes):
        graph.mode = mode
        wp.capture_launch(graph)
        cw.step(eager, DEV)
        graph.synchronize()
        cw.same(cw.snapshot(eager, DEV), outputs_of(graph), f"{mode} replay {run}")
    return eager


# --- live capture -------------------------------------------------------------------------------------------
def test_live_capture_replays_through_warps_graph():
    eager, replay = cw.make_state(DEV), cw.make_state(DEV)
    graph = capture(replay)
    assert isinstance(graph, CapturedCudaGraph)
    ops = graph.recording.ops
    kinds = {op.kind for op in ops}
    assert {rec.OpKind.CUDA_LAUNCH, rec.OpKind.MEMCPY, rec.OpKind.MEMSET, rec.OpKind.MEMTILE} <= kinds
    if cw.can_allocate_in_capture(DEV):
        assert rec.OpKind.ALLOC in kinds
    fills = {len(op.value.data) for op in ops if isinstance(op, rec.Memtile)}
    assert {1, 2, 4, 8, 12, 16} <= fills, fills
    kernels = {(k.key, k.adjoint) for k in graph.recording.kernels}
    for kernel in (ck.saxpy, ck.square_sum, ck.dims2, ck.dims3, ck.dims4, ck.structs, ck.indexed):
        assert (kernel.key, False) in kernels, kernel.key
    assert (ck.saxpy.key, True) in kernels
    cw.step(eager, DEV)  # the warm-up before the capture (stream capture itself runs nothing)
    for run in range(3):
        wp.capture_launch(graph)
        cw.step(eager, DEV)
        cw.same(cw.snapshot(eager, DEV), cw.snapshot(replay, DEV), f"Warp graph replay {run}")


def test_capture_without_apic_is_warps_own():
    state = cw.make_state(DEV)
    cw.step(state, DEV)
    with wp.ScopedCapture(device=DEV) as cap:
        cw.step(state, DEV)
    assert not isinstance(cap.graph, CudaGraph)
    wp.capture_launch(cap.graph)


# --- saved, loaded, replayed with cuda-python -------------------------------------------------------------------
@pytest.mark.parametrize("modes", [("graph",) * 3, ("launch",) * 3, ALTERNATING],
                         ids=["graph", "launch", "alternating"])
def test_saved_graph_replays_with_cuda_python(tmp_path, modes):
    needs_cuda_python()
    graph = wp.capture_load(save(tmp_path), device=DEV)
    assert graph.is_loaded and type(graph).__name__ == "LoadedCudaGraph"
    replays_as_eager(graph, modes)
    # replayed as op-table rows calling the driver library by address, not through cuda-python's wrappers
    assert graph._rows is not None


FRESH_PROCESS = """
import sys, numpy as np, warp as wp
import apic
from apic._compat import quiet_warp
quiet_warp()
stem, mode, out, names = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4].split(",")
g = wp.capture_load(stem, device="cuda:0")
g.mode = mode
found = {}
for run in range(3):
    wp.capture_launch(g)
    g.synchronize()
    for name in names:
        like = g.params[name]
        host = wp.empty(like["shape"], dtype=getattr(wp, like["dtype"]), device="cpu")
        g.get_param(name, host)
        found[f"{run}/{name}"] = host.numpy()
np.savez(out, **found)
"""


@pytest.mark.parametrize("mode", ["graph", "launch"])
def test_saved_graph_replays_in_a_fresh_process(tmp_path, mode):
    """Loaded by a process that never captured (no Warp module of the graph's loaded there), replayed 3 times."""
    needs_cuda_python()
    stem = save(tmp_path)
    names = list(cw.make_state("cpu"))
    out = str(tmp_path / "replays.npz")
    subprocess.run([sys.executable, "-c", FRESH_PROCESS, stem, mode, out, ",".join(names)], check=True,
                   env=child_env(), timeout=300)
    found = np.load(out)
    eager = cw.make_state(DEV)
    cw.step(eager, DEV)
    for run in range(3):
        cw.step(eager, DEV)
        expected = cw.snapshot(eager, DEV)
        cw.same(expected, {n: found[f"{run}/{n}"].reshape(expected[n].shape) for n in names}, f"fresh {mode} {run}")


def test_set_and_get_param(tmp_path):
    needs_cuda_python()
    graph = wp.capture_load(save(tmp_path), device=DEV)
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
    with pytest.raises(BindingError):
        graph.set_param("x", wp.zeros(N, dtype=wp.float64, device="cpu"))
    with pytest.raises(BindingError):
        graph.get_param("nope", host)


@pytest.mark.parametrize("where", ["cpu", DEV])
def test_set_param_changes_what_the_next_replays_compute(tmp_path, where):
    """A new input (from the host or the device) is what the next replays read, in both modes."""
    needs_cuda_python()
    graph = wp.capture_load(save(tmp_path), device=DEV)
    x = (np.arange(N, dtype=np.float32) % 13) - 6
    graph.set_param("x", wp.array(x, dtype=wp.float32, device=where))
    eager = cw.make_state(DEV)
    cw.step(eager, DEV)
    wp.copy(eager["x"], wp.array(x, dtype=wp.float32, device=DEV))
    replays_as_eager(graph, ALTERNATING, eager)


def test_named_scalar_parameters_are_refused_in_cuda_captures(tmp_path):
    """apic.param values are recorded by CPU captures only: a CUDA capture refuses them, saying so."""
    needs_cuda_python()
    state = cw.make_state(DEV)
    a = apic.param("a", wp.float32, 0.5)
    wp.launch(ck.saxpy, dim=N, inputs=[a, state["x"], state["y"]], device=DEV)  # eagerly: its value
    for apic_capture in (True, False):
        with pytest.raises(apic.UnsupportedOperationError, match="named parameters are recorded by CPU captures only"):
            with wp.ScopedCapture(device=DEV, apic=apic_capture):
                wp.launch(ck.saxpy, dim=N, inputs=[a, state["x"], state["y"]], device=DEV)
    assert cuda_record.active() is None
    graph = wp.capture_load(save(tmp_path), device=DEV)
    with pytest.raises(BindingError, match="no parameter named 'dt'"):
        graph.set_param("dt", 0.1)


# --- source fallback: the saved binary is refused, the kept .cu compiled here with NVRTC ----------------------
def _refuse_the_binary(stem: str, how: str) -> None:
    """Make the saved module unusable here: built for another GPU, rejected by the driver, or missing."""
    body = wrp_body(stem)
    modules_dir = stem + "_modules"
    arch = wp.get_device(DEV).arch
    for module in body["modules"]:
        path = os.path.join(modules_dir, module["file"])
        if how == "arch":
            module["arch"] = arch + 1 if module["file"].endswith(".cubin") else arch + 10
        elif how == "rejected":  # its size and hash match, so only the driver can refuse it
            import hashlib

            junk = b"\x7fELF" + b"\xa5" * 4092
            with open(path, "wb") as f:
                f.write(junk)
            module["size"], module["sha256"] = len(junk), hashlib.sha256(junk).hexdigest()
        else:
            os.remove(path)
    rewrite_wrp(stem, body)


@pytest.mark.parametrize("how", ["arch", "rejected", "missing"])
def test_source_fallback_compiles_where_the_saved_code_cannot_run(tmp_path, how):
    """Saved with source_fallback=True: the kept .cu is compiled for this GPU, and replays as eager in both modes."""
    needs_cuda_python()
    stem = save(tmp_path, source_fallback=True)
    body = wrp_body(stem)
    assert all(module["source"]["file"].endswith(".cu") for module in body["modules"])
    _refuse_the_binary(stem, how)
    graph = wp.capture_load(stem, device=DEV)
    assert [m.file for m in graph.saved.modules] != [m["file"] for m in body["modules"]]  # compiled here
    replays_as_eager(graph)


def test_saved_for_another_architecture_is_refused(tmp_path):
    needs_cuda_python()
    stem = save(tmp_path)
    _refuse_the_binary(stem, "arch")
    with pytest.raises(apic.IncompatibleGraphError, match=f"sm_{wp.get_device(DEV).arch}"):
        wp.capture_load(stem, device=DEV)


def test_loaded_graph_saves_again(tmp_path):
    needs_cuda_python()
    graph = wp.capture_load(save(tmp_path), device=DEV)
    wp.capture_launch(graph)
    wp.capture_save(graph, str(tmp_path / "again"))
    again = wp.capture_load(str(tmp_path / "again"), device=DEV)
    assert set(again.params) == set(cw.make_state("cpu"))
    cw.same(outputs_of(graph), outputs_of(again), "saved again")


# --- what an apic=True CUDA capture refuses ----------------------------------------------------------------------
def test_unrecordable_work_is_refused():
    src = wp.zeros(8, dtype=wp.float32, device="cpu")
    dst = wp.zeros(8, dtype=wp.float32, device=DEV)
    wp.launch(ck.saxpy, dim=8, inputs=[1.0, dst, dst], device=DEV)
    with pytest.raises(apic.UnsupportedOperationError, match="CUDA"):
        with wp.ScopedCapture(device=DEV, apic=True):
            wp.copy(dst, src)  # host to device: not recorded on CUDA
    assert cuda_record.active() is None


def test_nested_graphs_are_refused(tmp_path):
    """Launching a graph, or a graph as a conditional's body: its ops would not pass apic's recorder
    (wp.capture_if / capture_while with callables are recorded: tests/test_cuda_conditional_gpu.py)."""
    needs_cuda_python()
    live = capture(cw.make_state(DEV))
    loaded = wp.capture_load(save(tmp_path), device=DEV)
    cond = wp.ones(1, dtype=wp.int32, device=DEV)
    bodies = {
        "a captured graph": lambda: wp.capture_launch(live),
        "a loaded graph": lambda: wp.capture_launch(loaded),
        "a captured graph as an if body": lambda: wp.capture_if(cond, on_true=live),
        "a loaded graph as a while body": lambda: wp.capture_while(cond, loaded),
        "a loaded graph launched in a body": lambda: wp.capture_while(cond, lambda: wp.capture_launch(loaded)),
    }
    for what, body in bodies.items():
        with pytest.raises(apic.UnsupportedOperationError, match="CUDA"):
            with wp.ScopedCapture(device=DEV, apic=True):
                body()
        assert cuda_record.active() is None, what


# --- Mesh, Bvh and HashGrid handles -------------------------------------------------------------------------------
def _handles() -> dict:
    """A Mesh, a Bvh and a HashGrid built on the device (outside any capture), and query points."""
    rng = np.random.default_rng(2)
    pts = (rng.random((64, 3)) * 4.0).astype(np.float32)
    points = wp.array(pts, dtype=wp.vec3, device=DEV)
    mesh = wp.Mesh(points=wp.array(pts[:48], dtype=wp.vec3, device=DEV),
                   indices=wp.array(np.arange(48, dtype=np.int32), dtype=wp.int32, device=DEV))
    bvh = wp.Bvh(wp.array(pts - 0.25, dtype=wp.vec3, device=DEV), wp.array(pts + 0.25, dtype=wp.vec3, device=DEV))
    grid = wp.HashGrid(8, 8, 8, device=DEV)
    grid.build(points, 0.5)
    return {"mesh": mesh, "bvh": bvh, "grid": grid, "points": points}


def _query(h: dict, dist, counts) -> None:
    wp.launch(ck.handles, dim=64, inputs=[h["mesh"].id, h["bvh"].id, h["grid"].id, h["points"]],
              outputs=[dist, counts], device=DEV)


def test_handle_queries_replay_live_and_are_refused_at_save(tmp_path):
    """Ids passed as uint64 replay live bit for bit; saving refuses them (they would dangle after a load)."""
    h = _handles()
    eager = (wp.zeros(64, dtype=wp.float32, device=DEV), wp.zeros(64, dtype=wp.int32, device=DEV))
    replay = (wp.zeros(64, dtype=wp.float32, device=DEV), wp.zeros(64, dtype=wp.int32, device=DEV))
    _query(h, *eager)
    with wp.ScopedCapture(device=DEV, apic=True) as cap:
        _query(h, *replay)
    wp.capture_launch(cap.graph)
    wp.synchronize_device(DEV)
    for a, b in zip(eager, replay):
        assert np.array_equal(a.numpy().view(np.uint8), b.numpy().view(np.uint8))
    assert (eager[1].numpy() >= 101).all()  # every point finds its own box and itself
    with pytest.raises(apic.UnsupportedOperationError, match="'mesh' of a launch of .* holds the id of a wp.Mesh"):
        wp.capture_save(cap.graph, str(tmp_path / "g"))
    assert not os.listdir(tmp_path)


@pytest.mark.parametrize("update", ["mesh.refit", "bvh.refit", "grid.build"])
def test_handle_updates_are_refused_during_an_apic_capture(update):
    h = _handles()
    run = {"mesh.refit": lambda: h["mesh"].refit(), "bvh.refit": lambda: h["bvh"].refit(),
           "grid.build": lambda: h["grid"].build(h["points"], 0.5)}[update]
    with pytest.raises(apic.UnsupportedOperationError, match="CUDA"):
        with wp.ScopedCapture(device=DEV, apic=True):
            run()
    assert cuda_record.active() is None
    run()  # and it still works outside the capture


# --- a loaded graph inside the caller's own capture ----------------------------------------------------------------
@pytest.mark.parametrize("mode", ["graph", "launch"])
def test_loaded_graph_replays_inside_a_warp_capture(tmp_path, mode):
    """Its ops become nodes of the caller's Warp graph, which keeps the loaded graph alive."""
    needs_cuda_python()
    graph = wp.capture_load(save(tmp_path), device=DEV)
    graph.mode = mode
    with wp.ScopedCapture(device=DEV) as outer:
        wp.capture_launch(graph)
        wp.capture_launch(graph)
    held = outer.graph._apic_held_graphs
    assert held == [graph]
    del graph
    gc.collect()
    eager = cw.make_state(DEV)
    cw.step(eager, DEV)
    for run in range(2):
        wp.capture_launch(outer.graph)
        cw.step(eager, DEV)
        cw.step(eager, DEV)
        wp.synchronize_device(DEV)
        cw.same(cw.snapshot(eager, DEV), outputs_of(held[0]), f"outer replay {run}")


def test_a_loaded_graph_freed_inside_a_capture_leaves_that_capture_valid(tmp_path):
    """Found on an H100: a loaded graph collected while the caller captured (a garbage collection can run at any
    allocation) synchronized the context in its finalizer, which invalidated the caller's capture (CUDA error 901
    at the next launch). Its driver objects now wait for the capture's end."""
    needs_cuda_python()
    loaded = wp.capture_load(save(tmp_path), device=DEV)
    resources = loaded._resources
    x = wp.array(np.arange(N, dtype=np.float32), device=DEV)
    y, y_eager = wp.zeros(N, dtype=wp.float32, device=DEV), wp.zeros(N, dtype=wp.float32, device=DEV)
    with wp.ScopedCapture(device=DEV) as cap:
        wp.launch(ck.saxpy, dim=N, inputs=[2.0, x, y], device=DEV)
        del loaded
        gc.collect()  # the loaded graph's finalizer runs here, inside the capture
        assert resources.context is not None, "released inside the capture"
        wp.launch(ck.saxpy, dim=N, inputs=[0.5, x, y], device=DEV)
    assert resources.context is None, "not released when the capture ended"
    for _ in range(2):
        wp.capture_launch(cap.graph)
        wp.launch(ck.saxpy, dim=N, inputs=[2.0, x, y_eager], device=DEV)
        wp.launch(ck.saxpy, dim=N, inputs=[0.5, x, y_eager], device=DEV)
    assert np.array_equal(y.numpy(), y_eager.numpy())


def test_loaded_graph_replays_inside_an_external_capture(tmp_path):
    """wp.capture_begin(external=True) on a stream cuda-python began capturing."""
    cu = driver()
    graph = wp.capture_load(save(tmp_path), device=DEV)
    stream = wp.Stream(DEV)
    handle = cu.CUstream(stream.cuda_stream)
    cu_call(cu, "cuStreamBeginCapture", handle, cu.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
    wp.capture_begin(stream=stream, external=True)
    wp.capture_launch(graph, stream=stream)
    warp_graph = wp.capture_end(stream=stream)
    assert warp_graph._apic_held_graphs == [graph]
    # Warp's graph owns the CUDA graph of an external capture too (it destroys it when collected)
    _launch_captured(cu, cu_call(cu, "cuStreamEndCapture", handle), handle, owned=False)
    eager = cw.make_state(DEV)
    cw.step(eager, DEV)
    cw.step(eager, DEV)
    cw.same(cw.snapshot(eager, DEV), outputs_of(graph), "external capture")
    del warp_graph


def test_loaded_graph_replays_inside_a_plain_stream_capture(tmp_path):
    """A capture Warp knows nothing of: the stream given as a raw handle, then as a wp.Stream."""
    cu = driver()
    graph = wp.capture_load(save(tmp_path), device=DEV)
    stream = wp.Stream(DEV)
    handle = cu.CUstream(stream.cuda_stream)
    cu_call(cu, "cuStreamBeginCapture", handle, cu.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
    graph.launch(stream=stream.cuda_stream, mode="graph")
    wp.capture_launch(graph, stream=stream)
    _launch_captured(cu, cu_call(cu, "cuStreamEndCapture", handle), handle)
    eager = cw.make_state(DEV)
    cw.step(eager, DEV)
    cw.step(eager, DEV)
    cw.step(eager, DEV)
    cw.same(cw.snapshot(eager, DEV), outputs_of(graph), "plain stream capture")


def _launch_captured(cu, cu_graph, handle, owned: bool = True) -> None:
    """Instantiate a captured CUDA graph, launch it once on ``handle`` and wait for it; destroy it if ``owned``."""
    from apic import _compat

    name, args = _compat.cuda_graph_instantiate_call(cu, cu_graph)
    exec_ = cu_call(cu, name, *args)
    try:
        cu_call(cu, "cuGraphLaunch", exec_, handle)
        cu_call(cu, "cuStreamSynchronize", handle)
    finally:
        cu_call(cu, "cuGraphExecDestroy", exec_)
        if owned:
            cu_call(cu, "cuGraphDestroy", cu_graph)


def test_calls_that_wait_for_the_device_are_refused_inside_a_capture(tmp_path):
    needs_cuda_python()
    graph = wp.capture_load(save(tmp_path), device=DEV)
    x = wp.zeros(N, dtype=wp.float32, device=DEV)
    for call in (lambda: graph.set_param("x", x), lambda: graph.get_param("x", x), graph.synchronize):
        with pytest.raises(CaptureError, match="while a graph capture runs on cuda:0"):
            with wp.ScopedCapture(device=DEV):
                call()
    replays_as_eager(graph)  # nothing was left half done


# --- Warp's conditional nodes, with apic graphs as bodies ------------------------------------------------------------
def _loop_graph(tmp_path):
    """A loaded graph of one loop iteration: ``countdown`` (the condition) and a ``saxpy``, all four arrays bound."""
    arrays = {"counter": wp.zeros(1, dtype=wp.int32, device=DEV), "cond": wp.zeros(1, dtype=wp.int32, device=DEV),
              "x": wp.zeros(N, dtype=wp.float32, device=DEV), "y": wp.zeros(N, dtype=wp.float32, device=DEV)}
    _iteration(arrays)  # loads the module outside the capture
    with wp.ScopedCapture(device=DEV, apic=True) as cap:
        _iteration(arrays)
    wp.capture_save(cap.graph, str(tmp_path / "loop"), inputs=arrays)
    return cap.graph, wp.capture_load(str(tmp_path / "loop"), device=DEV)


def _iteration(a: dict) -> None:
    wp.launch(ck.countdown, dim=1, inputs=[a["counter"], a["cond"]], device=DEV)
    wp.launch(ck.saxpy, dim=N, inputs=[0.5, a["x"], a["y"]], device=DEV)


def _loop_start(count: int) -> dict:
    """The loop's arrays before it runs: ``count`` iterations to go, the condition set."""
    rng = np.random.default_rng(3)
    return {"counter": np.array([count], dtype=np.int32), "cond": np.array([1], dtype=np.int32),
            "x": rng.integers(-8, 8, N).astype(np.float32), "y": rng.integers(-8, 8, N).astype(np.float32)}


def _eager_loop(start: dict, iterations: int) -> np.ndarray:
    """``y`` after ``iterations`` eager iterations from ``start``."""
    a = {k: wp.array(v, device=DEV) for k, v in start.items()}
    for _ in range(iterations):
        _iteration(a)
    return a["y"].numpy()


def _set_all(graph, start: dict) -> None:
    for name, value in start.items():
        graph.set_param(name, wp.array(value, device="cpu"))


def _y(graph) -> np.ndarray:
    y = wp.empty(N, dtype=wp.float32, device="cpu")
    graph.get_param("y", y)
    return y.numpy()


@pytest.mark.parametrize("taken", [True, False])
def test_loaded_graph_is_a_capture_if_body(tmp_path, taken):
    needs_cuda_python()
    needs_conditional_nodes()
    _live, loaded = _loop_graph(tmp_path)
    start = _loop_start(5)
    cond = wp.array([1 if taken else 0], dtype=wp.int32, device=DEV)
    with wp.ScopedCapture(device=DEV) as outer:
        wp.capture_if(cond, on_true=loaded)
    for run in range(2):
        _set_all(loaded, start)
        wp.capture_launch(outer.graph)
        wp.synchronize_device(DEV)
        assert np.array_equal(_y(loaded), _eager_loop(start, 1 if taken else 0)), run


def test_loaded_graph_is_a_capture_while_body(tmp_path):
    """The loop's condition lives in the loaded graph's memory, and the graph updates it."""
    needs_cuda_python()
    needs_conditional_nodes()
    _live, loaded = _loop_graph(tmp_path)
    cond = wp.array(ptr=loaded.get_param_ptr("cond"), dtype=wp.int32, shape=(1,), device=DEV)
    with wp.ScopedCapture(device=DEV) as outer:
        wp.capture_while(cond, loaded)
    for count in (3, 1, 4):
        start = _loop_start(count)
        _set_all(loaded, start)
        wp.capture_launch(outer.graph)
        wp.synchronize_device(DEV)
        assert np.array_equal(_y(loaded), _eager_loop(start, count)), count


def test_captured_graph_is_a_capture_if_body():
    """A live apic=True graph is a body as Warp's own graph is (a child graph node)."""
    needs_conditional_nodes()
    start = _loop_start(5)
    a = {k: wp.array(v, device=DEV) for k, v in start.items()}
    _iteration(a)  # loads the module outside the capture: one iteration, eagerly
    with wp.ScopedCapture(device=DEV, apic=True) as cap:
        _iteration(a)
    cond = wp.ones(1, dtype=wp.int32, device=DEV)
    with wp.ScopedCapture(device=DEV) as outer:
        wp.capture_if(cond, on_true=cap.graph)
    wp.capture_launch(outer.graph)
    wp.synchronize_device(DEV)
    assert np.array_equal(a["y"].numpy(), _eager_loop(start, 2))
