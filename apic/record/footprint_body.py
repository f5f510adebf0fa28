"""The footprint evaluation's interpreter: the statements and expressions of a kernel or a user function,
run for one task (:mod:`apic.record.footprint_eval`, whose docstring says what is followed and how)."""

from __future__ import annotations

import ast
import operator

from apic.record import footprint_shapes as shapes
from apic.record import splittable as _task
from apic.record.footprint_values import (UNKNOWN, Refused, View, as_int, holds_view, join, join_all, known, same,
                                          writable)


class _LoopDone(Exception):
    pass


_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.LShift: operator.lshift,
           ast.RShift: operator.rshift, ast.BitAnd: operator.and_, ast.BitOr: operator.or_,
           ast.BitXor: operator.xor}
_COMPARE = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
            ast.Gt: operator.gt, ast.GtE: operator.ge}


class Body:
    """The statements of the kernel or of one user function, run for the current task."""

    def __init__(self, evaluation, scope) -> None:
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
                return join(self.block(node.body, dict(env)), self.block(node.orelse, dict(env)))
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
                after = join_all([self.block(node.body, env)] + self.continues)
                exits += self.breaks
                if after is None:  # every way through the body left the loop
                    return join_all(exits)
                env = after
        finally:
            self.breaks, self.continues = outer
        return join_all([env] + exits)

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
            found = self.ev._inert[id(node)] = shapes.inert_shape(node, self.scope)
        if found is False:
            return False
        assigned, roots = found
        for root in roots:
            held = env.get(root)
            if holds_view(held) and (root in assigned or writable(held)):
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
            if holds_view(value):  # a struct or local holding an array: its later writes would not be followed
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
        return bool(value) if known(value) else UNKNOWN

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
            return as_int(function(left, right))
        if isinstance(op, (ast.Div, ast.FloorDiv, ast.Mod)) and left >= 0 and right > 0:
            # Warp's integer division and modulo truncate (C); Python's agree for these signs
            return left % right if isinstance(op, ast.Mod) else left // right
        return UNKNOWN

    def value(self, node, env: dict):
        """The value of an expression: an int or bool when known, a ``View``, a tuple, or UNKNOWN."""
        kind = type(node)
        if kind is ast.Name:
            found = env.get(node.id, env)
            return shapes.constant(self.scope.get(node.id)) if found is env else found
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
            if known(operand) and isinstance(node.op, ast.USub):
                return as_int(-int(operand))
            if known(operand) and isinstance(node.op, ast.UAdd):
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
                return body if same(body, orelse) else UNKNOWN
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
            return shapes.constant(getattr(base, node.attr, None))
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
            if function is None or not (known(left) and known(right)):
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
            names = self.ev._opaque[id(node)] = shapes.opaque_call(node, self.scope)
        if names is not False and not any(holds_view(env.get(n)) for n in names):
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
        if shapes.effectful(name):
            self.refuse(node, f"calls {name}")
        if name == "len" and len(args) == 1 and isinstance(args[0], View):
            return args[0].array.shape[len(args[0].prefix)]
        if any(holds_view(v) for v in (*args, *keywords.values())):
            self.refuse(node, f"passes an array to {name}")
        if name in shapes.SAFE_BUILTINS and args and all(type(v) is int for v in args) and not keywords:
            return as_int(shapes.SAFE_BUILTINS[name](*args))
        if name in ("int", "int32") and len(args) == 1 and known(args[0]):
            return int(args[0])
        if name == "bool" and len(args) == 1 and known(args[0]):
            return bool(args[0])
        return UNKNOWN

    def function(self, function, name: str, args: list, keywords: dict, node):
        """A user ``@wp.func``: its body run with its parameters bound; its (joined) return value."""
        found = shapes.functions.get(function)
        if found is None:
            found = shapes.functions.put(function, shapes.function_body(function))
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
        pure = not any(holds_view(v) for v in bound.values())
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
            body = Body(self.ev, scope)
            after = body.block(definition.body, bound)
        finally:
            self.ev._depth -= 1
        values = body.returns + ([UNKNOWN] if after is not None else [])
        first = values[0] if values else UNKNOWN
        return first if all(same(first, v) for v in values) else UNKNOWN
