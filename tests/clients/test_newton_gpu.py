"""One of newton's own examples on a CUDA GPU under apic (skipped, saying why, without a GPU or newton).

``example_basic_pendulum`` on ``cuda:0``, headless: its frame captured with ``apic=True`` (the example's own
``simulate``), saved, loaded and replayed ``FRAMES`` times in a process that cannot import newton (both replay
modes), against the example's own Warp graph replayed as many times. A GPU's float atomics need not add in the
same order twice, so Warp's graph is run twice first: where those two runs agree bit for bit, apic's replay
must too; otherwise it must agree to a tolerance (and the test says so).
"""

from __future__ import annotations

import importlib

import numpy as np
import pytest
import warp as wp

newton = pytest.importorskip("newton", reason="newton is not installed (the client tier: pip install newton)")
importlib.import_module("newton.viewer")

from client_helpers import raw, replay_without  # noqa: E402
from test_cuda_gpu import needs_cuda_python  # noqa: E402

pytestmark = pytest.mark.skipif(wp.get_cuda_device_count() == 0, reason="no CUDA device on this machine")
DEV = "cuda:0"
FRAMES = 10
EXAMPLE = "newton.examples.basic.example_basic_pendulum"
OUTPUTS = ("body_q", "body_qd")


def _example(captured: bool):
    """The example on the GPU; ``captured``: with the Warp graph it makes of its frame (else none)."""
    with wp.ScopedDevice(DEV):
        example = importlib.import_module(EXAMPLE).Example(newton.viewer.ViewerNull(num_frames=FRAMES), None)
    if not captured:
        example.graph = None
    return example


def _warp_run() -> dict:
    example = _example(captured=True)
    assert example.graph is not None, "the example did not capture a CUDA graph"
    with wp.ScopedDevice(DEV):
        for _ in range(FRAMES):
            example.step()
        wp.synchronize_device(DEV)
    return {name: raw(getattr(example.state_0, name)) for name in OUTPUTS}


@pytest.mark.parametrize("mode", ["graph", "launch"])
def test_example_saved_and_replayed_without_newton_as_warps_graph(tmp_path, mode):
    needs_cuda_python()
    first, second = _warp_run(), _warp_run()
    noisy = {name for name in OUTPUTS if not np.array_equal(first[name], second[name])}
    example = _example(captured=False)
    state = example.state_0
    start = {name: getattr(state, name).numpy() for name in OUTPUTS}
    with wp.ScopedDevice(DEV):
        with wp.ScopedCapture(device=DEV, apic=True) as capture:
            example.simulate()
    assert example.state_0 is state, "the frame swaps its states an odd number of times: bind the other state"
    wp.capture_save(capture.graph, str(tmp_path / "frame"), inputs={name: getattr(state, name) for name in OUTPUTS},
                    outputs={f"{name}_out": getattr(state, name) for name in OUTPUTS})
    for name, values in start.items():
        np.save(tmp_path / f"{name}.npy", values)
    got = {f"{name}_out": str(tmp_path / f"{name}.got.npy") for name in OUTPUTS}
    replay_without(("newton",), str(tmp_path / "frame"), FRAMES,
                   {name: str(tmp_path / f"{name}.npy") for name in OUTPUTS}, got, tmp_path, device=DEV, mode=mode)
    for name in OUTPUTS:
        found = np.load(got[f"{name}_out"]).view(np.uint8).reshape(-1)
        if name in noisy:
            print(f"{name}: Warp's own two runs differ; compared to a tolerance")
            assert np.allclose(found.view(np.float32), first[name].view(np.float32), rtol=1e-4, atol=1e-5), name
        else:
            assert np.array_equal(found, first[name]), f"{name} differs from the example's own Warp graph"
    moved = not np.array_equal(first["body_q"], raw(wp.array(start["body_q"], device="cpu")))
    assert moved, "the pendulum did not move"
