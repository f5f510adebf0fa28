"""The standalone example: capture and save a wave simulation, then replay it frame by frame in a
fresh process that has never seen the simulation's source, writing PNG images."""

from __future__ import annotations

import os
import sys

import pytest

import fork_server
from persist_helpers import REPO, child_env

pytestmark = [pytest.mark.warp_version, pytest.mark.interpreter, pytest.mark.install]

pytest.importorskip("matplotlib")

EXAMPLES = os.path.join(REPO, "examples")


def test_capture_then_view(tmp_path):
    save = fork_server.run([sys.executable, os.path.join(EXAMPLES, "wave_capture.py"), "--out", "wave", "--size", "48"],
                           cwd=tmp_path, env=child_env(), capture_output=True, text=True, timeout=600)
    assert save.returncode == 0, save.stderr
    # one file per module (its manifest inside)
    assert (tmp_path / "wave.wrp").is_file() and sorted(
        n.rsplit(".", 1)[1] for n in os.listdir(tmp_path / "wave_modules")) == ["o"]

    view_dir = tmp_path / "viewer"  # the viewer runs elsewhere, with only the saved files
    view_dir.mkdir()
    for name in ("wave.wrp", "wave_modules"):
        os.rename(tmp_path / name, view_dir / name)
    view = fork_server.run([sys.executable, os.path.join(EXAMPLES, "wave_view.py"), "wave.wrp", "--frames", "24",
                           "--every", "12", "--out", "frames"],
                           cwd=view_dir, env=child_env(), capture_output=True, text=True, timeout=600)
    assert view.returncode == 0, view.stderr
    frames = sorted(os.listdir(view_dir / "frames"))
    assert frames == ["frame_0012.png", "frame_0024.png"]
    for name in frames:
        assert (view_dir / "frames" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "wrote 2 images" in view.stdout
