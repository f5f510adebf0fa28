"""Launches split by world (docs/PARALLEL.md, "Splitting by world"), bit for bit against eager Warp.

Each form the world-split proof accepts (``world_kernels.CASES``: stores, ``a[w][j]``, in-place
updates at computed columns, float atomics, row views, rows and worlds passed to ``@wp.func``s, one
view passed in and out, and the same through ``@wp.struct`` fields) is replayed split over 2 and 64
threads by both interpreters and must equal eager Warp; each form it refuses (a global counter,
another world's row, ``w % n``, a rebound world, a function writing the next world, launches whose
written rows overlap, a struct used other than through its fields) must stay serial, with the reason
in ``parallel_report``. Mutation checks, in child processes: with the proof forced to accept
everything, the refused order-dependent forms must come out different from eager, and with chunks
cut without regard to worlds the accepted order-dependent forms must too; so these tests can fail.
"""

from __future__ import annotations

import json
import sys
import textwrap

import numpy as np
import pytest

import fork_server
import world_kernels as wk
from world_kernels import same_bits
from apic.record.parallel.splittable import kernel_verdict
from apic.record.parallel.world_split import world_verdict
from apic.record.parallel.world_structs import is_struct
from apic.replay.cpu import table as tbl
from persist_helpers import child_env

pytestmark = [pytest.mark.warp_version, pytest.mark.interpreter]

SPLIT = [name for name, case in wk.CASES.items() if case[3] == "split"]
REFUSED = [name for name, case in wk.CASES.items() if case[3] != "split"]


@pytest.mark.parametrize("interpreter", ["numba", "reference"])
@pytest.mark.parametrize("threads", [2, 64])
@pytest.mark.parametrize("name", SPLIT)
def test_accepted_form_splits_by_world_as_eager(name, threads, interpreter):
    eager, replayed, graph = wk.run(name, threads, interpreter)
    (entry,) = graph.parallel_report(threads)
    assert entry["chunks"] > 1 and not entry["why"], entry
    info = graph.recording.kernels[0]
    kernel = wk.CASES[name][0]
    # the task rule, when it applies, comes first; it takes no @wp.struct argument
    by_task = kernel_verdict(kernel).splittable and not any(is_struct(a.type) for a in kernel.adj.args)
    assert info.split_writes and (info.split_world is None) == by_task, info
    assert (graph.parallel_program(threads).table[:, 0] == tbl.OP_SPLIT).sum() == 1
    assert same_bits(eager, replayed), name


@pytest.mark.parametrize("name", REFUSED)
def test_refused_form_stays_serial_with_its_reason(name):
    kernel, _, _, refused_by = wk.CASES[name]
    eager, replayed, graph = wk.run(name, 2, "numba", replays=2)
    assert (graph.parallel_program(2).table[:, 0] != tbl.OP_SPLIT).all()
    (entry,) = graph.parallel_report(2)
    assert entry["chunks"] == 0 and entry["why"], entry
    if refused_by == "kernel":
        assert not world_verdict(kernel).splittable
        assert "nor by world" in entry["why"], entry
    else:
        assert world_verdict(kernel).splittable
        assert "rows" in entry["why"] or "overlaps" in entry["why"], entry
    assert same_bits(eager, replayed), name


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("global_counter", "writes n at a first index other than the world"),
        ("reads_previous_world", "reads acc (which it writes) at a first index other than the world"),
        ("modulo_world", "writes acc at a first index other than the world"),
        ("world_rebound", "no world index"),
        ("func_writes_next_world", "writes acc at a first index other than the world"),
        ("struct_reads_previous_world", "reads s.acc (which it writes) at a first index other than the world"),
    ],
)
def test_proof_names_the_reason(name, reason):
    verdict = world_verdict(wk.CASES[name][0])
    assert not verdict.splittable and reason in verdict.reason, verdict


