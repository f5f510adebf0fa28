"""The world-split proof's walk of a kernel's AST (docs/PARALLEL.md, "Splitting by world"): what each name
holds and every access of a kernel array argument, through the ``@wp.func`` calls it makes; anything it
cannot follow raises :class:`Refused`. :mod:`apic.record.parallel.world_split` turns the accesses into a verdict."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from apic import _compat
from apic.record.parallel import splittable as _task
from apic.record.parallel import world_structs

WHOLE, ROW, OTHER = "whole", "row", "other"  # where a view's first index is: not applied yet, w, anything else
WORLD = "world"  # the tag of a name that holds the world index
_METADATA = ("shape", "strides", "ndim")  # array attributes that read no element
_ARRAY_CONSTRUCTORS = ("array", "array1d", "array2d", "array3d", "array4d", "indexedarray", "fabricarray",
                       "indexedfabricarray")
# The tile builtins that take arrays, with the parameter each writes (None: it only reads). Tile memory
# is per thread once each thread runs its own loaded copy of the range object (``KernelInfo.split_tiles``),
# so what remains to prove is where the arrays are: a write at row ``w`` stays in the world's row as a
# store ``a[w, j]`` does (the tile's extent within the view, like a column index, is the kernel's to keep
# in bounds).
_TILE_ARRAYS = {"tile_load": None, "tile_load_indexed": None, "tile_store": "a", "tile_store_indexed": "a",
                "tile_atomic_add": "a", "tile_atomic_add_indexed": "a"}


@dataclass(frozen=True)
class View:
    """An array value: a view of kernel argument ``root``, with ``ndim`` dimensions left to index."""

    root: str
    state: str
    ndim: int


@dataclass(frozen=True)
class Struct:
    """A ``@wp.struct`` value holding arrays: kernel argument ``root`` or a struct field of one."""

    root: str
    struct: object = field(compare=False)


class Refused(Exception):
    pass


def store_counts(body: list) -> dict[str, int]:
    """How often each name is bound in a function body (assignments, loop targets, ``with ... as``)."""
    counts: dict[str, int] = {}
    for node in ast.walk(ast.Module(body=body, type_ignores=[])):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            counts[node.id] = counts.get(node.id, 0) + 1
    return counts


class Body:
    """One pass over a kernel's or function's statements, with what each name holds (``env``)."""

    def __init__(self, proof: Proof, scope, env: dict, counts: dict) -> None:
        self.proof, self.scope, self.env, self.counts = proof, scope, env, counts

    def refuse(self, node, why: str):
        raise Refused(f"line {getattr(node, 'lineno', '?')}: {why}")

    # --- statements ---------------------------------------------------------------------------------
    def block(self, statements: list) -> None:
        for statement in statements:
            self.statement(statement)

    def statement(self, node) -> None:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and _is_tid(node.value):
            return  # the world's own binding (:func:`world_name`)
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if node.value is None:
                return
            held = self.value_or_view(node.value)
            for target in targets:
                self.bind(target, held, node)
        elif isinstance(node, ast.AugAssign):
            self.value(node.value)
            if isinstance(node.target, ast.Name):
                if node.target.id in self.env:
                    self.refuse(node, f"updates {node.target.id} in place")
            else:
                self.store(node.target, node)
        elif isinstance(node, ast.Expr):
            self.value(node.value)
        elif isinstance(node, (ast.If, ast.While)):
            self.value(node.test)
            self.block(node.body)
            self.block(node.orelse)
        elif isinstance(node, ast.For):
            self.value(node.iter)
            self.bind(node.target, None, node)
            self.block(node.body)
            self.block(node.orelse)
        elif isinstance(node, ast.Return):
            if node.value is not None and isinstance(self.value_or_view(node.value), (View, Struct)):
                self.refuse(node, "returns an array or a struct holding one")
        elif not isinstance(node, (ast.Pass, ast.Break, ast.Continue)):
            self.refuse(node, f"{type(node).__name__} statement not analysed")

    def bind(self, target, held, node) -> None:
        """``target = <held>``: a name holds an array view or the world only when bound exactly once."""
        if isinstance(target, ast.Name):
            if isinstance(held, (View, Struct)):
                if self.counts.get(target.id, 0) != 1:
                    self.refuse(node, f"binds {target.id}, an array view or a struct holding one, more than once")
                self.env[target.id] = held
            elif held == WORLD and self.counts.get(target.id, 0) == 1:
                self.env[target.id] = WORLD
            elif target.id in self.env:
                self.refuse(node, f"rebinds {target.id}")
        elif isinstance(target, (ast.Tuple, ast.List)):
            if held is not None:
                self.refuse(node, "unpacks an array or the world index")
            for element in target.elts:
                self.bind(element, None, node)
        elif isinstance(held, (View, Struct)):
            self.refuse(node, "stores an array, or a struct holding one, into a field or an element")
        else:
            self.store(target, node)

    def store(self, target, node) -> None:
        """A store to ``target`` (a subscript, or a field of one): an element write of the array it
        indexes, or of a local value."""
        while isinstance(target, ast.Attribute):  # a[w].x = ..., v.x = ...
            target = target.value
        if isinstance(target, ast.Subscript):
            self.element(target, write=True)
        elif isinstance(target, ast.Name):
            if target.id in self.env:
                self.refuse(node, f"stores into a field of {target.id}")
        else:
            self.refuse(node, "stores through an expression")

    # --- expressions --------------------------------------------------------------------------------
    def indexed(self, view: View, node: ast.Subscript) -> View:
        """``view[index]``: the view (or the element, ``ndim`` 0) it selects."""
        index = node.slice
        indices = list(index.elts) if isinstance(index, ast.Tuple) else [index]
        if any(isinstance(i, ast.Slice) for i in indices):
            self.refuse(node, f"slices {view.root}")
        first = self.value(indices[0])
        for i in indices[1:]:
            self.value(i)
        state = view.state
        if state == WHOLE:
            state = ROW if first == WORLD else OTHER
        if len(indices) > view.ndim:
            self.refuse(node, f"indexes {view.root} with more indices than it has dimensions")
        return View(view.root, state, view.ndim - len(indices))

    def view(self, node) -> View | None:
        """The array view ``node`` evaluates to, or None when it is no array."""
        if isinstance(node, ast.Name):
            held = self.env.get(node.id)
            return held if isinstance(held, View) else None
        if isinstance(node, ast.Subscript):
            base = self.view(node.value)
            if base is not None:
                selected = self.indexed(base, node)
                return selected if selected.ndim > 0 else None
        if isinstance(node, ast.Attribute):
            member = self.member(node)
            return member if isinstance(member, View) else None
        return None

    def struct_of(self, node) -> Struct | None:
        """The struct holding arrays that ``node`` evaluates to, or None."""
        if isinstance(node, ast.Name):
            held = self.env.get(node.id)
            return held if isinstance(held, Struct) else None
        if isinstance(node, ast.Attribute):
            member = self.member(node)
            return member if isinstance(member, Struct) else None
        return None

    def member(self, node: ast.Attribute):
        """``struct.field`` of a struct holding arrays: an array view (``View``, named ``root.field``), a
        struct holding arrays, or None (a value, or ``node`` is no field of such a struct)."""
        struct = self.struct_of(node.value)
        if struct is None:
            return None
        var = struct.struct.vars.get(node.attr)
        if var is None:
            self.refuse(node, f"reads {struct.root}.{node.attr}, not a field of its struct")
        root = f"{struct.root}.{node.attr}"
        if world_structs.is_array(var.type):
            return View(root, WHOLE, var.type.ndim)
        if world_structs.is_struct(var.type) and world_structs.array_fields(root, var.type):
            return Struct(root, var.type)
        return None

    def element(self, node: ast.Subscript, write: bool) -> None:
        """An element access ``a[...]`` (or a local value's component, when ``a`` is no array)."""
        base = self.view(node.value)
        if base is None:
            if write and not isinstance(node.value, ast.Name):
                # a field of a struct may hold an array: only a local value's components are followed
                self.refuse(node, "writes through an expression it cannot follow")
            self.value(node.value)
            self.value(node.slice)
            return
        selected = self.indexed(base, node)
        if selected.ndim > 0:
            self.refuse(node, f"{'writes' if write else 'reads'} a whole view of {base.root}")
        self.proof.use(selected.root, selected.state, write)

    def value_or_view(self, node):
        if isinstance(node, (ast.Name, ast.Subscript, ast.Attribute)):
            found = self.view(node) or self.struct_of(node)
            if found is not None:
                return found
        return self.value(node)

    def value(self, node):
        """Evaluate ``node`` as a value: WORLD when it is the world index, else None; an array here
        (anything but indexing it) is refused."""
        if isinstance(node, ast.Name):
            held = self.env.get(node.id)
            if isinstance(held, View):
                self.refuse(node, f"uses array {node.id} other than by indexing it")
            if isinstance(held, Struct):
                self.refuse(node, f"uses {node.id}, a struct holding arrays, other than through its fields")
            return held
        if isinstance(node, ast.Subscript):
            self.element(node, write=False)
            return None
        if isinstance(node, ast.Attribute):
            member = self.member(node)
            if isinstance(member, View):
                self.refuse(node, f"uses array {member.root} other than by indexing it")
            if isinstance(member, Struct):
                self.refuse(node, f"uses {member.root}, a struct holding arrays, other than through its fields")
            if self.struct_of(node.value) is not None:
                return None  # a value field of a struct argument
            if isinstance(node.value, (ast.Name, ast.Subscript, ast.Attribute)) and self.view(node.value) is not None:
                if node.attr not in _METADATA:
                    self.refuse(node, f"reads .{node.attr} of an array")
                return None
            self.value(node.value)
            return None
        if isinstance(node, ast.Call):
            self.call(node)
            return None
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.expr):
                self.value(child)
            elif not isinstance(child, (ast.expr_context, ast.operator, ast.unaryop, ast.cmpop, ast.boolop)):
                if isinstance(child, ast.keyword):
                    self.value(child.value)
                else:
                    self.refuse(node, f"{type(node).__name__} expression not analysed")
        return None

    def call(self, node: ast.Call) -> None:
        name = _task._call_name(node.func)
        if name is None:
            self.refuse(node, "calls through an expression")
        if name.startswith("atomic_"):
            self.atomic(name, node)
            return
        if name in _ARRAY_CONSTRUCTORS:  # an array from a pointer: its writes would not be followed
            self.refuse(node, f"builds an array ({name})")
        if name == "len" and len(node.args) == 1 and self.view(node.args[0]) is not None:
            return
        target = _task._resolve(node.func, self.scope)
        is_builtin = getattr(target, "is_builtin", None)
        if callable(is_builtin) and not is_builtin():
            self.proof.function(target, name, node, self)
            return
        if _tile_builtin(name, node.func, target, self.scope):
            self.tile(name, node)
            return
        problem = _task._call_problem(name, node.func, self.scope, set())
        if problem is not None:
            self.refuse(node, problem)
        for argument in node.args:
            self.value(argument)
        for keyword in node.keywords:
            self.value(keyword.value)

    def tile(self, name: str, node: ast.Call) -> None:
        """A Warp tile builtin: its arrays (of ``_TILE_ARRAYS``' builtins only) read or written at the
        view passed, every other argument a value."""
        self.proof.tiles = True
        written = _TILE_ARRAYS.get(name, False)
        arguments = [(None, a) for a in node.args] + [(k.arg, k.value) for k in node.keywords]
        for position, (keyword, argument) in enumerate(arguments):
            view = self.view(argument) if written is not False else None
            if view is None:
                self.value(argument)  # an array here is refused
                continue
            writes = written is not None and (keyword == written or keyword is None and position == 0)
            self.proof.use(view.root, OTHER if view.state == WHOLE else view.state, writes)

    def atomic(self, name: str, node: ast.Call) -> None:
        """``atomic_*(array, i, j, ..., value)``: a read-modify-write of one element."""
        array = self.view(node.args[0]) if node.args else None
        if array is None:
            self.refuse(node, f"calls {name} on memory it cannot follow")
        indices = node.args[1 : 1 + array.ndim]
        if len(indices) != array.ndim or node.keywords:
            self.refuse(node, f"calls {name} with arguments it cannot follow")
        state = array.state
        first = self.value(indices[0])
        if state == WHOLE:
            state = ROW if first == WORLD else OTHER
        for argument in node.args[2:]:
            self.value(argument)
        self.proof.use(array.root, state, True)


