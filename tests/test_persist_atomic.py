"""A save that fails at any point (exception, full disk, permission denied, killed process) leaves the
earlier artifact at that path intact and loadable, and no temporary files: none after an exception,
none after a kill while the files are written (they are unnamed until published, on Linux), and
what a kill in the publication window leaves is removed by the next save there.
"""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import warp as wp

import persist_kernels as pk
from apic.format import writer
from persist_helpers import child_env, same_bits


@wp.kernel
def _double(x: wp.array(dtype=float)):
    i = wp.tid()
    x[i] = x[i] * 2.0


def tree(folder) -> dict:
    """Every file under ``folder``: relative path -> bytes."""
    found = {}
    for root, _, files in os.walk(folder):
        for name in files:
            path = os.path.join(root, name)
            with open(path, "rb") as f:
                found[os.path.relpath(path, folder)] = f.read()
    return found


def save_a(folder) -> np.ndarray:
    """Artifact A: a Sim graph saved at ``folder/g``; returns x after one replay (the oracle)."""
    sim = pk.Sim(0)
    graph = pk.capture(sim)
    wp.capture_save(graph, str(folder / "g"), outputs={"x": sim.a["x"]})
    wp.capture_launch(graph)
    return sim.numpy("x")


def graph_b():
    """Graph B: another Warp module (this test file's), so saving it writes a new module file."""
    x = wp.array(np.arange(8, dtype=np.float32), device="cpu")
    with wp.ScopedCapture(device="cpu", apic=True) as cap:
        wp.launch(_double, dim=8, inputs=[x], device="cpu")
    return cap.graph, x


def check_a(folder, before: dict, expected_x: np.ndarray) -> None:
    assert tree(folder) == before, "the earlier artifact or its folder changed"
    loaded = wp.capture_load(str(folder / "g"))
    wp.capture_launch(loaded)
    out = wp.empty(pk.N, dtype=wp.vec3, device="cpu")
    loaded.get_param("x", out)
    assert same_bits(out.numpy(), expected_x)


class Boom(Exception):
    pass


