"""Every apic file path (``apic/replay/cpu/table.py``) and module name (``apic.replay.cuda.lowering``) that the
package's own sources (Python and the C runtime of the export) and the pages under docs/ name exists, so that a
module moved to another folder leaves no stale name behind in a comment, a docstring or a page. CHANGELOG.md
keeps history and is not read; fenced blocks of the docs (a diffstat, a shell session) are not either."""

from __future__ import annotations

import os
import re

import pytest

from persist_helpers import REPO

pytestmark = [pytest.mark.once]

PATH = re.compile(r"\bapic/[A-Za-z0-9_/]+\.(?:py|c|h|inc|in)\b")
MODULE = re.compile(r"(?<![\"'])\bapic(?:\.[a-z_][a-z0-9_]*)+")  # a quoted "apic.kernels" is a format's tag
FENCE = re.compile(r"^```.*?^```", flags=re.M | re.S)
SOURCES = (".py", ".c", ".h", ".inc", ".in")


def _texts():
    """(path relative to the repository, text) of the package's sources and the docs' pages, fences left out."""
    for folder, _, files in os.walk(os.path.join(REPO, "apic")):
        for name in sorted(files):
            if name.endswith(SOURCES):
                path = os.path.join(folder, name)
                with open(path, encoding="utf-8") as f:
                    yield os.path.relpath(path, REPO), f.read()
    for name in sorted(os.listdir(os.path.join(REPO, "docs"))):
        if name.endswith((".md", ".rst")):
            with open(os.path.join(REPO, "docs", name), encoding="utf-8") as f:
                yield f"docs/{name}", FENCE.sub("", f.read())


def _module_file(parts: list[str]) -> str | None:
    """The file of module ``apic.<...>`` named by ``parts`` (a package's ``__init__.py``), or None."""
    path = os.path.join(REPO, *parts)
    for candidate in (path + ".py", os.path.join(path, "__init__.py")):
        if os.path.isfile(candidate):
            return candidate
    return None


def module_name_exists(name: str) -> bool:
    """Whether ``name`` is a module of the package, or a name its module defines or imports
    (``apic.replay.cuda.lowering.lower``: the longest prefix that is a module, then one name its source holds)."""
    parts = name.split(".")
    longest = max((n for n in range(1, len(parts) + 1) if _module_file(parts[:n])), default=0)
    if longest == len(parts):
        return True
    if longest != len(parts) - 1:
        return False
    with open(_module_file(parts[:longest]), encoding="utf-8") as f:
        return re.search(rf"\b{re.escape(parts[-1])}\b", f.read()) is not None


def stale_names(texts) -> list[str]:
    """``where: name`` for each path that is no file and each module name that is no module of the package."""
    stale = []
    for where, text in texts:
        stale += [f"{where}: {p}" for p in PATH.findall(text) if not os.path.exists(os.path.join(REPO, p))]
        stale += [f"{where}: {m}" for m in MODULE.findall(text)
                  if "__" not in m and not module_name_exists(m)]  # apic.__file__ and the like are Python's
    return sorted(set(stale))


def test_every_named_apic_file_and_module_exists():
    stale = stale_names(_texts())
    assert not stale, "names of files or modules that do not exist (moved or renamed?):\n" + "\n".join(stale)


def test_the_check_finds_a_moved_module_in_a_comment_and_a_page():
    planted = [("apic/x.c", "/* as apic/replay/cuda_rows.py does */"),
               ("docs/x.md", 'see `apic.replay.cuda_lowering`, `apic.replay.cuda.lowering.lower`, "apic.kernels"')]
    assert stale_names(planted) == ["apic/x.c: apic/replay/cuda_rows.py", "docs/x.md: apic.replay.cuda_lowering"]
