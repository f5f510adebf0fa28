"""The footprint evaluator: runs a kernel's Python AST once per task of one launch, on what is known of the
launch (its task ids, its integer and boolean scalar arguments, the contents of the integer and boolean
arrays it only reads), and lists every element each task may read or write of the arrays it writes.

Only integers and booleans are followed; every other value (a float, a vector, an element of an array
the kernel writes) is :data:`UNKNOWN`. The lists are a superset of what the compiled kernel touches for
those contents:

* a branch whose condition is known runs as the kernel runs it; one whose condition is unknown runs both
  ways, and a name the two ways leave different is unknown after it (``break``, ``continue`` and
  ``return`` under an unknown condition are joined the same way);
* a loop runs its known iterations; a ``for`` whose range is unknown is refused unless its body touches
  no array the kernel may write and calls no user function (it is then skipped, and every name it
  assigns is unknown after it); a ``while`` whose condition is unknown is refused;
* an access of an array the kernel may write must have known indices, inside the array;
* arrays may only be indexed, measured (``len``, ``.shape``), passed to a user ``@wp.func`` or to an
  atomic; tiles, printing, ``store``/``address`` and calls through an expression are refused.

Anything else raises :class:`Refused` with its reason. Which contents the answer depends on is what
:class:`Evaluation` records (``concrete``): the launch's caller checks them again before each split.
"""

from __future__ import annotations

import ast
import ctypes
import operator

import numpy as np
import warp as wp

from apic.record import splittable as _task
from apic.record.world_proof import _ARRAY_CONSTRUCTORS


class Refused(Exception):
    pass


class _LoopDone(Exception):
    pass


class _Unknown:
    __slots__ = ()

    def __repr__(self) -> str:
        return "UNKNOWN"


UNKNOWN = _Unknown()
_LIMIT = 1 << 31  # an integer outside int32 is not followed (Warp's int wraps there)
_SAFE_BUILTINS = {"min": min, "max": max, "abs": abs}
_UNSAFE = _task._UNSAFE_CALL_NAMES
_UNSAFE_PREFIXES = ("tile", "print", "adjoint")
_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.LShift: operator.lshift,
           ast.RShift: operator.rshift, ast.BitAnd: operator.and_, ast.BitOr: operator.or_,
           ast.BitXor: operator.xor}
_COMPARE = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
            ast.Gt: operator.gt, ast.GtE: operator.ge}


class Array:
    """One array argument of the launch: its descriptor, and whether the kernel may write it."""

    __slots__ = ("label", "ptr", "shape", "strides", "dtype", "may_write", "values")

    def __init__(self, label: str, ptr: int, shape: tuple, strides: tuple, dtype, may_write: bool) -> None:
        self.label, self.ptr, self.shape, self.strides = label, ptr, shape, strides
        self.dtype, self.may_write, self.values = dtype, may_write, None


class View:
    """An array value in the evaluation: ``array`` indexed by ``prefix`` so far."""

    __slots__ = ("array", "prefix")

    def __init__(self, array: Array, prefix: tuple = ()) -> None:
        self.array, self.prefix = array, prefix

    def __eq__(self, other) -> bool:
        return type(other) is View and other.array is self.array and other.prefix == self.prefix

    __hash__ = None


def _writable(value) -> bool:
    """Whether a value is, or holds, a view of an array the kernel may write."""
    if isinstance(value, View):
        return value.array.may_write
    return isinstance(value, tuple) and any(_writable(v) for v in value)


def _holds_view(value) -> bool:
    return isinstance(value, View) or (isinstance(value, tuple) and any(_holds_view(v) for v in value))


def _known(value) -> bool:
    return type(value) in (int, bool)


def _int(value):
    return value if -_LIMIT <= value < _LIMIT else UNKNOWN


def _same(a, b) -> bool:
    return a is b or (type(a) is type(b) and a == b)


