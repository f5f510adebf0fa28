"""A save that fails at any point (exception, full disk, permission denied, killed process) leaves the
earlier artifact at that path intact and loadable, and no temporary files: none after an exception,
none after a kill while the files are written (they are unnamed until published, on Linux). A kill
in the few calls around the commit leaves the old or the new artifact, complete, plus at most files
the committed .wrp does not name and one fixed temporary name: a load ignores them and the next save
removes them (docs/RELIABILITY.md, section 4, states the guarantee).
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest
import warp as wp

import persist_kernels as pk
from apic.format import publish, writer
from persist_helpers import child_env, same_bits

pytestmark = [pytest.mark.warp_version, pytest.mark.interpreter, pytest.mark.install]


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
    "stage module": lambda mp: mp.setattr(publish, "_stage", fail_on_call(1, publish._stage, Boom("stage"))),
    "stage wrp": lambda mp: mp.setattr(publish, "_stage", fail_on_call(2, publish._stage, Boom("stage"))),
    "disk full module": lambda mp: mp.setattr(
        publish, "_write_all", fail_on_call(1, publish._write_all, OSError(errno.ENOSPC, "No space left on device"))),
    "disk full wrp": lambda mp: mp.setattr(
        publish, "_write_all", fail_on_call(2, publish._write_all, OSError(errno.ENOSPC, "No space left on device"))),
    "publish module": lambda mp: mp.setattr(publish, "_publish", fail_on_call(1, publish._publish, Boom("publish"))),
    "commit": lambda mp: mp.setattr(publish, "_publish", fail_on_call(2, publish._publish, OSError(errno.EIO, "io"))),
    "rename": lambda mp: mp.setattr(publish.os, "replace", fail_on_call(1, os.replace, OSError(errno.EIO, "io"))),
    "permission denied module": lambda mp: mp.setattr(
        publish, "_stage", fail_on_call(1, publish._stage, PermissionError(errno.EACCES, "Permission denied"))),
    "permission denied wrp": lambda mp: mp.setattr(
        publish, "_stage", fail_on_call(2, publish._stage, PermissionError(errno.EACCES, "Permission denied"))),
    "fsync": lambda mp: mp.setattr(publish.os, "fsync", fail_on_call(1, os.fsync, OSError(errno.EIO, "io"))),
    "fsync modules dir": lambda mp: mp.setattr(publish, "_fsync_dir", fail_on_call(1, publish._fsync_dir, Boom("dir"))),
    "interrupt": lambda mp: mp.setattr(publish, "_stage", fail_on_call(2, publish._stage, KeyboardInterrupt())),
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
    # the new module file (its kernel manifest inside)
    assert len(modules) == 1 and all("test_persist_atomic" in m for m in modules), "the old module file must be gone"
    assert set(files) == {"g.wrp", *modules}
    loaded = wp.capture_load(str(tmp_path / "g"))
    wp.capture_launch(loaded)
    out = wp.empty(8, dtype=float, device="cpu")
    loaded.get_param("x", out)
    assert np.array_equal(out.numpy(), np.arange(8, dtype=np.float32) * 2)


def test_save_over_foreign_modules_folder(tmp_path):
    """Files in <stem>_modules that apic did not write (an upstream save's, say) survive a save."""
    (tmp_path / "g_modules").mkdir()
    (tmp_path / "g_modules" / "wp___main___0123456.cpu0000.o").write_bytes(b"old")
    graph, x = graph_b()
    wp.capture_save(graph, str(tmp_path / "g"), inputs={"x": x})
    names = sorted(os.listdir(tmp_path / "g_modules"))
    assert len(names) == 2 and "wp___main___0123456.cpu0000.o" in names  # and apic's module
    assert any("test_persist_atomic" in name for name in names)


def test_leftovers_are_ignored_by_load_and_removed_by_save(tmp_path):
    """What killed saves can leave, here damaged (a kill mid-write leaves a named temporary half
    written where there are no unnamed files): a load ignores it all and changes nothing; the next
    save removes it all, reusing the .wrp's temporary name on the way."""
    expected_x = save_a(tmp_path)
    leftovers = {
        ".g.wrp" + publish._TEMP_TAG: b"half a .wrp",
        os.path.join("g_modules", ".x.0123456789abcdef.o" + publish._TEMP_TAG): b"half a module",
        os.path.join("g_modules", "x.%s.o" % hashlib.sha256(b"\x7fELF an orphan").hexdigest()[:16]):
            b"\x7fELF an orphan",
    }
    for name, data in leftovers.items():
        (tmp_path / name).write_bytes(data)
    before = tree(tmp_path)
    check_a(tmp_path, before, expected_x)
    assert tree(tmp_path) == before, "a load changed the folder"
    graph, x = graph_b()
    wp.capture_save(graph, str(tmp_path / "g"), inputs={"x": x})
    files = tree(tmp_path)
    assert len(files) == 2 and "g.wrp" in files and not set(leftovers) & set(files), sorted(files)


@pytest.mark.skipif(os.name != "posix", reason="flock is POSIX")
def test_saves_at_one_path_take_turns(tmp_path, monkeypatch):
    """A save waits while another at the same path is between publishing its modules and cleaning up
    (``flock`` on the folder). Otherwise it would commit and then remove, as unused, the module
    file the other has just published, and the other would commit a .wrp whose module is gone."""
    save_a(tmp_path)
    sim = pk.Sim(0)
    graph_a = pk.capture(sim)
    graph, x = graph_b()
    paused, resume, done = threading.Event(), threading.Event(), []
    original = publish._fsync_dir

    def fsync_dir(folder):
        original(folder)
        if threading.current_thread() is first and folder.endswith("g_modules") and not paused.is_set():
            paused.set()  # B's module is published, its .wrp not committed yet
            resume.wait(60)

    def save(g, **bindings):
        wp.capture_save(g, str(tmp_path / "g"), **bindings)
        done.append(g)

    monkeypatch.setattr(publish, "_fsync_dir", fsync_dir)
    first = threading.Thread(target=save, args=(graph,), kwargs={"inputs": {"x": x}})
    second = threading.Thread(target=save, args=(graph_a,), kwargs={"outputs": {"x": sim.a["x"]}})
    first.start()
    assert paused.wait(60)
    second.start()
    second.join(1.0)
    waited = second.is_alive()
    resume.set()
    first.join(60)
    second.join(60)
    assert waited, "the second save did not wait for the first"
    assert done == [graph, graph_a]
    files = tree(tmp_path)  # the second save's artifact, and nothing else
    assert len(files) == 2 and "g.wrp" in files and any("persist_kernels" in name for name in files), sorted(files)
    wp.capture_load(str(tmp_path / "g"))  # every module it names is there, as saved


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
# A child process saves graph B (its own kernel, so a new module file) at argv[1].
CHILD_SAVE = textwrap.dedent(
    """
    import json, os, resource, shutil, signal, sys
    import numpy as np
    import warp as wp
    wp.config.quiet = True
    import apic
    from apic.format import publish

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

    # mode "every": argv[1] is a folder holding template/ (what is there before the save). The save
    # runs once to the end in complete/ and lists every call of an `os` function the publication makes;
    # then, for each call k, a forked process copies template/ to k<k>/ and saves there, with
    # SIGKILL just before call k (half-way through it, for a write).
    root = sys.argv[1]
    if arg == "named":  # no unnamed files: every staged file has its temporary name from the start
        publish._open_unnamed = lambda folder: None
    real_os = os

    class Dying:  # stands for `os` in the publication (apic.format.publish)
        def __init__(self, kill_at):
            self.kill_at, self.calls = kill_at, []

        def __getattr__(self, name):
            value = getattr(real_os, name)
            if not callable(value):
                return value

            def call(*args, **kwargs):
                self.calls.append(name)
                if len(self.calls) == self.kill_at:
                    if name == "write":
                        real_os.write(args[0], bytes(args[1])[: len(args[1]) // 2])
                    real_os.kill(real_os.getpid(), signal.SIGKILL)
                return value(*args, **kwargs)
            return call

    def save(folder, kill_at):
        shutil.copytree(os.path.join(root, "template"), folder)
        publish.os = dying = Dying(kill_at)
        try:
            wp.capture_save(cap.graph, os.path.join(folder, "g"), inputs={"x": x})
        finally:
            publish.os = real_os
        return dying.calls

    calls = save(os.path.join(root, "complete"), 0)
    statuses = []
    for k in range(1, len(calls) + 1):
        pid = os.fork()
        if pid == 0:
            try:
                save(os.path.join(root, f"k{k:03d}"), k)
            finally:
                os._exit(3)  # not killed
        statuses.append(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
    print(json.dumps({"calls": calls, "statuses": statuses}))
    """
)


def _unnamed_files_supported(folder) -> bool:
    fd = publish._open_unnamed(str(folder))
    if fd is None:
        return False
    os.close(fd)
    return True


def _child(script, out, *args):
    return subprocess.Popen([sys.executable, str(script), str(out), *args], env=child_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def listing(folder) -> tuple[dict, set]:
    """``(tree(folder), every folder under it)``, relative paths."""
    dirs = {os.path.relpath(os.path.join(root, d), folder) for root, ds, _ in os.walk(folder) for d in ds}
    return tree(folder), dirs


def replays(folder, expected) -> None:
    """The graph at ``folder/g`` loads and replays to ``expected``: A's x, or B's (the child's) x * 3."""
    loaded = wp.capture_load(str(folder / "g"))
    wp.capture_launch(loaded)
    if expected is None:
        out = wp.empty(8, dtype=float, device="cpu")
        loaded.get_param("x", out)
        assert np.array_equal(out.numpy(), np.arange(8, dtype=np.float32) * 3)
    else:
        out = wp.empty(pk.N, dtype=wp.vec3, device="cpu")
        loaded.get_param("x", out)
        assert same_bits(out.numpy(), expected)


def check_killed(folder, old: dict, new: dict, old_x, named: bool, done: list[str], fatal, next_save,
                 checked: dict) -> str:
    """What a save killed in ``folder`` before its call ``fatal``, after the calls ``done``, left: the
    old (files ``old``, replaying to ``old_x``) or the new artifact, complete, plus only leftovers that
    a load ignores and the next save removes. Returns a description of the leftovers. ``checked``
    maps folder contents already loaded and saved over to their description (the same contents load
    and save the same way)."""
    files, dirs = listing(folder)
    key = (tuple(sorted(files.items())), tuple(sorted(dirs)))
    where = f"killed before call {len(done) + 1}, os.{fatal}" if fatal else "not killed"
    if "g.wrp" in files and files["g.wrp"] == old.get("g.wrp"):
        state, artifact = "old", old
    elif "g.wrp" in files and files["g.wrp"] == new["g.wrp"]:
        state, artifact = "new", new
    else:
        assert "g.wrp" not in files and not old, f"{where}: g.wrp is neither artifact"
        state, artifact = "none", {}
    for name, data in artifact.items():  # every file of that artifact is there, as saved
        assert files.get(name) == data, f"{where}: {name} is missing or changed"
    assert dirs <= {"g_modules"}, f"{where}: folders {sorted(dirs)}"

    modules = {name for name in set(old) | set(new) if name.startswith("g_modules" + os.sep)}
    temps = {".g.wrp" + publish._TEMP_TAG}
    if named:
        temps |= {os.path.join("g_modules", "." + os.path.basename(m) + publish._TEMP_TAG) for m in modules}
    strays = set(files) - set(artifact)
    for name in strays:
        if name in modules:  # the other artifact's module: complete (a file has its name only when it is)
            assert files[name] == (old.get(name) or new.get(name)), f"{where}: {name} is damaged"
        else:
            assert name in temps, f"{where}: stray {name}"
            if not named:  # linked only once complete, for the commit rename
                assert name == ".g.wrp" + publish._TEMP_TAG and files[name] == new["g.wrp"], where
    if not named and "link" not in done:
        assert not strays, f"{where}: {sorted(strays)} left before anything was published"
    if not named and "mkdir" not in done and state == "none":  # a first save, everything written unnamed
        assert not dirs, f"{where}: the modules folder was made before its files were written"

    if state == "none":
        strays |= {d + os.sep for d in dirs}  # the modules folder, made first
    left = f"{state}: " + (", ".join(sorted(strays)) or "nothing else")
    if key in checked:
        return checked[key]
    checked[key] = left

    # a load reads the artifact, ignores the leftovers and changes nothing
    if state == "none":
        with pytest.raises(FileNotFoundError):
            wp.capture_load(str(folder / "g"))
    else:
        replays(folder, old_x if state == "old" else None)
    assert listing(folder) == (files, dirs), f"{where}: a load changed the folder"

    next_save(folder)  # the next save at that path leaves nothing but its own artifact
    files_after, dirs_after = listing(folder)
    assert dirs_after == {"g_modules"}, f"{where}: then {sorted(dirs_after)}"
    assert len(files_after) == 2 and "g.wrp" in files_after, f"{where}: then {sorted(files_after)}"  # + module
    assert "test_persist_atomic" in next(n for n in files_after if n != "g.wrp")
    return left


@pytest.mark.skipif(not hasattr(os, "fork"), reason="forks a process per kill point")
@pytest.mark.parametrize("named", [False, True], ids=["unnamed", "named temporaries"])
@pytest.mark.parametrize("first", [False, True], ids=["over A", "first save"])
def test_killed_at_every_call(tmp_path, first, named):
    """SIGKILL before each call the writer makes to `os` during ``capture_save``, one process each.

    "unnamed" is the Linux path (staged files are O_TMPFILE until published); "named temporaries"
    is what other systems do (each staged file is ``.<name>.apic-tmp`` from the start).
    """
    if not named and not _unnamed_files_supported(tmp_path):
        pytest.skip("no O_TMPFILE here")
    script = tmp_path / "child_save.py"  # Warp kernels need a source file
    script.write_text(CHILD_SAVE)
    template = tmp_path / "template"
    template.mkdir()
    expected_x = None if first else save_a(template)
    child = _child(script, tmp_path, "every", "named" if named else "unnamed")
    stdout, stderr = child.communicate(timeout=300)
    assert child.returncode == 0, stdout + stderr[-3000:]
    report = json.loads(stdout.strip().splitlines()[-1])
    calls, statuses = report["calls"], report["statuses"]
    assert statuses == [-signal.SIGKILL] * len(calls), "every save must have been killed"
    expected_calls = {"fsync", "unlink", "link" if not named else "replace"}
    if not first:  # the .wrp replaces A's (a first save links the unnamed .wrp into place)
        expected_calls.add("replace")
    assert expected_calls <= set(calls)

    old, new = tree(template), tree(tmp_path / "complete")
    assert set(new) == {"g.wrp", *[n for n in new if n.startswith("g_modules" + os.sep)]} and len(new) == 2

    graph, x = graph_b()

    def next_save(folder):
        wp.capture_save(graph, str(folder / "g"), inputs={"x": x})

    seen, checked = {}, {}
    for k in range(1, len(calls) + 1):
        left = check_killed(tmp_path / f"k{k:03d}", old, new, expected_x, named, calls[: k - 1], calls[k - 1],
                            next_save, checked)
        seen.setdefault(left, []).append(f"{k}:{calls[k - 1]}")
    # the save that was not killed: B, nothing else
    left = check_killed(tmp_path / "complete", old, new, expected_x, named, calls, None, next_save, {})
    assert left == "new: nothing else"
    print(f"\n{len(calls)} kill points; left behind:")
    for left, where in seen.items():
        print(f"  {left}  <- before {' '.join(where)}")


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
    child = _child(script, out / "g", "fsize", str(limit))
    stdout, stderr = child.communicate(timeout=300)
    assert child.returncode == 0 and f"save failed: {errno.EFBIG}" in stdout, stdout + stderr[-2000:]
    check_a(out, before, expected_x)
