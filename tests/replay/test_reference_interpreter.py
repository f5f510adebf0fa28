"""The Numba interpreter against the reference one (``apic/replay/cpu/reference.py``), and both against eager.

Each graph is captured twice from identical states; one copy is replayed by the Numba loop, the other
by the pure-Python reference over its own (identical) table, and every array is compared bit for bit
with the eager run after each replay. CI also runs the whole suite with ``APIC_REPLAY=reference``, so
every test graph is replayed by both implementations.
"""

from __future__ import annotations

import numpy as np
import pytest
import warp as wp

import persist_kernels as pk
import test_control_flow as cf
from apic.replay.cpu import reference
from apic.replay.cpu import table as tbl
from conftest import CPU, assert_same, snapshot

pytestmark = [pytest.mark.warp_version, pytest.mark.interpreter]


def _sim_state():
    sim = pk.Sim(3)
    return {"sim": sim, **sim.a}


@pytest.mark.parametrize(
    "program, make_state",
    [
        (lambda s: s["sim"].step(), _sim_state),  # launches of many argument kinds, adjoint, copies, fills
        (cf.data_dependent_while, cf.make_state),  # jumps and branches
        (cf.alternating_if, cf.make_state),
        (cf.nested, cf.make_state),
    ],
    ids=["sim-step", "while", "if-else", "nested"],
)
def test_numba_and_reference_replay_as_eager(program, make_state):
    eager, numba_state, reference_state = make_state(), make_state(), make_state()
    graphs = []
    for state in (numba_state, reference_state):
        with wp.ScopedCapture(device=CPU) as capture:
            program(state)
        graphs.append(capture.graph)
    assert np.array_equal(graphs[0].program.table[:, 0], graphs[1].program.table[:, 0])  # the same opcodes
    names = [name for name, value in eager.items() if isinstance(value, wp.array)]
    for run in range(3):
        program(eager)
        graphs[0].program.run(1)  # the Numba loop
        reference.run_table(graphs[1].program.table, 1, None, graphs[1].program.loops)
        expected = snapshot({n: eager[n] for n in names})
        assert_same(expected, snapshot({n: numba_state[n] for n in names}), f"numba, replay {run + 1}")
        assert_same(expected, snapshot({n: reference_state[n] for n in names}), f"reference, replay {run + 1}")


@pytest.mark.parametrize("interpreter", ["numba", "reference"])
def test_the_two_argument_call_runs_loops_uncapped(interpreter):
    """``run_table(table, repeats)`` (no limits, no loop count) must not touch the loop counters."""
    from apic.replay.cpu.interpreter import run_table as numba_run

    run = numba_run if interpreter == "numba" else reference.run_table
    states = [cf.make_state() for _ in range(2)]
    with wp.ScopedCapture(device=CPU) as capture:
        cf.nested(states[1])
    assert capture.graph.program.loops >= 2  # several loop heads: slots beyond the first
    cf.nested(states[0])
    assert run(capture.graph.program.table, 1) == tbl.STATUS_DONE
    names = [n for n, v in states[0].items() if isinstance(v, wp.array)]
    assert_same(snapshot({n: states[0][n] for n in names}), snapshot({n: states[1][n] for n in names}), "replay")
