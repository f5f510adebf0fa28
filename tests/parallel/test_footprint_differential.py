"""The footprint evaluator against the compiled kernel (docs/PARALLEL.md, "Why a footprint split cannot race").

Hypothesis draws a kernel (``footprint_gen_kernels``: integer expressions across the builtins and integer types
the evaluator meets, branches, loops, arrays chosen per task, helpers with defaults bound in another module)
and index data for it. The kernel is compiled by Warp, and each task's real writes are found by comparing
memory: launched over the first ``t + 1`` tasks and over the first ``t``, from the same contents (Warp's CPU
launch runs its tasks in order), the elements that differ are task ``t``'s writes, as the serial replay
makes them. The evaluator judges the captured launch as lowering does (the footprint cache off), and every
real write of every task must be among the writes it lists for that task; an evaluation that refuses the
launch lists nothing and claims nothing. An evaluator failure (an exception other than a refusal) fails too.
"""

from __future__ import annotations

import itertools
import time

import numpy as np
import pytest
import warp as wp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import footprint_gen_kernels as gen
from apic.replay.parallel import footprint_launch
from world_kernels import CPU

pytestmark = [pytest.mark.warp_version]

EXAMPLES = 24  # each compiles a kernel: half a second to two seconds
_names = itertools.count()


def _with_extremes(draw, idx: np.ndarray) -> np.ndarray:
    """``idx`` with up to two elements drawn as int32's extremes (sums with them wrap)."""
    for _ in range(draw(st.integers(0, 2))):
        idx[draw(st.integers(0, len(idx) - 1))] = draw(st.sampled_from([2**31 - 1, -2**31]))
    return idx


@st.composite
def launches(draw):
    """``(kernel source, tasks, argument values)``."""
    source = draw(gen.kernel_sources())
    tasks = draw(st.integers(2, 24))
    length = gen.INDEX_LENGTH
    values = {
        "n": draw(st.integers(-5, 40)), "u": draw(st.integers(0, 2**32 - 1)), "w": draw(st.integers(0, 2**32 - 1)),
        "b8": draw(st.integers(-128, 127)),
        "idx": _with_extremes(draw, np.array(draw(st.lists(st.integers(-40, 40), min_size=length,
                                                          max_size=length)), np.int32)),
        "s8": np.array(draw(st.lists(st.integers(-128, 127), min_size=length, max_size=length)), np.int8),
        "u8": np.array(draw(st.lists(st.integers(0, 255), min_size=length, max_size=length)), np.uint8),
        "u32": np.array(draw(st.lists(st.integers(0, 2**32 - 1), min_size=length, max_size=length)), np.uint32),
        "flag": np.array(draw(st.lists(st.booleans(), min_size=length, max_size=length)), np.bool_),
        "x": np.array(draw(st.lists(st.floats(0, 1, width=32), min_size=length, max_size=length)), np.float32),
    }
    return source, tasks, values


def _inputs(values: dict) -> list:
    scalars = {"u": wp.uint32, "w": wp.uint32, "b8": wp.int8}
    dtypes = {"idx": int, "s8": wp.int8, "u8": wp.uint8, "u32": wp.uint32, "flag": wp.bool, "x": float}
    inputs = [values["n"]] + [scalars[k](values[k]) for k in ("u", "w", "b8")]
    inputs += [wp.array(values[k], dtype=dtypes[k], device=CPU) for k in dtypes]
    return inputs + [wp.full(gen.WRITTEN_LENGTH, -1.0, dtype=float, device=CPU) for _ in gen.WRITTEN]


def real_writes(kernel, values: dict, tasks: int) -> list[set]:
    """Each task's writes, ``{(array name, element)}``, found by comparing memory after the first ``t`` and
    ``t + 1`` tasks."""
    states = []
    inputs = _inputs(values)
    written = inputs[-len(gen.WRITTEN):]
    for count in range(tasks + 1):
        for array in written:  # the same contents before each launch (the kernel writes only these)
            array.fill_(-1.0)
        if count:
            wp.launch(kernel, dim=count, inputs=inputs, device=CPU)
        states.append([a.numpy().view(np.uint32).copy() for a in written])
    return [{(name, int(k)) for name, before, after in zip(gen.WRITTEN, states[t], states[t + 1])
             for k in np.flatnonzero(before != after)} for t in range(tasks)]


def claimed_writes(kernel, values: dict, tasks: int, monkeypatch) -> tuple[list[set] | None, str]:
    """Each task's writes as the evaluator lists them when lowering judges the captured launch, or None and
    why when it refuses (or no evaluation ran: another rule took the kernel)."""
    evaluations = []

    class Recorded(footprint_launch.Evaluation):
        def run(self):
            evaluations.append(self)
            super().run()

    monkeypatch.setattr(footprint_launch, "Evaluation", Recorded)
    monkeypatch.setenv("APIC_FOOTPRINT_CACHE", "0")
    inputs = _inputs(values)
    with wp.ScopedCapture(device=CPU) as capture:
        wp.launch(kernel, dim=tasks, inputs=inputs, device=CPU)
    program = capture.graph.program  # its launch checks, without planning a replay
    why = program.refusals[0][1] if program.refusals else None
    assert "footprint evaluation failed" not in (why or ""), why
    if not evaluations or why is not None and "two tasks touch" not in why:
        return None, why or "split by another rule"
    (evaluation,) = evaluations
    claimed = [set() for _ in range(tasks)]
    for name, (elements, owners) in evaluation.writes.items():
        for element, task in zip(elements, owners):
            claimed[task].add((name, element))
    return claimed, why or "split"


FIGURES = {"examples": 0, "evaluated": 0, "split": 0, "seconds": 0.0}


@settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example])
@given(launch=launches())
def _differential(launch, tmp_path, monkeypatch):
    source, tasks, values = launch
    kernel = gen.load(source, tmp_path, f"footprint_generated_{next(_names)}")
    real = real_writes(kernel, values, tasks)
    with monkeypatch.context() as patched:
        claimed, why = claimed_writes(kernel, values, tasks, patched)
    FIGURES["examples"] += 1
    if claimed is None:
        return
    FIGURES["evaluated"] += 1
    FIGURES["split"] += why == "split"
    for task in range(tasks):
        missed = real[task] - claimed[task]
        assert not missed, f"task {task} wrote {sorted(missed)} the evaluator did not list ({why}):\n{source}"


def test_claimed_writes_cover_the_compiled_kernels_writes(tmp_path, monkeypatch):
    """Every real write of every task of every drawn launch the evaluator judges is among its listed writes;
    and the draws reach the evaluator (most launches are evaluated, some split)."""
    started = time.perf_counter()
    _differential(tmp_path=tmp_path, monkeypatch=monkeypatch)
    FIGURES["seconds"] = time.perf_counter() - started
    print(FIGURES)
    assert FIGURES["examples"] >= EXAMPLES and FIGURES["evaluated"] >= EXAMPLES // 3 and FIGURES["split"], FIGURES
