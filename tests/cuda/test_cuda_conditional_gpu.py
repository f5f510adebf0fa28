"""``wp.capture_if`` / ``wp.capture_while`` in ``apic=True`` CUDA captures on a real GPU (skipped, saying why,
without one, a CUDA 12.4 driver or cuda-python).

The work is ``cuda_conditional_workload.step``: if / else, if, a while whose body changes its own condition,
a while in a while, a while in an if, zero iterations, copies and memsets inside bodies. Every replay must
agree bit for bit with the same steps run eagerly and with Warp's own graph of them: the live ``apic=True``
graph, the loaded graph in both modes (conditional nodes, and conditions read on the host), a fresh process
that never imported the workload, and the loaded graph replayed inside a caller's capture (warp#1827: Warp's
``ScopedCapture``, ``capture_begin(external=True)``, a plain cuda-python stream capture) between a kernel of
the caller's own before and after.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import warp as wp

import cuda_conditional_workload as cc
import cuda_kernels as ck
from apic.record.cuda.conditional_tree import IfNode, WhileNode, conditional_tree, depth_of
from persist_helpers import child_env
from test_cuda_gpu import cu_call, driver, needs_conditional_nodes, needs_cuda_python

pytestmark = pytest.mark.skipif(wp.get_cuda_device_count() == 0, reason="no CUDA device on this machine")
pytestmark = [pytestmark, pytest.mark.once]
DEV = "cuda:0"
STEPS = 4  # replays per check: the if / else takes each side twice


def _same(a: dict, b: dict, what: str) -> None:
    assert a.keys() == b.keys(), what
    for name in a:
        assert np.array_equal(a[name].view(np.uint8), b[name].view(np.uint8)), f"{what}: '{name}' differs"


def _captured(apic_flag: bool):
    """(state, graph): one eager warm-up step (modules load), then a capture of one step."""
    needs_conditional_nodes()
    state = cc.make_state(DEV)
    cc.step(state, DEV)
    with wp.ScopedCapture(device=DEV, apic=apic_flag) as cap:
        cc.step(state, DEV)
    return state, cap.graph


def _eager_after_warmup() -> dict:
    eager = cc.make_state(DEV)
    cc.step(eager, DEV)
    return eager


def _saved(tmp_path) -> str:
    state, graph = _captured(True)
    stem = str(tmp_path / "cond")
    wp.capture_save(graph, stem, inputs={"x": state["x"]}, outputs={k: v for k, v in state.items() if k != "x"})
    return stem


def _outputs(graph) -> dict:
    found = {}
    for name, like in cc.make_state("cpu").items():
        out = wp.empty_like(like)
        graph.get_param(name, out)
        found[name] = out.numpy().copy()
    return found


def test_the_recording_holds_the_conditionals_nested():
    _state, graph = _captured(True)
    tree = conditional_tree(graph.recording.ops)
    nodes = [item for item in tree if isinstance(item, (IfNode, WhileNode))]
    assert [type(n).__name__ for n in nodes] == ["IfNode", "IfNode", "WhileNode", "WhileNode", "IfNode",
                                                 "WhileNode"]
    assert nodes[0].otherwise is not None and nodes[1].otherwise is None
    assert isinstance(nodes[3].body[-1], WhileNode) and isinstance(nodes[4].then[0], WhileNode)
    assert depth_of(tree) == 2


def test_live_apic_graph_replays_as_eager_and_as_warps_own_graph():
    apic_state, apic_graph = _captured(True)
    warp_state, warp_graph = _captured(False)
    eager = _eager_after_warmup()
    for run in range(STEPS):
        wp.capture_launch(apic_graph)
        wp.capture_launch(warp_graph)
        cc.step(eager, DEV)
        expected = cc.snapshot(eager, DEV)
        _same(expected, cc.snapshot(apic_state, DEV), f"apic=True graph, replay {run}")
        _same(expected, cc.snapshot(warp_state, DEV), f"Warp's graph, replay {run}")


@pytest.mark.parametrize("modes", [("graph",) * STEPS, ("launch",) * STEPS, ("graph", "launch") * (STEPS // 2)],
                         ids=["graph", "launch", "alternating"])
def test_loaded_graph_replays_as_eager(tmp_path, modes):
    needs_cuda_python()
    graph = wp.capture_load(_saved(tmp_path), device=DEV)
    eager = _eager_after_warmup()
    for run, mode in enumerate(modes):
        graph.mode = mode
        wp.capture_launch(graph)
        cc.step(eager, DEV)
        graph.synchronize()
        _same(cc.snapshot(eager, DEV), _outputs(graph), f"{mode} replay {run}")


FRESH = """
import sys, numpy as np, warp as wp
import apic
from apic._compat import quiet_warp
quiet_warp()
stem, mode, out, steps = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
assert "cuda_conditional_workload" not in sys.modules
g = wp.capture_load(stem, device="cuda:0")
g.mode = mode
found = {}
for run in range(steps):
    wp.capture_launch(g)
    g.synchronize()
    for name, like in g.params.items():
        host = wp.empty(like["shape"], dtype=getattr(wp, like["dtype"]), device="cpu")
        g.get_param(name, host)
        found[f"{run}/{name}"] = host.numpy()