def _tile_builtin(name: str, func: ast.expr, target, scope: dict) -> bool:
    """Whether a call (``wp.tile_load(...)``, ``tile_load(...)``; ``target`` what its name resolves to)
    is one of Warp's tile builtins, other than printing (its output order would change)."""
    if not name.startswith("tile") or "print" in name or name not in _compat.wp_context.builtin_functions:
        return False
    if isinstance(func, ast.Attribute):  # Warp's tile builtins are no attributes of the warp module
        base = scope.get(func.value.id)
        return getattr(base, "__name__", None) == "warp" or base is None and func.value.id in ("wp", "warp")
    return target is None or getattr(target, "__name__", None) == "warp"


class Proof:
    """The accesses of one kernel's launch, through the functions it calls."""

    def __init__(self) -> None:
        self.uses: set[tuple[str, str, bool]] = set()  # (argument, ROW or OTHER, write)
        self.tiles = False  # a tile builtin is called
        self._done: set = set()  # (function, bound parameters) already walked
        self._active: set = set()

    def use(self, root: str, state: str, write: bool) -> None:
        self.uses.add((root, state, write))

    def function(self, function, name: str, node: ast.Call, caller: Body) -> None:
        """A call of a user ``@wp.func``: walk each overload's body with its parameters bound to what
        the call passes (array views, the world index, or plain values)."""
        passed = [caller.value_or_view(a) for a in node.args]
        keywords = {k.arg: caller.value_or_view(k.value) for k in node.keywords}
        if None in keywords:
            caller.refuse(node, f"calls {name} with **arguments")
        overloads = list(getattr(function, "user_overloads", {}).values()) or [function]
        for overload in overloads:
            if getattr(overload, "native_snippet", None) is not None:
                caller.refuse(node, f"calls {name}, a native snippet (not analysed)")
            definition = _task.source_definition(overload)
            if definition is None:
                caller.refuse(node, f"calls {name}, which has no source to analyse")
            params = [a.arg for a in definition.args.args]
            bound = dict(zip(params, passed))
            bound.update((k, v) for k, v in keywords.items() if k in params)
            key = (id(overload), tuple(sorted((k, v) for k, v in bound.items() if v is not None)))
            if key in self._done or key in self._active:  # Warp compiles no recursion
                continue
            counts = store_counts(definition.body)
            env = {}
            for param, held in bound.items():
                if held is None:
                    continue
                if counts.get(param, 0):
                    if isinstance(held, (View, Struct)):
                        caller.refuse(node, f"calls {name}, which rebinds its array or struct parameter {param}")
                    continue  # a reassigned world parameter is no world
                env[param] = held
            self._active.add(key)
            try:
                body = Body(self, _task._scope(getattr(overload, "func", None)), env, counts)
                try:
                    body.block(definition.body)
                except Refused as refused:
                    raise Refused(f"line {node.lineno}: calls {name}, which at its {refused}") from None
            finally:
                self._active.discard(key)
            self._done.add(key)


def _is_tid(call: ast.Call) -> bool:
    return _task._call_name(call.func) == "tid"
