"""What the footprint evaluation asks of a piece of AST, remembered by the caller per node or function: which
calls may have effects it must see, which calls and loops it may skip, a user function's body, a module
constant's value (:mod:`apic.record.footprint_eval`)."""

from __future__ import annotations

import ast

import warp as wp

from apic.record import splittable as _task
from apic.record.footprint_values import UNKNOWN, as_int
from apic.record.world_proof import _ARRAY_CONSTRUCTORS

SAFE_BUILTINS = {"min": min, "max": max, "abs": abs}  # followed on known integers
_UNSAFE_PREFIXES = ("tile", "print", "adjoint")
# builtins whose value the evaluation follows (and ``tid``): never skipped as opaque
_FOLLOWED = {"tid", "len", "int", "int32", "bool", *SAFE_BUILTINS}


def effectful(name: str) -> bool:
    """Whether a builtin named ``name`` reaches memory the evaluation must see or refuse: an atomic, a tile,
    printing, ``store``/``address`` and the like, or an array made from a pointer (whose writes would not
    be followed)."""
    return (name.startswith("atomic_") or name in _task._UNSAFE_CALL_NAMES or name.startswith(_UNSAFE_PREFIXES)
            or name in _ARRAY_CONSTRUCTORS)


functions = _task._Memo()  # user function -> function_body(it)


def function_body(function):
    """``(definition, scope, parameter names)`` of a user ``@wp.func``, or why it cannot be evaluated."""
    overloads = list(getattr(function, "user_overloads", {}).values()) or [function]
    definitions = [_task.source_definition(o) for o in overloads]
    if any(d is None for d in definitions) or getattr(overloads[0], "native_snippet", None) is not None:
        return "which has no Python source"
    if len({ast.dump(d) for d in definitions}) != 1:
        return "whose overloads differ"
    return definitions[0], _task._scope(getattr(overloads[0], "func", None)), [a.arg for a in definitions[0].args.args]


def opaque_call(node: ast.Call, scope):
    """For a call of a Warp builtin whose value is not followed (``wp.cross(a, wp.sin(b))``) and whose
    arguments index nothing and call only such builtins: the names its arguments read (it is then
    unknown, with nothing to record, unless one of them holds an array); else False."""
    names = set()
    for part in ast.walk(node):
        if isinstance(part, ast.Subscript) or isinstance(part, (ast.Lambda, ast.NamedExpr)):
            return False
        if isinstance(part, ast.Call):
            name = _task._call_name(part.func)
            if name is None or name in _FOLLOWED or effectful(name):
                return False
            target = _task._resolve(part.func, scope)
            if target is None:
                target = getattr(wp, name, None)
            is_builtin = getattr(target, "is_builtin", None)
            if not (callable(is_builtin) and is_builtin()) and not isinstance(target, type):
                return False
        if isinstance(part, ast.Name):
            names.add(part.id)
    return frozenset(names)


def constant(value):
    """A module-level or closure value as the kernel sees it: ints and booleans (an ``IntEnum`` member
    too), else UNKNOWN."""
    if type(value) is bool:
        return value
    if isinstance(value, int):
        return as_int(int(value))
    return UNKNOWN


def inert_shape(node, scope):
    """For a loop: ``(names it assigns, array names it indexes)`` when it stores only into local names and
    calls only safe builtins; else False."""
    assigned: set[str] = set()
    roots: set[str] = set()
    for part in ast.walk(node):
        if isinstance(part, (ast.Break, ast.Continue, ast.Return, ast.While)):  # a while loop is never skipped
            return False
        if isinstance(part, ast.Call):
            name = _task._call_name(part.func)
            if name is None or effectful(name):
                return False
            target = _task._resolve(part.func, scope)
            is_builtin = getattr(target, "is_builtin", None)
            if callable(is_builtin) and not is_builtin():
                return False
            if target is None and getattr(wp, name, None) is None and name not in ("range", "int", "float", "bool",
                                                                                  "len", "abs", "min", "max"):
                return False
        if isinstance(part, ast.Name):
            # a name read may hold an array the kernel writes, indexed or passed to a builtin
            (assigned if isinstance(part.ctx, ast.Store) else roots).add(part.id)
        if isinstance(part, (ast.Subscript, ast.Attribute)) and isinstance(part.ctx, ast.Store):
            base = part
            while isinstance(base, (ast.Subscript, ast.Attribute)):
                base = base.value
            if not isinstance(base, ast.Name):
                return False
            assigned.add(base.id)
    return frozenset(assigned), frozenset(roots)
