"""The documentation a newcomer reads: a short README (what apic is, the two commands, one example), the
reference pages under docs/ with an index that lists every page, relative links that resolve (to a file, and
to a heading where they name one), an API reference that names every public name, and pinned tools (Sphinx
and MyST in the `docs` extra, ruff in the `test` extra and CI's lint venv). Sphinx itself builds the pages
with warnings as errors in CI (scripts/docs.sh); these checks need no Sphinx."""

from __future__ import annotations

import importlib
import os
import re

import pytest

import apic
from persist_helpers import REPO

pytestmark = [pytest.mark.once]

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", flags=re.M | re.S)


def _read(path: str) -> str:
    with open(os.path.join(REPO, path), encoding="utf-8") as f:
        return f.read()


def _markdown_pages() -> list[str]:
    pages = ["README.md", "CHANGELOG.md", "benchmarks/README.md", "tests/README.md"]
    pages += sorted(f"docs/{name}" for name in os.listdir(os.path.join(REPO, "docs")) if name.endswith(".md"))
    return pages


def _anchors(text: str) -> set[str]:
    """The anchors GitHub (and MyST, with myst_heading_anchors) gives a page's headings."""
    found, seen = set(), {}
    for heading in re.findall(r"^#{1,6} (.+?)\s*$", FENCE.sub("", text), flags=re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def _links(page: str) -> list[str]:
    return LINK.findall(FENCE.sub("", _read(page)))


def test_every_relative_link_resolves_to_a_file_and_heading():
    broken = []
    for page in _markdown_pages():
        for target in _links(page):
            if re.match(r"^[a-z]+:", target):
                continue  # https:, mailto:: not ours to check offline
            path, _, anchor = target.partition("#")
            resolved = os.path.normpath(os.path.join(os.path.dirname(page), path)) if path else page
            if not os.path.exists(os.path.join(REPO, resolved)):
                broken.append(f"{page}: {target} (no file {resolved})")
            elif anchor and resolved.endswith(".md") and anchor not in _anchors(_read(resolved)):
                broken.append(f"{page}: {target} (no heading #{anchor} in {resolved})")
    assert not broken, "\n".join(broken)


def test_the_link_check_catches_a_missing_file_and_a_missing_heading():
    assert _anchors("# 6.1 Compatibility promise\n## `apic.param`: named\n## Usage\n## Usage\n") == {
        "61-compatibility-promise", "apicparam-named", "usage", "usage-1"}
    assert LINK.findall(FENCE.sub("", "[a](b.md#c)\n```\n[d](e.md)\n```\n[f](https://g)")) == ["b.md#c", "https://g"]


def test_the_readme_is_short_and_starts_with_the_two_commands_and_one_example():
    readme = _read("README.md")
    lines = readme.splitlines()
    assert len(lines) <= 150, f"README.md has {len(lines)} lines: reference material belongs in docs/"
    first_block = re.search(r"```bash\n(.*?)```", readme, flags=re.S).group(1)
    assert [line.split("#")[0].strip() for line in first_block.splitlines()] == [
        "bash scripts/demo.sh", "bash scripts/test.sh"]
    assert readme.index(first_block) < 400, "the two commands come first"
    python = re.findall(r"```python\n(.*?)```", readme, flags=re.S)
    assert len(python) == 1, "one example"
    assert len(python[0].splitlines()) < 40
    for step in ("wp.ScopedCapture(", "wp.capture_launch(", "wp.capture_save("):
        assert step in python[0]
    assert "python -m apic replay step.wrp" in readme  # the saved step loaded and replayed in a fresh process
    assert "docs/index.md" in readme


def test_the_docs_index_links_every_page():
    index = _read("docs/index.md")
    linked = {target.partition("#")[0] for target in LINK.findall(index)}
    pages = {name for name in os.listdir(os.path.join(REPO, "docs")) if name.endswith((".md", ".rst"))}
    missing = sorted(pages - linked - {"index.md"})
    assert not missing, f"docs/index.md does not link {missing}"


def _documented() -> list[str]:
    return re.findall(r"^\.\. (?:auto(?:function|class|module)|py:data):: ([\w.]+)", _read("docs/api.rst"), flags=re.M)


def test_the_api_reference_names_every_public_name_and_each_one_imports():
    documented = _documented()
    assert "apic.errors" in documented  # the errors, every one, by their module (automodule :members:)
    undocumented = [name for name in apic.__all__ if f"apic.{name}" not in documented
                    and getattr(getattr(apic, name), "__module__", None) != "apic.errors"]
    assert not undocumented, f"docs/api.rst leaves out {undocumented}"
    for name in ("capture_if", "capture_while", "capture_pause", "capture_resume"):
        assert f"apic.capture_flow.{name}" in documented
    for target in documented:
        if target == "apic.ray":
            continue  # needs the ray extra; Sphinx builds its page with Ray mocked (docs/conf.py)
        module, _, attribute = target.rpartition(".")
        try:
            importlib.import_module(target)
        except ImportError:
            assert hasattr(importlib.import_module(module), attribute), f"docs/api.rst: {target} does not exist"


def _extra(name: str) -> list[str]:
    optional = _read("pyproject.toml").split("[project.optional-dependencies]", 1)[1].split("\n[", 1)[0]
    line = re.search(rf"^{name} = \[(.*?)\]", optional, flags=re.M).group(1)
    return re.findall(r'"([^"]+)"', line)


def test_the_doc_tools_and_the_linter_are_pinned():
    docs = _extra("docs")
    assert {re.split(r"==", spec)[0] for spec in docs} >= {"sphinx", "myst-parser"}
    assert all(re.fullmatch(r"[\w-]+==[\w.]+", spec) for spec in docs), docs
    script = _read("scripts/docs.sh")
    assert '".[docs]"' in script and "-W --keep-going" in script  # the pinned extra, warnings as errors
    ruff = [spec for spec in _extra("test") if spec.startswith("ruff")]
    assert len(ruff) == 1 and re.fullmatch(r"ruff==[\d.]+", ruff[0]), ruff
    ci = _read(".ci/run")
    assert f'RUFF_VERSION="{ruff[0].split("==")[1]}"' in ci, "CI's lint venv pins the test extra's ruff"
    assert re.search(r'^step "docs: .*" \d+ bash scripts/docs\.sh', ci, flags=re.M)


def test_py_typed_is_package_data():
    assert os.path.isfile(os.path.join(REPO, "apic", "py.typed"))
    pyproject = _read("pyproject.toml")
    data = pyproject.split("[tool.setuptools.package-data]", 1)[1].split("\n[", 1)[0]
    assert re.search(r'^apic = \[.*"py\.typed".*\]', data, flags=re.M)
