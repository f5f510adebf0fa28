"""mujoco-warp on a CUDA GPU under apic (skipped, saying why, without one or without mujoco-warp).

A small scene (``test_mujoco_warp.SCENE``, two worlds, contacts) on ``cuda:0``, with both settings of
mujoco-warp's ``opt.graph_conditional``: ``True`` (its GPU default: the solver exits early through a
``capture_while``, which apic records and rebuilds as a CUDA conditional node) and ``False`` (fixed solver
iterations, no conditional nodes). An ``apic=True`` capture records alongside Warp's own CUDA graph; the step
is saved and replayed in a process that cannot import mujoco-warp, and (warp#1827) the loaded step is
replayed inside a caller's own capture between kernels of the caller's.

The oracle is Warp's own graph replay of the same step. A GPU's float atomics need not add in the same order
twice, so Warp's graph is replayed twice from the same start first: every array those two runs agree on must
agree bit for bit with apic's replays; the few they do not agree on (if any) are named in the output and must
agree to a tolerance.
"""

from __future__ import annotations

import numpy as np
import pytest
import warp as wp

mujoco = pytest.importorskip("mujoco", reason="mujoco is not installed (the client tier: pip install mujoco-warp)")
mjw = pytest.importorskip("mujoco_warp",
                          reason="mujoco-warp is not installed (the client tier: pip install mujoco-warp)")

from client_helpers import raw, replay_without, warp_arrays, zeroed_where_uninitialised  # noqa: E402
from test_cuda_gpu import needs_cuda_python  # noqa: E402
from test_mujoco_warp import SCENE  # noqa: E402

pytestmark = pytest.mark.skipif(wp.get_cuda_device_count() == 0, reason="no CUDA device on this machine")
DEV = "cuda:0"
STEPS = 6
OUTPUTS = ("qpos", "qvel", "xpos", "qacc")


def _model(conditional: bool):
    mjm = mujoco.MjModel.from_xml_string(SCENE)
    mjm.opt.iterations, mjm.opt.ls_iterations = 8, 8  # a short unrolled solver: a graph of hundreds of nodes
    m = mjw.put_model(mjm)
    m.opt.graph_conditional = conditional
    return mjm, m


@pytest.fixture(scope="module", params=[True, False], ids=["graph_conditional", "unrolled"])
def scene(request):
    """The model (``graph_conditional`` as the parameter says), ``fresh()`` Data (equal every time), every module
    loaded on the GPU."""
    with wp.ScopedDevice(DEV):
        mjm, m = _model(conditional=request.param)
        mjd = mujoco.MjData(mjm)
        mjd.qvel[:3] = (0.4, -0.2, 0.0)

        def made():
            return mjw.put_data(mjm, mjd, nworld=2, nconmax=32, njmax=64)

        fresh = zeroed_where_uninitialised(made)  # put_data leaves a few arrays as wp.empty
        mjw.step(m, fresh())  # loads every module outside a capture (NVRTC compiles them the first time)
        wp.synchronize_device(DEV)
        yield m, fresh


def _warp_graph_run(m, data) -> dict:
    """``STEPS`` replays of Warp's own CUDA graph of one step (apic not recording), every array on the host."""
    with wp.ScopedDevice(DEV):
        with wp.ScopedCapture(device=DEV) as cap:
            mjw.step(m, data)
        for _ in range(STEPS):
            wp.capture_launch(cap.graph)
        wp.synchronize_device(DEV)
    return {name: raw(arr) for name, arr in warp_arrays(data).items()}


def _compare(reference: dict, noisy: set, found: dict, what: str) -> None:
    """``found`` equals ``reference`` bit for bit on every array outside ``noisy``; within it, to a tolerance."""
    different = sorted(name for name in found if not np.array_equal(found[name], reference[name]))
    beyond = [name for name in different if name not in noisy]
    assert not beyond, f"{what}: {len(beyond)} arrays differ from Warp's graph replay: {beyond[:12]}"
    print(f"{what}: {len(found)} arrays, {len(found) - len(different)} bit for bit; {different} differ as Warp's "
          "own two runs do")


@pytest.fixture(scope="module")
def warp_reference(scene):
    """Warp's graph replayed twice from the same start: the arrays of the first, and the names that differ."""
    m, fresh = scene
    first, second = _warp_graph_run(m, fresh()), _warp_graph_run(m, fresh())
    noisy = {name for name in first if not np.array_equal(first[name], second[name])}
    print(f"Warp's own graph, two runs: {len(first)} arrays, differing in {sorted(noisy)}")
    return first, noisy


def test_live_apic_capture_replays_as_warps_graph(scene, warp_reference):
    m, fresh = scene
    reference, noisy = warp_reference
    data = fresh()
    with wp.ScopedDevice(DEV):
        with wp.ScopedCapture(device=DEV, apic=True) as cap:
            mjw.step(m, data)
        for _ in range(STEPS):
            wp.capture_launch(cap.graph)
        wp.synchronize_device(DEV)
    _compare(reference, noisy, {name: raw(arr) for name, arr in warp_arrays(data).items()}, "live apic=True capture")
    assert not np.array_equal(reference["qpos"], raw(fresh().qpos)), "the scene did not move"


