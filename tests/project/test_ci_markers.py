"""Every test file says which CI runs need it, so that a new file is never silently left out of one.

``.ci/run`` runs the whole suite once (warp-lang 1.19.0, from the checkout) and then, by marker, only the
files that can behave differently elsewhere: ``warp_version`` on the other supported warp-lang,
``interpreter`` with the reference interpreter, ``install`` against the installed wheel. A file that
needs none of those says ``once``. The decision is written in the file (``pytestmark``), so it moves with
the file; this test reads it from the source, without importing the file.
"""

from __future__ import annotations

import ast
import glob
import os

import pytest
from persist_helpers import REPO, TESTS

pytestmark = [pytest.mark.once]

CLASSIFYING = {"warp_version", "interpreter", "install", "once"}
OTHER = {"serial"}
# The client tier runs in a venv of its own on warp-lang 1.19.0 only (scripts/test.sh), in no other run.
OWN_RUN = ("clients",)


def module_marks(path: str) -> set:
    """The ``pytest.mark.<name>`` names that the module-level ``pytestmark`` assignments of ``path`` use."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    names = set()
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets):
            for sub in ast.walk(node.value):
                if (isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Attribute)
                        and sub.value.attr == "mark" and isinstance(sub.value.value, ast.Name)
                        and sub.value.value.id == "pytest"):
                    names.add(sub.attr)
    return names


def _test_files() -> list:
    found = sorted(glob.glob(os.path.join(TESTS, "**", "test_*.py"), recursive=True))
    return [p for p in found if os.path.relpath(p, TESTS).split(os.sep)[0] not in OWN_RUN]


def test_every_test_file_is_classified():
    files = _test_files()
    assert len(files) > 80, files  # the suite's files were found
    missing = [os.path.relpath(p, REPO) for p in files if not module_marks(p) & CLASSIFYING]
    assert not missing, (f"{missing}: say in pytestmark which CI runs need each file: any of warp_version, "
                         f"interpreter, install, or once for none (tests/README.md)")


def test_once_excludes_the_other_runs():
    both = [os.path.relpath(p, REPO) for p in _test_files() if "once" in module_marks(p)
            and module_marks(p) & (CLASSIFYING - {"once"})]
    assert not both, f"{both}: 'once' means no other run; drop it or the others"


def test_test_files_sit_in_a_subject_folder():
    """tests/ itself holds support code only (tests/README.md); a test file there would belong to no subject."""
    loose = sorted(os.path.basename(p) for p in glob.glob(os.path.join(TESTS, "test_*.py")))
    assert not loose, f"{loose}: move each into the folder of its subject (tests/README.md)"


def test_the_markers_used_are_declared():
    used = set()
    for path in _test_files():
        used |= module_marks(path) & (CLASSIFYING | OTHER)
    assert used == CLASSIFYING | OTHER, used


def test_a_file_without_a_decision_is_found(tmp_path):
    """The check above can fail: a file with only a skip condition, or none at all, is reported."""
    bare = tmp_path / "test_bare.py"
    bare.write_text("import pytest\npytestmark = pytest.mark.skipif(False, reason='x')\n")
    assert not module_marks(str(bare)) & CLASSIFYING
    marked = tmp_path / "test_marked.py"
    marked.write_text("import pytest\npytestmark = [pytest.mark.skipif(False, reason='x')]\n"
                      "pytestmark = [*pytestmark, pytest.mark.warp_version]\n")
    assert module_marks(str(marked)) & CLASSIFYING == {"warp_version"}
