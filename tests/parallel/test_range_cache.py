"""Range objects kept between processes (``apic.replay.parallel.range_cache``): a second process loads the object the
first built instead of compiling it, a damaged file is built again (never loaded), ``APIC_RANGE_CACHE=0``
keeps nothing, and the key changes with what the object depends on. Each process is a real child with
its own Warp kernel cache folder, splitting a real launch against eager.
"""

from __future__ import annotations

import json
import os
import sys
import textwrap

import pytest

from apic.replay.parallel import range_cache
import fork_server
from persist_helpers import child_env, keep_kernel_modules, kept_in, seed_kernel_cache

pytestmark = [pytest.mark.warp_version]

_CHILD = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    import warp as wp
    wp.config.kernel_cache_dir = sys.argv[1]
    wp.config.quiet = True
    import apic
    from apic import _compat
    from apic.replay.parallel import range_entry, threaded_launch

    @wp.kernel
    def scale(x: wp.array(dtype=float), y: wp.array(dtype=float)):
        i = wp.tid()
        y[i] = x[i] * 3.0 + 1.0

    compiled = []
    if sys.argv[2] == "no compiler":  # the object must come from the folder
        def refuse(*args, **kwargs):
            raise RuntimeError("compiled")
        _compat.compile_cpu_source = refuse
    else:
        original = _compat.compile_cpu_source
        def counted(*args, **kwargs):
            compiled.append(1)
            return original(*args, **kwargs)
        _compat.compile_cpu_source = counted
    n = 1 << 14
    x = wp.array(np.arange(n, dtype=np.float32), device="cpu")
    y, eager = wp.zeros(n, device="cpu"), wp.zeros(n, device="cpu")
    wp.launch(scale, dim=n, inputs=[x, eager], device="cpu")
    split = threaded_launch.launch(scale, n, [x, y], threads=2, min_tasks_per_thread=1024)
    print(json.dumps({"split": split, "same": bool(np.array_equal(y.numpy(), eager.numpy())),
                      "compiled": len(compiled)}))
    """
)


def _child(cache, mode: str = "", **env) -> dict:
    script = os.path.join(os.path.dirname(cache), "range_child.py")  # Warp reads a kernel's source from its file
    with open(script, "w") as f:
        f.write(_CHILD)
    done = fork_server.run([sys.executable, script, str(cache), mode], env={**child_env(), **env},
                           capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    keep_kernel_modules(cache)
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture
def cache(tmp_path):
    """A kernel cache folder of the test's own, holding the Warp modules earlier children compiled (never a
    range object: what the children find there is the test's doing)."""
    return seed_kernel_cache(tmp_path / "kernels")


def test_a_later_process_loads_the_object_an_earlier_one_built(cache):
    tmp_path = cache
    first = _child(tmp_path)
    assert first == {"split": True, "same": True, "compiled": 1}
    (kept,) = kept_in(tmp_path, "apic-range")
    assert kept.endswith(".o") and not os.path.basename(kept).startswith(".")  # renamed into place, no temporary
    assert _child(tmp_path, "no compiler") == {"split": True, "same": True, "compiled": 0}


@pytest.mark.parametrize("damage", ["truncated", "flipped", "empty"])
def test_a_damaged_file_is_built_again(cache, damage):
    tmp_path = cache
    _child(tmp_path)
    (path,) = kept_in(tmp_path, "apic-range")
    data = open(path, "rb").read()
    damaged = {"truncated": data[: len(data) // 2], "flipped": data[:100] + bytes([data[100] ^ 1]) + data[101:],
               "empty": b""}[damage]
    with open(path, "wb") as f:
        f.write(damaged)
    assert _child(tmp_path) == {"split": True, "same": True, "compiled": 1}
    assert open(path, "rb").read() == data  # written again, whole


def test_switched_off_keeps_nothing(cache):
    tmp_path = cache
    assert _child(tmp_path, **{range_cache.VARIABLE: "0"}) == {"split": True, "same": True, "compiled": 1}
    assert kept_in(tmp_path, "apic-range") == []


def test_the_key_follows_what_the_object_depends_on(monkeypatch):
    base = range_cache.key(b"source", {"mode": "release"}, None)
    assert base == range_cache.key(b"source", {"mode": "release"}, None)
    assert base != range_cache.key(b"source!", {"mode": "release"}, None)
    assert base != range_cache.key(b"source", {"mode": "debug"}, None)
    assert base != range_cache.key(b"source", {"mode": "release"}, "x86-64-v3")
    # another CPU (the test pretends this host has only a level's features): another object
    from host_cpus import HOST_CPUS, pretend

    pretend(sorted(HOST_CPUS)[0], monkeypatch)
    assert range_cache.key(b"source", {"mode": "release"}, None) != base
