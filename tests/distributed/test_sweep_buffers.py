"""apic.sweep.Replayer owns what it reloads from: the caller's buffers may be reused or released after the call.

``capture_load_from_bytes`` promises that the caller may release its buffers once it returns; a Replayer
loads its graph again for each item when the graph holds native handles (a Mesh), so it must keep copies,
not the caller's buffers. Each attack below changes or releases the caller's ``(data, modules)`` after the
Replayer is made, and every item must still replay the graph it was made from, bit for bit with a fresh
load of an untouched copy.
"""

from __future__ import annotations

import numpy as np
import pytest
import warp as wp

import apic
from apic.sweep import Replayer
from persist_helpers import same_bits

pytestmark = [pytest.mark.warp_version, pytest.mark.interpreter]


@wp.kernel
def _raise_points(points: wp.array(dtype=wp.vec3), dz: float):
    i = wp.tid()
    points[i] = points[i] + wp.vec3(0.0, 0.0, dz)


@wp.kernel
def _point_distance(mesh: wp.uint64, scale: float, out: wp.array(dtype=float)):
    i = wp.tid()
    p = wp.vec3(float(i) * scale, 0.2, 0.0)
    q = wp.mesh_query_point_no_sign(mesh, p, 100.0)
    out[i] = wp.length(wp.mesh_eval_position(mesh, q.face, q.u, q.v) - p)


def _mesh_bundle(scale: float, name: str):
    """A graph with a Mesh (so a Replayer loads it again per item), saved to bytes; ``scale`` tells two apart."""
    points = wp.array(np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0], [1, 1, 0]], dtype=np.float32), dtype=wp.vec3,
                      device="cpu")
    mesh = wp.Mesh(points=points, indices=wp.array([0, 1, 2, 1, 3, 2], dtype=wp.int32, device="cpu"))
    out = wp.zeros(8, dtype=float, device="cpu")
    dz = apic.param(name, wp.float32, 0.25)
    wp.launch(_raise_points, dim=4, inputs=[points, 0.0], device="cpu")  # compiled before the capture
    wp.launch(_point_distance, dim=8, inputs=[mesh.id, scale, out], device="cpu")
    with wp.ScopedCapture(device="cpu", apic=True) as cap:
        wp.launch(_raise_points, dim=4, inputs=[points, dz], device="cpu")
        mesh.refit()
        wp.launch(_point_distance, dim=8, inputs=[mesh.id, scale, out], device="cpu")
    data, modules = apic.capture_save_to_bytes(cap.graph, outputs={"out": out})
    assert cap.graph.recording.handles  # the attack needs a graph the Replayer loads again per item
    return bytes(data), {key: bytes(value) for key, value in modules.items()}


def _expected(bundle, param: str, dz: float, steps: int) -> np.ndarray:
    fresh = wp.capture_load_from_bytes(*bundle)
    fresh.set_param(param, dz)
    for _ in range(steps):
        wp.capture_launch(fresh)
    out = np.empty(8, dtype=np.float32)
    fresh.get_param("out", out)
    return out


def _reuse_for_other_graph(data, modules, other):
    """The caller reuses its buffers for another graph: the same bytearrays now hold the other graph's bytes."""
    data[:] = other[0]
    for key in list(modules):
        del modules[key]
    modules.update({key: bytearray(value) for key, value in other[1].items()})


def _release(data, modules, other):
    """The caller releases its views (a memoryview over shared memory, say) once the call returned."""
    data.release()
    for value in modules.values():
        value.release()
    modules.clear()


def _overwrite(data, modules, other):
    """The caller refills its NumPy buffers with something else."""
    data[:] = 0
    for value in modules.values():
        value[:] = 0xFF


_ATTACKS = {
    "bytearray reused for another graph": (bytearray, _reuse_for_other_graph),
    "memoryview released": (lambda b: memoryview(bytearray(b)), _release),
    "numpy buffer overwritten": (lambda b: np.frombuffer(bytearray(b), dtype=np.uint8), _overwrite),
}


@pytest.mark.parametrize("attack", list(_ATTACKS))
def test_items_replay_the_graph_given_whatever_the_caller_does_with_its_buffers(attack):
    wrap, spoil = _ATTACKS[attack]
    mine, other = _mesh_bundle(0.1, "buffers_dz"), _mesh_bundle(0.3, "buffers_dz")
    data, modules = wrap(mine[0]), {key: wrap(value) for key, value in mine[1].items()}
    replayer = Replayer(data, modules)
    spoil(data, modules, other)
    runs = [(dz, replayer.run({"buffers_dz": dz}, steps=2)["out"]) for dz in (0.25, 0.5, 0.25)]
    for dz, out in runs:
        assert same_bits(out, _expected(mine, "buffers_dz", dz, 2)), (attack, dz)
    # the two graphs differ, so a replay of the other one could not pass the comparison above
    assert not same_bits(_expected(mine, "buffers_dz", 0.5, 2), _expected(other, "buffers_dz", 0.5, 2))
