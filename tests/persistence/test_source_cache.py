"""Objects compiled from a loaded graph's saved source, kept between processes (``apic.format.source_cache``): a
second process that loads the same graph takes the first one's object instead of compiling, and replays bit
for bit as eager; a damaged kept file is compiled again (never loaded) and replaced whole; ``APIC_SOURCE_CACHE=0``
keeps nothing; the key follows the source, its options and the host. Each process is a real child
with a Warp kernel cache folder of the test's own, loading a file whose objects cannot be used here (re-encoded as
saved on a CPU with a feature this one lacks, the objects overwritten), so that only its source can replay it.

The compiler's refusal of a source is kept too: a golden file of the other supported warp-lang (whose source this
one's headers refuse) is refused by a second process with the same words and no compile; a damaged kept refusal is
compiled again; a failure that is not the compiler's diagnostic of the source (a full disk) is never kept.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import sys
import textwrap

import numpy as np
import pytest
import warp as wp

from apic._probes import cache_store
from apic.format import source_cache
import fork_server
from persist_helpers import TESTS, child_env, kept_in, same_bits
from test_source_fallback import _break_objects, _eager, _foreign_cpu, _save

pytestmark = [pytest.mark.warp_version]

ITERS = 3
MAGIC = b"apic apic-source\n"  # what a kept file of this kind starts with (apic._probes.cache_store)

# what every child runs first: Warp's kernel cache folder is the test's (argv[1]), and each compile of a saved
# source is counted (apic.format.source_cache compiles through _compat.compile_cpu_source)
_COUNTING = textwrap.dedent(
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
    """
)
_CHILD = _COUNTING + textwrap.dedent(
    """
    graph = wp.capture_load(sys.argv[2])
    for _ in range(int(sys.argv[3])):
        wp.capture_launch(graph)
    out = wp.zeros(graph.params["b"]["shape"], dtype=float, device="cpu")
    graph.get_param("b", out)
    np.save(sys.argv[4], out.numpy())
    print(json.dumps({"compiled": len(compiled)}))
    """
)


def _run(script: str, args: list, env: dict, preexec=None) -> dict:
    """``script`` in a fresh interpreter with ``args``; its JSON report (the last line it prints)."""
    done = fork_server.run([sys.executable, "-c", script, *map(str, args)], env={**child_env(), **env},
                           capture_output=True, text=True, timeout=600, preexec_fn=preexec)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def _child(cache, path: str, out, **env) -> dict:
    report = _run(_CHILD, [cache, path, ITERS, out], env)
    report["same"] = same_bits(np.load(out), _eager(ITERS)[1])
    return report


