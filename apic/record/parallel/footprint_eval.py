"""The footprint evaluator: runs a kernel's Python AST once per task of one launch, on what is known of the
launch (its task ids, its ``int32`` and ``bool`` scalar arguments, the contents of the ``int32`` and ``bool``
arrays it only reads), and lists every element each task may read or write of the arrays it writes.

Only Warp ``int32`` integers and booleans are followed, exactly (a result outside ``int32`` is unknown); every
other value (a float, a vector, an integer of another width or signedness, an element of an array the kernel
writes) is :data:`UNKNOWN`, and a name that may hold one of several arrays is ``MAYBE_ARRAY``, whose use
refuses the launch. The lists are a superset of what the compiled kernel touches for those contents
(docs/PARALLEL.md, "Why a footprint split cannot race"; ``tests/parallel/test_footprint_differential.py``
checks it against the compiled kernel):

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

The values are :mod:`apic.record.parallel.footprint_values`'s, the interpreter of statements and expressions is
:mod:`apic.record.parallel.footprint_body`'s, and what it asks of a piece of AST (which calls have effects, which
loops and calls it may skip) :mod:`apic.record.parallel.footprint_shapes`'s.
"""

from __future__ import annotations

import ctypes

import numpy as np

from apic.record.parallel import splittable as _task
from apic.record.parallel.footprint_body import Body
from apic.record.parallel.footprint_values import UNKNOWN, Array, Refused, View, as_int, known

__all__ = ["Array", "Evaluation", "Refused", "UNKNOWN", "View"]
# the element types whose values are followed: Warp's int32 and bool (any other integer wraps otherwise)
_FOLLOWED = (np.dtype(np.int32), np.dtype(np.bool_))  # the values, for callers of the evaluation


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
            Body(self, scope).block(definition.body, dict(self.args))
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
        indexed = all(known(i) for i in full)  # every index known
        if array.may_write or write:
            if not array.may_write:
                raise Refused(f"line {node.lineno}: writes {array.label}, which the analysis did not find written")
            if not indexed:
                raise Refused(f"line {node.lineno}: {'writes' if write else 'reads'} {array.label} at an index "
                              "not known from the launch's index data")
            flat = self._flat(array, full, node)
            lists = (self.writes if write else self.reads).setdefault(array.label, ([], []))
            lists[0].append(flat)
            lists[1].append(self.task)
            return UNKNOWN
        if not indexed or array.dtype not in _FOLLOWED:
            return UNKNOWN
        if self.lenient and not all(0 <= i < n for i, n in zip(full, array.shape)):
            return UNKNOWN
        self._flat(array, full, node)  # in bounds
        if array.values is None:
            array.values = _host_view(array)
            self.concrete.add(array.label)
        value = array.values[full]
        return bool(value) if array.dtype.kind == "b" else as_int(int(value))

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
