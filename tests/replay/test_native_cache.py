"""apic's cache folder under attack and over time: the native serial interpreter's object and the kept host
target are pruned once unused, only apic's own files ever go, and every replay equals eager Warp whatever
is found at the cache's paths (a folder, a link, a FIFO, an unreadable file, a read-only folder, a
killed writer, a write failing part-way, two writers at once).

Replays run in fresh interpreters (``native_replay_child.py``): loading the cache is what a process does
first. Where the suite runs as root, the children that meet file modes run without the capabilities that
let root read and write past them.
"""

from __future__ import annotations

import ctypes
import json
import os
import resource
import signal
import subprocess
import sys
import time

import pytest

from apic._probes import cache_store, cpu
from apic.replay.cpu import native_interpreter
import fork_server
from test_native_interpreter import CHILD, REPO, _env

pytestmark = [pytest.mark.warp_version, pytest.mark.install]

MAGIC = b"APIC-NATIVE-INTERPRETER 1\n"
DAY = 24 * 3600
BUILT = {"same": True, "numba": True, "llvmlite": True}  # the child built the object (with Numba)
LOADED = {"same": True, "numba": False, "llvmlite": False}  # the child loaded it from the cache


def _object_name() -> str:
    return os.path.basename(native_interpreter.cache_path(native_interpreter.cache_key()))


def _drop_file_mode_override():
    """In a root child: drop the capabilities that let root read and write past file modes."""
    libc = ctypes.CDLL(None, use_errno=True)
    for capability in (1, 2):  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH
        if libc.prctl(24, capability, 0, 0, 0) != 0:  # PR_CAPBSET_DROP: gone from the child's exec
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


def _run_child(cache_home, modes=False, preexec=None, timeout=600) -> subprocess.CompletedProcess:
    """A child replaying the 10-launch graph with apic's cache in ``cache_home``; ``modes``: file modes
    bind it (as root too)."""
    if modes and os.geteuid() == 0:
        try:
            subprocess.run(["true"], preexec_fn=_drop_file_mode_override, check=True)
        except (subprocess.SubprocessError, OSError) as error:
            pytest.skip(f"root here cannot give up reading and writing past file modes: {error}")
        preexec = _drop_file_mode_override
    return fork_server.run([sys.executable, CHILD, "launch", ""], env=_env(cache_home), cwd=REPO,
                           capture_output=True, text=True, timeout=timeout, preexec_fn=preexec)


def _replayed(cache_home, modes=False, preexec=None) -> dict:
    result = _run_child(cache_home, modes, preexec)
    assert result.returncode == 0, f"child failed ({result.returncode}):\n{result.stdout}\n{result.stderr}"
    # quiet: what the child writes on stderr is Warp's own start-up lines (no CUDA driver here), nothing of apic's
    assert all(line.startswith("Warp ") for line in result.stderr.splitlines()), result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def _whole_object(path) -> bool:
    return os.path.isfile(path) and not os.path.islink(path) and native_interpreter.read_cached(
        str(path), native_interpreter.cache_key()) is not None


def _cache_files(folder) -> list[str]:
    return sorted(os.listdir(folder))


# --- pruning, on real files --------------------------------------------------------------------------


def _age(path, days: float, now: float) -> None:
    os.utime(path, (now - days * DAY, now - days * DAY))


def _made(folder, name: str, data: bytes, days: float, now: float) -> str:
    path = os.path.join(folder, name)
    with open(path, "wb") as f:
        f.write(data)
    _age(path, days, now)
    return name


