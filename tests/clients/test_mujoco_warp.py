"""mujoco-warp under apic on the CPU: a small scene stepped eagerly and replayed from a capture made
the way mujoco-warp captures (``wp.ScopedCapture()`` around ``mjw.step``, as its viewer and
testspeed do; the solver's ``wp.capture_while`` loop and the collision driver's ``wp.capture_if``
inside), compared bit for bit over every array of ``Data``; then saved and replayed in a process
that cannot import mujoco or mujoco_warp.
"""

from __future__ import annotations

import numpy as np
import pytest
import warp as wp

mujoco = pytest.importorskip("mujoco", reason="mujoco is not installed (the client tier: pip install mujoco-warp)")
mjw = pytest.importorskip("mujoco_warp",
                          reason="mujoco-warp is not installed (the client tier: pip install mujoco-warp)")

from client_helpers import (  # noqa: E402
    assert_same_arrays, control_flow_ops, raw, replay_without, warp_arrays, zeroed_where_uninitialised)

# A free box and a capsule on a hinge over a plane: contacts, a constraint solve, two worlds.
SCENE = """
<mujoco>
  <option timestep="0.005"/>
  <worldbody>
    <geom type="plane" size="2 2 0.1"/>
    <body pos="0 0 0.099">
      <freejoint/>
      <geom type="box" size="0.1 0.1 0.1" mass="1"/>
    </body>
    <body pos="0.3 0 0.6">
      <joint type="hinge" axis="0 1 0"/>
      <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.05"/>
    </body>
  </worldbody>
</mujoco>
"""
STEPS = 12


@pytest.fixture(scope="module")
def scene():
    mjm = mujoco.MjModel.from_xml_string(SCENE)
    mjd = mujoco.MjData(mjm)
    mjd.qvel[:3] = (0.4, -0.2, 0.0)
    m = mjw.put_model(mjm)

    def made():
        return mjw.put_data(mjm, mjd, nworld=2, nconmax=32, njmax=64)

    # put_data leaves a few arrays as wp.empty (uninitialised memory; entries past the contact count
    # are never written): they differ between two fresh Data objects, so both copies start zeroed.
    fresh = zeroed_where_uninitialised(made)
    assert len(fresh.uninitialised) <= 3, fresh.uninitialised

    mjw.step(m, fresh())  # compile every module first: compilation is not captured
    return m, fresh


def test_step_eager_vs_replay_every_data_array(scene):
    m, fresh = scene
    eager, replayed = fresh(), fresh()
    with wp.ScopedCapture() as capture:  # mujoco-warp's own form (viewer._compile_step, testspeed)
        mjw.step(m, replayed)
    assert control_flow_ops(capture.graph) > 0, "the solver's capture_while was not recorded"
    for step in range(STEPS):
        mjw.step(m, eager)
        wp.capture_launch(capture.graph)
        if step in (0, STEPS - 1):
            count = assert_same_arrays(warp_arrays(eager), warp_arrays(replayed), f"after step {step + 1}")
    assert count > 100
    assert not np.array_equal(raw(eager.qpos), raw(fresh().qpos)), "the scene did not move"
    assert int(eager.nacon.numpy()[0]) > 0, "the scene made no contacts"


def test_step_split_over_threads_every_data_array(scene):
    """Parallel replay (docs/PARALLEL.md): with every launch of a splittable kernel split (threshold 1
    task per thread), three threads, every Data array stays as eager's."""
    from apic.replay.cpu import table as tbl

    m, fresh = scene
    eager, replayed = fresh(), fresh()
    with wp.ScopedCapture() as capture:
        mjw.step(m, replayed)
    graph = capture.graph
    graph.min_tasks_per_thread = 1
    assert (graph.parallel_program(3).table[:, 0] == tbl.OP_SPLIT).sum() >= 10, graph.parallel_report(3)
    for step in range(STEPS):
        mjw.step(m, eager)
        wp.capture_launch(graph, threads=3)
        if step in (0, STEPS - 1):
            assert_same_arrays(warp_arrays(eager), warp_arrays(replayed), f"after step {step + 1}")


