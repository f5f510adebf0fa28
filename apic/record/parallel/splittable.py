"""Which CPU kernels may have their tasks split across threads, proved from the kernel's source.

A parallel replay may run the tasks of one launch on several threads only where the result cannot
differ from Warp's serial task loop. On the CPU Warp's atomics (``wp.atomic_*`` and ``a[i] += x`` on
an array) are plain read-modify-writes, and a task may read what another task writes, so the rule is
conservative: a kernel is splittable only when every write to memory lands at the task's own index and
every read of a written array reads that same element. Anything this module cannot prove (a call into
a user ``@wp.func``, a write through a struct field or a local array, an index other than the task id)
keeps the kernel serial. The answer comes from the kernel's Python AST (``kernel.adj.tree``), which
Warp 1.12 and 1.19 both keep, so it does not depend on how either version generates code.

A launch is splittable only when its kernel is, and when no array it writes overlaps another array
argument of the same launch (two arguments viewing one buffer would let tasks see each other's writes):
see :func:`launch_arrays_disjoint`; and a written array whose strides make two indices share an
element (a zero stride) is the launch's to refuse too.
"""

from __future__ import annotations

import ast
import collections
import weakref
from dataclasses import dataclass

import warp as wp

from apic import _compat
from apic.record.layout import extent
from apic.record.ops import HandleRef
from apic.targets import cpu

# Builtins with effects beyond the task's own element: atomics are racy read-modify-writes on the CPU,
# printing interleaves, tile operations cooperate across the tasks of a block.
_UNSAFE_CALL_PREFIXES = ("atomic_", "tile", "print", "printf", "adjoint")
# Builtins that write memory the analysis does not see (a volume, a pointer), or stop the program.
_UNSAFE_CALL_NAMES = ("store", "array_store", "volume_store", "volume_store_f", "volume_store_i", "volume_store_v",
                      "address", "breakpoint")  # fmt: skip


@dataclass(frozen=True)
class Verdict:
    """Whether a kernel's tasks may run on several threads; ``reason`` says why not."""

    splittable: bool
    reason: str
    written: frozenset = frozenset()  # names of the array arguments the kernel writes (when splittable)


def _call_name(func: ast.expr) -> str | None:
    """``wp.sin`` -> ``sin``, ``sin`` -> ``sin``; anything else (a call through an expression) -> None."""
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
        return func.attr
    if isinstance(func, ast.Name):
        return func.id
    return None


def _scope(python_function) -> collections.ChainMap:
    """The names a kernel's or function's body sees: its closure, then its module's globals (not copied)."""
    closure = {}
    code, cells = getattr(python_function, "__code__", None), getattr(python_function, "__closure__", None) or ()
    for name, cell in zip(code.co_freevars if code else (), cells):
        try:
            closure[name] = cell.cell_contents
        except ValueError:  # an empty cell
            pass
    return collections.ChainMap(closure, getattr(python_function, "__globals__", {}))


class _Memo:
    """Results per live object (a kernel, a function), keyed by ``id`` and dropped when it is collected:
    hashing a Warp kernel costs more than the lookup, and a capture asks once per entry point."""

    def __init__(self) -> None:
        self._found: dict[int, tuple] = {}

    def get(self, obj):
        found = self._found.get(id(obj))
        return found[1] if found is not None and found[0]() is obj else None

    def put(self, obj, value):
        try:
            # the default binds the id now: once obj is collected, its id is no longer known
            ref = weakref.ref(obj, lambda _, key=id(obj): self._found.pop(key, None))  # noqa: B008
        except TypeError:  # not weakly referenceable: not remembered
            return value
        self._found[id(obj)] = (ref, value)
        return value


_verdicts = _Memo()
_function_problems = _Memo()


def _resolve(func: ast.expr, scope: dict):
    """The object a call's target names (``f``, ``module.f``), or None."""
    if isinstance(func, ast.Name):
        return scope.get(func.id)
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
        base = scope.get(func.value.id)
        return getattr(base, func.attr, None) if base is not None else None
    return None


