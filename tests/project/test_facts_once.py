"""Each fact once: a fact the package spells in one named place is not spelled again elsewhere.

The scan reads every module's AST (no import runs) and looks for the literal spellings of facts that
have a home: the native handle kinds (``apic/targets/handle_kinds.py``), the saved-file naming rule and
the SHA-256 pattern (``apic/targets/files.py``), CUDA's grid extent in y and z (``apic/targets/cuda.py``)
and the pointer words of an array descriptor (``apic/targets/cpu.py``). A new spelling outside the home
fails here: name the constant instead. docs/ARCHITECTURE.md lists where each fact lives.
"""

from __future__ import annotations

import ast
import os

import pytest

import apic
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
