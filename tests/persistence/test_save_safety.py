"""Saving never deletes what apic did not write (issue 11, item 1).

A save cleans ``<stem>_modules/`` after its commit, removing only files named by apic's scheme whose
contents prove apic wrote them (``apic.format.ownership``), and never through a symlink swapped in
for the folder between the check and the use.
"""

from __future__ import annotations

import errno
import hashlib
import os

import numpy as np
import pytest
import warp as wp

from apic.format import ownership, publish, writer

pytestmark = [pytest.mark.warp_version, pytest.mark.interpreter]


@wp.kernel
def _triple(x: wp.array(dtype=float)):
    i = wp.tid()
    x[i] = x[i] * 3.0


def kernel_graph():
    x = wp.array(np.arange(8, dtype=np.float32), device="cpu")
    with wp.ScopedCapture(device="cpu", apic=True) as cap:
        wp.launch(_triple, dim=8, inputs=[x], device="cpu")
    return cap.graph, x


def copy_graph():
    """A graph with no modules: one copy."""
    src = wp.array(np.arange(8, dtype=np.float32), device="cpu")
    dst = wp.zeros(8, dtype=float, device="cpu")
    with wp.ScopedCapture(device="cpu", apic=True) as cap:
        wp.copy(dst, src)
    return cap.graph, dst


def apic_like(data: bytes, stem: str = "mine") -> str:
    """A name apic's scheme would give ``data``."""
    return writer.module_file_name(stem, hashlib.sha256(data).hexdigest())


def user_files(folder) -> dict[str, bytes]:
    """The user's own files: plain names, dot-names, names like apic's with other contents."""
    files = {
        "notes.txt": b"my notes",
        ".hidden": b"secret",
        "model.o": b"\x7fELF my object",
        "wp___main___0123456.cpu0000.o": b"an upstream module",
        "fake.0123456789abcdef.o": b"named like apic's, not written by apic",
        "x.%s.o" % ("0" * 16): b"",
        "fake.0123456789abcdef.0123456789abcdef.kernels": b"named like apic's kernel manifest, not apic's",
        ".fake.0123456789abcdef.o.apic-tmp.kernels": b"close to a temporary name, not one",
    }
    folder.mkdir(exist_ok=True)
    for name, data in files.items():
        (folder / name).write_bytes(data)
    return files


def check_survive(folder, files: dict[str, bytes]) -> None:
    for name, data in files.items():
        assert (folder / name).read_bytes() == data, f"{name} was removed or changed"


def replays_tripled(path) -> None:
    loaded = wp.capture_load(str(path))
    wp.capture_launch(loaded)
    out = wp.empty(8, dtype=float, device="cpu")
    loaded.get_param("x", out)
    assert np.array_equal(out.numpy(), np.arange(8, dtype=np.float32) * 3)


def test_first_save_keeps_user_files(tmp_path):
    files = user_files(tmp_path / "g_modules")
    (tmp_path / "g_modules" / "sub").mkdir()
    os.symlink(tmp_path / "g_modules" / "notes.txt", tmp_path / "g_modules" / "link.0123456789abcdef.o")
    graph, x = kernel_graph()
    wp.capture_save(graph, str(tmp_path / "g"), inputs={"x": x})
    check_survive(tmp_path / "g_modules", files)
    assert (tmp_path / "g_modules" / "sub").is_dir()
    assert os.path.islink(tmp_path / "g_modules" / "link.0123456789abcdef.o")
    replays_tripled(tmp_path / "g")


def test_save_without_modules_keeps_user_files(tmp_path):
    files = user_files(tmp_path / "g_modules")
    graph, dst = copy_graph()
    wp.capture_save(graph, str(tmp_path / "g"), outputs={"dst": dst})
    check_survive(tmp_path / "g_modules", files)


