"""newton under apic on the CPU: a small scene of ours and three of newton's own examples, stepped
eagerly and replayed from a capture made the way newton's examples capture
(``with wp.ScopedCapture() as capture: self.simulate()``), compared bit for bit over every array of
the states, control and contacts; the scene is also saved and replayed in a process that cannot
import newton.
"""

from __future__ import annotations

import importlib

import numpy as np
import pytest
import warp as wp

newton = pytest.importorskip("newton", reason="newton is not installed (the client tier: pip install newton)")
importlib.import_module("newton.viewer")

from client_helpers import assert_same_arrays, raw, replay_without, warp_arrays  # noqa: E402

FRAMES = 10


class Scene:
    """A sphere and a box dropped onto the ground plane, XPBD with newton's collision pipeline."""

    substeps = 4
    dt = 1.0 / 240.0

    def __init__(self, worlds: int = 0):
        builder = newton.ModelBuilder(up_axis=newton.Axis.Z)
        scene = newton.ModelBuilder(up_axis=newton.Axis.Z) if worlds else builder
        sphere = scene.add_body(xform=wp.transform(wp.vec3(0.0, 0.0, 0.12), wp.quat_identity()))
        scene.add_shape_sphere(sphere, radius=0.1)
        box = scene.add_body(xform=wp.transform(wp.vec3(0.4, 0.0, 0.15), wp.quat_rpy(0.3, 0.2, 0.1)))
        scene.add_shape_box(box, hx=0.1, hy=0.08, hz=0.06)
        if worlds:  # one copy per world, side by side
            builder.replicate(scene, worlds, spacing=(1.5, 0.0, 0.0))
        builder.add_ground_plane()
        self.model = builder.finalize(device="cpu")
        self.solver = newton.solvers.SolverXPBD(self.model, iterations=4)
        self.state_0, self.state_1 = self.model.state(), self.model.state()
        self.control = self.model.control()
        self.pipeline = newton.CollisionPipeline(self.model)
        self.contacts = self.pipeline.contacts()
        newton.eval_fk(self.model, self.model.joint_q, self.model.joint_qd, self.state_0)

    def simulate(self):
        """One frame, as newton's examples write it (an even number of state swaps)."""
        for _ in range(self.substeps):
            self.state_0.clear_forces()
            self.pipeline.collide(self.state_0, self.contacts)
            self.solver.step(self.state_0, self.state_1, self.control, self.contacts, self.dt)
            self.state_0, self.state_1 = self.state_1, self.state_0

    def arrays(self) -> dict:
        return {**warp_arrays(self.state_0, "state_0."), **warp_arrays(self.state_1, "state_1."),
                **warp_arrays(self.control, "control."), **warp_arrays(self.contacts, "contacts.")}


@pytest.fixture(scope="module")
def warmed():
    Scene().simulate()  # compile every module first: compilation is not captured


def test_scene_eager_vs_replay(warmed):
    eager, replayed = Scene(), Scene()
    with wp.ScopedCapture() as capture:
        replayed.simulate()
    start = raw(eager.state_0.body_q).copy()
    for frame in range(FRAMES):
        eager.simulate()
        wp.capture_launch(capture.graph)
        if frame in (0, FRAMES - 1):
            count = assert_same_arrays(eager.arrays(), replayed.arrays(), f"after frame {frame + 1}")
    assert count > 20
    assert not np.array_equal(raw(eager.state_0.body_q), start), "the scene did not move"
    assert int(eager.contacts.rigid_contact_count.numpy()[0]) > 0, "the scene made no contacts"


def test_scene_split_over_threads(warmed):
    """Parallel replay (docs/PARALLEL.md): every launch of a splittable kernel split (threshold 1 task
    per thread) over three threads; every array stays as eager's."""
    from apic.replay.cpu import table as tbl

    eager, replayed = Scene(), Scene()
    with wp.ScopedCapture() as capture:
        replayed.simulate()
    graph = capture.graph
    graph.min_tasks_per_thread = 1
    assert (graph.parallel_program(3).table[:, 0] == tbl.OP_SPLIT).any(), graph.parallel_report(3)
    for frame in range(FRAMES):
        eager.simulate()
        wp.capture_launch(graph, threads=3)
        if frame in (0, FRAMES - 1):
            assert_same_arrays(eager.arrays(), replayed.arrays(), f"after frame {frame + 1}")


