"""The modules folder is read safely at load (issue 11, item 6).

Module files are opened relative to a descriptor of ``<stem>_modules/`` (itself opened without
following a symlink) with ``O_NOFOLLOW | O_NONBLOCK``, must be regular files of exactly the
recorded size, and are read with that bound: a symlink, FIFO, device node, folder, or a file of
another size raises ``apic.FormatError`` naming the file, and nothing blocks.
"""

from __future__ import annotations

import os
import stat
import shutil
import sys
import textwrap

import numpy as np
import pytest
import warp as wp

import apic
import fork_server
from persist_helpers import child_env

pytestmark = [pytest.mark.warp_version, pytest.mark.interpreter]


@wp.kernel
def _add_one(x: wp.array(dtype=float)):
    i = wp.tid()
    x[i] = x[i] + 1.0


@pytest.fixture
def saved(tmp_path):
    """``(stem, module file path)`` of a one-kernel graph saved at ``tmp_path/g``."""
    x = wp.array(np.arange(8, dtype=np.float32), device="cpu")
    with wp.ScopedCapture(device="cpu", apic=True) as cap:
        wp.launch(_add_one, dim=8, inputs=[x], device="cpu")
    wp.capture_save(cap.graph, str(tmp_path / "g"), inputs={"x": x})
    (name,) = [n for n in os.listdir(tmp_path / "g_modules") if n.endswith(".o")]  # beside it: its kernel manifest
    return tmp_path / "g", tmp_path / "g_modules" / name


def replays(stem) -> None:
    loaded = wp.capture_load(str(stem))
    wp.capture_launch(loaded)
    out = wp.empty(8, dtype=float, device="cpu")
    loaded.get_param("x", out)
    assert np.array_equal(out.numpy(), np.arange(8, dtype=np.float32) + 1)


def refused(stem, *words) -> None:
    with pytest.raises(apic.FormatError) as error:
        wp.capture_load(str(stem))
    message = str(error.value)
    for word in words:
        assert word in message, message


def test_honest_folder_loads(saved):
    replays(saved[0])


def test_symlinked_module_file_is_refused(saved, tmp_path):
    stem, module = saved
    shutil.copy(module, tmp_path / "elsewhere.o")  # identical contents: only the link is wrong
    os.unlink(module)
    os.symlink(tmp_path / "elsewhere.o", module)
    refused(stem, "symlink", module.name)


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="needs /dev/zero")
def test_symlink_to_a_device_is_refused(saved):
    stem, module = saved
    os.unlink(module)
    os.symlink("/dev/zero", module)
    refused(stem, "symlink", module.name)


def test_device_node_is_refused(saved):
    stem, module = saved
    os.unlink(module)
    try:
        os.mknod(module, 0o600 | stat.S_IFCHR, os.makedev(1, 5))  # /dev/zero's numbers
    except (PermissionError, AttributeError, OSError):
        pytest.skip("cannot make a device node here (not root)")
    refused(stem, "not a regular file", module.name)


def test_directory_in_place_of_a_module_is_refused(saved):
    stem, module = saved
    os.unlink(module)
    module.mkdir()
    refused(stem, "not a regular file", module.name)


@pytest.mark.parametrize("change", ["larger", "smaller"])
def test_module_of_another_size_is_refused(saved, change):
    stem, module = saved
    data = module.read_bytes()
    module.write_bytes(data + b"\0" * 4096 if change == "larger" else data[:-1])
    refused(stem, "bytes", "records", module.name)


def test_symlinked_modules_folder_is_refused(saved, tmp_path):
    stem, _ = saved
    shutil.copytree(tmp_path / "g_modules", tmp_path / "real_modules")
    shutil.rmtree(tmp_path / "g_modules")
    os.symlink(tmp_path / "real_modules", tmp_path / "g_modules")
    refused(stem, "modules folder", "symlink")


def test_path_through_a_symlinked_parent_loads(saved, tmp_path):
    os.symlink(tmp_path, tmp_path.parent / (tmp_path.name + "_link"))
    try:
        replays(tmp_path.parent / (tmp_path.name + "_link") / "g")
    finally:
        os.unlink(tmp_path.parent / (tmp_path.name + "_link"))


CHILD_LOAD = textwrap.dedent("""
    import sys
    import warp as wp
    import apic
    wp.config.quiet = True
    try:
        wp.capture_load(sys.argv[1])
    except apic.FormatError as error:
        print("FormatError:", error)
    else:
        print("loaded")
""")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_fifo_is_refused_without_blocking(saved, tmp_path):
    """A FIFO nobody writes to: a blocking open or read would hang forever; the child must finish."""
    stem, module = saved
    os.unlink(module)
    os.mkfifo(module)
    script = tmp_path / "child_load.py"
    script.write_text(CHILD_LOAD)
    result = fork_server.run([sys.executable, str(script), str(stem)], env=child_env(), capture_output=True,
                             text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "FormatError:" in result.stdout and "not a regular file" in result.stdout, result.stdout


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_inspect_reports_odd_entries_without_blocking(saved, tmp_path):
    """``inspect`` reads module files as a load does: a FIFO is reported refused, never read."""
    stem, module = saved
    os.unlink(module)
    os.mkfifo(module)
    result = fork_server.run([sys.executable, "-m", "apic", "inspect", str(stem)], env=child_env(),
                             capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "refused:" in result.stdout and "not a regular file" in result.stdout, result.stdout
