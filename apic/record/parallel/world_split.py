"""The world-split proof: a kernel whose tasks of one world touch only that world's rows may be split
into contiguous ranges of whole worlds (docs/PARALLEL.md, "Splitting by world").

Batched simulators launch with ``dim[0] == nworld``, bind the world as the first component of
``wp.tid()`` and write only rows ``[world, ...]`` of per-world arrays, often at computed columns and
with float atomics. Run a whole world's tasks in their serial order on one thread and every write,
in-place update and atomic into its rows happens in the serial order too: the result is the serial
one, bit for bit. So, from the kernel's Python AST (``kernel.adj.tree``, through every ``@wp.func`` it
calls, with each call's arguments bound to what they are at the call), this module proves:

* the world name ``w``, the first name bound to ``wp.tid()`` (bound once in the kernel), is never
  reassigned, in the kernel or in a function it is passed to (a reassigned parameter is no world);
* every store, in-place update and atomic goes to a kernel array argument at first index ``w``
  (``a[w, j]``, ``a[w][j]``, ``wp.atomic_add(a, w, j, x)``, a row view ``r = a[w]`` or ``a[w]``
  passed to a function and written there);
* every other access of an array the kernel writes is at first index ``w`` too.

An array field of a ``@wp.struct`` argument (``p.acc[w, j]``, through nested structs and functions
the struct is passed to) is an array argument of its own, named ``p.acc`` (:mod:`apic.record.parallel.world_structs`).

Anything it cannot follow raises the refusal with its reason: an array used other than by indexing
(passed to a builtin, returned, stored in a struct), a write to memory not a kernel argument, a slice,
an unsafe builtin (tiles, printing, ``store``, ``address``), a call through an expression. The launch
checks (each written array has ``shape[0] == dim[0]`` and rows that overlap nothing else the launch
reaches) are :func:`apic.record.parallel.world_launch.world_launch_refusal`'s; the AST walk is
:mod:`apic.record.parallel.world_proof`'s.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from apic import _compat
from apic.record.parallel import splittable as _task
from apic.record.parallel import world_structs
from apic.record.parallel.world_proof import (OTHER, ROW, WHOLE, WORLD, Body, Proof, Refused, Struct, View,
                                              store_counts)


@dataclass(frozen=True)
class WorldVerdict:
    """Whether a kernel's launches may be split by world; ``reason`` says why not.

    ``written``: the array arguments it writes; ``rows``: those it accesses only at the world's row
    (every written one, and read-only ones read only there); ``tiles``: it calls tile builtins."""

    splittable: bool
    reason: str
    written: frozenset = frozenset()
    rows: frozenset = frozenset()
    tiles: bool = False


def _world_name(body: list, counts: dict) -> str | None:
    """The name bound to the first component of ``wp.tid()``, when ``wp.tid()`` is bound once and the
    name is bound nowhere else."""
    bound = []
    for node in ast.walk(ast.Module(body=body, type_ignores=[])):
        if isinstance(node, ast.Call) and _task._call_name(node.func) == "tid":
            bound.append(node)
    if len(bound) != 1:
        return None
    for node in ast.walk(ast.Module(body=body, type_ignores=[])):
        if isinstance(node, ast.Assign) and node.value is bound[0] and len(node.targets) == 1:
            target = node.targets[0]
            if isinstance(target, ast.Tuple) and target.elts:
                target = target.elts[0]
            if isinstance(target, ast.Name) and counts.get(target.id) == 1:
                return target.id
    return None


_verdicts = _task._Memo()


def world_verdict(kernel) -> WorldVerdict:
    """Decide from a ``wp.Kernel``'s source whether its launches may be split into ranges of whole worlds
    (remembered per kernel object)."""
    found = _verdicts.get(kernel)
    if found is None:
        found = _verdicts.put(kernel, _world_verdict(kernel))
    return found


def _world_verdict(kernel) -> WorldVerdict:
    adj = getattr(kernel, "adj", None)
    definition = _task.source_definition(kernel)
    if definition is None:
        return WorldVerdict(False, "kernel source not available")
    counts = store_counts(definition.body)
    world = _world_name(definition.body, counts)
    if world is None:
        return WorldVerdict(False, "no world index: wp.tid() is not bound once, or its first name is rebound")
    arg_types = {a.label: a.type for a in getattr(adj, "args", ())}
    env: dict = {world: WORLD}
    array_types = {}  # array name (an argument, or a struct argument's field "p.f") -> its Warp type
    for label, arg_type in arg_types.items():
        elements = world_structs.struct_elements(label, arg_type)
        if elements is not None:
            # memory behind its elements' fields is no array of the launch: written behind the analysis' back
            return WorldVerdict(False, f"argument {label} holds {elements}, an array of @wp.struct (not analysed)")
        fields = world_structs.array_fields(label, arg_type) if world_structs.is_struct(arg_type) else {}
        if fields:
            if counts.get(label, 0):
                return WorldVerdict(False, f"rebinds its struct argument {label}")
            env[label] = Struct(label, arg_type)
            array_types.update(fields)
        elif world_structs.is_array(arg_type) and arg_type.ndim > 0:
            if counts.get(label, 0):
                return WorldVerdict(False, f"rebinds its array argument {label}")
            env[label] = View(label, WHOLE, arg_type.ndim)
            array_types[label] = arg_type
    proof = Proof()
    try:
        Body(proof, _task._scope(getattr(adj, "func", None)), env, counts).block(definition.body)
    except Refused as refused:
        return WorldVerdict(False, str(refused))
    written = {root for root, _, write in proof.uses if write}
    for root in sorted(written):
        if not _compat.is_plain_array_type(array_types.get(root)):
            return WorldVerdict(False, f"writes {root}, not a plain wp.array")
        if (root, OTHER, True) in proof.uses:
            return WorldVerdict(False, f"writes {root} at a first index other than the world {world}")
        if (root, OTHER, False) in proof.uses:
            return WorldVerdict(False, f"reads {root} (which it writes) at a first index other than the world {world}")
    rows = {root for root, state, _ in proof.uses if state == ROW}
    rows -= {root for root, state, _ in proof.uses if state == OTHER}
    return WorldVerdict(True, f"every write lands in row {world} of a per-world array", frozenset(written),
                        frozenset(rows), proof.tiles)


def world_offsets(kernel, args_layout) -> tuple[tuple[int, ...], tuple[int, ...], bool] | None:
    """For a graph launch of a kernel not splittable by task: ``(writes, rows, tiles)``, the sorted byte
    offsets in its packed arguments of the arrays it writes and of those it accesses only at the
    world's row (``apic.record.parallel.world_split``), and whether it uses tiles (each thread must then run it
    in its own loaded copy: ``KernelInfo.split_tiles``), or None when its launches must stay serial.

    An array field of a ``@wp.struct`` argument counts as an array argument of its own (its descriptor
    is an array slot of the launch: :mod:`apic.record.parallel.world_structs`). Refused as in
    :func:`apic.record.parallel.splittable.written_offsets`: a 64-bit integer argument (or struct field), and a
    written array that is not a plain array slot."""
    verdict = world_verdict(kernel)
    if not verdict.splittable or args_layout.words:
        return None
    plain = {slot.at for slot in args_layout.slots if not slot.indexed}
    offsets = world_structs.array_offsets(kernel, args_layout)
    writes = [offsets.get(root) for root in verdict.written]
    if any(at not in plain for at in writes):
        return None
    rows = [at for at in map(offsets.get, verdict.rows) if at in plain]
    return tuple(sorted(writes)), tuple(sorted(rows)), verdict.tiles


def split_refusal(kernel) -> str:
    """Why a kernel's launches stay serial, when neither :func:`apic.record.parallel.splittable.written_offsets` nor
    :func:`world_offsets` accepted it (for ``parallel_report``)."""
    task, world = _task.kernel_verdict(kernel), world_verdict(kernel)
    if world.splittable:
        return ("an argument or a struct field is a 64-bit integer (maybe a handle id), or a written array is "
                "not a plain array")
    if task.splittable:
        return (f"by task, an argument is a @wp.struct or a 64-bit integer, or a written argument is not a plain "
                f"array; not splittable by world ({world.reason})")
    return f"not splittable by task ({task.reason}) nor by world ({world.reason})"
