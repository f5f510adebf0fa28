"""Independent launches replayed at the same time (``apic.replay.parallel.split_planner``), bit for bit against
eager Warp.

Consecutive launches of splittable kernels that touch no region another one writes share one
``OP_SPLIT`` row: the threads run all their chunks, then wait once. Each test replays with the Numba
interpreter (the native splitter, workers included) and with the reference interpreter (the same
rows, items and chunks run last first, so a dependence the grouping missed shows as a difference),
and checks which launches were grouped: dependent ones (read after write, write after read, write
after write, two views of one allocation), launches a branch lands on, and more than ``MAX_GROUP``
launches in a row each start a new row.
"""

from __future__ import annotations

import numpy as np
import pytest
import warp as wp

import persist_kernels as P
from apic.replay.cpu import reference
from apic.replay.parallel import split_planner
from apic.replay.cpu import table as tbl
from conftest import CPU, assert_same, snapshot

pytestmark = [pytest.mark.warp_version, pytest.mark.interpreter]

INTERPRETERS = ["numba", "reference"]
COUNT, CHUNKS = tbl.COL_ARG0 + 2, tbl.COL_ARG0 + 3  # an OP_SPLIT row's launches and chunks


def _state(chains: int, n: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    return {f"{k}{c}": wp.array(rng.standard_normal(n).astype(np.float32), device=CPU)
            for c in range(chains) for k in "ab"}


def _interleaved(s: dict, chains: int, steps: int, n: int) -> None:
    """``chains`` independent chains, each squaring back and forth between its own two arrays,
    interleaved: chain 0, chain 1, ..., chain 0, ... (consecutive launches are independent)."""
    for step in range(steps):
        for c in range(chains):
            src, dst = (s[f"a{c}"], s[f"b{c}"]) if step % 2 == 0 else (s[f"b{c}"], s[f"a{c}"])
            wp.launch(P.square, dim=n, inputs=[src, dst], device=CPU)


def _replay(graph, threads: int, interpreter: str) -> None:
    if interpreter == "numba":
        wp.capture_launch(graph, threads=threads)
    else:
        program = graph.parallel_program(threads)
        reference.run_table(program.table, 1, None, program.loops)


def _captured(program, state: dict, min_tasks: int = 1000):
    """The graph of ``program(state)``, splitting launches of at least ``min_tasks`` tasks per thread."""
    with wp.ScopedCapture(device=CPU) as capture:
        program(state)
    capture.graph.min_tasks_per_thread = min_tasks
    return capture.graph


def _split_rows(graph, threads: int) -> np.ndarray:
    table = graph.parallel_program(threads).table
    return table[table[:, 0] == tbl.OP_SPLIT]


def _check(eager: dict, replayed: dict, graph, program, threads: int, interpreter: str, runs: int = 3) -> None:
    for run in range(runs):
        program(eager)
        _replay(graph, threads, interpreter)
        assert_same(snapshot(eager), snapshot(replayed), f"replay {run + 1}")


@pytest.mark.parametrize("interpreter", INTERPRETERS)
@pytest.mark.parametrize("threads", [2, 64])
def test_independent_small_launches_run_together(threads, interpreter):
    """Four chains of 600-task launches: none is large enough to split alone (min 1000 tasks per
    thread), four together are, so each row runs four launches whole, one per thread."""
    chains, steps, n = 4, 3, 600
    eager, replayed = _state(chains, n, 1), _state(chains, n, 1)
    graph = _captured(lambda s: _interleaved(s, chains, steps, n), replayed, 1000)
    rows = _split_rows(graph, threads)
    assert len(rows) == steps and (rows[:, COUNT] == chains).all()  # count: 4 launches a row
    assert (rows[:, CHUNKS] == chains).all()  # one chunk each: each runs whole
    report = graph.parallel_report(threads)
    assert all(entry["chunks"] == 1 and entry["together"] == chains for entry in report), report
    _check(eager, replayed, graph, lambda s: _interleaved(s, chains, steps, n), threads, interpreter)


@pytest.mark.parametrize("interpreter", INTERPRETERS)
def test_independent_large_launches_share_their_chunks(interpreter):
    """Large launches side by side share the chunks one launch of all their tasks would have."""
    chains, steps, n = 3, 2, 9000
    eager, replayed = _state(chains, n, 2), _state(chains, n, 2)
    graph = _captured(lambda s: _interleaved(s, chains, steps, n), replayed, 1000)
    rows = _split_rows(graph, 2)
    # the row is cut as one launch of 27,000 tasks would be (2 threads x 4 chunks): round(8 / 3) = 3 chunks
    # a launch, rounded up to a multiple of the 2 threads that would share each alone
    assert len(rows) == steps and (rows[:, CHUNKS] == 12).all()
    assert all(entry["chunks"] == 4 and entry["together"] == chains for entry in graph.parallel_report(2))
    _check(eager, replayed, graph, lambda s: _interleaved(s, chains, steps, n), 2, interpreter)


def _uneven(s: dict) -> None:
    """A launch of few tasks beside one of many: independent, so they share one row."""
    wp.launch(P.square, dim=30_000, inputs=[s["a0"], s["b0"]], device=CPU)
    wp.launch(P.square, dim=2_000, inputs=[s["a1"][:2_000], s["b1"][:2_000]], device=CPU)


@pytest.mark.parametrize("interpreter", INTERPRETERS)
def test_a_launch_of_few_tasks_beside_a_large_one_still_shares_its_tasks(interpreter):
    """Shared by tasks alone, the 2,000-task launch would get no chunk of its own (8 x 2,000 / 32,000);
    tasks say nothing of time (one task per world of a tile kernel can outweigh thousands of small
    ones), so a launch large enough to split alone keeps one chunk per thread that would share it."""
    eager, replayed = _state(2, 30_000, 3), _state(2, 30_000, 3)
    graph = _captured(_uneven, replayed, 1000)
    rows = _split_rows(graph, 2)
    assert len(rows) == 1 and rows[0, COUNT] == 2
    chunks = {entry["chunks"] for entry in graph.parallel_report(2)}
    assert chunks == {8, 2}, graph.parallel_report(2)  # round(8 x 30 / 32) and one per thread
    _check(eager, replayed, graph, _uneven, 2, interpreter)


def _dependent(s, n):
    wp.launch(P.square, dim=n, inputs=[s["a0"], s["b0"]], device=CPU)
    wp.launch(P.square, dim=n, inputs=[s["b0"], s["a1"]], device=CPU)  # reads what the last one wrote
    wp.launch(P.square, dim=n, inputs=[s["b1"], s["b0"]], device=CPU)  # writes what the last one read
    wp.launch(P.square, dim=n, inputs=[s["a0"], s["b0"]], device=CPU)  # writes what the last one wrote


@pytest.mark.parametrize("interpreter", INTERPRETERS)
def test_dependent_launches_are_not_grouped(interpreter):
    n = 3000
    eager, replayed = _state(2, n, 3), _state(2, n, 3)
    graph = _captured(lambda s: _dependent(s, n), replayed, 1000)
    rows = _split_rows(graph, 2)
    assert len(rows) == 4 and (rows[:, COUNT] == 1).all()  # each launch split alone
    _check(eager, replayed, graph, lambda s: _dependent(s, n), 2, interpreter)


def _views(s, n):
    half = n // 2
    whole = s["a0"]
    wp.launch(P.square, dim=half, inputs=[s["b0"][:half], whole[:half]], device=CPU)
    wp.launch(P.square, dim=half, inputs=[s["b1"][:half], whole[half:]], device=CPU)


def test_disjoint_views_of_one_allocation_are_not_grouped():
    """Independence is judged on whole allocations: two launches writing halves of one array stay apart."""
    n = 4000
    eager, replayed = _state(2, n, 4), _state(2, n, 4)
    graph = _captured(lambda s: _views(s, n), replayed, 1500)
    rows = _split_rows(graph, 2)
    assert len(rows) == 0, rows  # 2000 tasks each: neither splits alone, and they are not grouped
    graph.min_tasks_per_thread = 1000
    assert (_split_rows(graph, 2)[:, COUNT] == 1).all()
    _check(eager, replayed, graph, lambda s: _views(s, n), 2, "numba")


def _branching(s, n):
    wp.launch(P.square, dim=n, inputs=[s["a0"], s["b0"]], device=CPU)
    wp.capture_if(s["flag"], on_true=lambda: wp.launch(P.square, dim=n, inputs=[s["a1"], s["b1"]], device=CPU))
    wp.launch(P.square, dim=n, inputs=[s["a2"], s["b2"]], device=CPU)  # where the branch lands when flag is 0
    wp.launch(P.square, dim=n, inputs=[s["a3"], s["b3"]], device=CPU)


@pytest.mark.parametrize("interpreter", INTERPRETERS)
@pytest.mark.parametrize("flag", [0, 1])
def test_a_group_starts_where_a_branch_lands(flag, interpreter):
    """The launch after a ``capture_if`` body is a branch target: it may head a row, never join one."""
    n = 1200  # too few tasks to split alone (min 1000 per thread), enough for two launches together
    eager, replayed = _state(4, n, 5), _state(4, n, 5)
    for s in (eager, replayed):
        s["flag"] = wp.array([flag], dtype=wp.int32, device=CPU)
    graph = _captured(lambda s: _branching(s, n), replayed, 1000)
    table = graph.parallel_program(2).table
    target = split_planner.jump_targets(table)
    (landing,) = target
    assert table[landing, 0] == tbl.OP_SPLIT and table[landing, COUNT] == 2  # heads the last two
    assert table[landing - 1, 0] != tbl.OP_NOP  # the body's launch is not folded into the row
    _check(eager, replayed, graph, lambda s: _branching(s, n), 2, interpreter)


def test_at_most_max_group_launches_a_row():
    chains, n = split_planner.MAX_GROUP + 3, 700
    eager, replayed = _state(chains, n, 6), _state(chains, n, 6)
    graph = _captured(lambda s: _interleaved(s, chains, 1, n), replayed, 1000)
    rows = _split_rows(graph, 2)
    assert rows[:, COUNT].tolist() == [split_planner.MAX_GROUP, 3]
    _check(eager, replayed, graph, lambda s: _interleaved(s, chains, 1, n), 2, "numba")


def test_small_independent_launches_stay_serial_by_default():
    """Tiny-op graphs keep their serial table: independent launches of 16 tasks are not worth a wake-up."""
    chains, n = 8, 16
    s = _state(chains, n, 7)
    with wp.ScopedCapture(device=CPU) as capture:
        _interleaved(s, chains, 4, n)
    graph = capture.graph
    assert graph.parallel_program(2) is graph.program
    assert all(entry["why"].startswith("fewer than") for entry in graph.parallel_report(2))