def test_prune_removes_only_unused_objects_of_the_kind_it_made(tmp_path):
    now = time.time()
    folder = str(tmp_path)
    kept_object = "serial-interpreter-" + "0" * 32 + ".o"
    old = _made(folder, "serial-interpreter-" + "1" * 32 + ".o", MAGIC + b"{}\ncode", 31, now)
    recent = [_made(folder, f"serial-interpreter-{0x10 + k:032x}.o", MAGIC + b"{}\ncode", k / 24, now)
              for k in range(1, 1 + cache_store.CACHE_KEEP_RECENT)]  # used in the last hours
    # the ninth most recently used: beyond those kept, but used today (kept) or two days ago (removed)
    today = _made(folder, "serial-interpreter-" + "2" * 32 + ".o", MAGIC + b"{}\ncode", 0.9, now)
    two_days = _made(folder, "serial-interpreter-" + "3" * 32 + ".o", MAGIC + b"{}\ncode", 2, now)
    abandoned = _made(folder, f".{kept_object}.k3j_x9a2.partial", MAGIC[:5], 0.5, now)
    abandoned_empty = _made(folder, f".{kept_object}.0000abcd.partial", b"", 0.5, now)
    being_written = _made(folder, f".{kept_object}.zzzzzzzz.partial", MAGIC, 0.01, now)
    # not apic's, or not of this kind: never removed, however old
    foreign = [
        _made(folder, "serial-interpreter-" + "4" * 32 + ".o", b"\x7fELF someone else's object", 400, now),
        _made(folder, "serial-interpreter-" + "5" * 31 + ".o", MAGIC + b"{}\ncode", 400, now),  # 31 digits
        _made(folder, "serial-interpreter-" + "6" * 32 + ".o.bak", MAGIC + b"{}\ncode", 400, now),
        _made(folder, "host-target-" + "7" * 32 + ".json", b'{"key": {}}', 400, now),  # another kind
        _made(folder, "notes.txt", MAGIC, 400, now),
        _made(folder, f".{kept_object}.k3j_x9a2.partial.txt", MAGIC, 400, now),
        _made(folder, ".elsewhere.k3j_x9a2.partial", MAGIC, 400, now),
    ]
    outside = tmp_path.parent / f"{tmp_path.name}-outside.o"
    outside.write_bytes(MAGIC + b"{}\ncode")
    _age(outside, 400, now)
    link = "serial-interpreter-" + "8" * 32 + ".o"
    os.symlink(outside, os.path.join(folder, link))  # a link named as an object: the link stays, its file too
    os.mkdir(os.path.join(folder, "serial-interpreter-" + "9" * 32 + ".o"))
    _age(os.path.join(folder, "serial-interpreter-" + "9" * 32 + ".o"), 400, now)
    _made(folder, kept_object, MAGIC + b"{}\ncode", 365, now)  # the file just stored is never pruned

    removed = cache_store.prune_cache(os.path.join(folder, kept_object), MAGIC, now=now)
    assert sorted(removed) == sorted([old, two_days, abandoned, abandoned_empty])
    left = set(_cache_files(folder))
    assert left == set(recent + [today, being_written, *foreign, link, kept_object,
                                 "serial-interpreter-" + "9" * 32 + ".o"])
    assert outside.exists()
    # a second pruner (another process) finds nothing more to remove, and fails on nothing
    assert cache_store.prune_cache(os.path.join(folder, kept_object), MAGIC, now=now) == []
    assert cache_store.prune_cache(str(tmp_path / "absent" / kept_object), MAGIC, now=now) == []
    assert cache_store.prune_cache(os.path.join(folder, "not-a-cache-name.o"), MAGIC, now=now) == []


def test_a_read_marks_the_file_used_at_most_hourly(tmp_path):
    now = time.time()
    path = tmp_path / ("serial-interpreter-" + "a" * 32 + ".o")
    path.write_bytes(MAGIC + b"data")
    _age(path, 40, now)
    assert cache_store.read_cache_file(str(path), 100) == MAGIC + b"data"
    assert now - 60 < os.stat(path).st_mtime  # refreshed: a file read today is not pruned
    _age(path, 1 / 48, now)  # half an hour ago: left as it is (no write per read)
    before = os.stat(path).st_mtime
    cache_store.read_cache_file(str(path), 100)
    assert os.stat(path).st_mtime == before
    assert cache_store.read_cache_file(str(path), 4) == (MAGIC + b"data")[:5]  # the caller sees it is too long
    assert cache_store.read_cache_file(str(tmp_path), 100) is None  # a folder
    os.mkfifo(tmp_path / "fifo")
    assert cache_store.read_cache_file(str(tmp_path / "fifo"), 100) is None  # a FIFO: no wait for a writer
    assert cpu._read_target(str(tmp_path / "fifo"), {}) is None  # the kept host target reads it so too
    assert cache_store.read_cache_file("/dev/zero", 100) is None  # a device: not read forever


def test_storing_an_object_prunes_the_unused_ones_of_its_kind(tmp_path):
    now = time.time()
    folder = str(tmp_path)
    unused = _made(folder, "serial-interpreter-" + "1" * 32 + ".o", MAGIC + b"{}\nold", 31, now)
    used = _made(folder, "serial-interpreter-" + "2" * 32 + ".o", MAGIC + b"{}\nold", 29, now)
    target = _made(folder, "host-target-" + "3" * 32 + ".json", b'{"key": {}, "target": {}}', 31, now)
    new = "serial-interpreter-" + "4" * 32 + ".o"
    cache_store.store_in_cache(os.path.join(folder, new), MAGIC + b"{}\nnew", MAGIC)
    assert _cache_files(folder) == sorted([used, target, new])
    assert unused not in _cache_files(folder)
    cache_store.store_in_cache(os.path.join(folder, "host-target-" + "5" * 32 + ".json"), b'{"key": {"a": 1}}',
                        b'{"key": ')
    assert target not in _cache_files(folder)
    assert len(_cache_files(folder)) == 3


# --- attacks on the cache, each replay compared with eager Warp -----------------------------------------


def test_a_folder_at_the_objects_path_is_left_and_the_replay_builds_its_own(tmp_path):
    home = tmp_path / "cache"
    (home / "apic" / _object_name()).mkdir(parents=True)
    assert _replayed(home) == BUILT
    assert (home / "apic" / _object_name()).is_dir()
    assert _cache_files(home / "apic") == [_object_name()]  # no temporary left behind