def fail_on_call(n: int, original, exc):
    calls = {"n": 0}

    def wrapper(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == n:
            raise exc
        return original(*args, **kwargs)

    return wrapper


INJECTIONS = {
    "document": lambda mp: mp.setattr(writer, "document", fail_on_call(1, writer.document, Boom("collect"))),
    "stage module": lambda mp: mp.setattr(writer, "_stage", fail_on_call(1, writer._stage, Boom("stage"))),
    "stage wrp": lambda mp: mp.setattr(writer, "_stage", fail_on_call(2, writer._stage, Boom("stage"))),
    "disk full module": lambda mp: mp.setattr(
        writer, "_write_all", fail_on_call(1, writer._write_all, OSError(errno.ENOSPC, "No space left on device"))),
    "disk full wrp": lambda mp: mp.setattr(
        writer, "_write_all", fail_on_call(2, writer._write_all, OSError(errno.ENOSPC, "No space left on device"))),
    "publish module": lambda mp: mp.setattr(writer, "_publish", fail_on_call(1, writer._publish, Boom("publish"))),
    "commit": lambda mp: mp.setattr(writer, "_publish", fail_on_call(2, writer._publish, OSError(errno.EIO, "io"))),
    "rename": lambda mp: mp.setattr(writer.os, "replace", fail_on_call(1, os.replace, OSError(errno.EIO, "io"))),
    "permission denied module": lambda mp: mp.setattr(
        writer, "_stage", fail_on_call(1, writer._stage, PermissionError(errno.EACCES, "Permission denied"))),
    "permission denied wrp": lambda mp: mp.setattr(
        writer, "_stage", fail_on_call(2, writer._stage, PermissionError(errno.EACCES, "Permission denied"))),
    "fsync": lambda mp: mp.setattr(writer.os, "fsync", fail_on_call(1, os.fsync, OSError(errno.EIO, "io"))),
    "fsync modules dir": lambda mp: mp.setattr(writer, "_fsync_dir", fail_on_call(1, writer._fsync_dir, Boom("dir"))),
    "interrupt": lambda mp: mp.setattr(writer, "_stage", fail_on_call(2, writer._stage, KeyboardInterrupt())),
}


@pytest.mark.parametrize("point", list(INJECTIONS))
def test_failed_save_keeps_earlier_artifact(tmp_path, monkeypatch, point):
    expected_x = save_a(tmp_path)
    before = tree(tmp_path)
    graph, x = graph_b()
    INJECTIONS[point](monkeypatch)
    with pytest.raises((Boom, OSError, KeyboardInterrupt)):
        wp.capture_save(graph, str(tmp_path / "g"), inputs={"x": x})
    monkeypatch.undo()
    check_a(tmp_path, before, expected_x)


@pytest.mark.parametrize("point", ["stage module", "disk full wrp", "publish module", "commit",
                                   "permission denied wrp"])
def test_failed_first_save_leaves_nothing(tmp_path, monkeypatch, point):
    graph, x = graph_b()
    INJECTIONS[point](monkeypatch)
    with pytest.raises((Boom, OSError)):
        wp.capture_save(graph, str(tmp_path / "g"), inputs={"x": x})
    monkeypatch.undo()
    assert os.listdir(tmp_path) == []


def test_successful_save_replaces_artifact(tmp_path):
    save_a(tmp_path)
    graph, x = graph_b()
    wp.capture_save(graph, str(tmp_path / "g"), inputs={"x": x})
    files = tree(tmp_path)
    modules = [name for name in files if name.startswith("g_modules")]
    assert len(modules) == 1 and "test_persist_atomic" in modules[0], "the old module file must be gone"
    assert set(files) == {"g.wrp", *modules}
    loaded = wp.capture_load(str(tmp_path / "g"))
    wp.capture_launch(loaded)
    out = wp.empty(8, dtype=float, device="cpu")
    loaded.get_param("x", out)
    assert np.array_equal(out.numpy(), np.arange(8, dtype=np.float32) * 2)


def test_save_over_foreign_modules_folder(tmp_path):
    """Stale files in <stem>_modules (an upstream save's, say) do not survive a save."""
    (tmp_path / "g_modules").mkdir()
    (tmp_path / "g_modules" / "wp___main___0123456.cpu0000.o").write_bytes(b"old")
    graph, x = graph_b()
    wp.capture_save(graph, str(tmp_path / "g"), inputs={"x": x})
    assert len(os.listdir(tmp_path / "g_modules")) == 1
    assert "test_persist_atomic" in os.listdir(tmp_path / "g_modules")[0]


def test_modules_path_that_is_a_file_is_refused(tmp_path):
    (tmp_path / "g_modules").write_bytes(b"not a folder")
    graph, x = graph_b()
    with pytest.raises(FileExistsError):
        wp.capture_save(graph, str(tmp_path / "g"), inputs={"x": x})
    assert sorted(os.listdir(tmp_path)) == ["g_modules"]


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="needs a non-root POSIX user")
def test_read_only_folder(tmp_path):
    """Permission really denied (not injected): the earlier artifact stays as it was."""
    expected_x = save_a(tmp_path)
    before = tree(tmp_path)
    graph, x = graph_b()
    os.chmod(tmp_path / "g_modules", 0o555)
    os.chmod(tmp_path, 0o555)
    try:
        with pytest.raises(PermissionError):
            wp.capture_save(graph, str(tmp_path / "g"), inputs={"x": x})
    finally:
        os.chmod(tmp_path, 0o755)
        os.chmod(tmp_path / "g_modules", 0o755)
    check_a(tmp_path, before, expected_x)


# --- faults in a real process: a file-size limit, and kills -----------------------------------------
# A child process saves graph B (its own kernel, so a new module file) over artifact A at argv[1].
CHILD_SAVE = textwrap.dedent(
    """
    import os, resource, signal, sys
    import numpy as np
    import warp as wp
    wp.config.quiet = True
    import apic
    from apic.format import writer

    @wp.kernel
    def triple(x: wp.array(dtype=float)):
        i = wp.tid()
        x[i] = x[i] * 3.0

    x = wp.array(np.arange(8, dtype=np.float32), device="cpu")
    with wp.ScopedCapture(device="cpu", apic=True) as cap:
        wp.launch(triple, dim=8, inputs=[x], device="cpu")
    mode, arg = sys.argv[2], sys.argv[3]

    if mode == "fsize":  # the disk is "full" after this many bytes per file: writes fail with EFBIG
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (int(arg), int(arg)))
        try:
            wp.capture_save(cap.graph, sys.argv[1], inputs={"x": x})
        except OSError as error:
            print("save failed:", error.errno)
            sys.exit(0)
        sys.exit("the save did not fail")

    # mode "kill": SIGKILL this process at call number `n` of `name` (half-way through, for a write)
    name, n = arg.rsplit("#", 1)
    owner = os if name in ("fsync", "replace") else writer
    original, calls = getattr(owner, name), [0]

    def dying(*args, **kwargs):
        calls[0] += 1
        if calls[0] == int(n):
            if name == "_write_all":
                fd, data = args
                os.write(fd, bytes(data)[: len(data) // 2])
            os.kill(os.getpid(), signal.SIGKILL)
        return original(*args, **kwargs)

    setattr(owner, name, dying)
    wp.capture_save(cap.graph, sys.argv[1], inputs={"x": x})
    print("not killed")
    """
)

