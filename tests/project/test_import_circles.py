"""No import circle anywhere in the tree: apic/, benchmarks/ and scripts/*.py, function-local imports included.

A static scan (stdlib ``ast``; nothing is imported): every ``import`` and ``from ... import`` statement, at
module level or inside a function (a lazy import still closes a circle: two modules that need each other
cannot be understood, tested or moved apart), except those under ``if TYPE_CHECKING:``, which never run.
Importing ``a.b.c`` first imports its package ``a.b``: that counts as an edge too, except to a top package
(``apic``, ``benchmarks``: ``apic/__init__`` is the public API, imported first, and imports the rest).
A failure names the circle, each step with the file and line of its import. ``test_layering.py`` checks the
layer order inside apic on the same kind of graph; this test covers the whole tree.
"""

from __future__ import annotations

import ast
import os
import textwrap

import pytest

import apic
from persist_helpers import REPO
from test_layering import import_graph  # scripts/import_graph.py, loaded by path

pytestmark = [pytest.mark.once]

PACKAGES = ("apic", "benchmarks")  # scanned as packages; scripts/*.py are scanned as scripts.<name>


def _is_type_checking(test: ast.AST) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def tree_modules(roots: dict) -> dict:
    """``{module name: file}`` for each package folder of ``roots`` (``{package: its parent folder}``), and
    ``scripts.<name>`` for each ``scripts/*.py`` of ``roots["scripts"]`` (the scripts folder's parent)."""
    files = {}
    for package, parent in roots.items():
        top = os.path.join(parent, package)
        if package == "scripts":
            for name in sorted(os.listdir(top)) if os.path.isdir(top) else ():
                if name.endswith(".py"):
                    files[f"scripts.{name[:-3]}"] = os.path.join(top, name)
            continue
        for folder, dirs, names in os.walk(top):
            dirs[:] = sorted(d for d in dirs if not d.startswith((".", "__pycache__")))
            for name in sorted(names):
                if name.endswith(".py"):
                    parts = os.path.relpath(os.path.join(folder, name), parent)[:-3].split(os.sep)
                    files[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = os.path.join(folder, name)
    return files


def _targets(node, module: str, is_package: bool, modules: set) -> list:
    """The modules of the tree one import statement runs (a script's sibling counts by its bare name)."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        base = node.module or ""
        if node.level:
            parts = module.split(".")[: None if is_package else -1]
            parts = parts[: len(parts) - (node.level - 1)]
            base = ".".join(parts + ([base] if base else []))
        # ``from a import b``: b is a module of a, or a name a defines (then the edge goes to a)
        names = [f"{base}.{alias.name}" for alias in node.names if f"{base}.{alias.name}" in modules] or [base]
    found = []
    for name in names:
        if module.startswith("scripts.") and f"scripts.{name}" in modules:
            name = f"scripts.{name}"  # a script imports a sibling by its bare name (scripts/ on sys.path)
        while name and name not in modules:  # ``import a.b.X`` where X is not a module
            name = name.rpartition(".")[0]
        if name and name != module:
            found.append(name)
    return found


def build(files: dict) -> dict:
    """``{module: {imported module: (file, line)}}`` over every import statement that runs, local ones too."""
    modules = set(files)
    edges = {m: {} for m in modules}
    for module, path in sorted(files.items()):
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
        is_package = path.endswith("__init__.py")

        def visit(node, module=module, path=path, is_package=is_package):
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.If) and _is_type_checking(child.test):
                    for sub in child.orelse:
                        visit(ast.Module(body=[sub], type_ignores=[]))
                elif isinstance(child, (ast.Import, ast.ImportFrom)):
                    for target in _targets(child, module, is_package, modules):
                        edges[module].setdefault(target, (path, child.lineno))
                else:
                    visit(child)

        visit(tree)
        parent = module.rpartition(".")[0]
        if "." in parent and parent in modules:  # the implicit import of the package (not of a top package)
            edges[module].setdefault(parent, (path, 0))
    return edges


def circles(edges: dict) -> list:
    """One circle per strongly connected component of more than one module: ``[(module, file, line), ...]``
    from a module back to it."""
    found = []
    for component in map(set, import_graph.strongly_connected(edges)):
        start = min(component)
        # the shortest way back to start inside the component (breadth first)
        came = {start: None}
        queue = [start]
        while queue:
            node = queue.pop(0)
            for child in sorted(edges[node]):
                if child == start:
                    path, at = [node], node
                    while came[at] is not None:
                        at = came[at]
                        path.append(at)
                    path.reverse()
                    found.append([(m, *edges[m][n]) for m, n in zip(path, path[1:] + [start])])
                    queue = []
                    break
                if child in component and child not in came:
                    came[child] = node
                    queue.append(child)
    return sorted(found)


def describe(circle: list) -> str:
    names = [m for m, _, _ in circle] + [circle[0][0]]
    steps = "; ".join(f"{m} imports {n} ({os.path.relpath(p, REPO)}:{line or 'its package'})"
                      for (m, p, line), n in zip(circle, names[1:]))
    return " -> ".join(names) + ": " + steps


def _roots() -> dict:
    return {"apic": os.path.dirname(os.path.dirname(os.path.abspath(apic.__file__))), "benchmarks": REPO,
            "scripts": REPO}


def test_the_scan_sees_the_tree():
    edges = build(tree_modules(_roots()))
    assert {"apic.replay.program", "apic.replay.cpu.table", "benchmarks.cuda_replay", "scripts.import_graph"} \
        <= set(edges)
    assert "apic.replay.cpu.table" in edges["apic.replay.program"]
    assert "apic.replay.parallel.split_pool" in edges["apic.replay.program"]  # a function-local import counts
    assert "benchmarks.cuda_methods" in edges["benchmarks.cuda_issue_paths"]
    assert "apic.replay.cpu" in edges["apic.replay.cpu.table"]  # the package, imported first
    assert "apic" not in edges["apic.replay"]  # but not the top package


def test_no_import_circle_anywhere():
    found = circles(build(tree_modules(_roots())))
    assert found == [], "import circles:\n" + "\n".join(describe(c) for c in found)


def _plant(tmp_path, files: dict) -> dict:
    for rel, text in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return {"apic": str(tmp_path), "benchmarks": str(tmp_path), "scripts": str(tmp_path)}


def test_a_planted_circle_is_found_and_named(tmp_path):
    roots = _plant(tmp_path, {
        "apic/__init__.py": "",
        "apic/sub/__init__.py": "",
        "apic/sub/a.py": "from apic.sub import b\n",
        "apic/sub/b.py": "def f():\n    from apic.sub.c import x  # a lazy import closes it\n",
        "apic/sub/c.py": "from . import a\nx = 1\n",
        "apic/sub/d.py": "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    from apic.sub import e\n",
        "apic/sub/e.py": "import apic.sub.d\n",
        "benchmarks/__init__.py": "",
        "benchmarks/one.py": "import benchmarks.two\n",
        "benchmarks/two.py": "def g():\n    from benchmarks.one import h\n",
        "scripts/s1.py": "import s2\n",
        "scripts/s2.py": "from apic.sub import d\nimport s1\n",
    })
    found = circles(build(tree_modules(roots)))
    named = [describe(c) for c in found]
    assert [[m for m, _, _ in c] for c in found] == [
        ["apic.sub.a", "apic.sub.b", "apic.sub.c"], ["benchmarks.one", "benchmarks.two"], ["scripts.s1", "scripts.s2"]]
    assert "apic.sub.b imports apic.sub.c (" in named[0] and "b.py:2)" in named[0], named[0]
    assert not any("apic.sub.d" in n for n in named), "an import under TYPE_CHECKING never runs"


def test_a_package_importing_its_own_module_is_a_circle(tmp_path):
    """``pkg/__init__`` importing ``pkg.m``, which imports ``pkg`` again first: the re-export that makes circles."""
    roots = _plant(tmp_path, {"apic/__init__.py": "", "apic/pkg/__init__.py": "from apic.pkg.m import y\n",
                              "apic/pkg/m.py": "y = 1\n"})
    assert [[m for m, _, _ in c] for c in circles(build(tree_modules(roots)))] == [["apic.pkg", "apic.pkg.m"]]


def test_no_circle_in_a_tree_without_one(tmp_path):
    roots = _plant(tmp_path, {"apic/__init__.py": "from apic import a\n", "apic/a.py": "import apic.b\n",
                              "apic/b.py": "import os\n", "benchmarks/__init__.py": "",
                              "benchmarks/x.py": "import apic\n"})
    assert circles(build(tree_modules(roots))) == []