def _call_problem(name: str, func: ast.expr, scope: dict, seen: set) -> str | None:
    """Why a call may not appear in a split task, or None when it is a Warp builtin, a type constructor,
    or a user ``@wp.func`` that (with everything it calls) writes no memory (:func:`_function_problem`)."""
    if name.startswith(_UNSAFE_CALL_PREFIXES) or name in _UNSAFE_CALL_NAMES:
        return f"calls {name} (atomic / cross-task effect)"
    target = _resolve(func, scope)
    if target is None and isinstance(func, ast.Name) or target is wp or getattr(target, "__name__", "") == "warp":
        target = None
    if target is None:
        if isinstance(func, ast.Attribute) and func.value.id not in ("wp", "warp"):
            return f"calls {name}, not a Warp builtin (not analysed)"
        target = getattr(wp, name, None)
        if target is None:
            if name in ("range", "int", "float", "bool", "len", "abs", "min", "max", "round"):
                return None
            return f"calls {name}, not a Warp builtin (not analysed)"
    is_builtin = getattr(target, "is_builtin", None)
    if callable(is_builtin):
        if is_builtin():
            return None
        problem = _function_problem(target, seen)
        return None if problem is None else f"calls {name}, which {problem}"
    if isinstance(target, type):  # wp.vec3(...), wp.float32(...): pure constructors
        return None
    return f"calls {name}, not a Warp builtin (not analysed)"


def _function_problem(function, seen: set) -> str | None:
    """Why a user ``@wp.func`` (every overload) may not run in a split task, or None when its body
    stores into nothing but plain local names and calls only what :func:`_call_problem` accepts."""
    known = _function_problems.get(function)
    if known is not None:
        return known or None
    if id(function) in seen:  # being analysed further up (Warp compiles no recursion): its own visit decides
        return None
    seen.add(id(function))
    try:
        problem = _function_problem_uncached(function, seen)
    finally:
        seen.discard(id(function))
    _function_problems.put(function, problem or "")
    return problem


def source_definition(function) -> ast.FunctionDef | None:
    """The parsed definition of a Warp kernel or ``@wp.func`` overload (``adj.tree``), or None where
    Warp kept no source for it."""
    tree = getattr(getattr(function, "adj", None), "tree", None)
    if tree is None or not tree.body or not isinstance(tree.body[0], ast.FunctionDef):
        return None
    return tree.body[0]


def _function_problem_uncached(function, seen: set) -> str | None:
    overloads = list(getattr(function, "user_overloads", {}).values()) or [function]
    for overload in overloads:
        definition = source_definition(overload)
        if definition is None:
            return "has no source to analyse"
        scope = _scope(getattr(overload, "func", None))
        for node in ast.walk(ast.Module(body=definition.body, type_ignores=[])):
            if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                if any(isinstance(t, (ast.Subscript, ast.Attribute)) for target in targets for t in ast.walk(target)):
                    return f"stores through a subscript or a field (line {node.lineno} of its body)"
            if isinstance(node, ast.Call):
                called = _call_name(node.func)
                if called is None:
                    return "calls through an expression"
                problem = _call_problem(called, node.func, scope, seen)
                if problem is not None:
                    return problem
    return None


def _tid_index(kernel_def: ast.Module) -> tuple[str, ...] | None:
    """The names bound to ``wp.tid()`` (``i = wp.tid()`` or ``i, j = wp.tid()``), if bound exactly once."""
    bound: list[tuple[str, ...]] = []
    assigned: dict[str, int] = {}
    for node in ast.walk(kernel_def):
        targets = []
        if isinstance(node, ast.Assign):
            targets = node.targets
            value = node.value
            if isinstance(value, ast.Call) and _call_name(value.func) == "tid" and len(targets) == 1:
                t = targets[0]
                if isinstance(t, ast.Name):
                    bound.append((t.id,))
                elif isinstance(t, ast.Tuple) and all(isinstance(e, ast.Name) for e in t.elts):
                    bound.append(tuple(e.id for e in t.elts))
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        elif isinstance(node, ast.For):
            targets = [node.target]
        for t in targets:
            for n in ast.walk(t):
                if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                    assigned[n.id] = assigned.get(n.id, 0) + 1
    if len(bound) != 1:
        return None
    names = bound[0]
    # A task id reassigned later would no longer be the task's own index.
    if any(assigned.get(n, 0) != 1 for n in names):
        return None
    return names


