"""Launches split by footprint (docs/PARALLEL.md, "Splitting by footprint"), bit for bit against eager Warp.

Each accepted form of ``footprint_kernels.CASES`` (segments ``[start[t], end[t])``, children through an
index array, dense blocks at offsets through a ``@wp.func``, a ``while`` walk up a parent array with float
atomics, both branches of an unknown condition) is replayed split over 2 and 64 threads by both
interpreters and must equal eager Warp; each refused one (the same kernels over overlapping index data,
an index computed from a float, a ``printf``) stays serial with its reason. The guards: index data changed
after the plan was made runs the launch serially (equal to eager), and a child process with the guards
emptied shows the change would otherwise come out wrong; so these tests can fail.
"""

from __future__ import annotations

import json
import sys
import textwrap

import numpy as np
import pytest
import warp as wp

import fork_server
import footprint_kernels as fk
from footprint_helpers import evaluate
from apic.record.parallel.footprint import written_params
from apic.replay.cpu import table as tbl
from persist_helpers import child_env
from world_kernels import same_bits

pytestmark = [pytest.mark.warp_version, pytest.mark.interpreter]

SPLIT = [name for name, case in fk.CASES.items() if case[4] == "split"]
REFUSED = [name for name, case in fk.CASES.items() if case[4] != "split"]


@pytest.mark.parametrize("interpreter", ["numba", "reference"])
@pytest.mark.parametrize("threads", [2, 64])
@pytest.mark.parametrize("name", SPLIT)
def test_accepted_form_splits_by_footprint_as_eager(name, threads, interpreter):
    eager, replayed, graph = fk.run(name, threads, interpreter)
    (entry,) = graph.parallel_report(threads)
    assert entry["chunks"] > 1 and not entry["why"], entry
    info = graph.recording.kernels[0]
    assert info.split_writes is None and info.split_footprint is not None, info
    assert (graph.parallel_program(threads).table[:, 0] == tbl.OP_SPLIT).sum() == 1
    assert same_bits(eager, replayed), name


@pytest.mark.parametrize("name", REFUSED)
def test_refused_form_stays_serial_with_its_reason(name):
    eager, replayed, graph = fk.run(name, 2, "numba", replays=2)
    assert (graph.parallel_program(2).table[:, 0] != tbl.OP_SPLIT).all()
    (entry,) = graph.parallel_report(2)
    assert entry["chunks"] == 0 and fk.CASES[name][4] in entry["why"], entry
    assert same_bits(eager, replayed), name


def test_written_params_follow_functions_and_aliases():
    assert written_params(fk.children) == {"q"}
    assert written_params(fk.write_chain) == {"q"}
    assert written_params(fk.ancestors) == {"acc"}
    assert written_params(fk.dense_blocks) == {"m"}


def _overlap(inputs) -> None:
    """Every segment reaches two elements into the next: what the plan's verdict did not see."""
    end = inputs[1].numpy()
    end[:] = np.minimum(end + 2, len(inputs[-1]))
    wp.copy(inputs[1], wp.array(end, dtype=int, device=fk.CPU))


@pytest.mark.parametrize("interpreter", ["numba", "reference"])
def test_index_data_changed_after_planning_runs_serially(interpreter):
    """The plan split the launch on the first contents; after ``end`` changes, its guard sees it and the
    launch runs serially, equal to eager on the new contents."""
    eager, replayed, graph = fk.run("running_sum", 2, interpreter, replays=4, mutate=_overlap)
    (entry,) = graph.parallel_report(2)
    assert entry["chunks"] > 1, entry  # still planned split: the guard decides at each replay
    assert entry["basis"].endswith("(they differ now)"), entry  # and the report says it differs now
    assert same_bits(eager, replayed)


def test_guards_cover_arguments_bounds_and_index_arrays():
    """What a verdict rests on: the packed arguments (scalars, and which arrays), the bounds, and each index
    array whose contents it read."""
    _, _, graph = fk.run("running_sum", 2, "reference", replays=1)
    (split,) = graph.program.splits
    guards = split.guards
    assert guards.hold()
    spans = [(int(a), int(n)) for a, _, n in guards.table.tolist()]
    # the arguments, the bounds, and the two index arrays read (start, end)
    assert len(spans) == 4, spans


