"""Print the import graph of the apic package: module-level edges, cycles and function-local imports.

Uses only the standard library (``ast``), so it runs without warp or numba installed::

    python scripts/import_graph.py            # edges, cycles, local-import counts
    python scripts/import_graph.py --local    # also list every function-local import
    python scripts/import_graph.py --root DIR # the apic package of another checkout (a before/after)

A module-level import is one that runs when the module is imported (at the top, or in a module-level
``try``/``if``); a function-local import runs only when its function is called. Imports under
``if TYPE_CHECKING:`` never run and are left out. Importing ``apic.format.reader`` first imports its
parent package ``apic.format``: that implicit import counts as an edge, except to the root ``apic``
(the public API, which imports the rest and is always imported first).

``tests/project/test_layering.py`` imports this file and asserts the layering rules on what it returns.
"""

from __future__ import annotations

import ast
import os
import sys
from dataclasses import dataclass, field

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = "apic"


@dataclass
class LocalImport:
    """One import written inside a function body."""

    module: str  # the importing module
    target: str  # the imported module (an apic module, or the top-level name of a third-party one)
    line: int
    function: str
    comment: str  # the comment on the import's line (or the line above), without the ``#``


@dataclass
class Graph:
    """The import graph of one package."""

    modules: list = field(default_factory=list)  # every module name, sorted
    edges: dict = field(default_factory=dict)  # module -> set of apic modules imported at module level
    local: list = field(default_factory=list)  # LocalImport, in file order


def module_files(root: str = ROOT, package: str = PACKAGE) -> dict:
    """Map each module name of ``package`` under ``root`` to its file path."""
    files = {}
    for dirpath, dirnames, filenames in os.walk(os.path.join(root, package)):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith((".", "__pycache__")))
        for name in sorted(filenames):
            if not name.endswith(".py"):
                continue
            rel = os.path.relpath(os.path.join(dirpath, name), root)[: -len(".py")]
            parts = rel.split(os.sep)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            files[".".join(parts)] = os.path.join(dirpath, name)
    return files


def _resolve(names: list, modules: set) -> list:
    """The apic modules (or third-party top-level names) that one import statement brings in."""
    out = []
    for name in names:
        if name in modules:
            out.append(name)
        elif name.split(".")[0] == PACKAGE:
            # ``from apic.x import y`` where y is not a module: the edge goes to apic.x
            parent = name.rsplit(".", 1)[0]
            out.append(parent if parent in modules else name)
        else:
            out.append(name.split(".")[0])
    return out


def _imported_names(node: ast.AST, module: str, is_package: bool) -> list:
    """The dotted names an Import/ImportFrom node names (``from a import b`` gives ``a.b``)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        parts = module.split(".")
        if not is_package:
            parts = parts[:-1]
        parts = parts[: len(parts) - (node.level - 1)]
        base = ".".join(parts + ([base] if base else []))
    return [f"{base}.{alias.name}" for alias in node.names] + [base]


def _is_type_checking(test: ast.AST) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _comment(lines: list, line: int) -> str:
    """The comment on ``line`` (1-based), or on the line above when that is a comment only."""
    text = lines[line - 1]
    if "#" in text:
        return text.split("#", 1)[1].strip()
    above = lines[line - 2].strip() if line >= 2 else ""
    return above[1:].strip() if above.startswith("#") else ""


def build(root: str = ROOT, package: str = PACKAGE) -> Graph:
    """Parse every module of ``package`` and return its import graph."""
    files = module_files(root, package)
    modules = set(files)
    graph = Graph(modules=sorted(modules), edges={m: set() for m in modules})
    for module, path in sorted(files.items()):
        with open(path, encoding="utf-8") as f:
            source = f.read()
        lines = source.splitlines()
        is_package = path.endswith("__init__.py")

        def visit(node, function, module=module, is_package=is_package, lines=lines):
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.If) and _is_type_checking(child.test):
                    for sub in child.orelse:
                        visit(ast.Module(body=[sub], type_ignores=[]), function)
                    continue
                if isinstance(child, (ast.Import, ast.ImportFrom)):
                    names = _imported_names(child, module, is_package)
                    if isinstance(child, ast.ImportFrom):
                        # ``from a import b``: b is a module of a, or a name defined in a
                        names = [n for n in names[:-1] if n in modules] or [names[-1]]
                    targets = sorted(set(_resolve(names, modules)))
                    for target in targets:
                        if target == module:
                            continue
                        if function is None:
                            if target in modules:
                                graph.edges[module].add(target)
                        else:
                            graph.local.append(
                                LocalImport(module, target, child.lineno, function, _comment(lines, child.lineno))
                            )
                    continue
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                    visit(child, function or getattr(child, "name", "<lambda>"))
                else:
                    visit(child, function)

        visit(ast.parse(source, path), None)
        parent = module.rsplit(".", 1)[0] if "." in module else None
        if parent is not None and parent != package and parent in modules:
            graph.edges[module].add(parent)
    return graph


def strongly_connected(edges: dict) -> list:
    """The strongly connected components of more than one node of the graph ``edges`` (node -> the nodes it
    points to; every node a key), each as a sorted list, in sorted order: Tarjan's algorithm, iteratively (no
    recursion limit on a deep graph)."""
    index, low, stack, on_stack, components = {}, {}, [], set(), []
    for v in sorted(edges):
        if v in index:
            continue
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        work = [(v, iter(sorted(edges[v])))]
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    component.append(w)
                    if w == node:
                        break
                if len(component) > 1:
                    components.append(sorted(component))
    return sorted(components)


def cycles(graph: Graph) -> list:
    """The strongly connected components of the module-level graph that hold more than one module."""
    return strongly_connected({m: graph.edges.get(m, set()) for m in graph.modules})


def cycles_with_local(graph: Graph) -> list:
    """The cycles that appear when function-local apic imports count as edges too (the hidden cycles)."""
    full = Graph(modules=graph.modules, edges={m: set(e) for m, e in graph.edges.items()})
    for imp in graph.local:
        if imp.target in full.edges:
            full.edges[imp.module].add(imp.target)
    return cycles(full)


def main(argv: list) -> int:
    root = argv[argv.index("--root") + 1] if "--root" in argv else ROOT
    graph = build(root)
    print("# module-level imports (apic modules only)")
    for module in graph.modules:
        targets = sorted(graph.edges[module])
        print(f"{module}: {', '.join(targets) if targets else '-'}")
    found = cycles(graph)
    print(f"\n# cycles among module-level imports: {len(found)}")
    for component in found:
        print("  " + " <-> ".join(component))
    hidden = cycles_with_local(graph)
    print(f"\n# cycles when function-local imports count too: {len(hidden)}")
    for component in hidden:
        print("  " + " <-> ".join(component))
    apic_local = [i for i in graph.local if i.target.split(".")[0] == PACKAGE]
    print(f"\n# function-local imports: {len(graph.local)} ({len(apic_local)} of apic modules)")
    counts = {}
    for imp in graph.local:
        counts[imp.target] = counts.get(imp.target, 0) + 1
    for target, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        print(f"  {n:3d}  {target}")
    if "--local" in argv:
        print("\n# every function-local import")
        for imp in graph.local:
            print(f"  {imp.module}:{imp.line} {imp.function}() -> {imp.target}  # {imp.comment}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
