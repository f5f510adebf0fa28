"""The footprint rule of the parallel replay (docs/PARALLEL.md, "Splitting by footprint"): a kernel whose
tasks write memory through index data (newton's Featherstone kernels: one task per articulation, writing
``body_q[joint_child[i]]`` for ``i`` in ``[articulation_start[t], articulation_end[t])``, or
``J[J_start[t] + ...]``) may be split by task when, for the index data a launch actually holds, no two
tasks touch an element one of them writes.

That cannot be proved from the source alone: it is a fact about the contents of the index arrays. So this
module only decides, at capture, whether a kernel is one the footprint evaluator
(:mod:`apic.record.parallel.footprint_eval`) may try: its source is there, it has no ``@wp.struct`` argument and no
64-bit integer argument (a handle id reaches memory behind the arguments), and every array it may write
is a plain ``wp.array``. The evaluation itself runs at lowering, per launch, on the arguments and index
arrays as they are then (:mod:`apic.replay.parallel.footprint_launch`), and each split replay checks those bytes
again before it splits (the row's guards): other contents run the launch serially.

Footprint claims are live only: they hold the kernel object (its AST). A save seals, in the kernel manifest
of each module, the verdicts of the launches that split (:class:`SealedFootprint`: the digest of what each
rested on); a loaded graph splits a launch whose arguments and index data have a sealed verdict's digest,
and replays the others serially.
"""

from __future__ import annotations

import ast
import ctypes
import hashlib
import struct
from dataclasses import dataclass, field

from apic import _compat
from apic.record.parallel import splittable as _task
from apic.record.layout import extent
from apic.targets import cpu as _cpu


@dataclass(frozen=True)
class FootprintClaim:
    """A kernel the footprint evaluator may try, and where its arguments lie in the packed launch arguments.

    ``args``: ``(label, byte offset, Warp type)`` of each kernel argument; ``writes``: the sorted byte
    offsets of the arrays it may write (a superset: :func:`written_params`)."""

    kernel: object = field(compare=False, repr=False)
    args: tuple = field(compare=False, repr=False)
    writes: tuple[int, ...] = ()


@dataclass(frozen=True)
class SealedFootprint:
    """A loaded kernel's footprint verdicts, as its module's kernel manifest seals them: ``writes`` as a
    claim's; ``verdicts`` the ``(digest, offsets)`` of each launch judged splittable at save, ``offsets`` the
    byte offsets of the index arrays whose contents it rested on (:func:`sealed_digest`)."""

    writes: tuple[int, ...]
    verdicts: tuple[tuple[str, tuple[int, ...]], ...]


def addresses_reduced(data: bytes, array_offsets) -> bytes:
    """``data`` (packed arguments) with each array descriptor's address and gradient address at
    ``array_offsets`` reduced to whether the address is null: the evaluation never reads an address."""
    reduced = bytearray(data)
    for at in array_offsets:
        reduced[at : at + 16] = (b"\1" if any(reduced[at : at + 8]) else b"\0") + bytes(15)
    return bytes(reduced)


def index_spans(data: bytes, blob, offsets) -> tuple[tuple[int, int], ...]:
    """``(address, nbytes)`` of each plain array whose descriptor is at one of ``offsets`` of ``data``."""
    slots = {slot.at: slot for slot in blob.arrays}
    spans = []
    for at in offsets:
        ptr, _, *dims, ndim = _cpu.ARRAY_T.unpack_from(data, at)
        lo, hi = extent(ptr, slots[at].elem_size, dims[:4][:ndim], dims[4:][:ndim])
        spans.append((lo, hi - lo))
    return tuple(spans)


def sealed_digest(data: bytes, blob, dim: tuple, offsets) -> str | None:
    """What a sealed verdict (:class:`SealedFootprint`) names a launch by: the SHA-256 of
    its dimensions, its packed arguments with array addresses reduced to whether they are null, and the
    contents of the index arrays at ``offsets``. None when an offset is not a plain array's."""
    slots = {slot.at: slot for slot in blob.arrays}
    if any(at not in slots or slots[at].indexed for at in offsets):
        return None
    digest = hashlib.sha256(repr(tuple(dim)).encode())
    digest.update(addresses_reduced(data, slots))
    for at, (address, nbytes) in zip(offsets, index_spans(data, blob, offsets)):
        digest.update(struct.pack("<qq", at, nbytes) + ctypes.string_at(address, nbytes))
    return digest.hexdigest()


