"""The load of a saved mujoco-warp step (``capture_load``), where mujoco-warp is installed; the loaded
graph's first replay is checked bit for bit against eager ``mjw.step``."""

from __future__ import annotations

import gc
import os
import tempfile
import time

import numpy as np
import warp as wp

import apic
from apic.bench.config import Config

# a box on a plane and a hinged capsule, two worlds (the client tier's scene)
_SCENE = """
<mujoco>
  <option timestep="0.005"/>
  <worldbody>
    <geom type="plane" size="2 2 0.1"/>
    <body pos="0 0 0.099"><freejoint/><geom type="box" size="0.1 0.1 0.1" mass="1"/></body>
    <body pos="0.3 0 0.6"><joint type="hinge" axis="0 1 0"/><geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.05"/></body>
  </worldbody>
</mujoco>
"""  # noqa: E501 (the scene's text, kept as one line per body)


def measure_mujoco_load(config: Config) -> dict:
    """Save one ``mjw.step`` of the scene and time its ``capture_load`` (min / median over rounds)."""
    try:
        import mujoco  # optional: the figure is reported where mujoco-warp is installed
        import mujoco_warp as mjw  # optional, as above
    except ImportError as error:
        return {"available": False, "reason": f"mujoco-warp is not installed ({error.name})"}
    mjm = mujoco.MjModel.from_xml_string(_SCENE)
    mjd = mujoco.MjData(mjm)
    mjd.qvel[:3] = (0.4, -0.2, 0.0)
    model = mjw.put_model(mjm)
    eager = mjw.put_data(mjm, mjd, nworld=2, nconmax=32, njmax=64)
    saved = mjw.put_data(mjm, mjd, nworld=2, nconmax=32, njmax=64)
    mjw.step(model, mjw.put_data(mjm, mjd, nworld=2, nconmax=32, njmax=64))  # compile outside the capture
    with wp.ScopedCapture(apic=True) as capture:
        mjw.step(model, saved)
    mjw.step(model, eager)
    loads = []
    with tempfile.TemporaryDirectory(prefix="apic-bench-mjw-") as root:
        path = os.path.join(root, "step")
        apic.capture_save(capture.graph, path, inputs={"qpos": saved.qpos, "qvel": saved.qvel},
                          outputs={"qpos_out": saved.qpos})
        for _ in range(2 if config.quick else 7):
            gc.collect()
            start = time.perf_counter()
            loaded = apic.capture_load(path, device="cpu")
            loads.append((time.perf_counter() - start) * 1e3)
        file_bytes = os.path.getsize(path + ".wrp")
    wp.capture_launch(loaded)
    got = wp.empty_like(eager.qpos)
    loaded.get_param("qpos_out", got)
    if not np.array_equal(got.numpy().view(np.uint8), eager.qpos.numpy().view(np.uint8)):
        raise AssertionError("the loaded mujoco-warp step differs from eager mjw.step; refusing to report its load")
    return {"available": True, "verified": True, "ops": len(capture.graph.recording.ops), "file_bytes": file_bytes,
            "load_ms": {"min": min(loads), "median": sorted(loads)[len(loads) // 2], "rounds": loads}}