np.savez(out, **found)
"""


@pytest.mark.parametrize("mode", ["graph", "launch"])
def test_loaded_graph_replays_in_a_fresh_process(tmp_path, mode):
    needs_cuda_python()
    stem = _saved(tmp_path)
    out = str(tmp_path / "fresh.npz")
    subprocess.run([sys.executable, "-c", FRESH, stem, mode, out, str(STEPS)], check=True, env=child_env(),
                   timeout=300)
    found = np.load(out)
    eager = _eager_after_warmup()
    for run in range(STEPS):
        cc.step(eager, DEV)
        expected = cc.snapshot(eager, DEV)
        _same(expected, {n: found[f"{run}/{n}"].reshape(expected[n].shape) for n in expected}, f"fresh {mode} {run}")


# --- warp#1827: a loaded graph with conditional nodes inside the caller's own capture ---------------------------
def _caller_arrays() -> dict:
    rng = np.random.default_rng(11)
    return {"a": wp.array(rng.integers(-4, 4, cc.N).astype(np.float32), device=DEV),
            "b": wp.zeros(cc.N, dtype=wp.float32, device=DEV)}


def _before(c: dict, stream=None) -> None:
    wp.launch(ck.saxpy, dim=cc.N, inputs=[3.0, c["a"], c["b"]], device=DEV, stream=stream)


def _after(c: dict, stream=None) -> None:
    wp.launch(ck.saxpy, dim=cc.N, inputs=[-1.0, c["b"], c["a"]], device=DEV, stream=stream)


def _check_nested(graph, caller: dict, launch_outer) -> None:
    """Replays of the caller's graph: its kernels and the loaded graph's work, each as eager."""
    eager, eager_caller = _eager_after_warmup(), _caller_arrays()
    for run in range(STEPS):
        launch_outer()
        wp.synchronize_device(DEV)
        _before(eager_caller)
        cc.step(eager, DEV)
        _after(eager_caller)
        _same(cc.snapshot(eager, DEV), _outputs(graph), f"loaded graph in the caller's graph, replay {run}")
        _same(cc.snapshot(eager_caller, DEV), cc.snapshot(caller, DEV), f"the caller's kernels, replay {run}")


def _instantiated(cu, cu_graph):
    from apic import _compat

    name, args = _compat.cuda_graph_instantiate_call(cu, cu_graph)
    return cu_call(cu, name, *args)


def test_loaded_graph_with_conditionals_inside_a_scoped_capture(tmp_path):
    needs_cuda_python()
    graph = wp.capture_load(_saved(tmp_path), device=DEV)
    caller = _caller_arrays()
    _before(_caller_arrays())  # loads the module outside the capture
    with wp.ScopedCapture(device=DEV) as outer:
        _before(caller)
        wp.capture_launch(graph)
        _after(caller)
    assert outer.graph._apic_held_graphs == [graph]
    _check_nested(graph, caller, lambda: wp.capture_launch(outer.graph))


@pytest.mark.parametrize("how", ["external", "cuda-python"])
def test_loaded_graph_with_conditionals_inside_a_stream_capture(tmp_path, how):
    """``wp.capture_begin(external=True)`` on a stream cuda-python began capturing, and that capture alone."""
    cu = driver()
    graph = wp.capture_load(_saved(tmp_path), device=DEV)
    caller = _caller_arrays()
    _before(_caller_arrays())
    stream = wp.Stream(DEV)
    handle = cu.CUstream(stream.cuda_stream)
    cu_call(cu, "cuStreamBeginCapture", handle, cu.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
    if how == "external":
        wp.capture_begin(stream=stream, external=True)
    _before(caller, stream)
    wp.capture_launch(graph, stream=stream)
    _after(caller, stream)
    if how == "external":
        warp_graph = wp.capture_end(stream=stream)
        assert warp_graph._apic_held_graphs == [graph]
    exec_ = _instantiated(cu, cu_call(cu, "cuStreamEndCapture", handle))
    _check_nested(graph, caller, lambda: cu_call(cu, "cuGraphLaunch", exec_, handle))