@pytest.mark.parametrize("target", ["another file", "dangling", "fifo"])
def test_a_link_or_fifo_at_the_objects_path_is_replaced_never_followed(tmp_path, target):
    home = tmp_path / "cache"
    (home / "apic").mkdir(parents=True)
    path = home / "apic" / _object_name()
    elsewhere = tmp_path / "precious.o"
    if target == "another file":
        elsewhere.write_bytes(b"the user's own file")
        os.symlink(elsewhere, path)
    elif target == "dangling":
        os.symlink(elsewhere, path)
    else:
        os.mkfifo(path)  # a plain open would wait for a writer forever
    assert _replayed(home) == BUILT
    assert _whole_object(path)
    if target == "another file":
        assert elsewhere.read_bytes() == b"the user's own file"
    else:
        assert not elsewhere.exists()
    assert _replayed(home) == LOADED


def test_an_unreadable_object_is_rebuilt_and_replaced(tmp_path):
    home = tmp_path / "cache"
    assert _replayed(home) == BUILT
    path = home / "apic" / _object_name()
    os.chmod(path, 0)
    assert _replayed(home, modes=True) == BUILT
    assert _whole_object(path) and os.stat(path).st_mode & 0o777 == 0o600
    assert _replayed(home, modes=True) == LOADED


def test_truncated_objects_are_rebuilt_never_run(tmp_path):
    home = tmp_path / "cache"
    assert _replayed(home) == BUILT
    path = home / "apic" / _object_name()
    good = path.read_bytes()
    for cut in (len(good) - 1, len(good) // 2, len(MAGIC) + 3):
        path.write_bytes(good[:cut])
        assert _replayed(home) == BUILT
        assert path.read_bytes() == good


def test_a_read_only_cache_folder_replays_with_an_object_built_in_the_process(tmp_path):
    home = tmp_path / "cache"
    folder = home / "apic"
    folder.mkdir(parents=True)
    os.chmod(folder, 0o555)
    try:
        assert _replayed(home, modes=True) == BUILT
        assert _replayed(home, modes=True) == BUILT  # nothing kept: each process builds its own
        assert _cache_files(folder) == []
    finally:
        os.chmod(folder, 0o755)


def test_a_cache_home_that_is_a_file_replays_with_an_object_built_in_the_process(tmp_path):
    home = tmp_path / "cache-home"
    home.write_bytes(b"not a folder")
    assert _replayed(home) == BUILT
    assert home.read_bytes() == b"not a folder"


def test_two_processes_building_at_once_both_replay_and_leave_one_whole_object(tmp_path):
    home = tmp_path / "cache"
    children = [subprocess.Popen([sys.executable, CHILD, "launch", ""], env=_env(home), cwd=REPO,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    for child in children:
        out, err = child.communicate(timeout=600)
        assert child.returncode == 0, err
        assert json.loads(out.strip().splitlines()[-1])["same"] is True
    assert _cache_files(home / "apic") == [_object_name()]
    assert _whole_object(home / "apic" / _object_name())
    assert _replayed(home) == LOADED


def _limit_file_size(limit: int):
    def preexec():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
    return preexec


def test_a_cache_write_failing_part_way_leaves_no_object_and_the_replay_runs(tmp_path):
    assert _replayed(tmp_path / "first") == BUILT
    code_bytes = len((tmp_path / "first" / "apic" / _object_name()).read_bytes().split(b"\n", 2)[2])
    # a write past the bare object's size fails (EFBIG: Python ignores SIGXFSZ), as on a full disk: the
    # cached file (header and object) fails part-way, while the bare object itself can still be written
    # (Warp before 1.19 loads an object from a file)
    home = tmp_path / "cache"
    assert _replayed(home, preexec=_limit_file_size(code_bytes + 64)) == BUILT
    assert _cache_files(home / "apic") == []


def test_a_writer_killed_mid_write_leaves_no_object_to_run(tmp_path):
    home = tmp_path / "cache"
    folder = home / "apic"
    # the kernel kills the child (SIGXFSZ, its default action restored) inside its write of the object,
    # once 1000 bytes are on disk
    dying = ("import runpy, signal, sys; signal.signal(signal.SIGXFSZ, signal.SIG_DFL); "
             f"sys.argv = [{CHILD!r}, 'launch', '']; runpy.run_path({CHILD!r}, run_name='__main__')")
    killed = fork_server.run([sys.executable, "-c", dying], env=_env(home), cwd=REPO, capture_output=True,
                             text=True, timeout=600, preexec_fn=_limit_file_size(1000))
    assert killed.returncode == -signal.SIGXFSZ, killed.stderr
    partials = _cache_files(folder)
    assert len(partials) == 1 and partials[0].startswith(f".{_object_name()}.") and partials[0].endswith(".partial")
    assert (folder / partials[0]).read_bytes().startswith(MAGIC) and os.path.getsize(folder / partials[0]) == 1000
    assert _replayed(home) == BUILT  # the temporary is never taken for the object
    assert _whole_object(folder / _object_name())
    # the dead writer's temporary goes once it is older than any write in progress
    _age(folder / partials[0], 1, time.time())
    os.unlink(folder / _object_name())
    assert _replayed(home) == BUILT
    assert _cache_files(folder) == [_object_name()]
