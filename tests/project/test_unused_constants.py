"""Every module-level constant of apic is used: named somewhere besides its definition (in apic, the tests,
the benchmarks or the scripts). A constant nothing reads says something that nothing checks."""

from __future__ import annotations

import ast
import collections
import glob
import os
import re

import apic

import pytest
from persist_helpers import REPO

pytestmark = [pytest.mark.install]

ROOT = REPO
# apic's own sources: the checkout's, or the installed wheel's when the suite runs against it (scripts/test_wheel.sh)
PACKAGE_PARENT = os.path.dirname(os.path.dirname(os.path.abspath(apic.__file__)))

# Constants kept although nothing names them yet, and why.
KNOWN_UNUSED = {
    "apic/bench/methods.py": {"METHOD_KEYS"},  # the benchmark's method keys, for its readers
}


def _sources() -> dict[str, str]:
    paths = [(PACKAGE_PARENT, p) for p in glob.glob(os.path.join(PACKAGE_PARENT, "apic/**/*.py"), recursive=True)]
    for pattern in ("tests/**/*.py", "benchmarks/**/*.py", "scripts/*.py"):
        paths += [(ROOT, p) for p in glob.glob(os.path.join(ROOT, pattern), recursive=True)]
    here = os.path.abspath(__file__)  # its KNOWN_UNUSED names them, which is not a use
    return {os.path.relpath(p, root): open(p, encoding="utf-8").read()
            for root, p in paths if os.path.abspath(p) != here}


def _constants(source: str) -> list[str]:
    names = []
    for node in ast.parse(source).body:
        targets = []
        if isinstance(node, ast.Assign):
            targets = [t.id for t in node.targets if isinstance(t, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            targets = [node.target.id]
        names += [n for n in targets if re.fullmatch(r"_?[A-Z][A-Z0-9_]*", n)]
    return names


def test_every_module_level_constant_is_used():
    sources = _sources()
    # how often each word occurs in all the sources: a constant's uses are the words equal to its name (what
    # \bNAME\b finds, counted once for all names rather than a search of every source per name)
    words = collections.Counter(word for source in sources.values() for word in re.findall(r"\w+", source))
    unused = {}
    for path, source in sources.items():
        if not path.startswith("apic" + os.sep):
            continue
        for name in _constants(source):
            if words[name] <= 1:
                unused.setdefault(path.replace(os.sep, "/"), set()).add(name)
    assert unused == KNOWN_UNUSED