def _index_names(sub: ast.Subscript) -> tuple[str, ...] | None:
    """``a[i]`` -> ``("i",)``, ``a[i, j]`` -> ``("i", "j")``; any other index -> None."""
    index = sub.slice
    if isinstance(index, ast.Name):
        return (index.id,)
    if isinstance(index, ast.Tuple) and all(isinstance(e, ast.Name) for e in index.elts):
        return tuple(e.id for e in index.elts)
    return None


def kernel_verdict(kernel) -> Verdict:
    """Decide from a ``wp.Kernel``'s source whether its tasks may be split across threads (conservative).

    Remembered per kernel object (its source does not change).
    """
    found = _verdicts.get(kernel)
    if found is None:
        found = _verdicts.put(kernel, _kernel_verdict(kernel))
    return found


def _kernel_verdict(kernel) -> Verdict:
    adj = getattr(kernel, "adj", None)
    definition = source_definition(kernel)
    if definition is None:
        return Verdict(False, "kernel source not available")
    # Only the body: decorators (``@wp.kernel(...)``) and annotations are not kernel code.
    kernel_def = ast.Module(body=definition.body, type_ignores=[])
    arg_names = {a.arg for a in definition.args.args}
    arg_types = {a.label: a.type for a in getattr(adj, "args", ())}
    tid = _tid_index(kernel_def)
    scope, seen = _scope(getattr(adj, "func", None)), set()

    parents: dict[ast.AST, ast.AST] = {}
    for node in ast.walk(kernel_def):
        for child in ast.iter_child_nodes(node):
            parents[child] = node

    written: set[str] = set()
    write_nodes: set[int] = set()
    for node in ast.walk(kernel_def):
        if isinstance(node, ast.AugAssign) and not isinstance(node.target, ast.Name):
            return Verdict(False, f"line {node.lineno}: in-place update of memory (an atomic on the CPU)")
        if isinstance(node, ast.Call):
            name = _call_name(node.func)
            if name is None:
                return Verdict(False, f"line {node.lineno}: call through an expression")
            problem = None if name == "tid" else _call_problem(name, node.func, scope, seen)
            if problem is not None:
                return Verdict(False, f"line {node.lineno}: {problem}")
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                for sub in ast.walk(t):
                    if isinstance(sub, ast.Attribute) and isinstance(sub.ctx, ast.Store):
                        return Verdict(False, f"line {node.lineno}: writes through a field")
                    if isinstance(sub, ast.Subscript) and isinstance(sub.ctx, ast.Store):
                        if not (isinstance(sub.value, ast.Name) and sub.value.id in arg_names):
                            return Verdict(False, f"line {node.lineno}: writes to memory not a kernel argument")
                        # An indexed or fabric array may map two task ids to one element.
                        if not _compat.is_plain_array_type(arg_types.get(sub.value.id)):
                            return Verdict(False, f"line {node.lineno}: writes {sub.value.id}, not a plain wp.array")
                        if tid is None or _index_names(sub) != tid:
                            return Verdict(
                                False, f"line {node.lineno}: writes {sub.value.id} at an index other than the task id"
                            )
                        written.add(sub.value.id)
                        write_nodes.add(id(sub.value))

    # Every read of a written array must read the task's own element.
    for node in ast.walk(kernel_def):
        if isinstance(node, ast.Name) and node.id in written and id(node) not in write_nodes:
            parent = parents.get(node)
            if not (isinstance(parent, ast.Subscript) and parent.value is node and _index_names(parent) == tid):
                reason = f"line {node.lineno}: reads {node.id} (which it writes) other than at the task id"
                return Verdict(False, reason)
    return Verdict(True, "every write lands at the task id; no atomics", frozenset(written))


