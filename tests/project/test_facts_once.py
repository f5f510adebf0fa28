"""Each fact once: a fact the package spells in one named place is not spelled again elsewhere.

The scan reads every module's AST (no import runs) and looks for the literal spellings of facts that
have a home: the native handle kinds (``apic/targets/handle_kinds.py``), the saved-file naming rule and
the SHA-256 pattern (``apic/targets/files.py``), CUDA's grid extent in y and z (``apic/targets/cuda.py``)
and the pointer words of an array descriptor (``apic/targets/cpu.py``). A new spelling outside the home
fails here: name the constant instead. It also finds type tests on op classes outside ``apic/record/ops.py``
and ``apic/record/effects.py``, whose predicates say what kind an op is. docs/ARCHITECTURE.md lists where
each fact lives.
"""

from __future__ import annotations

import ast
import os

import pytest

import apic
from apic.record import ops
from apic.targets import cpu, cuda, files, handle_kinds

pytestmark = [pytest.mark.once]

_PACKAGE = os.path.dirname(os.path.abspath(apic.__file__))

# fact -> (its home, relative to the package; what spells it, as a test of one AST constant node)
_HANDLE_KINDS = frozenset(handle_kinds.NATIVE)
_NAMING = ("[0-9a-f]{64}", "[0-9a-f]{16}", "[0-9a-f]{{16}}", "A-Za-z0-9_.-")
FACTS = {
    "a native handle kind": ("targets/handle_kinds.py", lambda v: isinstance(v, str) and v in _HANDLE_KINDS),
    "the saved-file naming rule or the SHA-256 pattern": (
        "targets/files.py", lambda v: isinstance(v, str) and any(p in v for p in _NAMING)),
    "CUDA's grid extent in y and z": ("targets/cuda.py", lambda v: type(v) is int and v == cuda.GRID_YZ_MAX),
    "the pointer words of an array descriptor": (
        "targets/cpu.py", lambda v: v == tuple(cpu.ARRAY_T_POINTER_SLOTS)),
}

# (module, fact) spellings that are another fact with the same value, each with why.
UNRELATED = {
    # the byte sizes a native call's scalar-values argument may have (none, or one 8-byte word)
    ("record/natives.py", "the pointer words of an array descriptor"),
}


def _constants(tree: ast.AST):
    """Every constant of a module: plain constants, and tuples of constants as one value."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant):
            yield node.lineno, node.value
        elif isinstance(node, ast.Tuple) and all(isinstance(e, ast.Constant) for e in node.elts):
            yield node.lineno, tuple(e.value for e in node.elts)


def spellings(source: str, module: str) -> list[tuple[str, int, str]]:
    """``(module, line, fact)`` of each fact ``source`` spells outside the fact's home."""
    found = []
    for line, value in _constants(ast.parse(source)):
        for fact, (home, spells) in FACTS.items():
            if module != home and (module, fact) not in UNRELATED and spells(value):
                found.append((module, line, fact))
    return found


def _modules():
    for folder, _, names in os.walk(_PACKAGE):
        for name in sorted(names):
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                yield os.path.relpath(path, _PACKAGE).replace(os.sep, "/"), path


def test_each_fact_is_spelled_in_its_home_only():
    found = []
    for module, path in _modules():
        with open(path, encoding="utf-8") as f:
            found += spellings(f.read(), module)
    assert found == [], "spelled again: use the constant of the fact's home (docs/ARCHITECTURE.md)"


def test_every_unrelated_spelling_still_occurs():
    """The exceptions may only shrink: one that no longer occurs is removed."""
    for module, fact in UNRELATED:
        with open(os.path.join(_PACKAGE, module), encoding="utf-8") as f:
            tree = ast.parse(f.read())
        assert any(FACTS[fact][1](value) for _, value in _constants(tree)), (module, fact)


def test_the_scan_finds_each_fact_spelled_again():
    """A module that spells each fact again is caught, once per fact (the scan can fail)."""
    source = ('kind = "Mesh"\nname = r"[a-z]+\\.[0-9a-f]{16}\\.o"\nGRID = 65535\nslots = (0, 8)\n'
              'digest = re.compile(r"[0-9a-f]{64}")\n')
    found = spellings(source, "format/example.py")
    assert sorted(fact for _, _, fact in found) == sorted([*FACTS, "the saved-file naming rule or the SHA-256 pattern"])
    assert spellings(source.replace('"Mesh"', "hk.MESH"), "targets/handle_kinds.py") != []


