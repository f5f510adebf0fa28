"""The native serial interpreter: a first replay (and a load) without Numba, bit for bit as eager Warp,
and a cached object that is rebuilt, never run, when it is damaged or was built for another key.

Every replay runs in a fresh interpreter (a child process): what a process imports is the point.
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np
import pytest
import warp as wp

from apic.errors import ReplayError
from apic.replay.cpu import native_interpreter
from apic.replay.program import Program
import fork_server
from persist_helpers import REPO, TESTS

pytestmark = [pytest.mark.warp_version, pytest.mark.install]


CHILD = os.path.join(TESTS, "native_replay_child.py")


def _env(cache_home) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (REPO, env.get("PYTHONPATH", "")) if p)
    env.pop("APIC_REPLAY", None)  # the default interpreter's loading is what is checked, in every run
    if cache_home is not None:
        # apic's cache moves; Numba's and Warp's stay where they are (warm)
        env.setdefault("NUMBA_CACHE_DIR", os.path.join(os.path.expanduser("~"), ".cache", "numba"))
        env.setdefault("WARP_CACHE_PATH", os.path.dirname(wp.config.kernel_cache_dir))
        env["XDG_CACHE_HOME"] = str(cache_home)
    return env


def _child(mode: str, path="", cache_home=None) -> dict:
    result = fork_server.run([sys.executable, CHILD, mode, str(path)], env=_env(cache_home), cwd=REPO,
                             capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, f"child failed ({result.returncode}):\n{result.stdout}\n{result.stderr}"
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_first_launch_and_load_import_neither_numba_nor_llvmlite(tmp_path):
    _child("launch")  # warms the caches, should this one be the first run here
    assert _child("launch") == {"same": True, "numba": False, "llvmlite": False}
    stem = tmp_path / "ten"
    _child("save", stem)
    assert _child("load", stem) == {"same": True, "numba": False, "llvmlite": False}


def _cached_object(cache_home) -> str:
    folder = cache_home / "apic"
    names = [n for n in os.listdir(folder) if n.startswith("serial-interpreter-")]
    assert len(names) == 1, names
    return str(folder / names[0])


def test_damaged_or_foreign_cached_object_is_rebuilt_not_run(tmp_path):
    home = tmp_path / "cache"
    assert _child("launch", cache_home=home) == {"same": True, "numba": True, "llvmlite": True}  # built
    path = _cached_object(home)
    with open(path, "rb") as f:
        good = f.read()
    assert _child("launch", cache_home=home)["numba"] is False  # loaded
    # a damaged object: one byte of its code changed
    with open(path, "wb") as f:
        f.write(good[:-7] + bytes([good[-7] ^ 0xFF]) + good[-6:])
    assert _child("launch", cache_home=home) == {"same": True, "numba": True, "llvmlite": True}  # rebuilt
    with open(path, "rb") as f:
        assert f.read() == good
    # a foreign object: built for another key (another CPU), in this key's file
    header_end = good.index(b"\n", len(b"APIC-NATIVE-INTERPRETER 1\n"))
    header = json.loads(good[len(b"APIC-NATIVE-INTERPRETER 1\n"):header_end])
    header["key"]["cpu"] = "another CPU"
    with open(path, "wb") as f:
        f.write(b"APIC-NATIVE-INTERPRETER 1\n" + json.dumps(header).encode() + good[header_end:])
    assert _child("launch", cache_home=home) == {"same": True, "numba": True, "llvmlite": True}
    with open(path, "rb") as f:
        assert f.read() == good


def test_read_cached_accepts_only_its_key_and_a_whole_object(tmp_path):
    key = native_interpreter.cache_key()
    path = str(tmp_path / "object.o")
    code = b"\x7fELF not really an object, but bytes to keep"
    with open(path, "wb") as f:
        f.write(native_interpreter._pack(key, code))
    assert native_interpreter.read_cached(path, key) == code
    for component in key:
        assert native_interpreter.read_cached(path, {**key, component: key[component] + "-changed"}) is None
    with open(path, "wb") as f:
        f.write(native_interpreter._pack(key, code)[:-1])  # truncated
    assert native_interpreter.read_cached(path, key) is None
    for junk in (b"", b"APIC-NATIVE-INTERPRETER 1\n", b"APIC-NATIVE-INTERPRETER 1\n{not json\n" + code):
        with open(path, "wb") as f:
            f.write(junk)
        assert native_interpreter.read_cached(path, key) is None
    assert native_interpreter.read_cached(str(tmp_path / "absent.o"), key) is None


def test_cache_key_names_the_cpu_and_the_toolchain():
    key = native_interpreter.cache_key()
    assert set(key) == {"sources", "numba", "llvmlite", "warp", "platform", "cpu"}
    assert key["warp"] == wp.config.version
    import numba  # the versions the key reads off the installation, without importing

    assert key["numba"] == numba.__version__
    assert all(key.values())


def test_a_table_of_another_layout_is_refused_before_any_call():
    for table in (np.zeros((1, 12)), np.zeros((1, 11), dtype=np.int64), np.zeros((12, 2), dtype=np.int64).T):
        with pytest.raises(ReplayError, match="C-contiguous int64 rows of 12"):
            Program(table, np.zeros(8, dtype=np.uint8)).run()