def _damaged(whole: bytes, magic: bytes, other_kind: str) -> dict:
    """A kept file's ``whole`` bytes damaged as a killed writer, a bad disk or a mix-up would leave them."""
    return {
        "truncated": whole[: len(whole) // 2],
        "a byte flipped": whole[:-40] + bytes([whole[-40] ^ 1]) + whole[-39:],
        "empty": b"",
        "another kind's file": cache_store.kept_bytes(other_kind, whole[len(magic):-32]),
    }


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
    for damage, damaged in _damaged(whole, MAGIC, "apic-range").items():
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


# --- the compiler's refusals -----------------------------------------------------------------------------

OTHER = {"1.19.0": "1.12.1", "1.12.1": "1.19.0"}.get(wp.config.version)
REFUSED_MAGIC = b"apic apic-source-refused\n"

_REFUSING_CHILD = _COUNTING + textwrap.dedent(
    """
    try:
        wp.capture_load(sys.argv[2])
    except apic.IncompatibleGraphError as error:
        print(json.dumps({"compiled": len(compiled), "refused": str(error)}))
    else:
        print(json.dumps({"compiled": len(compiled), "loaded": True}))
    """
)


def _refusing_child(cache, path: str, preexec=None, **env) -> dict:
    return _run(_REFUSING_CHILD, [cache, path], env, preexec)


@pytest.fixture
def other_warps_source(tmp_path):
    """A golden file saved by the other supported warp-lang: its objects are refused here, and its source
    does not compile against this warp-lang's headers."""
    if OTHER is None:
        pytest.skip("golden files of another warp-lang are kept for 1.12.1 and 1.19.0")
    folder = tmp_path / "golden"
    shutil.copytree(os.path.join(TESTS, "data", "golden", f"v3-warp{OTHER}"), folder)
    return str(folder / "graph.wrp")


def test_a_source_this_warp_refuses_is_refused_again_without_compiling(tmp_path, other_warps_source):
    cache = tmp_path / "kernels"
    first = _refusing_child(cache, other_warps_source)
    assert first["compiled"] == 1 and "module.cpp:" in first["refused"], first
    assert "apic-source-" not in first["refused"]  # the source named by its file, not its temporary folder
    (kept,) = kept_in(cache, "apic-source-refused")
    assert kept.endswith(".txt") and kept_in(cache, "apic-source") == []
    assert _refusing_child(cache, other_warps_source) == {"compiled": 0, "refused": first["refused"]}
    # switched off, the kept refusal is neither read nor written: the compiler says it again
    assert _refusing_child(cache, other_warps_source, **{source_cache.VARIABLE: "0"}) == {
        "compiled": 1, "refused": first["refused"]}


def test_a_damaged_kept_refusal_is_compiled_again_and_replaced(tmp_path, other_warps_source):
    cache = tmp_path / "kernels"
    first = _refusing_child(cache, other_warps_source)
    (kept,) = kept_in(cache, "apic-source-refused")
    with open(kept, "rb") as f:
        whole = f.read()
    assert whole.startswith(REFUSED_MAGIC)
    for damage, damaged in _damaged(whole, REFUSED_MAGIC, "apic-source").items():
        with open(kept, "wb") as f:
            f.write(damaged)
        assert _refusing_child(cache, other_warps_source) == {"compiled": 1, "refused": first["refused"]}, damage
        with open(kept, "rb") as f:
            assert f.read() == whole, damage


def test_a_failure_that_is_not_the_sources_is_never_kept(tmp_path, other_warps_source):
    cache = tmp_path / "kernels"

    def full_disk():  # a write past 4 KiB fails (EFBIG: Python ignores SIGXFSZ), as on a full disk
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))

    # the module's source (tens of KiB) cannot be written for the compiler: refused, and nothing kept for it
    failed = _refusing_child(cache, other_warps_source, preexec=full_disk)
    assert failed["compiled"] == 1 and "File too large" in failed["refused"], failed
    assert kept_in(cache, "apic-source-refused") == []
    assert _refusing_child(cache, other_warps_source)["compiled"] == 1  # tried again, and now kept
    assert len(kept_in(cache, "apic-source-refused")) == 1


def test_the_refusals_key_follows_warps_headers(tmp_path):
    assert "'builtin.h'" in source_cache._headers()  # Warp's: the header every module's source includes
    listing = source_cache._headers.__wrapped__  # uncached: a mended folder is read again
    header = tmp_path / "builtin.h"
    header.write_bytes(b"// one\n")
    seen = [listing(str(tmp_path))]
    for change in (lambda: header.write_bytes(b"// one, mended\n"),  # another size
                   lambda: os.utime(header, ns=(1, 1)),  # another time
                   lambda: (tmp_path / "added.h").write_bytes(b"")):  # another header
        change()
        seen.append(listing(str(tmp_path)))
        assert seen[-1] != seen[-2]


@pytest.mark.parametrize("message, kept", [
    # the two warp-langs' own refusals of each other's source (the golden files)
    ("CPU kernel build failed with error code -1: module.cpp:27:5: error: use of class template "
     "'wp::launch_bounds_t' requires template arguments | 27 |     wp::launch_bounds_t dim,", True),
    ("CPU kernel build failed with error code -1: module.cpp:6:10: fatal error: 'deterministic.h' file not found",
     True),
    # the machine's: tried again at the next load
    ("CPU kernel build failed with error code -1: module.cpp:6:10: fatal error: cannot open file 'builtin.h': "
     "Too many open files", False),
    ("CPU kernel build failed with error code -1: fatal error: error in backend: IO failure on output stream: "
     "No space left on device", False),
    ("CPU kernel build failed with error code -1: no compiler message", False),
    ("CPU kernel build failed with error code -1: builtin.h:12:3: error: unknown type name", False),  # not the source
])
def test_only_the_compilers_refusal_of_the_source_is_kept(message, kept):
    assert source_cache.is_source_error(message) is kept