def _join(a: dict | None, b: dict | None) -> dict | None:
    if a is None:
        return b
    if b is None:
        return a
    # a name one way left unbound is unknown (not the module global of that name)
    return {name: value if _same(value, b.get(name, UNKNOWN)) else UNKNOWN for name, value in a.items()} | {
        name: UNKNOWN for name in b.keys() - a.keys()}


def _join_all(envs) -> dict | None:
    found = None
    for env in envs:
        found = _join(found, env)
    return found


class Evaluation:
    """The accesses of one launch's tasks. After :meth:`run`: ``reads`` and ``writes`` map each array the
    tasks may write to two lists, flat element indices and the task of each; ``concrete`` holds the arrays
    whose contents decided something."""

    def __init__(self, kernel, args: dict, dim: tuple, budget: int) -> None:
        self.kernel, self.args, self.dim, self.budget = kernel, args, tuple(int(n) for n in dim), budget
        self.reads: dict = {}
        self.writes: dict = {}
        self.concrete: set = set()
        self.lenient = 0  # > 0: evaluating what the kernel may not run (a decided operand of and/or, ...)
        self.task = 0
        self._inert: dict = {}
        self._opaque: dict = {}
        self._pure: dict = {}  # (function, arguments) -> value, of calls given no array
        self._depth = 0

    def run(self) -> None:
        definition = _task.source_definition(self.kernel)
        scope = _task._scope(getattr(self.kernel.adj, "func", None))
        tasks = int(np.prod(self.dim, dtype=np.int64)) if self.dim else 1
        budget = self.budget
        for task in range(tasks):
            self.task = task
            _Body(self, scope).block(definition.body, dict(self.args))
            if task == 0 and (budget - self.budget) * tasks > budget:  # refused now rather than at the end
                raise Refused(f"{tasks:,} tasks of {budget - self.budget:,} steps each: too many to evaluate "
                              "its footprint at lowering")

    def tid(self):
        if len(self.dim) <= 1:
            return self.task
        ids, rest = [], self.task
        for n in reversed(self.dim):
            ids.append(rest % n)
            rest //= n
        return tuple(reversed(ids))

    def step(self, node) -> None:
        self.budget -= 1
        if self.budget < 0:
            raise Refused("too many steps to evaluate its footprint at lowering")

    def access(self, view: View, indices: tuple, node, write: bool):
        """An element of ``view`` at ``indices`` read or written by the current task; its value."""
        array = view.array
        full = view.prefix + indices
        if not array.ptr:
            raise Refused(f"line {node.lineno}: accesses {array.label}, a null array")
        known = all(_known(i) for i in full)
        if array.may_write or write:
            if not array.may_write:
                raise Refused(f"line {node.lineno}: writes {array.label}, which the analysis did not find written")
            if not known:
                raise Refused(f"line {node.lineno}: {'writes' if write else 'reads'} {array.label} at an index "
                              "not known from the launch's index data")
            flat = self._flat(array, full, node)
            lists = (self.writes if write else self.reads).setdefault(array.label, ([], []))
            lists[0].append(flat)
            lists[1].append(self.task)
            return UNKNOWN
        if not known or array.dtype.kind not in "iub":
            return UNKNOWN
        if self.lenient and not all(0 <= i < n for i, n in zip(full, array.shape)):
            return UNKNOWN
        self._flat(array, full, node)  # in bounds
        if array.values is None:
            array.values = _host_view(array)
            self.concrete.add(array.label)
        value = array.values[full]
        return bool(value) if array.dtype.kind == "b" else _int(int(value))

    @staticmethod
    def _flat(array: Array, full: tuple, node) -> int:
        if len(full) != len(array.shape):
            raise Refused(f"line {node.lineno}: indexes {array.label} with {len(full)} of its "
                          f"{len(array.shape)} dimensions")
        flat = 0
        for i, n in zip(full, array.shape):
            if not 0 <= i < n:
                raise Refused(f"line {node.lineno}: index {i} out of bounds of {array.label} (shape {array.shape})")
            flat = flat * n + i
        return flat


