"""Small graphs for the profile, picture and golden-file tests: one with control flow and a mesh handle.

``flow_program(s)`` is the step the tests run eagerly (the oracle) and capture: a ``capture_while``
counting down, a ``capture_if``/else, a mesh moved and refit, and a query of the mesh.
"""

from __future__ import annotations

import numpy as np
import warp as wp

CPU = "cpu"


@wp.kernel
def add(x: wp.array(dtype=float), amount: float):
    i = wp.tid()
    x[i] = x[i] + amount


@wp.kernel
def scale(x: wp.array(dtype=float), factor: float):
    i = wp.tid()
    x[i] = x[i] * factor


@wp.kernel
def decrement(counter: wp.array(dtype=wp.int32)):
    counter[0] = counter[0] - 1


@wp.kernel
def lift(points: wp.array(dtype=wp.vec3), dz: float):
    i = wp.tid()
    points[i] = points[i] + wp.vec3(0.0, 0.0, dz)


@wp.kernel
def closest(mesh: wp.uint64, queries: wp.array(dtype=wp.vec3), out: wp.array(dtype=float)):
    i = wp.tid()
    q = wp.mesh_query_point_no_sign(mesh, queries[i], 100.0)
    if q.result:
        out[i] = wp.length(wp.mesh_eval_position(mesh, q.face, q.u, q.v) - queries[i])


def flow_state() -> dict:
    """Fresh inputs: values, a counter of 3, a flag, a two-triangle mesh and query points."""
    points = wp.array(np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0], [1, 1, 0]], dtype=np.float32), dtype=wp.vec3,
                      device=CPU)
    indices = wp.array(np.array([0, 1, 2, 1, 3, 2], dtype=np.int32), dtype=wp.int32, device=CPU)
    return {
        "x": wp.array(np.arange(8, dtype=np.float32), dtype=float, device=CPU),
        "counter": wp.array(np.array([3], dtype=np.int32), dtype=wp.int32, device=CPU),
        "flag": wp.array(np.array([1], dtype=np.int32), dtype=wp.int32, device=CPU),
        "points": points,
        "mesh": wp.Mesh(points=points, indices=indices),
        "queries": wp.array(np.array([[0.2, 0.2, 1.0], [0.9, 0.8, -2.0]], dtype=np.float32), dtype=wp.vec3, device=CPU),
        "out": wp.zeros(2, dtype=float, device=CPU),
    }


def flow_program(s: dict) -> None:
    """One step: while counter: x += 1, counter -= 1; if flag: x *= 2 else x += -1; lift + refit + query."""
    def body():
        wp.launch(add, dim=8, inputs=[s["x"], 1.0], device=CPU)
        wp.launch(decrement, dim=1, inputs=[s["counter"]], device=CPU)

    wp.capture_while(s["counter"], body)
    wp.capture_if(s["flag"], on_true=lambda: wp.launch(scale, dim=8, inputs=[s["x"], 2.0], device=CPU),
                  on_false=lambda: wp.launch(add, dim=8, inputs=[s["x"], -1.0], device=CPU))
    for _ in range(3):
        wp.launch(add, dim=8, inputs=[s["x"], 0.5], device=CPU)
    wp.launch(lift, dim=4, inputs=[s["points"], 0.25], device=CPU)
    s["mesh"].refit()
    wp.launch(closest, dim=2, inputs=[s["mesh"].id, s["queries"], s["out"]], device=CPU)


def flow_outputs(s: dict) -> dict:
    return {k: s[k].numpy().copy() for k in ("x", "counter", "points", "out")}
