"""Launches an earlier footprint evaluator split although their tasks meet in the compiled kernel
(docs/PARALLEL.md, "Why a footprint split cannot race"), each kept as an attack: integers that wrap at a
fixed width or change sign in a conversion, an array chosen per task (in a branch, by a ``@wp.func``, in a
skipped loop), and a ``@wp.func`` default bound in its own module at its definition. Each must stay serial
with its reason and equal eager Warp bit for bit; replayed by the reference interpreter (chunks last first)
a wrong split differs from eager, so these tests fail without the fixes.
"""

from __future__ import annotations

import pytest

import footprint_attack_kernels as ak
from apic.replay.cpu import table as tbl
from world_kernels import same_bits

pytestmark = [pytest.mark.warp_version, pytest.mark.interpreter]


@pytest.mark.parametrize("interpreter", ["reference", "numba"])
@pytest.mark.parametrize("name", list(ak.CASES))
def test_attack_stays_serial_and_equals_eager(name, interpreter):
    eager, replayed, graph = ak.run(name, 2, interpreter)
    (entry,) = graph.parallel_report(2)
    assert entry["chunks"] == 0 and ak.CASES[name][2] in entry["why"], entry
    assert (graph.parallel_program(2).table[:, 0] != tbl.OP_SPLIT).all()
    assert same_bits(eager, replayed), name