def _host_view(array: Array) -> np.ndarray:
    """The array's elements, read in place (CPU memory)."""
    lo = sum(min(0, (n - 1) * s) for n, s in zip(array.shape, array.strides))
    hi = sum(max(0, (n - 1) * s) for n, s in zip(array.shape, array.strides)) + array.dtype.itemsize
    buffer = (ctypes.c_char * (hi - lo)).from_address(array.ptr + lo)
    return np.ndarray(array.shape, array.dtype, buffer, offset=-lo, strides=array.strides)


class _Body:
    """The statements of the kernel or of one user function, run for the current task."""

    def __init__(self, evaluation: Evaluation, scope) -> None:
        self.ev, self.scope = evaluation, scope
        self.breaks: list = []
        self.continues: list = []
        self.returns: list = []

    def refuse(self, node, why: str):
        raise Refused(f"line {getattr(node, 'lineno', '?')}: {why}")

    # --- statements -----------------------------------------------------------------------------------
    def block(self, statements: list, env: dict) -> dict | None:
        """Run ``statements``; the names after them, or None when every way through left the block."""
        for statement in statements:
            env = self.statement(statement, env)
            if env is None:
                return None
        return env

    def statement(self, node, env: dict) -> dict | None:
        self.ev.step(node)
        if isinstance(node, ast.Assign):
            value = self.value(node.value, env)
            for target in node.targets:
                self.assign(target, value, env, node)
        elif isinstance(node, ast.AnnAssign):
            if node.value is not None:
                self.assign(node.target, self.value(node.value, env), env, node)
        elif isinstance(node, ast.AugAssign):
            value = self.value(node.value, env)
            if isinstance(node.target, ast.Name):
                env[node.target.id] = self.binary(node.op, env.get(node.target.id, UNKNOWN), value)
            else:
                self.store(node.target, env, node, update=True)
        elif isinstance(node, ast.Expr):
            self.value(node.value, env)
        elif isinstance(node, ast.If):
            test = self.truth(self.value(node.test, env))
            if test is UNKNOWN:
                return _join(self.block(node.body, dict(env)), self.block(node.orelse, dict(env)))
            return self.block(node.body if test else node.orelse, env)
        elif isinstance(node, ast.For):
            return self.for_loop(node, env)
        elif isinstance(node, ast.While):
            return self.while_loop(node, env)
        elif isinstance(node, ast.Return):
            self.returns.append(UNKNOWN if node.value is None else self.value(node.value, env))
            return None
        elif isinstance(node, ast.Break):
            self.breaks.append(env)
            return None
        elif isinstance(node, ast.Continue):
            self.continues.append(env)
            return None
        elif not isinstance(node, ast.Pass):
            self.refuse(node, f"{type(node).__name__} statement not evaluated")
        return env

    def loop(self, node, env: dict, iterations, bind) -> dict | None:
        """Run a loop's body once per item of ``iterations`` (``bind(env, item)`` before each); the names
        after it."""
        outer = self.breaks, self.continues
        exits = []
        try:
            for item in iterations:
                self.breaks, self.continues = [], []
                try:
                    bind(env, item)
                except _LoopDone:  # a while loop's condition is false
                    break
                after = _join_all([self.block(node.body, env)] + self.continues)
                exits += self.breaks
                if after is None:  # every way through the body left the loop
                    return _join_all(exits)
                env = after
        finally:
            self.breaks, self.continues = outer
        return _join_all([env] + exits)

    def for_loop(self, node: ast.For, env: dict) -> dict | None:
        if node.orelse:
            self.refuse(node, "for ... else not evaluated")
        call = node.iter
        if not (isinstance(call, ast.Call) and _task._call_name(call.func) == "range" and not call.keywords
                and 1 <= len(call.args) <= 3):
            self.refuse(node, "a loop over something other than range()")
        bounds = [self.value(arg, env) for arg in call.args]
        if self.inert(node, env):
            return self.skip(node, env)
        if not all(type(b) is int for b in bounds) or (len(bounds) == 3 and bounds[2] == 0):
            self.refuse(node, "a loop whose range is not known from the launch's index data")
        if not isinstance(node.target, ast.Name):
            self.refuse(node, "a loop target other than a name")
        name = node.target.id
        return self.loop(node, env, range(*bounds), lambda scope, i: scope.__setitem__(name, i))

    def while_loop(self, node: ast.While, env: dict) -> dict | None:
        if node.orelse:
            self.refuse(node, "while ... else not evaluated")

        def bind(scope: dict, _) -> None:
            test = self.truth(self.value(node.test, scope))
            if test is UNKNOWN:
                self.refuse(node, "a while loop whose condition is not known from the launch's index data")
            if not test:
                raise _LoopDone

        return self.loop(node, env, iter(int, 1), bind)

    def inert(self, node, env: dict) -> bool:
        """Whether a loop's body touches no array the kernel may write and calls no user function or unsafe
        builtin (so skipping it loses no access); remembered per loop, but checked against ``env``."""
        found = self.ev._inert.get(id(node))
        if found is None:
            found = self.ev._inert[id(node)] = _inert_shape(node, self.scope)
        if found is False:
            return False
        assigned, roots = found
        for root in roots:
            held = env.get(root)
            if _holds_view(held) and (root in assigned or _writable(held)):
                return False
        return True

    def skip(self, node, env: dict) -> dict:
        assigned, _ = self.ev._inert[id(node)]
        for name in assigned:
            env[name] = UNKNOWN
        return env

    def assign(self, target, value, env: dict, node) -> None:
        if isinstance(target, ast.Name):
            env[target.id] = value
        elif isinstance(target, (ast.Tuple, ast.List)):
            parts = value if isinstance(value, tuple) and len(value) == len(target.elts) else None
            for k, element in enumerate(target.elts):
                self.assign(element, UNKNOWN if parts is None else parts[k], env, node)
        elif isinstance(target, (ast.Subscript, ast.Attribute)):
            if _holds_view(value):  # a struct or local holding an array: its later writes would not be followed
                self.refuse(node, "stores an array into a field or an element")
            self.store(target, env, node, update=False)
        else:
            self.refuse(node, f"assigns to {type(target).__name__}")

    def store(self, target, env: dict, node, update: bool) -> None:
        """A store into ``target`` (``a[i] = x``, ``a[i].x = x``, ``v[k] = x`` on a local, ``+=``)."""
        base, indices = target, []
        while isinstance(base, (ast.Subscript, ast.Attribute)):
            if isinstance(base, ast.Subscript):
                indices.append(base.slice)
            base = base.value
        if not isinstance(base, ast.Name):
            self.refuse(node, "stores through an expression")
        held = env.get(base.id)
        if not isinstance(held, View):
            if base.id not in env:
                self.refuse(node, f"stores into {base.id}, not a local name or an array")
            env[base.id] = UNKNOWN  # a local vector, matrix or struct changes
            return
        keys = []
        for index in reversed(indices):
            keys += self.indices(index, env)
        rank = len(held.array.shape) - len(held.prefix)
        element = tuple(keys[:rank])
        if update:
            self.ev.access(held, element, node, write=False)
        self.ev.access(held, element, node, write=True)

    # --- expressions ----------------------------------------------------------------------------------
    def indices(self, node, env: dict) -> list:
        if isinstance(node, ast.Slice):
            self.refuse(node, "a slice")
        if isinstance(node, ast.Tuple):
            return [self.value(e, env) for e in node.elts]
        return [self.value(node, env)]

    @staticmethod
    def truth(value):
        if isinstance(value, View):
            return value.array.ptr != 0
        return bool(value) if _known(value) else UNKNOWN

    def binary(self, op, left, right):
        if type(left) is bool:
            left = int(left)
        if type(right) is bool:
            right = int(right)
        if type(left) is not int or type(right) is not int:
            return UNKNOWN
        function = _BINARY.get(type(op))
        if function is not None:
            if isinstance(op, (ast.LShift, ast.RShift)) and not 0 <= right < 32:
                return UNKNOWN
            return _int(function(left, right))
        if isinstance(op, (ast.Div, ast.FloorDiv, ast.Mod)) and left >= 0 and right > 0:
            # Warp's integer division and modulo truncate (C); Python's agree for these signs
            return left % right if isinstance(op, ast.Mod) else left // right
        return UNKNOWN

    def value(self, node, env: dict):
        """The value of an expression: an int or bool when known, a ``View``, a tuple, or UNKNOWN."""
        kind = type(node)
        if kind is ast.Name:
            found = env.get(node.id, env)
            return _constant(self.scope.get(node.id)) if found is env else found
        if kind is ast.Constant:
            return node.value if type(node.value) in (int, bool) else UNKNOWN
        if kind is ast.BinOp:
            return self.binary(node.op, self.value(node.left, env), self.value(node.right, env))
        if kind is ast.Call:
            return self.call(node, env)
        if isinstance(node, ast.Attribute):
            return self.attribute(node, env)
        if isinstance(node, ast.Subscript):
            base = self.value(node.value, env)
            keys = tuple(self.indices(node.slice, env))
            if isinstance(base, View):
                rank = len(base.array.shape) - len(base.prefix)
                if len(keys) < rank:
                    return View(base.array, base.prefix + keys)
                value = self.ev.access(base, keys[:rank], node, write=False)
                return UNKNOWN if len(keys) > rank else value
            if isinstance(base, tuple) and len(keys) == 1 and type(keys[0]) is int and 0 <= keys[0] < len(base):
                return base[keys[0]]
            return UNKNOWN
        if isinstance(node, ast.BinOp):
            return self.binary(node.op, self.value(node.left, env), self.value(node.right, env))
        if isinstance(node, ast.UnaryOp):
            operand = self.value(node.operand, env)
            if isinstance(node.op, ast.Not):
                truth = self.truth(operand)
                return UNKNOWN if truth is UNKNOWN else not truth
            if _known(operand) and isinstance(node.op, ast.USub):
                return _int(-int(operand))
            if _known(operand) and isinstance(node.op, ast.UAdd):
                return int(operand)
            return UNKNOWN
        if isinstance(node, ast.BoolOp):
            return self.bool_op(node, env)
        if isinstance(node, ast.Compare):
            return self.compare(node, env)
        if isinstance(node, ast.IfExp):
            # Warp may evaluate both ways (a select): both are, the one not taken leniently
            test = self.truth(self.value(node.test, env))
            body = self.maybe(node.body, env, lenient=test is False)
            orelse = self.maybe(node.orelse, env, lenient=test is True)
            if test is UNKNOWN:
                return body if _same(body, orelse) else UNKNOWN
            return body if test else orelse
        if isinstance(node, ast.Call):
            return self.call(node, env)
        if isinstance(node, (ast.Tuple, ast.List)):
            return tuple(self.value(e, env) for e in node.elts)
        self.refuse(node, f"{type(node).__name__} expression not evaluated")

    def attribute(self, node: ast.Attribute, env: dict):
        if isinstance(node.value, ast.Name) and node.value.id not in env:
            base = self.scope.get(node.value.id)
            if base is None:
                return UNKNOWN
            return _constant(getattr(base, node.attr, None))
        base = self.value(node.value, env)
        if isinstance(base, View):
            rest = base.array.shape[len(base.prefix):]
            if node.attr == "shape":
                return tuple(rest)
            if node.attr == "ndim":
                return len(rest)
            if node.attr == "strides":
                return tuple(base.array.strides[len(base.prefix):])
            self.refuse(node, f"reads .{node.attr} of array {base.array.label}")
        return UNKNOWN

    def bool_op(self, node: ast.BoolOp, env: dict):
        # Warp 1.19 stops at the first operand that decides, 1.12 evaluates them all: every operand is
        # evaluated, those after the decision leniently
        decided = None  # the result, once an operand decides it
        unknown = False
        for operand in node.values:
            truth = self.truth(self.maybe(operand, env, lenient=decided is not None))
            if decided is not None:
                continue
            if truth is UNKNOWN:
                unknown = True
            elif truth != isinstance(node.op, ast.And):
                decided = truth
        if decided is not None:
            return decided
        return UNKNOWN if unknown else isinstance(node.op, ast.And)

    def maybe(self, node, env: dict, lenient: bool):
        """The value of an expression the kernel may not evaluate: where ``lenient``, an out-of-bounds read
        of an array it does not write is unknown instead of refused."""
        if not lenient:
            return self.value(node, env)
        self.ev.lenient += 1
        try:
            return self.value(node, env)
        finally:
            self.ev.lenient -= 1

    def compare(self, node: ast.Compare, env: dict):
        left = self.value(node.left, env)
        result = True
        for op, right_node in zip(node.ops, node.comparators):
            right = self.value(right_node, env)
            function = _COMPARE.get(type(op))
            if function is None or not (_known(left) and _known(right)):
                result = UNKNOWN
            elif result is not UNKNOWN and not function(left, right):
                result = False
            left = right
        return result

    def call(self, node: ast.Call, env: dict):
        name = _task._call_name(node.func)
        if name is None:
            self.refuse(node, "a call through an expression")
        if name == "tid":
            return self.ev.tid()
        names = self.ev._opaque.get(id(node))
        if names is None:
            names = self.ev._opaque[id(node)] = _opaque_call(node, self.scope)
        if names is not False and not any(_holds_view(env.get(n)) for n in names):
            return UNKNOWN  # a builtin of builtins over local values: nothing to record, nothing known
        args = [self.value(a, env) for a in node.args]
        keywords = {k.arg: self.value(k.value, env) for k in node.keywords}
        target = _task._resolve(node.func, self.scope)
        is_builtin = getattr(target, "is_builtin", None)
        if callable(is_builtin) and not is_builtin():
            return self.function(target, name, args, keywords, node)
        if name.startswith("atomic_"):
            if not args or not isinstance(args[0], View):
                self.refuse(node, f"calls {name} on something other than an array argument")
            view = args[0]
            rank = len(view.array.shape) - len(view.prefix)
            self.ev.access(view, tuple(args[1 : 1 + rank]), node, write=False)
            self.ev.access(view, tuple(args[1 : 1 + rank]), node, write=True)
            return UNKNOWN
        if name in _UNSAFE or name.startswith(_UNSAFE_PREFIXES) or name in _ARRAY_CONSTRUCTORS:
            self.refuse(node, f"calls {name}")
        if name == "len" and len(args) == 1 and isinstance(args[0], View):
            return args[0].array.shape[len(args[0].prefix)]
        if any(_holds_view(v) for v in (*args, *keywords.values())):
            self.refuse(node, f"passes an array to {name}")
        if name in _SAFE_BUILTINS and args and all(type(v) is int for v in args) and not keywords:
            return _int(_SAFE_BUILTINS[name](*args))
        if name in ("int", "int32") and len(args) == 1 and _known(args[0]):
            return int(args[0])
        if name == "bool" and len(args) == 1 and _known(args[0]):
            return bool(args[0])
        return UNKNOWN

    def function(self, function, name: str, args: list, keywords: dict, node):
        """A user ``@wp.func``: its body run with its parameters bound; its (joined) return value."""
        found = _functions.get(function)
        if found is None:
            found = _functions.put(function, _function_body(function))
        if isinstance(found, str):
            self.refuse(node, f"calls {name}, {found}")
        definition, scope, params = found
        if len(args) > len(params) or set(keywords) - set(params):
            self.refuse(node, f"calls {name} with arguments it does not take")
        bound = dict(zip(params, args)) | keywords
        defaults = definition.args.defaults
        for param, default in zip(params[len(params) - len(defaults):], defaults):
            if param not in bound:
                bound[param] = self.value(default, {})
        if set(params) - set(bound):
            self.refuse(node, f"calls {name} without all its arguments")
        # Kernel arrays reach a function only through its arguments: one given none touches no array, and
        # its value depends on its arguments alone (``dense_index(stride, i, j)``, called per element)
        pure = not any(_holds_view(v) for v in bound.values())
        if pure:
            key = (id(function), tuple((k, type(v), v) for k, v in bound.items()))
            if key in self.ev._pure:
                return self.ev._pure[key]
        value = self.run_function(definition, scope, bound, name, node)
        if pure:
            self.ev._pure[key] = value
        return value

    def run_function(self, definition, scope, bound: dict, name: str, node):
        self.ev._depth += 1
        if self.ev._depth > 64:
            self.refuse(node, f"calls nested deeper than 64 ({name})")
        try:
            body = _Body(self.ev, scope)
            after = body.block(definition.body, bound)
        finally:
            self.ev._depth -= 1
        values = body.returns + ([UNKNOWN] if after is not None else [])
        first = values[0] if values else UNKNOWN
        return first if all(_same(first, v) for v in values) else UNKNOWN