def test_the_homes_hold_their_facts():
    assert set(handle_kinds.RECORDED) < set(handle_kinds.NATIVE)
    assert files.SHA256.fullmatch("ab" * 32) and not files.SHA256.fullmatch("AB" * 32)
    assert files.file_name("wp_mod/x", "cd" * 32, ".o") == "wp_mod_x.cdcdcdcdcdcdcdcd.o"
    assert cpu.MODULE_FILE.fullmatch(files.file_name("m" * 300, "ef" * 32, ".o"))
    assert not cpu.MODULE_FILE.fullmatch(".hidden.0123456789abcdef.o")
    assert cpu.ARRAY_T_POINTERS == slice(cpu.ARRAY_T_POINTER_SLOTS[0], cpu.ARRAY_T_POINTER_SLOTS[-1] + 8)


# --- what kind an op is ---------------------------------------------------------------------------------
# An op class is tested (``isinstance``, ``issubclass``, ``type(op) is``/``==``/``in``) only in its homes: the
# predicates of record/ops.py (``is_cpu_launch``, ``moves_nbytes``, ...) and the kind table of record/effects.py
# (``EFFECTS``, ``control_of``). Elsewhere a module asks those.
OP_TYPE_HOMES = ("record/ops.py", "record/effects.py")
_OPS_MODULE = "apic.record.ops"
_OP_CLASSES = frozenset(spec.type.__name__ for spec in ops.OP_SPECS)


def op_type_tests(source: str, module: str) -> list[tuple[str, int]]:
    """``(module, line)`` of each test of an op class's type that ``source`` makes outside the homes. An op
    class is a name imported from apic.record.ops, or an attribute of that module imported under a name."""
    if module in OP_TYPE_HOMES:
        return []
    tree = ast.parse(source)
    names, modules = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == _OPS_MODULE:
            names |= {alias.asname or alias.name for alias in node.names if alias.name in _OP_CLASSES}
        elif isinstance(node, ast.ImportFrom) and node.module == "apic.record":
            modules |= {alias.asname or alias.name for alias in node.names if alias.name == "ops"}
        elif isinstance(node, ast.Import):
            modules |= {alias.asname for alias in node.names if alias.name == _OPS_MODULE and alias.asname}

    def op_class(node) -> bool:
        if isinstance(node, (ast.Tuple, ast.Set, ast.List)):
            return any(map(op_class, node.elts))
        if isinstance(node, ast.Name):
            return node.id in names
        return (isinstance(node, ast.Attribute) and node.attr in _OP_CLASSES and isinstance(node.value, ast.Name)
                and node.value.id in modules)

    def called(node, *functions) -> bool:
        return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in functions

    found = []
    for node in ast.walk(tree):
        if called(node, "isinstance", "issubclass") and len(node.args) == 2 and op_class(node.args[1]):
            found.append((module, node.lineno))
        elif isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            types = any(called(side, "type") or (called(side, "set") and side.args and called(side.args[0], "map")
                                                  and isinstance(side.args[0].args[0], ast.Name)
                                                  and side.args[0].args[0].id == "type") for side in sides)
            if types and any(map(op_class, sides)):
                found.append((module, node.lineno))
    return found


def test_op_classes_are_tested_in_their_homes_only():
    found = []
    for module, path in _modules():
        with open(path, encoding="utf-8") as f:
            found += op_type_tests(f.read(), module)
    assert found == [], "an op class tested again: ask a predicate of record/ops.py or record/effects.py"


def test_the_scan_finds_each_op_type_test():
    """Each spelling of a type test on an op class is caught (the scan can fail); Warp's own ``Launch`` is not."""
    source = ("from apic.record import ops as rec\nfrom apic.record.ops import Jump as J, Branch\n"
              "from warp import context\n"
              "a = isinstance(op, rec.Launch)\nb = type(op) is rec.Memcpy\nc = isinstance(op, (J, Branch))\n"
              "d = type(op) in (rec.Memset, rec.Memtile)\ne = set(map(type, ops)) == {rec.Launch}\n"
              "f = isinstance(op, (rec.Branch, rec.Jump))\ng = type(op) is not J\n"
              "h = isinstance(x, context.Launch)\ni = type(op) is rec.Ref\nj = isinstance(op, rec.Blob)\n")
    assert [line for _, line in op_type_tests(source, "replay/example.py")] == [4, 5, 6, 7, 8, 9, 10]
    assert op_type_tests(source, "record/example.py") != []
    assert op_type_tests(source, "record/ops.py") == op_type_tests(source, "record/effects.py") == []
