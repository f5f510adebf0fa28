"""The expressions of the footprint evaluation's interpreter (:mod:`apic.record.parallel.footprint_body` runs the
statements): the value of an expression for one task, calls of builtins and of user ``@wp.func`` functions
(:mod:`apic.record.parallel.footprint_eval`'s docstring says what is followed).

Known integers are Warp ``int32`` values (:mod:`apic.record.parallel.footprint_values`): a result outside ``int32``, a
conversion to another integer type, a parameter or a return value declared another scalar type are unknown.
A value that may be one of several arrays (``a if c else b`` under an unknown ``c``, a function returning one
of two arrays) is :data:`MAYBE_ARRAY`, and reading a name that holds it refuses the launch.
"""

from __future__ import annotations

import ast
import operator

from apic.record.parallel import footprint_shapes as shapes
from apic.record.parallel import splittable as _task
from apic.record.parallel.footprint_values import MAYBE_ARRAY, UNKNOWN, View, as_int, either, holds_view, known

_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.LShift: operator.lshift,
           ast.RShift: operator.rshift, ast.BitAnd: operator.and_, ast.BitOr: operator.or_,
           ast.BitXor: operator.xor}
_COMPARE = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
            ast.Gt: operator.gt, ast.GtE: operator.ge}


class Expressions:
    """The expressions of one body (a :class:`apic.record.parallel.footprint_body.Body`: ``ev``, ``scope``,
    ``refuse``)."""

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
            if found is MAYBE_ARRAY:
                self.refuse(node, f"{node.id} may be one of several arrays, chosen per task")
            return shapes.constant(self.scope.get(node.id)) if found is env else found
        if kind is ast.Constant:  # an int literal is an int32 (one outside it is not followed)
            return shapes.constant(node.value)
        if kind is ast.BinOp:
            return self.binary(node.op, self.value(node.left, env), self.value(node.right, env))
        if kind is ast.Call:
            return self.call(node, env)
        if isinstance(node, ast.Attribute):
            return self.attribute(node, env)
        if isinstance(node, ast.Subscript):
            base = self.value(node.value, env)
            keys = tuple(self.indices(node.slice, env))
            if base is MAYBE_ARRAY:
                self.refuse(node, "indexes what may be one of several arrays, chosen per task")
            if isinstance(base, View):
                rank = len(base.array.shape) - len(base.prefix)
                if len(keys) < rank:
                    return View(base.array, base.prefix + keys)
                value = self.ev.access(base, keys[:rank], node, write=False)
                return UNKNOWN if len(keys) > rank else value
            if isinstance(base, tuple) and len(keys) == 1 and type(keys[0]) is int and 0 <= keys[0] < len(base):
                return base[keys[0]]
            if holds_view(base):
                self.refuse(node, "indexes a tuple holding arrays at an index not known")
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
                return either(body, orelse)
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
        if base is MAYBE_ARRAY:
            self.refuse(node, f"reads .{node.attr} of what may be one of several arrays, chosen per task")
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
        if isinstance(node.func, ast.Name) and node.func.id in env:  # a function passed as an argument
            self.refuse(node, f"a call through {name}, a parameter or local name")
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
        definition, scope, params, defaults, narrowed, returns_int32 = found
        if len(args) > len(params) or set(keywords) - set(params):
            self.refuse(node, f"calls {name} with arguments it does not take")
        # a default is Warp's: the value bound when the function was defined, in its own module
        bound = defaults | dict(zip(params, args)) | keywords
        if set(params) - set(bound):
            self.refuse(node, f"calls {name} without all its arguments")
        for param in narrowed:  # declared another scalar type: the kernel converts what it is given
            if known(bound[param]):
                bound[param] = UNKNOWN
        # Kernel arrays reach a function only through its arguments: one given none touches no array, and
        # its value depends on its arguments alone (``dense_index(stride, i, j)``, called per element)
        pure = not any(holds_view(v) for v in bound.values())
        if pure:
            key = (id(function), tuple((k, type(v), v) for k, v in bound.items()))
            if key in self.ev._pure:
                return self.ev._pure[key]
        value = self.run_function(definition, scope, bound, name, node)
        if not returns_int32 and known(value):
            value = UNKNOWN
        if pure:
            self.ev._pure[key] = value
        return value

    def run_function(self, definition, scope, bound: dict, name: str, node):
        self.ev._depth += 1
        if self.ev._depth > 64:
            self.refuse(node, f"calls nested deeper than 64 ({name})")
        try:
            body = type(self)(self.ev, scope)
            after = body.block(definition.body, bound)
        finally:
            self.ev._depth -= 1
        values = body.returns + ([UNKNOWN] if after is not None else [])
        found = values[0] if values else UNKNOWN
        for value in values[1:]:  # one of two arrays returned: MAYBE_ARRAY
            found = either(found, value)
        return found