_functions = _task._Memo()


def _function_body(function):
    """``(definition, scope, parameter names)`` of a user ``@wp.func``, or why it cannot be evaluated."""
    overloads = list(getattr(function, "user_overloads", {}).values()) or [function]
    definitions = [_task.source_definition(o) for o in overloads]
    if any(d is None for d in definitions) or getattr(overloads[0], "native_snippet", None) is not None:
        return "which has no Python source"
    if len({ast.dump(d) for d in definitions}) != 1:
        return "whose overloads differ"
    return definitions[0], _task._scope(getattr(overloads[0], "func", None)), [a.arg for a in definitions[0].args.args]


# builtins whose value the evaluation follows (and ``tid``): never skipped as opaque
_FOLLOWED = {"tid", "len", "int", "int32", "bool", *_SAFE_BUILTINS}


def _opaque_call(node: ast.Call, scope):
    """For a call of a Warp builtin whose value is not followed (``wp.cross(a, wp.sin(b))``) and whose
    arguments index nothing and call only such builtins: the names its arguments read (it is then
    unknown, with nothing to record, unless one of them holds an array); else False."""
    names = set()
    for part in ast.walk(node):
        if isinstance(part, ast.Subscript) or isinstance(part, (ast.Lambda, ast.NamedExpr)):
            return False
        if isinstance(part, ast.Call):
            name = _task._call_name(part.func)
            if (name is None or name in _FOLLOWED or name.startswith("atomic_") or name in _UNSAFE
                    or name.startswith(_UNSAFE_PREFIXES) or name in _ARRAY_CONSTRUCTORS):
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


def _constant(value):
    """A module-level or closure value as the kernel sees it: ints and booleans (an ``IntEnum`` member
    too), else UNKNOWN."""
    if type(value) is bool:
        return value
    if isinstance(value, int):
        return _int(int(value))
    return UNKNOWN


def _inert_shape(node, scope):
    """For a loop: ``(names it assigns, array names it indexes)`` when it stores only into local names and
    calls only safe builtins; else False."""
    assigned: set[str] = set()
    roots: set[str] = set()
    for part in ast.walk(node):
        if isinstance(part, (ast.Break, ast.Continue, ast.Return, ast.While)):  # a while loop is never skipped
            return False
        if isinstance(part, ast.Call):
            name = _task._call_name(part.func)
            if name is None or name.startswith("atomic_") or name in _UNSAFE or name.startswith(_UNSAFE_PREFIXES):
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
