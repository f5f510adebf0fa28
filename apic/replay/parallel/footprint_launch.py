"""Lowering's check of one launch of a kernel with a footprint claim (:mod:`apic.record.parallel.footprint`): run the
footprint evaluator on the launch's arguments and index arrays as they are now, refuse the launch unless no
two tasks touch an element one of them writes, and name the bytes that verdict rests on (the row's
guards: a split replay compares them with :class:`Guards`' copy before it splits, and runs the launch
serially where they differ).
"""

from __future__ import annotations

import ctypes
import struct

import numpy as np
import warp as wp

from apic import _compat
from apic.record.parallel.footprint import addresses_reduced, sealed_digest
from apic.record.parallel.footprint_eval import Evaluation
from apic.record.parallel.footprint_values import MAYBE_ARRAY, UNKNOWN, Array, Refused, View
from apic.record.parallel.splittable import graph_launch_refusal
from apic.replay.parallel import footprint_cache
from apic.targets import cpu as _cpu

# Statements the evaluator may run for one launch (all its tasks): a few seconds of Python. A launch
# needing more stays serial, saying so.
STEP_BUDGET = 2_000_000

# the scalar arguments the evaluation follows: int32 and bool only (docs/PARALLEL.md, "Why a footprint split
# cannot race"); any other is unknown (a uint32 or an int8 wraps where a Python int does not)
_SCALARS = {wp.int32: "<i", wp.bool: "<?", int: "<i", bool: "<?"}


class Guards:
    """The bytes a footprint verdict rests on: ``spans`` of ``(address, nbytes)``, and a copy of each taken
    when the verdict was made (``table``: ``(address, copy address, nbytes)`` rows for the splitter)."""

    def __init__(self, spans) -> None:
        spans = [(int(a), int(n)) for a, n in spans if n]
        self.copy = np.empty(sum(n for _, n in spans), dtype=np.uint8)
        self.table = np.zeros((len(spans), 3), dtype=np.int64)
        at = 0
        for k, (address, nbytes) in enumerate(spans):
            ctypes.memmove(self.copy.ctypes.data + at, address, nbytes)
            self.table[k] = (address, self.copy.ctypes.data + at, nbytes)
            at += nbytes

    def hold(self) -> bool:
        """Whether every guarded byte is still what it was (the check the splitter makes natively)."""
        return guards_hold(self.table.tolist())


def guards_hold(rows) -> bool:
    """Whether each ``(address, copy address, nbytes)`` of ``rows`` still holds its copy's bytes."""
    return all(ctypes.string_at(a, n) == ctypes.string_at(c, n) for a, c, n in rows)


def footprint_refusal(claim, data: bytes, blob, dim: tuple, region_span, evaluated: dict,
                      identity: bytes | None = None) -> tuple[str | None, tuple[int, ...]]:
    """``(why, index offsets)`` of one launch: why it must stay serial, or None and the byte offsets in its
    packed arguments of every index array whose contents decided the verdict
    (``apic.record.parallel.footprint.index_spans``; the launch's guards add its packed arguments and bounds).
    ``evaluated`` keeps evaluations by what they read: launches that differ only in where the written
    arrays are (a step's substeps swap their states) are evaluated once. ``identity`` (the kernel's module
    hash and symbol) lets a verdict be kept for later processes (:mod:`apic.replay.parallel.footprint_cache`); None
    keeps it in this process only."""
    why = graph_launch_refusal(data, blob, claim.writes, region_span)
    if why is not None:
        return why, ()
    key = (id(claim.kernel), tuple(dim), addresses_reduced(data, claim.writes))
    found = evaluated.get(key)
    if found is None:
        found = evaluated[key] = _evaluate(claim, data, blob, dim, identity)
    return found


def _evaluate(claim, data: bytes, blob, dim: tuple, identity: bytes | None) -> tuple[str | None, tuple[int, ...]]:
    args, arrays = _launch_values(claim, data, blob)
    kept = identity and footprint_cache.key(identity, dim, STEP_BUDGET, data, [slot.at for slot in blob.arrays],
                                            arrays)
    verdict = footprint_cache.load(kept) if kept else None
    if verdict is None or not set(verdict[1]) <= arrays.keys():
        verdict, keep = _judge(claim, args, dim)
        if kept and keep:
            footprint_cache.store(kept, *verdict)
    why, labels = verdict
    if why is not None:
        return why, ()
    return None, tuple(sorted(at for label, at, _ in claim.args if label in labels))


