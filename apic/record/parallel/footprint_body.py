"""The footprint evaluation's interpreter: the statements of a kernel or a user function, run for one task
(:mod:`apic.record.parallel.footprint_eval`, whose docstring says what is followed and how); its expressions are
:mod:`apic.record.parallel.footprint_exprs`'s."""

from __future__ import annotations

import ast

from apic.record.parallel import footprint_shapes as shapes
from apic.record.parallel import splittable as _task
from apic.record.parallel.footprint_exprs import Expressions
from apic.record.parallel.footprint_values import (MAYBE_ARRAY, UNKNOWN, Refused, View, holds_view, join, join_all,
                                                   known, writable)

_INT32 = range(-(1 << 31), 1 << 31)


class _LoopDone(Exception):
    pass


class Body(Expressions):
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
                value = self.value(node.value, env)
                if known(value) and not shapes.follows_annotation(node.annotation, self.scope):
                    value = UNKNOWN  # declared another scalar type: converted
                self.assign(node.target, value, env, node)
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
        iterations = range(*bounds)
        # Warp's counter is an int32 stepped past the last iteration: where that wraps, the kernel loops on
        if iterations and iterations[-1] + iterations.step not in _INT32:
            self.refuse(node, "a loop whose int32 counter wraps past its end")
        return self.loop(node, env, iterations, lambda scope, i: scope.__setitem__(name, i))

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
        assigned, roots, _ = found
        for root in roots:
            held = env.get(root)
            if holds_view(held) and (root in assigned or writable(held)):
                return False
        return True

    def skip(self, node, env: dict) -> dict:
        assigned, roots, copies = self.ev._inert[id(node)]
        # a name the loop may have bound to an array it reads (``arr = b``) is no known array after it
        arrays = any(holds_view(env.get(root)) for root in roots)
        for name in assigned:
            env[name] = MAYBE_ARRAY if arrays and name in copies else UNKNOWN
        return env

    def assign(self, target, value, env: dict, node) -> None:
        if isinstance(target, ast.Name):
            env[target.id] = value
        elif isinstance(target, (ast.Tuple, ast.List)):
            parts = value if isinstance(value, tuple) and len(value) == len(target.elts) else None
            if parts is None and holds_view(value):
                self.refuse(node, "unpacks arrays it cannot match to names")
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
            if holds_view(held):  # an array chosen per task, or a tuple of arrays: its writes cannot be listed
                self.refuse(node, f"stores through {base.id}, which may be one of several arrays")
            env[base.id] = UNKNOWN  # a local vector, matrix or struct (no array: UNKNOWN never is one) changes
            return
        keys = []
        for index in reversed(indices):
            keys += self.indices(index, env)
        rank = len(held.array.shape) - len(held.prefix)
        element = tuple(keys[:rank])
        if update:
            self.ev.access(held, element, node, write=False)
        self.ev.access(held, element, node, write=True)

