"""A CUDA graph's exported C library on a real GPU (skipped, saying why, without one): the GPU check of
docs/EXPORT.md's CUDA section. The workload of tests/cuda/test_cuda_gpu.py (every kernel shape, copies, memsets,
fills of 1 to 16 bytes) is captured with ``apic=True``, saved, exported, and run by a C program with no Python
(``cuda_runner.c``) against the machine's CUDA driver; every bound array must equal, bit for bit, the same steps
run eagerly and the Python replay of the same file (``graph.mode = "launch"``, the calls the library makes).
The offline checks of every call are in ``test_export_cuda.py``."""

from __future__ import annotations

import os
import subprocess

import numpy as np
import pytest
import warp as wp

import apic
import cuda_workload as cw
from export_helpers import bare_env, build
from test_cuda_gpu import DEV, needs_cuda_python, outputs_of, save

NO_DEVICE = "no CUDA device on this machine"
pytestmark = pytest.mark.skipif(wp.get_cuda_device_count() == 0, reason=NO_DEVICE)
pytestmark = [pytestmark, pytest.mark.warp_version]
NAME = "gpu_step"


def test_the_exported_library_replays_on_the_gpu_as_eager_and_the_python_replay(tmp_path):
    needs_cuda_python()
    stem = save(tmp_path)
    apic.export(stem + ".wrp", tmp_path / "out", name=NAME)
    runner = build("cuda_runner.c", tmp_path / "out", NAME, tmp_path / "runner", libraries=["-ldl"])
    dump = tmp_path / "dump"
    dump.mkdir()
    env = {**bare_env(), **{k: v for k, v in os.environ.items() if k in ("LD_LIBRARY_PATH", "CUDA_VISIBLE_DEVICES")}}
    # three replays: on the default stream, then twice on the per-thread default stream (CU_STREAM_PER_THREAD)
    done = subprocess.run([runner, "-", "o:0", "r:1:0", "r:2:2", f"d:{dump}", "c"], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr

    eager = cw.make_state(DEV)
    for _ in range(4):  # the warm-up step the saved state follows, then the three replays
        cw.step(eager, DEV)
    expected = cw.snapshot(eager, DEV)
    graph = apic.capture_load(stem)
    graph.mode = "launch"
    for _ in range(3):
        wp.capture_launch(graph)
    graph.synchronize()
    python = outputs_of(graph)
    assert set(python) <= {p.stem for p in dump.iterdir()}
    for name, array in python.items():
        exported = (dump / f"{name}.bin").read_bytes()
        assert exported == np.ascontiguousarray(array).tobytes(), f"{name}: the export differs from the Python replay"
        assert exported == np.ascontiguousarray(expected[name]).tobytes(), f"{name}: the export differs from eager"


def test_the_exported_library_runs_capture_if_and_capture_while_as_eager(tmp_path):
    """The conditional workload (if / else, nested whiles, a while that runs zero times) captured, saved and
    exported: conditions read on the host by the library; four replays equal four eager steps, bit for bit."""
    import cuda_conditional_workload as cc
    from test_cuda_conditional_gpu import STEPS, _eager_after_warmup, _saved

    needs_cuda_python()
    stem = _saved(tmp_path)
    apic.export(stem + ".wrp", tmp_path / "out", name="gpu_branches")
    runner = build("cuda_runner.c", tmp_path / "out", "gpu_branches", tmp_path / "runner", libraries=["-ldl"])
    dump = tmp_path / "dump"
    dump.mkdir()
    env = {**bare_env(), **{k: v for k, v in os.environ.items() if k in ("LD_LIBRARY_PATH", "CUDA_VISIBLE_DEVICES")}}
    done = subprocess.run([runner, "-", "o:0", f"r:{STEPS}:0", f"d:{dump}", "c"], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    eager = _eager_after_warmup()
    for _ in range(STEPS):
        cc.step(eager, DEV)
    for name, array in cc.snapshot(eager, DEV).items():
        assert (dump / f"{name}.bin").read_bytes() == np.ascontiguousarray(array).tobytes(), name