def sealed_refusal(sealed, data: bytes, blob, dim: tuple, region_span) -> tuple[str | None, tuple[int, ...]]:
    """:func:`footprint_refusal` of a loaded kernel's launch: its sealed verdict (``SealedFootprint``) whose
    digest the launch has now, or why it has none."""
    why = graph_launch_refusal(data, blob, sealed.writes, region_span)
    if why is not None:
        return why, ()
    for digest, offsets in sealed.verdicts:
        if sealed_digest(data, blob, dim, offsets) == digest:
            return None, offsets
    return ("its arguments and index data are not those of a launch whose footprint was judged splittable "
            "when the graph was saved"), ()


def _launch_values(claim, data: bytes, blob) -> tuple[dict, dict]:
    """The evaluation's arguments (label -> value) and the launch's arrays (label -> ``Array``)."""
    slots = {slot.at: slot for slot in blob.arrays}
    written = set(claim.writes)
    args, arrays = {}, {}
    for label, at, arg_type in claim.args:
        slot = slots.get(at)
        if slot is not None:
            ptr, _, *dims, ndim = _cpu.ARRAY_T.unpack_from(data, at)
            shape, strides = tuple(dims[:4][:ndim]), tuple(dims[4:][:ndim])
            # an indexed array's elements are not where its descriptor's strides say: never read concretely
            dtype = (np.dtype((np.void, slot.elem_size)) if slot.indexed
                     else _element_dtype(getattr(arg_type, "dtype", None), slot.elem_size))
            arrays[label] = Array(label, ptr, shape, strides, dtype, at in written)
            args[label] = View(arrays[label])
        elif _compat.wp_types.is_array(arg_type):  # an array with no descriptor read here: never listed
            args[label] = MAYBE_ARRAY
        else:
            code = _SCALARS.get(arg_type)
            args[label] = struct.unpack_from(code, data, at)[0] if code else UNKNOWN
    return args, arrays


def _judge(claim, args: dict, dim: tuple) -> tuple[tuple[str | None, tuple], bool]:
    """``((why, labels of the arrays the verdict rests on), whether it may be kept)``: an evaluator failure
    on an unforeseen kernel, or Python's recursion limit, is this process's, not the launch's."""
    evaluation = Evaluation(claim.kernel, args, dim, STEP_BUDGET)
    try:
        evaluation.run()
    except Refused as refused:
        return (str(refused), ()), True
    except RecursionError:
        return ("nested too deeply to evaluate", ()), False
    except Exception as error:  # noqa: BLE001 - an evaluator that fails on an unforeseen kernel: serial
        return (f"the footprint evaluation failed: {error!r}", ()), False
    why = _conflict(evaluation)
    return ((why, ()) if why is not None else (None, tuple(sorted(evaluation.concrete)))), True


def _element_dtype(dtype, elem_size: int) -> np.dtype:
    found = _compat.wp_types.warp_type_to_np_dtype.get(dtype) if dtype is not None else None
    if found is None or np.dtype(found).itemsize != elem_size:
        return np.dtype((np.void, elem_size))
    return np.dtype(found)


def _conflict(evaluation: Evaluation) -> str | None:
    """Why two tasks may touch one element of an array that one of them writes, or None."""
    for label, (elements, tasks) in evaluation.writes.items():
        read_elements, read_tasks = evaluation.reads.get(label, ([], []))
        every = np.array(elements + read_elements, dtype=np.int64)
        by = np.array(tasks + read_tasks, dtype=np.int64)
        order = np.lexsort((by, every))
        every, by = every[order], by[order]
        starts = np.flatnonzero(np.r_[True, every[1:] != every[:-1]])
        first, last = by[starts], np.maximum.reduceat(by, starts)
        shared = every[starts][first != last]
        clash = shared[np.isin(shared, np.asarray(elements, dtype=np.int64))]
        if clash.size:
            return (f"two tasks touch element {int(clash[0])} of {label}, which one of them writes "
                    "(for the index data the launch holds now)")
    return None