def test_struct_fields_are_refused():
    verdict = world_verdict(wk.writes_through_struct_element)
    assert not verdict.splittable and "holders, an array of @wp.struct" in verdict.reason, verdict


def test_struct_field_arrays_are_named_and_placed():
    """A struct argument's array fields are arrays of their own, ``argument.field``, at their descriptors'
    offsets in the packed arguments (the launch's array slots)."""
    verdict = world_verdict(wk.nested_struct)
    assert verdict.splittable, verdict
    assert verdict.written == {"n.state.acc", "out"}, verdict
    assert verdict.rows == {"n.state.acc", "out"}, verdict  # n.state.x is read at another world too
    _, _, graph = wk.run("nested_struct", 2, "numba", replays=1)
    info = graph.recording.kernels[0]
    (launch,) = [op for op in graph.recording.ops if hasattr(op, "args") and hasattr(op, "dim")]
    slots = {slot.at for slot in launch.args.arrays}
    assert len(slots) == 4 and set(info.split_writes) <= slots and info.split_world == info.split_writes, info


def _proof_only_kernels():
    """Struct forms the proof refuses, never launched (the proof reads their source only)."""
    import warp as wp

    @wp.func
    def rebinds_state(s: wk.WorldState, w: int):
        s = s
        s.acc[w, 0] = 1.0

    @wp.kernel
    def field_to_builtin(n: wk.Nested):
        w, j = wp.tid()
        n.state.acc[w, 0] = float(wp.lower_bound(n.col, 1))

    @wp.kernel
    def stores_a_field(s: wk.WorldState, other: wk.WorldState):
        w, j = wp.tid()
        s.acc = other.acc
        s.acc[w, 0] = 1.0

    @wp.kernel
    def stores_a_struct(n: wk.Nested, other: wk.WorldState):
        w, j = wp.tid()
        n.state = other
        n.state.acc[w, 0] = 1.0

    @wp.kernel
    def struct_rebound(s: wk.WorldState, other: wk.WorldState):
        w, j = wp.tid()
        s = other
        s.acc[w, 0] = 1.0

    @wp.kernel
    def scalar_field_written(s: wk.WorldState):
        w, j = wp.tid()
        s.scale = 2.0
        s.acc[w, 0] = s.scale

    @wp.kernel
    def struct_to_rebinding_func(s: wk.WorldState):
        w, j = wp.tid()
        rebinds_state(s, w)

    @wp.kernel
    def field_at_other_world_in_func(s: wk.WorldState):
        w, j = wp.tid()
        wk.bump_next_world(s.acc, w, j % 3, 1.0)

    return {
        "field_to_builtin": (field_to_builtin, "uses array n.col other than by indexing it"),
        "stores_a_field": (stores_a_field, "stores an array, or a struct holding one, into a field"),
        "stores_a_struct": (stores_a_struct, "stores an array, or a struct holding one, into a field"),
        "struct_rebound": (struct_rebound, "rebinds its struct argument s"),
        "scalar_field_written": (scalar_field_written, "stores into a field of s"),
        "struct_to_rebinding_func": (struct_to_rebinding_func, "rebinds its array or struct parameter s"),
        "field_at_other_world_in_func": (field_at_other_world_in_func,
                                         "writes s.acc at a first index other than the world"),
    }


@pytest.mark.parametrize("name", list(_proof_only_kernels()))
def test_struct_form_refused_names_the_reason(name):
    kernel, reason = _proof_only_kernels()[name]
    verdict = world_verdict(kernel)
    assert not verdict.splittable and reason in verdict.reason, verdict


