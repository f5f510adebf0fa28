"""Lowering's parallel verdicts: which launches of kernels proved splittable (by task or by world), or claimed
by footprint, may run split across threads in this loaded or live graph, judged from the arena's relocated
argument bytes (and, for footprint claims, the index data they reach), and why the others may not
(``parallel_report``)."""

from __future__ import annotations

import numpy as np

from apic.record.parallel.splittable import graph_launch_refusal
from apic.record.parallel.footprint import SealedFootprint, index_spans
from apic.replay.parallel.footprint_launch import Guards, footprint_refusal, sealed_refusal
from apic.record.parallel.world_launch import world_launch_refusal
from apic.replay.parallel import split_planner
from apic.replay.program import Split
from apic.replay.relocate import Arena
from apic.targets.cpu import ARRAY_T_SIZE, INDEXEDARRAY_T_SIZE


def splits(recording, arena: Arena, bases: list[int], launch_rows: dict, sequence) -> tuple:
    """The launches of splittable kernels that may run split (``Split``), and why the others may not
    (``bases``: the address of each region)."""
    def region_span(ref) -> tuple[int, int]:
        return bases[ref.region], recording.regions[ref.region].nbytes

    # the positions of each row: the sequence sorted by row (stable, so positions stay in order), cut at each row
    sequence = np.asarray(sequence, dtype=np.intp)
    order = np.argsort(sequence, kind="stable")
    ordered = sequence[order]
    keys = np.fromiter(launch_rows, dtype=np.intp, count=len(launch_rows))
    starts, ends = np.searchsorted(ordered, keys).tolist(), np.searchsorted(ordered, keys, side="right").tolist()
    # The verdict and spans read the kernel, the relocations and the array descriptors only: launches that
    # share them (one kernel over the same arrays, other scalars) are judged once.
    judged: dict = {}
    tasks_of: dict = {}
    # Equal relocations and slots, hashed once per tuple object (a loaded graph's launches read alike share
    # theirs): the id of the first equal tuple. The ops hold every tuple, so no id is reused meanwhile.
    first_equal: dict = {}
    by_value: dict = {}

    def same(parts: tuple) -> int:
        found = first_equal.get(id(parts))
        if found is None:
            found = first_equal[id(parts)] = id(by_value.setdefault(parts, parts))
        return found

    evaluated: dict = {}  # footprint evaluations by what they read
    splits, refusals = [], []
    for (_row, op), start, end in zip(launch_rows.items(), starts, ends):
        kernel = recording.kernels[op.kernel]
        args = op.args
        footprint = kernel.split_footprint if kernel.split_writes is None else None
        data = None
        if footprint is not None:
            # judged on the launch's whole arguments (scalars too) and the index data they reach: once per
            # distinct content (a step's substeps launch alike), the guards made per launch
            at = arena.address(args) - arena.base
            data = arena.buffer[at : at + len(args.data)].tobytes()
            key = (op.kernel, op.dim, data, op.adj_args is None, same(args.relocs), same(args.arrays))
        else:
            key = (op.kernel, op.adj_args is None, op.dim if kernel.split_world is not None else None,
                   same(args.relocs), same(args.arrays),
                   b"".join(args.data[a.at : a.at + (INDEXEDARRAY_T_SIZE if a.indexed else ARRAY_T_SIZE)]
                            for a in args.arrays))
        verdict = judged.get(key)
        if verdict is None:
            if data is None:
                at = arena.address(args) - arena.base
                data = arena.buffer[at : at + len(args.data)].tobytes()
            why = "backward launch" if op.adj_args is not None else None
            if why is None and kernel.cpu_blocks:
                why = "runs as cooperative CPU blocks"
            offsets = None  # a footprint launch that may split: the index arrays its verdict rests on
            if footprint is not None:  # its launch check reads the launch's dim and index data
                if why is None:
                    if isinstance(footprint, SealedFootprint):  # a loaded kernel: its verdicts sealed at save
                        why, offsets = sealed_refusal(footprint, data, args, op.dim, region_span)
                    else:
                        why, offsets = footprint_refusal(footprint, data, args, op.dim, region_span, evaluated,
                                                         _identity(recording, kernel))
                    # what the rules proved at capture said, then what the launch's footprint says
                    why = why and "; ".join(filter(None, (kernel.split_refused, f"by footprint, {why}")))
                    offsets = offsets if why is None else None
            elif kernel.split_world is not None:  # its launch check reads the launch's dim
                why = why or world_launch_refusal(data, args, kernel.split_writes, kernel.split_world, op.dim,
                                                  region_span)
            else:
                why = why or graph_launch_refusal(data, args, kernel.split_writes, region_span)
            writes = kernel.split_writes if footprint is None else footprint.writes
            spans = None if why is not None else split_planner.launch_spans(args, writes, region_span)
            verdict = judged[key] = (why, spans, offsets)
        why, spans, offsets = verdict
        if why is not None:
            refusals.append((op.kernel, why))
            continue
        guards = sealable = None
        if offsets is not None:  # (data: read above, for every footprint launch)
            guards = Guards([(arena.address(args), len(args.data)), (arena.address(op.bounds), len(op.bounds.data)),
                             *index_spans(data, args, offsets)])
            sealable = (offsets, args, op.dim)
        writes, reach = spans
        tasks = tasks_of.get(op.dim)
        if tasks is None:
            tasks = tasks_of[op.dim] = int(np.prod(op.dim, dtype=np.int64)) if op.dim else 1
        rows = order[start:end]
        splits.append(Split(rows, op.kernel, arena.address(op.bounds), arena.address(op.args), tasks, writes, reach,
                            guards, sealable))
    return tuple(splits), tuple(refusals)


def _identity(recording, kernel) -> bytes | None:
    """What names a kernel's code across processes: its module's content hash and its symbol (None: unknown)."""
    module_hash = getattr(recording.modules[kernel.module].module_exec, "module_hash", None)
    if not isinstance(module_hash, (bytes, str)) or not module_hash:
        return None
    return (module_hash if isinstance(module_hash, bytes) else module_hash.encode()) + b"/" + kernel.symbol.encode()