def written_offsets(kernel, args_layout) -> tuple[int, ...] | None:
    """For a graph launch: where, in ``kernel``'s packed arguments, lie the arrays it writes (sorted byte
    offsets of their ``array_t``), or None when its launches must stay serial.

    On top of :func:`kernel_verdict`, refused: a ``@wp.struct`` argument (arrays inside it are not
    analysed) and a 64-bit integer argument (it may be the id of a Mesh, Bvh, HashGrid or Volume,
    whose memory the kernel reads behind the analysis' back). ``args_layout`` is the
    ``apic.record.layout.ArgsLayout`` of the launch's parameters.
    """
    verdict = kernel_verdict(kernel)
    if not verdict.splittable or args_layout.words:
        return None
    plain = {slot.at for slot in args_layout.slots if not slot.indexed}
    offsets = []
    for i, arg in enumerate(kernel.adj.args):
        if isinstance(arg.type, _compat.wp_codegen.Struct):
            return None
        if arg.label in verdict.written:
            at = getattr(args_layout.struct_type, f"a{i}").offset
            if at not in plain:
                return None
            offsets.append(at)
    return tuple(sorted(offsets))


def graph_launch_refusal(data: bytes, blob, writes: tuple[int, ...], region_span) -> str | None:
    """Why one recorded launch of a splittable kernel must stay serial, or None when it may be split.

    ``data`` is the launch's packed arguments with every pointer relocated (as the kernel receives
    them), ``blob`` the recorded ``Blob`` (its array slots and relocations), ``writes`` the kernel's
    ``KernelInfo.split_writes`` and ``region_span(ref)`` the ``(address, nbytes)`` of the region a
    relocation points into. Each written array must be a plain, C-contiguous ``array_t`` (distinct task
    ids reach distinct elements) overlapping no other memory the launch reaches: a plain array by its
    exact extent, anything else (an indexed array, a gradient) by its whole region. A native handle id
    among the arguments is refused (its objects' memory is not in the arguments).
    """
    slots = {slot.at: slot for slot in blob.arrays}
    written, others, exact = [], [], set()
    for slot in blob.arrays:
        if slot.indexed:
            continue
        ptr, _, *dims, ndim = cpu.ARRAY_T.unpack_from(data, slot.at)
        shape, strides = dims[:4][:ndim], dims[4:][:ndim]
        lo, hi = extent(ptr, slot.elem_size, shape, strides)
        exact.add(slot.at)
        if slot.at in writes:
            step = slot.elem_size
            for n, stride in zip(reversed(shape), reversed(strides)):
                if n > 1 and stride != step:
                    return f"the written array at byte {slot.at} of the arguments is not contiguous"
                step *= n
            written.append((lo, hi - lo))
        elif hi > lo:
            others.append((lo, hi - lo))
    for at in writes:
        slot = slots.get(at)
        if slot is None or slot.indexed:
            return f"the written argument at byte {at} is not a plain array"
    for reloc in blob.relocs:
        if isinstance(reloc.target, HandleRef):
            return "an argument holds a native handle id"
        if reloc.at not in exact:  # a gradient, an indexed array's data or indices: its whole region
            others.append(region_span(reloc.target))
    if not launch_arrays_disjoint(written, others):
        return "a written array overlaps other memory the launch reaches"
    return None


def spans_overlap(first, second) -> bool:
    """True when a nonempty ``(address, nbytes)`` span of ``first`` overlaps one of ``second``."""
    return any(a < b + m and b < a + n for a, n in first for b, m in second if n and m)


def launch_arrays_disjoint(written: list[tuple[int, int]], others: list[tuple[int, int]]) -> bool:
    """True when no written ``(address, nbytes)`` range overlaps another array argument's range."""
    return not (spans_overlap(written, others)
                or any(spans_overlap(written[:i], written[i : i + 1]) for i in range(1, len(written))))