def test_resave_removes_only_apic_files(tmp_path):
    """A second save removes the first's module (apic's, hash verified) but nothing of the user's."""
    graph, x = kernel_graph()
    wp.capture_save(graph, str(tmp_path / "g"), inputs={"x": x})
    first = set(os.listdir(tmp_path / "g_modules"))
    assert len(first) == 1 and {name.rsplit(".", 1)[1] for name in first} == {"o"}  # the module (its manifest inside)
    files = user_files(tmp_path / "g_modules")
    orphan = b"\x7fELF a module an earlier apic save wrote"
    (tmp_path / "g_modules" / apic_like(orphan)).write_bytes(orphan)
    graph2, dst = copy_graph()
    wp.capture_save(graph2, str(tmp_path / "g"), outputs={"dst": dst})
    left = set(os.listdir(tmp_path / "g_modules"))
    assert left == set(files), sorted(left)
    check_survive(tmp_path / "g_modules", files)


def test_scheme_name_with_other_contents_survives(tmp_path):
    data = b"the user's file"
    name = apic_like(b"other contents")
    (tmp_path / "g_modules").mkdir()
    (tmp_path / "g_modules" / name).write_bytes(data)
    graph, x = kernel_graph()
    wp.capture_save(graph, str(tmp_path / "g"), inputs={"x": x})
    assert (tmp_path / "g_modules" / name).read_bytes() == data


def test_symlinked_modules_folder_swapped_in_is_not_followed(tmp_path, monkeypatch):
    """Between the checks and the cleanup, ``g_modules`` becomes a symlink to another folder that
    holds files apic would remove from its own folder: none of them is touched."""
    victim = tmp_path / "victim"
    victim.mkdir()
    orphan = b"\x7fELF looks exactly like apic's"
    victim_files = {apic_like(orphan): orphan, "keep.txt": b"keep"}
    for name, data in victim_files.items():
        (victim / name).write_bytes(data)
    graph, x = kernel_graph()
    original = publish._publish
    calls = {"n": 0}

    def swap_then_publish(staged, created):
        calls["n"] += 1
        if staged.final.endswith(".wrp"):  # just before the commit: swap the folder for a symlink
            os.rename(tmp_path / "g_modules", tmp_path / "moved")
            os.symlink(victim, tmp_path / "g_modules")
        return original(staged, created)

    monkeypatch.setattr(publish, "_publish", swap_then_publish)
    wp.capture_save(graph, str(tmp_path / "g"), inputs={"x": x})
    assert calls["n"] >= 2
    check_survive(victim, victim_files)
    assert sorted(os.listdir(victim)) == sorted(victim_files)


def test_lock_refuses_a_symlinked_folder(tmp_path):
    (tmp_path / "real").mkdir()
    os.symlink(tmp_path / "real", tmp_path / "link")
    with pytest.raises(OSError) as error:
        publish._lock(str(tmp_path / "link"))
    assert error.value.errno in (errno.ELOOP, errno.ENOTDIR)
    with pytest.raises(OSError):
        ownership.open_folder(str(tmp_path / "link"))


def test_save_through_a_symlinked_parent_still_works(tmp_path):
    """The user's own path may go through symlinks: it is resolved once, before the lock."""
    (tmp_path / "real").mkdir()
    os.symlink(tmp_path / "real", tmp_path / "link")
    graph, x = kernel_graph()
    wp.capture_save(graph, str(tmp_path / "link" / "g"), inputs={"x": x})
    assert (tmp_path / "real" / "g.wrp").is_file()
    replays_tripled(tmp_path / "link" / "g")


def test_ownership_rules():
    """Names outside the scheme are never apic's, whatever they hold."""
    assert not ownership._MODULE_FILE.fullmatch("notes.txt")
    assert not ownership._MODULE_FILE.fullmatch(".x.0123456789abcdef.o")
    assert ownership._MODULE_FILE.fullmatch(writer.module_file_name("wp_mod", "ab" * 32))
    assert ownership._TEMP_OF_MODULE.fullmatch("." + writer.module_file_name("m", "cd" * 32) + ".apic-tmp")
    assert not ownership._TEMP_OF_MODULE.fullmatch(".notes.txt.apic-tmp")
