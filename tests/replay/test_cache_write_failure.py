"""A replay works when apic's caches cannot be written (issue 33, leftovers): a full disk, a file-size limit.

A fresh process loads a saved graph with an empty cache folder, so that its first replay builds the native
serial interpreter with Numba (and Numba compiles apic's jitted helpers), under ``RLIMIT_FSIZE`` of 4 KiB:
every cache file it writes fails with ``EFBIG`` part-way, as a full disk fails with ``ENOSPC``. Numba's own
cache writes raised out of the replay (on warp-lang 1.12.1 and 1.19.0 alike); now the compiled code is
used from memory, and the result is eager Warp's, bit for bit. Python ignores ``SIGXFSZ``, so the limit
shows as an ``OSError`` rather than killing the process.
"""

from __future__ import annotations

import errno
import json
import os
import sys
import textwrap

import numpy as np
import pytest
import warp as wp

from apic import _compat

import fork_server
from persist_helpers import child_env

pytestmark = [pytest.mark.warp_version, pytest.mark.interpreter, pytest.mark.install]

N = 64
LIMIT = 4096  # bytes: the native interpreter's object and Numba's cache files are larger

CHILD = textwrap.dedent(
    """
    import json, os, resource, sys
    resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[2]), int(sys.argv[2])))
    import warp as wp
    wp.config.quiet = True
    import apic
    graph = wp.capture_load(sys.argv[1])
    wp.capture_launch(graph)
    wp.capture_launch(graph)
    from apic.replay import program
    print(json.dumps({"y": graph.param_numpy("y").tobytes().hex(), "native": program.native_replay()}))
    """
)


@wp.kernel
def _step(x: wp.array(dtype=float), y: wp.array(dtype=float)):
    i = wp.tid()
    y[i] = y[i] * 0.5 + wp.sin(x[i])


def _graph(tmp_path) -> tuple[str, np.ndarray]:
    x = wp.array(np.linspace(0, 3, N, dtype=np.float32), dtype=float, device="cpu")
    y = wp.ones(N, dtype=float, device="cpu")
    with wp.ScopedCapture(device="cpu", apic=True) as capture:
        wp.launch(_step, dim=N, inputs=[x, y], device="cpu")
    path = str(tmp_path / "g")
    wp.capture_save(capture.graph, path, outputs={"y": y})
    for _ in range(2):
        wp.launch(_step, dim=N, inputs=[x, y], device="cpu")
    return path, y.numpy()


@pytest.mark.parametrize("replay", ["numba", "reference"])
def test_a_replay_works_when_no_cache_file_can_be_written(tmp_path, replay):
    path, eager = _graph(tmp_path)
    cache = tmp_path / "cache"
    cache.mkdir()
    env = child_env()
    env.pop("NUMBA_CACHE_DIR", None)
    env.update(XDG_CACHE_HOME=str(cache), APIC_REPLAY=replay)
    done = fork_server.run([sys.executable, "-c", CHILD, path, str(LIMIT)], env=env, capture_output=True,
                           text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert bytes.fromhex(report["y"]) == eager.tobytes()
    if replay == "numba":
        # the native serial interpreter is kept where Warp loads its object from memory (1.19); where Warp loads
        # objects from a file (1.12), the limit stops that file too and the replay runs in Numba's dispatcher
        assert report["native"] is _compat.loads_objects_from_memory()
        # the limit did bite: some cache file was cut short or never written
        sizes = [os.path.getsize(os.path.join(root, f)) for root, _, files in os.walk(cache) for f in files]
        assert all(size <= LIMIT for size in sizes), sizes


def test_the_limit_bites_here():
    """The premise: a process under the limit gets an OSError writing more than it (not a signal)."""
    code = ("import os, resource, sys; resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))\n"
            "fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT)\nos.write(fd, bytes(4096))\n"
            "try:\n    os.write(fd, bytes(1))\nexcept OSError as e:\n    print(e.errno)")
    target = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"apic-fsize-{os.getpid()}")
    try:
        done = fork_server.run([sys.executable, "-c", code, target], capture_output=True, text=True, timeout=60)
    finally:
        if os.path.exists(target):
            os.unlink(target)
    assert done.stdout.strip() == str(errno.EFBIG), (done.stdout, done.stderr)