def test_saved_step_replays_without_mujoco(scene, tmp_path):
    m, fresh = scene
    eager, replayed = fresh(), fresh()
    start = {name: getattr(replayed, name).numpy().copy() for name in ("qpos", "qvel")}
    with wp.ScopedCapture(apic=True) as capture:
        mjw.step(m, replayed)
    bound = {name: getattr(replayed, name) for name in ("qpos", "qvel")}
    wp.capture_save(capture.graph, str(tmp_path / "step"), inputs=bound,
                    outputs={"qpos_out": replayed.qpos, "qvel_out": replayed.qvel, "xpos": replayed.xpos})
    for _ in range(STEPS):
        mjw.step(m, eager)

    for name, values in start.items():
        np.save(tmp_path / f"{name}.npy", values)
    get = {name: str(tmp_path / f"{name}_got.npy") for name in ("qpos_out", "qvel_out", "xpos")}
    replay_without(("mujoco", "mujoco_warp"), str(tmp_path / "step"), STEPS,
                   {name: str(tmp_path / f"{name}.npy") for name in start}, get, tmp_path)
    for name, arr in (("qpos_out", eager.qpos), ("qvel_out", eager.qvel), ("xpos", eager.xpos)):
        got = np.load(get[name])
        assert np.array_equal(got.view(np.uint8).reshape(-1), raw(arr)), name


def _batched(mjm, worlds: int, seed: int):
    """``fresh()`` Data of ``worlds`` worlds, each with its own random velocities (solvers then iterate
    differently per world), arrays put_data leaves uninitialised zeroed."""
    mjd = mujoco.MjData(mjm)
    qvel = np.random.default_rng(seed).standard_normal((worlds, mjm.nv)).astype(np.float32) * 0.5

    def made():
        data = mjw.put_data(mjm, mjd, nworld=worlds)
        data.qvel.assign(qvel)
        return data

    return zeroed_where_uninitialised(made)


@pytest.mark.parametrize("model, threads", [("humanoid", 2), ("contacts", 2), ("humanoid", 8), ("humanoid", 16)])
def test_worlds_split_over_threads_every_data_array(model, threads):
    """Launches split by world (docs/PARALLEL.md), the humanoid's tile kernels among them: 64 worlds with
    their own velocities, replayed on ``threads`` threads (on a machine of fewer cores too: a check of the
    plan, not of speed); after several steps every Data array equals a serial replay's and eager's, bit
    for bit."""
    import os

    if model == "humanoid":
        path = os.path.join(os.path.dirname(mjw.__file__), "test_data", "humanoid", "humanoid.xml")
        mjm = mujoco.MjModel.from_xml_path(path)
    else:
        mjm = mujoco.MjModel.from_xml_string(SCENE)
    m, fresh = mjw.put_model(mjm), _batched(mjm, 64, seed=11)
    mjw.step(m, fresh())  # compile every module first: compilation is not captured
    eager, serial, split = fresh(), fresh(), fresh()
    graphs = []
    for data in (serial, split):
        with wp.ScopedCapture() as capture:
            mjw.step(m, data)
        graphs.append(capture.graph)
    graphs[1].min_tasks_per_thread = 1
    report = graphs[1].parallel_report(threads)
    by_world = {k.key for k in graphs[1].recording.kernels if k.split_world is not None}
    assert any(e["chunks"] > 1 and e["kernel"] in by_world for e in report), report
    if model == "humanoid":  # its per-world tile kernels (Cholesky, dense gradient, contact Jacobian) too
        tiles = {k.key for k in graphs[1].recording.kernels if k.split_tiles}
        assert sum(e["chunks"] > 1 and e["kernel"] in tiles for e in report) >= 3, report
    for _ in range(4):
        mjw.step(m, eager)
        wp.capture_launch(graphs[0])
        wp.capture_launch(graphs[1], threads=threads)
    assert_same_arrays(warp_arrays(serial), warp_arrays(split), "split vs serial replay")
    assert_same_arrays(warp_arrays(eager), warp_arrays(split), "split replay vs eager")
    assert len(np.unique(eager.solver_niter.numpy())) > 1, "every world's solver ran the same iterations"
    if model == "contacts":
        assert int(eager.nacon.numpy()[0]) > 0, "the scene made no contacts"