@pytest.mark.parametrize("mode", ["graph", "launch"])
def test_saved_step_replays_in_a_process_without_mujoco(scene, warp_reference, tmp_path, mode):
    """Saved, then loaded and replayed ``STEPS`` times through cuda-python by a process that cannot import
    mujoco or mujoco_warp, with ``qpos``/``qvel`` fed through bindings."""
    needs_cuda_python()
    m, fresh = scene
    reference, noisy = warp_reference
    data = fresh()
    start = {name: getattr(data, name).numpy().copy() for name in ("qpos", "qvel")}
    with wp.ScopedDevice(DEV):
        with wp.ScopedCapture(device=DEV, apic=True) as cap:
            mjw.step(m, data)
    wp.capture_save(cap.graph, str(tmp_path / "step"), inputs={n: getattr(data, n) for n in start},
                    outputs={f"{n}_out": getattr(data, n) for n in OUTPUTS})
    for name, values in start.items():
        np.save(tmp_path / f"{name}.npy", values)
    got = {name: str(tmp_path / f"{name}_got.npy") for name in OUTPUTS}
    replay_without(("mujoco", "mujoco_warp"), str(tmp_path / "step"), STEPS,
                   {name: str(tmp_path / f"{name}.npy") for name in start},
                   {f"{name}_out": file for name, file in got.items()}, tmp_path, device=DEV, mode=mode)
    found = {name: np.load(file).view(np.uint8).reshape(-1) for name, file in got.items()}
    _compare({n: reference[n] for n in OUTPUTS}, noisy, found, f"saved, fresh process, {mode}")
    for name in set(OUTPUTS) & noisy:
        assert np.allclose(found[name].view(np.float32), reference[name].view(np.float32), rtol=1e-4, atol=1e-5), name


def test_the_conditional_step_records_its_while(scene):
    """With graph_conditional the recording holds the solver's capture_while as a conditional node (at any
    depth); without, none."""
    from apic.record.cuda.conditional_tree import conditional_tree, depth_of

    m, fresh = scene
    with wp.ScopedDevice(DEV):
        data = fresh()  # put_data copies from the host: outside the capture, as a user does
        with wp.ScopedCapture(device=DEV, apic=True) as cap:
            mjw.step(m, data)
    depth = depth_of(conditional_tree(cap.graph.recording.ops))
    assert (depth > 0) == bool(m.opt.graph_conditional), depth


@wp.kernel
def _caller_kernel(a: wp.array(dtype=wp.float32), b: wp.array(dtype=wp.float32), scale: wp.float32):
    i = wp.tid()
    b[i] = b[i] + scale * a[i]


def test_loaded_step_inside_a_callers_capture(scene, warp_reference, tmp_path):
    """warp#1827: the loaded step (conditional nodes with the GPU default) replayed while the caller captures
    its own graph, between a kernel of the caller's before and after; the caller's graph replays it ``STEPS``
    times as Warp's own graph of the step, and the caller's kernels as they run eagerly."""
    needs_cuda_python()
    m, fresh = scene
    reference, noisy = warp_reference
    data = fresh()
    with wp.ScopedDevice(DEV):
        with wp.ScopedCapture(device=DEV, apic=True) as cap:
            mjw.step(m, data)
        wp.capture_save(cap.graph, str(tmp_path / "step"), outputs={n: getattr(data, n) for n in OUTPUTS})
        loaded = wp.capture_load(str(tmp_path / "step"), device=DEV)
        a = wp.array(np.arange(64, dtype=np.float32), device=DEV)
        b, eager_b = wp.zeros(64, dtype=wp.float32, device=DEV), wp.zeros(64, dtype=wp.float32, device=DEV)
        wp.launch(_caller_kernel, dim=64, inputs=[a, eager_b, 0.0])  # loads the module outside the capture
        with wp.ScopedCapture(device=DEV) as outer:
            wp.launch(_caller_kernel, dim=64, inputs=[a, b, 2.0])
            wp.capture_launch(loaded)
            wp.launch(_caller_kernel, dim=64, inputs=[a, b, 0.5])
        for _ in range(STEPS):
            wp.capture_launch(outer.graph)
            wp.launch(_caller_kernel, dim=64, inputs=[a, eager_b, 2.0])
            wp.launch(_caller_kernel, dim=64, inputs=[a, eager_b, 0.5])
        wp.synchronize_device(DEV)
    found = {}
    for name in OUTPUTS:
        out = wp.empty_like(getattr(data, name), device="cpu")
        loaded.get_param(name, out)
        found[name] = out.numpy().view(np.uint8).reshape(-1)
    _compare({n: reference[n] for n in OUTPUTS}, noisy, found, "loaded step inside a caller's capture")
    for name in set(OUTPUTS) & noisy:
        assert np.allclose(found[name].view(np.float32), reference[name].view(np.float32), rtol=1e-4, atol=1e-5), name
    assert np.array_equal(b.numpy(), eager_b.numpy())