# Where a save is killed: (call, what the folder holds afterwards). "clean": exactly artifact A, as
# before (on Linux, where unpublished files have no name); "leftovers": A intact plus files the old
# graph does not use; "committed": graph B saved, plus the old module file.
KILL_POINTS = {
    "writing module": ("_write_all#1", "clean"),
    "module fsync": ("fsync#1", "clean"),
    "writing wrp": ("_write_all#2", "clean"),
    "wrp fsync": ("fsync#2", "clean"),
    "publishing": ("_publish#1", "clean"),
    "module published": ("_fsync_dir#1", "leftovers"),
    "commit rename": ("replace#1", "leftovers"),
    "committed": ("_collect_garbage#1", "committed"),
}


def _unnamed_files_supported(folder) -> bool:
    fd = writer._open_unnamed(str(folder))
    if fd is None:
        return False
    os.close(fd)
    return True


def _child(script, out, *args):
    return subprocess.Popen([sys.executable, str(script), str(out / "g"), *args], env=child_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_killed_save_keeps_earlier_artifact(tmp_path):
    script = tmp_path / "child_save.py"  # Warp kernels need a source file
    script.write_text(CHILD_SAVE)
    folders, befores, children = {}, {}, {}
    for point, (call, _) in KILL_POINTS.items():  # the children run side by side
        out = folders[point] = tmp_path / point.replace(" ", "_")
        out.mkdir()
        expected_x = save_a(out)  # the same for every folder
        befores[point] = tree(out)
        children[point] = _child(script, out, "kill", call)
    unnamed = _unnamed_files_supported(tmp_path)
    for point, (call, expect) in KILL_POINTS.items():
        out, before = folders[point], befores[point]
        stdout, stderr = children[point].communicate(timeout=300)
        assert children[point].returncode == -signal.SIGKILL, f"{point}: {stdout}{stderr[-2000:]}"
        after = tree(out)
        if expect == "committed":  # graph B, complete: x * 3
            assert "g.wrp" in after and after["g.wrp"] != before["g.wrp"]
            loaded = wp.capture_load(str(out / "g"))
            wp.capture_launch(loaded)
            x = wp.empty(8, dtype=float, device="cpu")
            loaded.get_param("x", x)
            assert np.array_equal(x.numpy(), np.arange(8, dtype=np.float32) * 3)
        else:
            for name, data in before.items():
                assert after[name] == data, f"{point}: {name} changed"
            check_a(out, after, expected_x)  # A still loads and replays
            strays = set(after) - set(before)
            if expect == "clean" and unnamed:
                assert not strays, f"{point}: the killed save left {sorted(strays)}"
            for name in strays:
                assert name.startswith("g_modules") or writer._TEMP_TAG in name, f"{point}: stray {name}"

        graph, x = graph_b()  # the next save at the path removes what the killed one left
        wp.capture_save(graph, str(out / "g"), inputs={"x": x})
        final = tree(out)
        assert len(final) == 2 and "g.wrp" in final, f"{point}: {sorted(final)}"
        assert not any(writer._TEMP_TAG in name for name in final)


@pytest.mark.skipif(os.name != "posix", reason="RLIMIT_FSIZE is POSIX")
@pytest.mark.parametrize("limit", [0, 1024])
def test_file_size_limit_keeps_earlier_artifact(tmp_path, limit):
    """A real write failure (EFBIG from RLIMIT_FSIZE, like a full disk): no fault injection."""
    script = tmp_path / "child_save.py"
    script.write_text(CHILD_SAVE)
    out = tmp_path / "out"
    out.mkdir()
    expected_x = save_a(out)
    before = tree(out)
    child = _child(script, out, "fsize", str(limit))
    stdout, stderr = child.communicate(timeout=300)
    assert child.returncode == 0 and f"save failed: {errno.EFBIG}" in stdout, stdout + stderr[-2000:]
    check_a(out, before, expected_x)
