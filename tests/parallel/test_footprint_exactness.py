"""What the footprint evaluator refuses because it does not model it exactly (docs/PARALLEL.md, "Why a
footprint split cannot race"), on kernels it reads as AST only (not launched here; the compiled forms are
``test_footprint_attacks.py`` and ``test_footprint_differential.py``): an int32 loop counter that wraps, an
array chosen by a select or a skipped loop, a call through a
parameter, typed parameters and return values, defaults as Warp bound them; the capture's write set keeps
every array an alias may name, and an array of structs holding arrays gets no claim. The footprint cache's key
covers every module of the evaluator. Every kernel here compiles: a test that loads every module of the
process (``capture_begin(force_module_load=True)``) may run in the same worker. (A tuple of arrays indexed at
an unknown index, which the evaluator also refuses, is not among them: Warp refuses to compile it.)
"""

from __future__ import annotations

import ast
import pathlib

import numpy as np
import pytest
import warp as wp

import footprint_far_funcs as far
from footprint_helpers import evaluate
from apic.record.parallel import footprint_shapes as shapes
from apic.record.parallel.footprint import written_params
from apic.record.parallel.footprint_eval import Evaluation, Refused
from apic.replay.parallel import footprint_cache

pytestmark = [pytest.mark.warp_version, pytest.mark.install, pytest.mark.interpreter]


@wp.kernel
def counter_wraps(n: int, out: wp.array(dtype=float)):
    t = wp.tid()
    for i in range(n, 2147483647, 1073741824):  # the counter steps past int32's top and the kernel loops on
        out[t] = float(i)


@wp.kernel
def select_of_arrays(x: wp.array(dtype=float), a: wp.array(dtype=float), b: wp.array(dtype=float)):
    t = wp.tid()
    arr = a if x[t] > 0.5 else b
    arr[t] = 1.0


@wp.kernel
def skipped_loop_binds(x: wp.array(dtype=float), a: wp.array(dtype=float), b: wp.array(dtype=float),
                       out: wp.array(dtype=float)):
    t = wp.tid()
    arr = a
    for _ in range(int(x[t] * 2.0)):  # skipped: it touches nothing the kernel writes (b is not found written)
        arr = wp.where(x[t] > 0.2, b, a)
    out[t] = arr[0]


@wp.func
def through(f: int, out: wp.array(dtype=float), t: int):
    out[t] = float(f)


@wp.kernel
def aliases(x: wp.array(dtype=float), a: wp.array(dtype=float), b: wp.array(dtype=float)):
    t = wp.tid()
    arr = a
    if x[t] > 0.5:
        arr = b
    view = arr
    view[t] = 1.0


@wp.func
def as_uint8(i: wp.uint8):
    return int(i)


@wp.func
def to_uint8(i: int) -> wp.uint8:
    return wp.uint8(i)


@wp.kernel
def typed_calls(n: int, out: wp.array(dtype=float)):
    t = wp.tid()
    out[int(to_uint8(n)) + t] = 1.0


@wp.kernel
def far_defaults(out: wp.array(dtype=float)):
    t = wp.tid()
    far.put(out, t)
    far.later_put(out, t)


def _floats(n=8):
    return np.zeros(n, np.float32)


@pytest.mark.parametrize(("kernel", "values", "reason"), [
    (counter_wraps, {"n": 0, "out": _floats()}, "int32 counter wraps"),
    (select_of_arrays, {"x": _floats(), "a": _floats(), "b": _floats()}, "one of several arrays"),
    (skipped_loop_binds, {"x": _floats(), "a": _floats(), "b": _floats(), "out": _floats()},
     "one of several arrays"),
    (aliases, {"x": _floats(), "a": _floats(), "b": _floats()}, "one of several arrays"),
    (typed_calls, {"n": 3, "out": _floats(300)}, "not known"),
])
def test_evaluator_refuses_what_it_does_not_model_exactly(kernel, values, reason):
    with pytest.raises(Refused, match=reason):
        evaluate(kernel, values, 4)


def test_a_counter_that_stays_in_int32_runs():
    """The bound is exact: a loop whose counter ends inside int32 is followed."""
    evaluation = evaluate(counter_wraps, {"n": 1073741823, "out": _floats()}, 4)
    assert evaluation.writes["out"][0] == [0, 1, 2, 3]


def test_defaults_are_those_bound_at_definition_in_the_functions_module():
    """``put``'s default is its module's ``SPREAD`` (0), not this module's nor the caller's; ``later_put``'s
    is 0 although its module rebinds ``LATER`` to 1 after the definition."""
    evaluation = evaluate(far_defaults, {"out": _floats()}, 3)
    assert evaluation.writes["out"] == ([0, 0, 0, 0, 0, 0], [0, 0, 1, 1, 2, 2])
    assert far.LATER == 1


def test_typed_parameters_and_returns_are_not_followed():
    found = shapes.function_body(as_uint8)
    assert found[4] == ("i",) and found[5] is True
    assert shapes.function_body(to_uint8)[5] is False
    assert shapes.follows_type(int) and shapes.follows_type(wp.int32) and shapes.follows_type(wp.bool)
    assert not any(shapes.follows_type(t) for t in (wp.uint32, wp.int8, wp.uint8, wp.int64, float, wp.float32))


def test_written_params_keep_every_array_an_alias_may_name():
    assert written_params(aliases) == {"a", "b"}


def test_a_call_through_a_parameter_is_refused():
    from apic.record.parallel.footprint_body import Body

    evaluation = Evaluation(through, {}, (1,), 100)
    body = Body(evaluation, {})
    call = ast.parse("f(1)").body[0].value
    with pytest.raises(Refused, match="a call through f"):
        body.call(call, {"f": 3})


def test_an_array_of_structs_holding_arrays_gets_no_claim():
    """Each task stores through ``holders[t].values``, memory no array argument describes: the kernel is
    given no footprint claim, and its launches stay serial."""
    from apic.record.parallel.footprint import _holds_arrays
    from footprint_attack_kernels import Holder, through_struct_elements

    assert _holds_arrays(Holder) and not _holds_arrays(wp.float32)
    shared = wp.zeros(1, dtype=float, device="cpu")
    elements = []
    for _ in range(4):
        holder = Holder()
        holder.values = shared
        elements.append(holder)
    holders = wp.array(elements, dtype=Holder, device="cpu")
    with wp.ScopedCapture(device="cpu") as capture:
        wp.launch(through_struct_elements, dim=4, inputs=[holders, wp.zeros(4, dtype=float, device="cpu")],
                  device="cpu")
    (info,) = capture.graph.recording.kernels
    assert info.split_footprint is None and info.split_writes is None, info
    (entry,) = capture.graph.parallel_report(2)
    assert entry["chunks"] == 0, entry


def test_the_cache_key_covers_every_module_of_the_evaluator():
    """A verdict kept by another evaluator is never read: the key hashes every
    ``apic/record/parallel/footprint*.py`` (and the modules it shares), so a change to any of them is another key."""
    import apic.record.parallel as proofs

    hashed = set(footprint_cache.evaluator_files())
    modules = {f"record/parallel/{p.name}" for p in pathlib.Path(proofs.__file__).parent.glob("footprint*.py")}
    assert len(modules) >= 6, modules
    assert modules <= hashed, modules - hashed
    assert "replay/parallel/footprint_launch.py" in hashed
