"""Write the golden CUDA graph with conditional nodes, offline (no GPU): ``cuda-conditional/graph.wrp``.

    python tests/data/golden/generate_cuda_conditional.py        (from the repository root, apic importable)

The graph is tests/test_cuda_conditional_offline.py's ``_nested_ops`` (an if / else, a while holding a while,
an if holding a while around the plain ops of tests/test_cuda_offline.py), its module the PTX of
tests/cuda_kernels.py compiled for sm_75 by Warp's NVRTC. ``tests/test_cuda_conditional_offline.py`` reads it
with the current apic and lowers it against the stand-in driver. Never rewrite it once checked in: a new
format gets a new folder.
"""

from __future__ import annotations

import glob
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.dirname(os.path.dirname(HERE))
sys.path[:0] = [TESTS, os.path.join(TESTS, "cuda")]

import warp as wp  # noqa: E402

wp.config.quiet = True

import apic  # noqa: E402,F401
import cuda_kernels as ck  # noqa: E402
from test_cuda_conditional_offline import _nested_ops, _plain  # noqa: E402
from test_cuda_offline import ARCH, FileGraph  # noqa: E402

FOLDER = os.path.join(HERE, "cuda-conditional")


def main() -> None:
    if os.path.exists(os.path.join(FOLDER, "graph.wrp")):
        sys.exit(f"{FOLDER} is checked in: golden files are never rewritten")
    with tempfile.TemporaryDirectory() as out:
        wp.compile_aot_module(ck.saxpy.module, arch=ARCH, module_dir=out, use_ptx=True)
        (path,) = glob.glob(os.path.join(out, "*.ptx"))
        with open(path, "rb") as f:
            image = f.read()
    import dataclasses

    recording, contents, _ = _plain()
    recording = dataclasses.replace(recording, ops=_nested_ops())
    os.makedirs(FOLDER, exist_ok=True)
    wp.capture_save(FileGraph(recording, contents, image, (ARCH, "", "ptx"), ARCH), os.path.join(FOLDER, "graph"))
    print(f"wrote {FOLDER}")


if __name__ == "__main__":
    main()
