"""Objects compiled from a loaded graph's saved source, kept between processes (``apic.format.source_cache``): a
second process that loads the same graph takes the first one's object instead of compiling, and replays bit
for bit as eager; a damaged kept file is compiled again (never loaded) and replaced whole; ``APIC_SOURCE_CACHE=0``
keeps nothing; the key follows the source, its options and the host. Each process is a real child
with a Warp kernel cache folder of the test's own, loading a file whose objects cannot be used here (re-encoded as
saved on a CPU with a feature this one lacks, the objects overwritten), so that only its source can replay it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from apic._probes import cache_store
from apic.format import source_cache
from persist_helpers import child_env, kept_in, same_bits
from test_source_fallback import _break_objects, _eager, _foreign_cpu, _save

pytestmark = [pytest.mark.warp_version]

ITERS = 3
MAGIC = b"apic apic-source\n"  # what a kept file of this kind starts with (apic._probes.cache_store)

_CHILD = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    import warp as wp
    wp.config.kernel_cache_dir = sys.argv[1]
    wp.config.quiet = True
    import apic
    from apic import _compat

    compiled = []
    original = _compat.compile_cpu_source
    def counted(*args, **kwargs):
        compiled.append(1)
        return original(*args, **kwargs)
    _compat.compile_cpu_source = counted
    graph = wp.capture_load(sys.argv[2])
    for _ in range(int(sys.argv[3])):
        wp.capture_launch(graph)
    out = wp.zeros(graph.params["b"]["shape"], dtype=float, device="cpu")
    graph.get_param("b", out)
    np.save(sys.argv[4], out.numpy())
    print(json.dumps({"compiled": len(compiled)}))
    """
)


def _child(cache, path: str, out, **env) -> dict:
    done = subprocess.run([sys.executable, "-c", _CHILD, str(cache), path, str(ITERS), str(out)],
                          env={**child_env(), **env}, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    report["same"] = same_bits(np.load(out), _eager(ITERS)[1])
    return report


@pytest.fixture
def foreign(tmp_path):
    """A saved graph only its source can replay here."""
    path = _save(tmp_path)
    _foreign_cpu(path)
    _break_objects(path)
    return path


def test_a_later_process_takes_the_object_an_earlier_one_compiled(tmp_path, foreign):
    cache = tmp_path / "kernels"
    assert _child(cache, foreign, tmp_path / "first.npy") == {"compiled": 1, "same": True}
    (kept,) = kept_in(cache, "apic-source")
    assert kept.endswith(".o") and not os.path.basename(kept).startswith(".")  # renamed into place
    assert _child(cache, foreign, tmp_path / "second.npy") == {"compiled": 0, "same": True}


def test_a_damaged_kept_object_is_compiled_again_and_replaced(tmp_path, foreign):
    cache = tmp_path / "kernels"
    _child(cache, foreign, tmp_path / "first.npy")
    (kept,) = kept_in(cache, "apic-source")
    with open(kept, "rb") as f:
        whole = f.read()
    for damage, damaged in {
        "truncated": whole[: len(whole) // 2],
        "a byte flipped": whole[:-40] + bytes([whole[-40] ^ 1]) + whole[-39:],
        "empty": b"",
        "another kind's file": cache_store.kept_bytes("apic-range", whole[len(MAGIC):-32]),
    }.items():
        with open(kept, "wb") as f:
            f.write(damaged)
        assert _child(cache, foreign, tmp_path / "again.npy") == {"compiled": 1, "same": True}, damage
        with open(kept, "rb") as f:
            assert f.read() == whole, damage  # the same object, kept whole again


def test_switched_off_keeps_nothing(tmp_path, foreign):
    cache = tmp_path / "kernels"
    off = {source_cache.VARIABLE: "0"}
    assert _child(cache, foreign, tmp_path / "first.npy", **off) == {"compiled": 1, "same": True}
    assert kept_in(cache, "apic-source") == []
    assert _child(cache, foreign, tmp_path / "second.npy", **off) == {"compiled": 1, "same": True}


def test_the_key_follows_what_the_object_depends_on(monkeypatch):
    options = {"mode": "release", "fast_math": False, "optimization_level": 2}
    base = source_cache.key(b"int f();", options)
    assert source_cache.key(b"int f();", dict(reversed(list(options.items())))) == base
    assert source_cache.key(b"int g();", options) != base
    assert source_cache.key(b"int f();", {**options, "fast_math": True}) != base
    # another CPU (the test pretends this host has only a level's features): another object
    from host_cpus import HOST_CPUS, pretend

    pretend(sorted(HOST_CPUS)[0], monkeypatch)
    assert source_cache.key(b"int f();", options) != base
