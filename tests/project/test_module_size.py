"""Every module of the apic package stays under 400 lines: one job per module, readable in one sitting.

A module that grows past it is split by job (docs/ARCHITECTURE.md, "One job per module" lists the splits).
"""

from __future__ import annotations

import os

import pytest

import apic

pytestmark = [pytest.mark.once]

MAX_LINES = 400
_PACKAGE = os.path.dirname(os.path.abspath(apic.__file__))


def modules_over(folder: str, limit: int = MAX_LINES) -> dict:
    """``{path relative to folder: lines}`` of every ``.py`` file under ``folder`` longer than ``limit`` lines."""
    found = {}
    for root, dirs, names in os.walk(folder):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        for name in names:
            if name.endswith(".py"):
                path = os.path.join(root, name)
                with open(path, encoding="utf-8") as f:
                    lines = sum(1 for _ in f)
                if lines > limit:
                    found[os.path.relpath(path, folder).replace(os.sep, "/")] = lines
    return found


def test_no_module_over_400_lines():
    assert modules_over(_PACKAGE) == {}, f"split these modules by job (at most {MAX_LINES} lines)"


def test_the_scan_covers_every_subpackage():
    """Every folder of the package is walked: the deepest modules (the replay's and the record's folders, the
    device seam) are seen, and a limit every module exceeds finds them all."""
    every = modules_over(_PACKAGE, limit=0)
    for module in ("replay/backends/cpu.py", "replay/cpu/table.py", "record/parallel/world_proof.py",
                   "record/cuda/recorder.py", "format/reader.py", "c_library/library.py", "_probes/host.py"):
        assert module in every, module


def test_a_planted_long_module_is_found(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "long.py").write_text("x = 1\n" * (MAX_LINES + 1))
    (tmp_path / "short.py").write_text("x = 1\n" * MAX_LINES)
    assert modules_over(str(tmp_path)) == {"sub/long.py": MAX_LINES + 1}
