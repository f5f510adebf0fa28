"""What the footprint evaluation asks of a piece of AST, remembered by the caller per node or function: which
calls may have effects it must see, which calls and loops it may skip, a user function's body, a module
constant's value (:mod:`apic.record.parallel.footprint_eval`)."""

from __future__ import annotations

import ast
import builtins

import warp as wp

from apic import _compat
from apic.record.parallel import splittable as _task
from apic.record.parallel.footprint_values import UNKNOWN, as_int
from apic.record.parallel.world_proof import _ARRAY_CONSTRUCTORS

_INT32_TYPES = (int, bool, wp.int32, wp.bool)
# a call's value is never an array, except these builtins' (a select between arrays)
_ARRAY_SELECTS = {"where", "select"}

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


def follows_type(declared) -> bool:
    """Whether a value declared of type ``declared`` keeps a known int32 the kernel gives it: ``int``,
    ``wp.int32``, ``bool``, or no scalar type at all (an array, a generic type); another scalar type
    (``wp.uint8``, ``float``) converts it, and the evaluation does not follow the conversion."""
    if declared in _INT32_TYPES:
        return True
    return not (declared is float or declared in _compat.wp_types.scalar_types)


def declared(annotation, scope):
    """The type an annotation names (``int``, ``wp.uint8``, a module's alias of one), or None."""
    found = _task._resolve(annotation, scope)
    if found is None and isinstance(annotation, ast.Name):
        found = getattr(builtins, annotation.id, None)
    return found


def follows_annotation(annotation, scope) -> bool:
    """:func:`follows_type` of an annotation; one that names nothing known is not followed."""
    found = declared(annotation, scope)
    return found is not None and follows_type(found)


def function_body(function):
    """``(definition, scope, parameter names, defaults, parameters declared another scalar type, whether its
    return value keeps an int32)`` of a user ``@wp.func``, or why it cannot be evaluated. The defaults are
    the values Warp bound when the function was defined (``Function.defaults``), as the kernel sees them."""
    overloads = list(getattr(function, "user_overloads", {}).values()) or [function]
    definitions = [_task.source_definition(o) for o in overloads]
    if any(d is None for d in definitions) or getattr(overloads[0], "native_snippet", None) is not None:
        return "which has no Python source"
    if len({ast.dump(d) for d in definitions}) != 1:
        return "whose overloads differ"
    first, definition = overloads[0], definitions[0]
    if any(getattr(o, "defaults", None) != getattr(first, "defaults", None) for o in overloads):
        return "whose overloads' defaults differ"
    scope = _task._scope(getattr(first, "func", None))
    params = [a.arg for a in definition.args.args]
    types = getattr(first, "input_types", None) or {}
    defaults = {name: constant(value) for name, value in (getattr(first, "defaults", None) or {}).items()}
    narrowed = tuple(name for name in params if name in types and not follows_type(types[name]))
    returns = definition.returns is None or follows_annotation(definition.returns, scope)
    return definition, scope, params, defaults, narrowed, returns


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


def _may_be_array(value) -> bool:
    """Whether an assigned expression's value may be an array: anything but arithmetic, a comparison, a
    constant or a builtin's value (other than a select)."""
    if isinstance(value, (ast.BinOp, ast.UnaryOp, ast.Compare, ast.BoolOp, ast.Constant)):
        return False
    return not (isinstance(value, ast.Call) and _task._call_name(value.func) not in _ARRAY_SELECTS)


def inert_shape(node, scope):
    """For a loop: ``(names it assigns, names it reads, names it may bind to an array)`` when it stores only
    into local names and calls only safe builtins; else False."""
    assigned: set[str] = set()
    roots: set[str] = set()
    copies: set[str] = set()
    for part in ast.walk(node):
        if isinstance(part, (ast.Assign, ast.AnnAssign)) and part.value is not None and _may_be_array(part.value):
            for target in part.targets if isinstance(part, ast.Assign) else [part.target]:
                copies.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
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
    return frozenset(assigned), frozenset(roots), frozenset(copies)