def test_replicated_worlds_split_over_threads(warmed):
    """A replicated multi-world scene (16 worlds, each body its own initial velocity) replayed on two
    threads: every array equals a serial replay's and eager's, bit for bit."""
    scenes = [Scene(worlds=16) for _ in range(3)]  # eager, serial replay, split replay
    qd = np.random.default_rng(5).standard_normal(scenes[0].state_0.body_qd.shape + (6,)).astype(np.float32)
    for scene in scenes:
        scene.state_0.body_qd.assign(qd * 0.3)
    scenes[0].simulate()  # this module's kernels for the replicated model (compilation is not captured)
    scenes[0] = Scene(worlds=16)
    scenes[0].state_0.body_qd.assign(qd * 0.3)
    graphs = []
    for scene in scenes[1:]:
        with wp.ScopedCapture() as capture:
            scene.simulate()
        graphs.append(capture.graph)
    graphs[1].min_tasks_per_thread = 1
    assert any(e["chunks"] > 1 for e in graphs[1].parallel_report(2)), graphs[1].parallel_report(2)
    for _ in range(3):
        scenes[0].simulate()
        wp.capture_launch(graphs[0])
        wp.capture_launch(graphs[1], threads=2)
    assert_same_arrays(scenes[1].arrays(), scenes[2].arrays(), "split vs serial replay")
    assert_same_arrays(scenes[0].arrays(), scenes[2].arrays(), "split replay vs eager")
    assert int(scenes[0].contacts.rigid_contact_count.numpy()[0]) > 0, "the scene made no contacts"


def test_saved_scene_replays_without_newton(warmed, tmp_path):
    eager, replayed = Scene(), Scene()
    np.save(tmp_path / "body_q.npy", replayed.state_0.body_q.numpy())
    np.save(tmp_path / "body_qd.npy", replayed.state_0.body_qd.numpy())
    with wp.ScopedCapture(apic=True) as capture:
        replayed.simulate()
    state = replayed.state_0
    wp.capture_save(capture.graph, str(tmp_path / "frame"), inputs={"body_q": state.body_q, "body_qd": state.body_qd},
                    outputs={"body_q_out": state.body_q, "body_qd_out": state.body_qd})
    for _ in range(FRAMES):
        eager.simulate()
    get = {name: str(tmp_path / f"{name}.got.npy") for name in ("body_q_out", "body_qd_out")}
    replay_without(("newton",), str(tmp_path / "frame"), FRAMES,
                   {"body_q": str(tmp_path / "body_q.npy"), "body_qd": str(tmp_path / "body_qd.npy")}, get, tmp_path)
    assert np.array_equal(np.load(get["body_q_out"]).view(np.uint8).reshape(-1), raw(eager.state_0.body_q))
    assert np.array_equal(np.load(get["body_qd_out"]).view(np.uint8).reshape(-1), raw(eager.state_0.body_qd))


# newton's examples, run headless (ViewerNull). pendulum and joints capture in __init__ on every
# device; dzhanibekov captures only on CUDA, so its own capture code is run here for the CPU.
EXAMPLES = ("pendulum", "joints", "dzhanibekov")


def make_example(name: str, captured: bool):
    """A newton example; ``captured``: replay a graph captured exactly as the example captures."""
    module = importlib.import_module(f"newton.examples.basic.example_basic_{name}")
    example = module.Example(newton.viewer.ViewerNull(num_frames=FRAMES), None)
    if not captured:
        example.graph = None
    elif example.graph is None:
        with wp.ScopedCapture() as capture:  # the example's capture(), without its is_cuda guard
            example.simulate()
        example.graph = capture.graph
    return example


