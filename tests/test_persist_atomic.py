"""A save that fails at any point (exception, full disk, killed process) leaves the earlier artifact
at that path intact and, for an exception, no stray files; a later save cleans up after a kill.
"""

from __future__ import annotations

import errno
import os
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
    "rename module": lambda mp: mp.setattr(writer.os, "replace", fail_on_call(1, os.replace, OSError(errno.EIO, "io"))),
    "commit": lambda mp: mp.setattr(writer.os, "replace", fail_on_call(2, os.replace, OSError(errno.EIO, "io"))),
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


@pytest.mark.parametrize("point", ["stage module", "disk full wrp", "commit"])
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


# A child process saves graph B over artifact A and is killed (os._exit) at the Nth os.replace:
# 1 = after staging its module file, 2 = just before the commit.
KILLED_SAVE = textwrap.dedent(
    """
    import os, sys
    import numpy as np
    import warp as wp
    wp.config.quiet = True
    import apic

    @wp.kernel
    def triple(x: wp.array(dtype=float)):
        i = wp.tid()
        x[i] = x[i] * 3.0

    x = wp.array(np.arange(8, dtype=np.float32), device="cpu")
    with wp.ScopedCapture(device="cpu", apic=True) as cap:
        wp.launch(triple, dim=8, inputs=[x], device="cpu")
    kill_at, calls, replace = int(sys.argv[2]), [0], os.replace

    def dying_replace(*args):
        calls[0] += 1
        if calls[0] == kill_at:
            os._exit(9)
        return replace(*args)

    os.replace = dying_replace
    wp.capture_save(cap.graph, sys.argv[1], inputs={"x": x})
    print("not killed")
    """
)


@pytest.mark.parametrize("kill_at", [1, 2])
def test_killed_save_keeps_earlier_artifact(tmp_path, kill_at):
    script = tmp_path / "killed_save.py"  # Warp kernels need a source file
    script.write_text(KILLED_SAVE)
    out = tmp_path / "out"
    out.mkdir()
    expected_x = save_a(out)
    before = tree(out)
    done = subprocess.run([sys.executable, str(script), str(out / "g"), str(kill_at)],
                          env=child_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 9, done.stdout + done.stderr
    after = tree(out)
    for name, data in before.items():
        assert after[name] == data, f"{name} changed"
    strays = set(after) - set(before)
    assert strays, "the killed save should have left its staged files"
    check_a(out, after, expected_x)  # A still loads and replays

    graph, x = graph_b()  # the next save at the path removes what the killed one left
    wp.capture_save(graph, str(out / "g"), inputs={"x": x})
    final = tree(out)
    assert len(final) == 2 and "g.wrp" in final
    assert not any(writer._TEMP_TAG in name for name in final)