def footprint_claim(kernel, args_layout) -> FootprintClaim | None:
    """The kernel's claim to the footprint rule, or None when its launches must stay serial."""
    definition = _task.source_definition(kernel)
    if definition is None or args_layout.words:
        return None
    args = []
    for i, arg in enumerate(kernel.adj.args):
        if isinstance(arg.type, _compat.wp_codegen.Struct) or _holds_arrays(getattr(arg.type, "dtype", None)):
            return None  # an array of structs holding arrays reaches memory its descriptor does not
        args.append((arg.label, getattr(args_layout.struct_type, f"a{i}").offset, arg.type))
    written = written_params(kernel)
    plain = {slot.at for slot in args_layout.slots if not slot.indexed}
    writes = []
    for label, at, arg_type in args:
        if label in written:
            if not _compat.is_plain_array_type(arg_type) or at not in plain:
                return None
            writes.append(at)
    if not writes:
        return None
    return FootprintClaim(kernel, tuple(args), tuple(sorted(writes)))


def _holds_arrays(dtype) -> bool:
    """Whether a ``@wp.struct`` type has an array field, in itself or a nested struct."""
    if not isinstance(dtype, _compat.wp_codegen.Struct):
        return False
    return any(_compat.wp_types.is_array(var.type) or _holds_arrays(var.type) for var in dtype.vars.values())


_summaries = _task._Memo()


def written_params(function) -> frozenset:
    """The parameters of a kernel or ``@wp.func`` (every overload) that it may write through: stored into,
    updated in place, passed to an atomic, or passed to a function that writes its parameter there.

    A hint, not a proof: the evaluator refuses a launch that writes an array this set leaves out, and
    uses the set only to skip loops that read nothing a task may write."""
    found = _summaries.get(function)
    if found is None:
        _summaries.put(function, frozenset())  # a cycle (Warp compiles none) sees nothing written
        found = _summaries.put(function, _written_params(function))
    return found


def _written_params(function) -> frozenset:
    written: set[str] = set()
    for overload in list(getattr(function, "user_overloads", {}).values()) or [function]:
        definition = _task.source_definition(overload)
        if definition is None:
            continue
        params = [a.arg for a in definition.args.args]
        scope = _task._scope(getattr(overload, "func", None))
        # a local name -> every parameter whose memory it may view (``arr = a`` one way, ``arr = b`` another)
        roots = {name: {name} for name in params}
        nodes = list(ast.walk(ast.Module(body=definition.body, type_ignores=[])))
        changed = True
        while changed:  # aliases of aliases, to a fixed point
            changed = False
            for node in nodes:
                if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                    found = roots.get(_root_name(node.value), set()) - roots.get(node.targets[0].id, set())
                    if found:
                        roots.setdefault(node.targets[0].id, set()).update(found)
                        changed = True
        for node in nodes:
            targets = []
            if isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            elif isinstance(node, ast.AugAssign):
                targets = [node.target]
            for target in targets:
                for part in ast.walk(target):
                    if isinstance(part, (ast.Subscript, ast.Attribute)) and isinstance(part.ctx, ast.Store):
                        written.update(roots.get(_root_name(part), ()))
            if isinstance(node, ast.Call):
                name = _task._call_name(node.func)
                if name is None:
                    continue
                if name.startswith("atomic_") and node.args:
                    written.update(roots.get(_root_name(node.args[0]), ()))
                callee = _task._resolve(node.func, scope)
                is_builtin = getattr(callee, "is_builtin", None)
                if callable(is_builtin) and not is_builtin():
                    inner = written_params(callee)
                    names = _param_names(callee)
                    for position, value in enumerate(node.args):
                        if position < len(names) and names[position] in inner:
                            written.update(roots.get(_root_name(value), ()))
                    for keyword in node.keywords:
                        if keyword.arg in inner:
                            written.update(roots.get(_root_name(keyword.value), ()))
    return frozenset(written)


def _param_names(function) -> list[str]:
    definition = _task.source_definition(function)
    return [a.arg for a in definition.args.args] if definition is not None else []


def _root_name(node) -> str | None:
    """``a`` of ``a``, ``a[i]``, ``a[i][j]``, ``a[i].x``; None for anything else."""
    while isinstance(node, (ast.Subscript, ast.Attribute)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None
