"""The branches and jumps of a CUDA recording read back as the nested bodies of CUDA conditional nodes.

A CUDA recording keeps ``wp.capture_if`` / ``wp.capture_while`` as the CPU recorder does, a ``Branch`` over
each body and ``Jump`` s (``apic.record.control_flow``), so the file format, ``inspect`` and the DOT picture
need nothing new. A CUDA graph has no jumps: each body becomes the child graph of a conditional node. This
module finds those bodies. It accepts only the layouts the recorder writes (``apic.record.cuda.control_flow``):

* if:          ``branch(-> end); <then>; end:``
* if / else:   ``branch(-> else); <then>; jump(-> end); else: <else, not empty>; end:``
* while:       ``top: branch(-> end); <body>; jump(-> top); end:``

Anything else (a jump into a body, a branch that leaves one, an else body the recorder would have dropped)
is refused with the position at fault. ``max_depth`` and ``max_body`` bound what a file may ask for (the
reader passes ``apic.format.schema``'s limits); the recursion is bounded by ``max_depth``.
"""

from __future__ import annotations

from dataclasses import dataclass

from apic.record.effects import BRANCH, JUMP, control_of


class StructureError(ValueError):
    """The branches and jumps of an op sequence do not nest as conditional nodes (the message says where)."""


@dataclass(frozen=True)
class IfNode:
    """A ``capture_if``: ``then`` runs where the int32 at ``cond`` is nonzero, ``otherwise`` (or nothing) where
    it is zero. Bodies are tuples of ops and nested nodes."""

    cond: object  # the Branch's pointer (a Ref once resolved)
    then: tuple
    otherwise: tuple | None


@dataclass(frozen=True)
class WhileNode:
    """A ``capture_while``: ``body`` runs while the int32 at ``cond`` is nonzero (tested before each pass)."""

    cond: object
    body: tuple


def has_conditionals(ops) -> bool:
    """Whether an op sequence holds a branch or a jump."""
    return any(map(control_of, ops))


def conditional_tree(ops, max_depth: int = 64, max_body: int | None = None) -> tuple:
    """The op sequence as a tuple of ops, ``IfNode`` s and ``WhileNode`` s; ``StructureError`` where it does
    not nest (see the module docstring), a body is nested deeper than ``max_depth`` or a body holds more than
    ``max_body`` positions (the whole sequence is no body: its own limits are the reader's)."""
    ops = list(ops)
    return _body(ops, 0, len(ops), 0, max_depth, max_body)


def _body(ops: list, lo: int, hi: int, depth: int, max_depth: int, max_body: int | None) -> tuple:
    if depth > max_depth:
        raise StructureError(f"the conditional body at position {lo} is nested {depth} deep, deeper than "
                             f"the {max_depth} this reader accepts")
    if depth and max_body is not None and hi - lo > max_body:
        raise StructureError(f"the body at positions {lo}..{hi - 1} holds {hi - lo} ops, more than the "
                             f"{max_body} this reader accepts in one body")
    out = []
    i = lo
    while i < hi:
        op = ops[i]
        control = control_of(op)
        if control == JUMP:
            raise StructureError(f"the jump at position {i} does not end a loop or a then-body")
        if control != BRANCH:
            out.append(op)
            i += 1
            continue
        t = op.target
        if not i < t <= hi:
            raise StructureError(f"the branch at position {i} goes to position {t}, outside its body "
                                 f"(positions {i + 1}..{hi})")
        last = ops[t - 1] if t - 1 > i else None
        jumps = last is not None and control_of(last) == JUMP
        if jumps and last.target == i:  # while: the jump back to the branch
            out.append(WhileNode(op.cond, _body(ops, i + 1, t - 1, depth + 1, max_depth, max_body)))
            i = t
        elif jumps and last.target > t:  # if / else: the then-body jumps over the else-body
            end = last.target
            if end > hi:
                raise StructureError(f"the jump at position {t - 1} goes to position {end}, outside its body "
                                     f"(positions {lo}..{hi})")
            then = _body(ops, i + 1, t - 1, depth + 1, max_depth, max_body)
            out.append(IfNode(op.cond, then, _body(ops, t, end, depth + 1, max_depth, max_body)))
            i = end
        elif jumps and last.target == t:
            raise StructureError(f"the jump at position {t - 1} goes to the next position (an empty else-body "
                                 "the recorder does not write)")
        else:  # if: the then-body ends where the branch goes (a loop inside it ends in its own jump)
            out.append(IfNode(op.cond, _body(ops, i + 1, t, depth + 1, max_depth, max_body), None))
            i = t
    return tuple(out)


def depth_of(tree: tuple) -> int:
    """How deep conditional nodes nest in a tree (0: none)."""
    deepest = 0
    for item in tree:
        if isinstance(item, IfNode):
            deepest = max(deepest, 1 + max(depth_of(item.then), depth_of(item.otherwise or ())))
        elif isinstance(item, WhileNode):
            deepest = max(deepest, 1 + depth_of(item.body))
    return deepest
