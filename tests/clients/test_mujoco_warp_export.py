"""mujoco-warp's step exported to a C library (``apic.export``) and run by a C program in a process with no
Python: the humanoid with mujoco-warp's default broadphase (all pairs); the humanoid, the contact scene and a
row of touching spheres (where the sweep needs the sort) with its sweep-and-prune broadphase
(``BroadphaseType.SAP_SEGMENTED``: Warp's native segmented sort and scan, which the exported runtime runs as
ports of Warp's CPU code). Every Data array the graph uses is bound, and after several replays each equals,
bit for bit, apic's Python replay of the same saved file.
"""

from __future__ import annotations

import os
import re

import numpy as np
import pytest
import warp as wp

mujoco = pytest.importorskip("mujoco", reason="mujoco is not installed (the client tier: pip install mujoco-warp)")
mjw = pytest.importorskip("mujoco_warp",
                          reason="mujoco-warp is not installed (the client tier: pip install mujoco-warp)")

import apic  # noqa: E402
from apic.c_library.from_graph import python_replay  # noqa: E402
from apic.errors import BindingError  # noqa: E402
from apic.record.bindings import make_binding  # noqa: E402
from apic.record.ops import NativeCall  # noqa: E402
from client_helpers import warp_arrays, zeroed_where_uninitialised  # noqa: E402
from export_helpers import build, dumped, exported, run  # noqa: E402
from test_mujoco_warp import SCENE  # noqa: E402

REPLAYS = 3
# Free spheres in a row, each touching the next, listed in the reverse of their order along mujoco-warp's sweep
# direction: the sweep finds their contacts only where the segmented sort ordered them.
PILE = "<mujoco><worldbody><geom type='plane' size='3 3 0.1'/>" + "".join(
    f"<body pos='{0.9 - 0.15 * k:.2f} {0.9 - 0.15 * k:.2f} 0.2'><freejoint/><geom type='sphere' size='0.12'/></body>"
    for k in range(6)) + "</worldbody></mujoco>"


def _model(name: str):
    if name in ("contacts", "pile"):
        return mujoco.MjModel.from_xml_string(SCENE if name == "contacts" else PILE)
    return mujoco.MjModel.from_xml_path(os.path.join(os.path.dirname(mjw.__file__), "test_data", "humanoid",
                                                     "humanoid.xml"))


def _used(graph, arrays: dict) -> dict:
    """The arrays of ``arrays`` that lie in the graph's memory (the ones a binding may name), by a C name."""
    found = {}
    for name, arr in arrays.items():
        if arr.size == 0:
            continue
        try:
            make_binding(name, "output", arr, graph.recording.regions, graph.region_addresses)
        except BindingError:
            continue
        found[re.sub(r"\W", "_", name)] = arr
    return found


@pytest.mark.parametrize("model, broadphase", [("humanoid", "NXN"), ("humanoid", "SAP_SEGMENTED"),
                                               ("contacts", "SAP_SEGMENTED"), ("pile", "SAP_SEGMENTED")])
def test_step_exported_to_c_matches_python_replay_every_bound_array(model, broadphase, tmp_path):
    mjm = _model(model)
    mjd = mujoco.MjData(mjm)
    mjd.qvel[:] = np.random.default_rng(5).standard_normal(mjm.nv) * 0.3
    m = mjw.put_model(mjm)
    m.opt.broadphase = getattr(mjw.BroadphaseType, broadphase)
    sizes = {"nconmax": 32, "njmax": 64} if model == "contacts" else {}  # as test_mujoco_warp's scene
    sizes = {"nconmax": 64, "njmax": 256} if model == "pile" else sizes
    fresh = zeroed_where_uninitialised(lambda: mjw.put_data(mjm, mjd, nworld=2, **sizes))
    mjw.step(m, fresh())  # compile every module first: compilation is not captured
    data = fresh()
    with wp.ScopedCapture(device="cpu", apic=True) as capture:
        mjw.step(m, data)
    called = {op.name for op in capture.graph.recording.ops if isinstance(op, NativeCall)}
    if broadphase == "SAP_SEGMENTED":
        assert {"segmented_sort_pairs_float_host", "array_scan_int_host"} <= called, called
    bound = _used(capture.graph, warp_arrays(data))
    assert len(bound) > 60, sorted(bound)
    apic.capture_save(capture.graph, tmp_path / "step.wrp", outputs=bound)

    exported(tmp_path / "step.wrp", tmp_path / "out", "step")
    runner = build("runner.c", tmp_path / "out", "step", tmp_path / "runner")
    (tmp_path / "d").mkdir()
    done = run(runner, ["m", f"r:{REPLAYS}", f"d:{tmp_path / 'd'}", "m"], tmp_path)
    assert done.returncode == 0, done.stderr
    got = dumped(tmp_path / "d", list(bound))
    python = python_replay(apic.capture_load(tmp_path / "step.wrp"), {}, {}, REPLAYS)
    differ = [name for name in bound if got[name] != python[name]]
    assert not differ, differ
    moved = [name for name in ("qpos", "qvel", "xpos") if got[name] != bound[name].numpy().tobytes()]
    assert moved == ["qpos", "qvel", "xpos"], "the replay did not step the scene"
    contacts = np.frombuffer(got["nacon"], dtype=np.int32)[0]
    if model == "contacts" or broadphase == "SAP_SEGMENTED":
        assert contacts > 0, "the scene made no contacts"
    if model == "pile":  # each sphere touches its neighbours (above the floor): 5 contacts per world
        assert contacts >= 2 * 5, contacts
