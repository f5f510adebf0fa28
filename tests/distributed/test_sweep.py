"""apic.sweep.Replayer without Ray: every item from the saved state, whatever ran before, bit for bit.

What a Ray worker runs; here in this process, against the step run eagerly and against a fresh load of
the same bytes per item (the graph with a Mesh, whose native state is not graph memory, is loaded again
for each item).
"""

from __future__ import annotations

import numpy as np
import pytest
import warp as wp

import apic
import ray_kernels as rk
from apic.sweep import Replayer
from persist_helpers import same_bits

pytestmark = [pytest.mark.warp_version, pytest.mark.interpreter]


def test_each_run_starts_from_the_saved_state():
    graph, x, v = rk.capture()
    bundle = apic.capture_save_to_bytes(graph, inputs={"x0": x}, outputs={"x": x, "v": v})
    replayer = Replayer(*bundle)
    assert replayer.default_outputs() == ["x", "v"]
    first = replayer.run({"dt": 0.02, "inner": 3}, steps=4)
    other = replayer.run({"dt": 0.05}, steps=2)
    again = replayer.run({"dt": 0.02, "inner": 3}, steps=4)
    expected = rk.eager(4, 0.02, 3)
    for name in ("x", "v"):
        assert same_bits(first[name], expected[name]) and same_bits(again[name], expected[name])
    # the scalar the first run set was put back: "inner" is 1 again in the second
    assert same_bits(other["x"], rk.eager(2, 0.05, 1)["x"])
    assert same_bits(replayer.run({}, steps=0)["x"], rk.arrays()[0].numpy())
    assert replayer.run({"dt": 0.5}, steps=0, outputs=["dt"])["dt"] == np.float32(0.5)


@pytest.mark.parametrize("steps, params, error", [(-1, {}, ValueError), (1.0, {}, ValueError),
                                                  (1, [("dt", 1.0)], TypeError), (1, {"nope": 1}, apic.BindingError)])
def test_bad_calls_are_refused(steps, params, error):
    graph, x, v = rk.capture()
    replayer = Replayer(*apic.capture_save_to_bytes(graph, outputs={"x": x}))
    with pytest.raises(error):
        replayer.run(params, steps=steps)


@wp.kernel
def _lift(points: wp.array(dtype=wp.vec3), dz: float):
    i = wp.tid()
    points[i] = points[i] + wp.vec3(0.0, 0.0, dz)


@wp.kernel
def _distance(mesh: wp.uint64, out: wp.array(dtype=float)):
    i = wp.tid()
    q = wp.mesh_query_point_no_sign(mesh, wp.vec3(float(i) * 0.1, 0.2, 0.0), 100.0)
    out[i] = wp.length(wp.mesh_eval_position(mesh, q.face, q.u, q.v) - wp.vec3(float(i) * 0.1, 0.2, 0.0))


def test_a_graph_with_a_mesh_is_loaded_again_for_each_item():
    points = wp.array(np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0], [1, 1, 0]], dtype=np.float32), dtype=wp.vec3,
                      device="cpu")
    mesh = wp.Mesh(points=points, indices=wp.array([0, 1, 2, 1, 3, 2], dtype=wp.int32, device="cpu"))
    out = wp.zeros(8, dtype=float, device="cpu")
    dz = apic.param("sweep_dz", wp.float32, 0.25)
    wp.launch(_lift, dim=4, inputs=[points, 0.0], device="cpu")  # compiled before the capture
    wp.launch(_distance, dim=8, inputs=[mesh.id, out], device="cpu")
    with wp.ScopedCapture(device="cpu", apic=True) as cap:
        wp.launch(_lift, dim=4, inputs=[points, dz], device="cpu")
        mesh.refit()
        wp.launch(_distance, dim=8, inputs=[mesh.id, out], device="cpu")
    bundle = apic.capture_save_to_bytes(cap.graph, outputs={"out": out})
    replayer = Replayer(*bundle)
    loaded = replayer.graph
    runs = [replayer.run({"sweep_dz": dz_value}, steps=3) for dz_value in (0.25, 0.5, 0.25)]
    # the Mesh's native state (its BVH) is not graph memory: each item after the first gets a new load
    assert replayer.graph is not loaded
    for dz_value, run in zip((0.25, 0.5, 0.25), runs):
        fresh = wp.capture_load_from_bytes(*bundle)
        fresh.set_param("sweep_dz", dz_value)
        for _ in range(3):
            wp.capture_launch(fresh)
        expected = np.empty(8, dtype=np.float32)
        fresh.get_param("out", expected)
        assert same_bits(run["out"], expected), dz_value
    assert same_bits(runs[0]["out"], runs[2]["out"]) and not same_bits(runs[0]["out"], runs[1]["out"])