def example_arrays(example) -> dict:
    return {**warp_arrays(example.state_0, "state_0."), **warp_arrays(example.state_1, "state_1."),
            **warp_arrays(example.control, "control.")}


@pytest.mark.parametrize("name", EXAMPLES)
def test_newton_example_eager_vs_replay(name):
    eager = make_example(name, captured=False)
    replayed = make_example(name, captured=True)
    assert replayed.graph is not None and eager.graph is None
    start = raw(eager.state_0.body_q).copy()
    for _ in range(FRAMES):
        eager.step()
        replayed.step()
    assert_same_arrays(example_arrays(eager), example_arrays(replayed), f"{name} after {FRAMES} frames")
    assert not np.array_equal(raw(eager.state_0.body_q), start), f"{name} did not move"


# The Featherstone launches of newton's articulated scenes write flat arrays through index data: split by
# footprint (docs/PARALLEL.md), per launch, on the index data the launch holds.
FEATHERSTONE_KERNELS = {"eval_rigid_fk", "eval_rigid_id", "eval_rigid_tau", "eval_rigid_jacobian", "eval_rigid_mass",
                        "eval_dense_gemm_batched", "eval_dense_cholesky_batched", "eval_dense_solve_batched",
                        "integrate_generalized_joints"}


@pytest.mark.parametrize("interpreter", ["numba", "reference"])
def test_featherstone_chains_split_by_footprint_as_eager(interpreter):
    """newton's ``basic_multi_solver_overlay`` pendulum chain with its Featherstone solver, 16 worlds
    (``benchmarks.parallel_featherstone``): every Featherstone launch splits over 2 threads (threshold 4
    tasks per thread) and every state array equals eager's after each of three frames, bit for bit."""
    from benchmarks.parallel_featherstone import Scene
    from world_kernels import replay

    eager, replayed = Scene(16), Scene(16)
    eager.simulate()  # compilation is not captured; both start from the same frame
    replayed.simulate()
    graph = replayed.capture()
    graph.min_tasks_per_thread = 4
    report = graph.parallel_report(2)
    split = {e["kernel"] for e in report if e["chunks"] > 1}
    assert FEATHERSTONE_KERNELS <= split, [e for e in report if e["kernel"] in FEATHERSTONE_KERNELS - split]
    start = raw(eager.states[0].body_q).copy()
    for frame in range(3):
        eager.simulate()
        replay(graph, 2, interpreter)
        assert_same_arrays(warp_arrays(eager.states[0]), warp_arrays(replayed.states[0]), f"frame {frame + 1}")
    assert not np.array_equal(raw(eager.states[0].body_q), start), "the chains did not move"


def test_saved_featherstone_chains_split_without_newton(tmp_path):
    """The same chains saved with their generated source (the footprint verdicts sealed in the module
    manifests) and replayed on 2 threads in a process that cannot import newton: every Featherstone launch
    splits there too, and the state after three frames equals eager's, bit for bit."""
    from benchmarks.parallel_featherstone import Scene

    eager, replayed = Scene(16), Scene(16)
    eager.simulate()
    replayed.simulate()
    state = replayed.states[0]
    names = ("body_q", "body_qd", "joint_q", "joint_qd")
    with wp.ScopedCapture(apic=True) as capture:
        replayed.simulate()
    wp.capture_save(capture.graph, str(tmp_path / "chains"), outputs={n: getattr(state, n) for n in names},
                    source_fallback=True)
    for _ in range(3):
        eager.simulate()
    get = {name: str(tmp_path / f"{name}.npy") for name in names}
    report = replay_without(("newton",), str(tmp_path / "chains"), 3, {}, get, tmp_path, threads=2, min_tasks=4)
    assert FEATHERSTONE_KERNELS <= set(report["split"]), report
    for name in names:
        assert np.array_equal(np.load(get[name]).view(np.uint8).reshape(-1), raw(getattr(eager.states[0], name))), name