_MUTANT = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    import warp as wp
    wp.config.quiet = True
    import footprint_kernels as fk
    from apic.replay.parallel import footprint_launch
    import test_footprint_split as t

    if sys.argv[1] == "no guards":
        original = footprint_launch.Guards.__init__
        footprint_launch.Guards.__init__ = lambda self, spans: original(self, [])
    eager, replayed, graph = fk.run("running_sum", 2, "reference", replays=4, mutate=t._overlap)
    same = all(np.array_equal(a.view(np.uint8), b.view(np.uint8)) for a, b in zip(eager, replayed))
    print(json.dumps({"split": graph.parallel_report(2)[0]["chunks"] > 1, "same": same}))
    """
)


def _mutant(mutation: str) -> dict:
    here = __file__.rsplit("/", 1)[0]
    env = child_env()
    env["PYTHONPATH"] = here + ":" + env.get("PYTHONPATH", "")
    done = fork_server.run([sys.executable, "-c", _MUTANT, mutation], env=env, capture_output=True, text=True,
                           timeout=600, cwd=fk.__file__.rsplit("/", 1)[0])
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_mutation_without_guards_is_caught():
    """With the guards emptied, the changed index data is split as the old verdict said, and the result
    differs from eager: the guards are what keeps it right."""
    assert _mutant("guarded") == {"split": True, "same": True}
    assert _mutant("no guards") == {"split": True, "same": False}


# The evaluator on kernels it must not accept (never compiled: it reads their AST only).
STRIDE = 2


@wp.kernel
def binds_in_one_branch(x: wp.array(dtype=float), out: wp.array(dtype=float)):
    t = wp.tid()
    if x[t] > 0.5:
        STRIDE = 1  # noqa: N806 - shadows the module's STRIDE one way only
    out[t * STRIDE] = 1.0


@wp.kernel
def zero_step(n: int, out: wp.array(dtype=float)):
    t = wp.tid()
    for i in range(0, n, 0):
        out[t + i] = 1.0


@wp.kernel
def breaks_early(limit: wp.array(dtype=int), x: wp.array(dtype=float), out: wp.array(dtype=float)):
    t = wp.tid()
    k = int(0)
    for i in range(4):
        if x[t] > 0.5:  # unknown: k may stop at any iteration
            break
        k = i
    out[t * 4 + k] = 1.0  # k is unknown after the loop


@wp.kernel
def writes_through_made_array(address: wp.uint64, out: wp.array(dtype=float)):
    t = wp.tid()
    out[t] = 1.0
    for k in range(4):  # stores into no kernel array by name: the array made from a pointer is the memory
        made = wp.array(ptr=address, shape=(4,), dtype=float)
        made[k] = float(t)


@pytest.mark.parametrize(("kernel", "values", "reason"), [
    (binds_in_one_branch, {"x": np.ones(4, np.float32), "out": np.zeros(8, np.float32)}, "not known"),
    (zero_step, {"n": 3, "out": np.zeros(8, np.float32)}, "range is not known"),
    (breaks_early, {"limit": np.zeros(4, np.int32), "x": np.ones(4, np.float32), "out": np.zeros(16, np.float32)},
     "not known"),
    (writes_through_made_array, {"address": 0, "out": np.zeros(4, np.float32)}, "calls array"),
])
def test_evaluator_refuses_what_it_cannot_follow(kernel, values, reason):
    """A name bound one way only is unknown (not the module global it shadows), a zero step is no known
    range, a name a loop may leave at any iteration is unknown after it, and a loop that makes an array from
    a pointer is evaluated (not skipped as storing into locals only) and refused."""
    from apic.record.parallel.footprint_eval import Refused

    with pytest.raises(Refused, match=reason):
        evaluate(kernel, values, 4)


def test_report_says_a_footprint_split_holds_only_for_its_index_data():
    _, _, graph = fk.run("running_sum", 2, "numba", replays=1)
    (entry,) = graph.parallel_report(2)
    assert entry["chunks"] > 1 and "judged by footprint" in entry["basis"], entry
    assert "differ now" not in entry["basis"], entry
