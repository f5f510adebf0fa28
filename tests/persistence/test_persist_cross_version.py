"""Save under this warp-lang, replay under another (and the reverse), in fresh processes.

The other interpreter is ``$APIC_CROSS_PYTHON`` if set, else any ``.venv-warp-<version>`` folder in
the repository root (made by scripts/test.sh) whose warp-lang differs from this one. Without one the
test skips; CI also runs scripts/cross_version.sh after both test runs.
"""

from __future__ import annotations

import glob
import os
import subprocess
import sys

import pytest
import warp as wp

from persist_helpers import REPO, child_env

pytestmark = [pytest.mark.warp_version, pytest.mark.interpreter]

SCRIPT = os.path.join(REPO, "tests", "cross_version.py")


def _warp_version(python: str) -> str | None:
    try:
        done = subprocess.run([python, "-c", "import warp; print(warp.config.version)"], capture_output=True,
                              text=True, timeout=120, env=child_env())
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def _other_pythons() -> list[str]:
    named = os.environ.get("APIC_CROSS_PYTHON")
    candidates = [named] if named else sorted(glob.glob(os.path.join(REPO, ".venv-warp-*", "bin", "python")))
    return [p for p in candidates if p and _warp_version(p) not in (None, wp.config.version)]


OTHERS = _other_pythons()


def _run(python: str, mode: str, folder) -> str:
    done = subprocess.run([python, SCRIPT, mode, str(folder)], capture_output=True, text=True, timeout=600,
                          env=child_env())
    assert done.returncode == 0, f"{python} {mode}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.mark.skipif(not OTHERS, reason="no interpreter with another warp-lang (set APIC_CROSS_PYTHON)")
@pytest.mark.parametrize("other", OTHERS)
@pytest.mark.parametrize("direction", ["here_to_other", "other_to_here"])
def test_cross_version_round_trip(tmp_path, other, direction):
    saver, checker = (sys.executable, other) if direction == "here_to_other" else (other, sys.executable)
    _run(saver, "save", tmp_path)
    report = _run(checker, "check", tmp_path)
    assert "bit for bit" in report