def test_struct_with_a_64_bit_field_stays_serial():
    """Proved by world, but a launch's 64-bit integer may be a handle id whose memory the kernel reads:
    its launches stay serial, and the report says why."""
    import warp as wp

    kernel, dim, make = wk.WORD_CASE
    assert world_verdict(kernel).splittable
    eager, replayed = make(np.random.default_rng(3)), make(np.random.default_rng(3))
    with wp.ScopedCapture(device="cpu") as capture:
        wp.launch(kernel, dim=dim, inputs=replayed, device="cpu")
    graph = capture.graph
    graph.min_tasks_per_thread = 1
    for _ in range(2):
        wp.launch(kernel, dim=dim, inputs=eager, device="cpu")
        wp.capture_launch(graph, threads=2)
    (entry,) = graph.parallel_report(2)
    assert entry["chunks"] == 0 and "64-bit integer" in entry["why"], entry
    assert same_bits(wk.arrays(eager), wk.arrays(replayed))


def test_launch_check_names_the_reason():
    reasons = {name: wk.run(name, 2, "numba", replays=1)[2].parallel_report(2)[0]["why"]
               for name, case in wk.CASES.items() if case[3] == "launch"}
    assert "has 62 rows for 61 worlds" in reasons["more_rows_than_worlds"], reasons
    assert "overlaps another argument" in reasons["overlapping_rows"], reasons
    assert "overlaps another argument" in reasons["one_view_read_at_next_world"], reasons
    assert "has 62 rows for 61 worlds" in reasons["struct_more_rows_than_worlds"], reasons  # a struct's field
    assert "overlaps another argument" in reasons["struct_overlapping_rows"], reasons


_MUTANT = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    import warp as wp
    wp.config.quiet = True
    import world_kernels as wk
    from apic.record.parallel import world_split, world_structs
    from apic.replay.parallel import range_entry

    mutation, names = sys.argv[1], json.loads(sys.argv[2])
    if mutation == "proof says yes":
        def accept_all(kernel):
            arrays = frozenset(a.label for a in kernel.adj.args if isinstance(getattr(a.type, "ndim", None), int))
            arrays |= {root for a in kernel.adj.args if world_structs.is_struct(a.type)
                       for root in world_structs.array_fields(a.label, a.type)}
            return world_split.WorldVerdict(True, "forced", arrays, arrays)
        world_split._world_verdict = accept_all
    else:  # chunks cut anywhere: the range entry that does not move cuts to world boundaries
        original = range_entry.range_entry
        range_entry.range_entry = lambda module, module_exec, symbol, world=False: original(module, module_exec, symbol)
    found = {}
    for name in names:
        eager, replayed, graph = wk.run(name, 2, "reference")
        split = any(entry["chunks"] > 1 for entry in graph.parallel_report(2))
        same = all(np.array_equal(a.view(np.uint8), b.view(np.uint8)) for a, b in zip(eager, replayed))
        found[name] = {"split": split, "same": same}
    print(json.dumps(found))
    """
)


def _mutant(mutation: str, names: list[str]) -> dict:
    done = fork_server.run([sys.executable, "-c", _MUTANT, mutation, json.dumps(names)], env=child_env(),
                           capture_output=True, text=True, timeout=600, cwd=wk.__file__.rsplit("/", 1)[0])
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_mutation_proof_always_yes_is_caught():
    """Forced to accept every kernel, the refused order-dependent forms split and differ from eager:
    the refusals above are what keeps them right."""
    names = ["global_counter", "reads_previous_world", "one_view_read_at_next_world", "struct_reads_previous_world"]
    found = _mutant("proof says yes", names)
    assert all(found[name]["split"] for name in names), found
    assert not any(found[name]["same"] for name in names), found


def test_mutation_chunks_not_at_world_boundaries_is_caught():
    """Cut without regard to worlds (a world's tasks in two chunks, run last first), the forms whose
    result depends on the order of a world's tasks differ from eager."""
    names = ["computed_columns", "float_atomics", "row_view", "one_view_in_and_out", "struct_atomics", "nested_struct"]
    found = _mutant("chunks anywhere", names)
    assert all(found[name]["split"] for name in names), found
    assert not any(found[name]["same"] for name in names), found
