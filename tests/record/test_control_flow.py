"""``wp.capture_if`` / ``wp.capture_while``, ``capture_pause`` / ``capture_resume`` and ``Device.is_capturing``.

The oracle is the same code run eagerly: a captured branch or loop must read its condition at
replay time, every time, so data-dependent control flow replays bit for bit as it ran eagerly,
live and after a save and a load in a fresh process.
"""

from __future__ import annotations

import threading
import weakref

import numpy as np
import pytest
import warp as wp

import apic
from apic.record.cpu.recorder import active
from wrp_helpers import body_of, read_doc
from conftest import CPU, eager_vs_replay
from persist_helpers import run_child, same_bits

pytestmark = [pytest.mark.warp_version, pytest.mark.interpreter]

N = 8


@wp.kernel
def add(x: wp.array(dtype=wp.float32), amount: wp.float32):
    i = wp.tid()
    x[i] = x[i] + amount


@wp.kernel
def scale(x: wp.array(dtype=wp.float32), factor: wp.float32):
    i = wp.tid()
    x[i] = x[i] * factor


@wp.kernel
def decrement(counter: wp.array(dtype=wp.int32)):
    counter[0] = counter[0] - 1


@wp.kernel
def set_int(target: wp.array(dtype=wp.int32), value: wp.int32):
    target[0] = value


@wp.kernel
def less_than(x: wp.array(dtype=wp.float32), limit: wp.float32, flag: wp.array(dtype=wp.int32)):
    flag[0] = wp.where(x[0] < limit, 1, 0)


@wp.kernel
def tick_parity(counter: wp.array(dtype=wp.int32), flag: wp.array(dtype=wp.int32)):
    counter[0] = counter[0] + 1
    flag[0] = counter[0] % 2


def make_state():
    return {
        "x": wp.array(np.linspace(-1.0, 1.0, N, dtype=np.float32), device=CPU),
        "flag": wp.zeros(1, dtype=wp.int32, device=CPU),
        "counter": wp.zeros(1, dtype=wp.int32, device=CPU),
        "inner": wp.zeros(1, dtype=wp.int32, device=CPU),
    }


def launch(kernel, *inputs, dim=N):
    wp.launch(kernel, dim=dim, inputs=list(inputs), device=CPU)


# --- the programs, used eagerly and captured -------------------------------------------------------
def data_dependent_while(s):
    """Add 1.5 until x[0] reaches 4, then pull x back: each run iterates a different number of times."""
    launch(less_than, s["x"], 4.0, s["flag"], dim=1)

    def body():
        launch(add, s["x"], 1.5)
        launch(less_than, s["x"], 4.0, s["flag"], dim=1)

    wp.capture_while(s["flag"], body)
    launch(add, s["x"], -5.25)


def alternating_if(s):
    launch(tick_parity, s["counter"], s["flag"], dim=1)
    wp.capture_if(s["flag"], on_true=lambda: launch(add, s["x"], 1.0), on_false=lambda: launch(scale, s["x"], -0.5))


def only_true(s):
    launch(tick_parity, s["counter"], s["flag"], dim=1)
    wp.capture_if(s["flag"], on_true=lambda: launch(add, s["x"], 2.0))


def only_false(s):
    launch(tick_parity, s["counter"], s["flag"], dim=1)
    wp.capture_if(s["flag"], on_false=lambda: s["x"].fill_(3.0))


def nested(s):
    """while (counter) { counter--; if (counter odd) { inner = 2; while (inner) {...} } else {...} }."""
    launch(set_int, s["counter"], 4, dim=1)

    def inner_loop():
        launch(set_int, s["inner"], 2, dim=1)

        def inner_body():
            launch(decrement, s["inner"], dim=1)
            launch(add, s["x"], 0.25)

        wp.capture_while(s["inner"], inner_body)

    def outer_body():
        launch(decrement, s["counter"], dim=1)
        launch(tick_parity, s["inner"], s["flag"], dim=1)  # flag = parity of a running count
        wp.capture_if(s["flag"], on_true=inner_loop, on_false=lambda: launch(scale, s["x"], 0.75))

    wp.capture_while(s["counter"], outer_body)


def with_kwargs(s):
    launch(tick_parity, s["counter"], s["flag"], dim=1)
    wp.capture_if(s["flag"], on_true=lambda amount: launch(add, s["x"], amount),
                  on_false=lambda amount: launch(add, s["x"], -amount), amount=0.5)


PROGRAMS = [data_dependent_while, alternating_if, only_true, only_false, nested, with_kwargs]


@pytest.mark.parametrize("program", PROGRAMS, ids=[p.__name__ for p in PROGRAMS])
def test_eager_vs_replay(program):
    graph, _ = eager_vs_replay(program, make_state, repeats=4)
    kinds = {type(op).__name__ for op in graph.recording.ops}
    assert "Branch" in kinds


def test_condition_is_read_at_replay_time():
    s = make_state()
    with wp.ScopedCapture(device=CPU) as capture:
        wp.capture_if(s["flag"], on_true=lambda: launch(add, s["x"], 1.0), on_false=lambda: launch(add, s["x"], 10.0))
    start = s["x"].numpy().copy()
    wp.capture_launch(capture.graph)  # flag 0: on_false
    s["flag"].fill_(7)  # any nonzero value is true
    wp.capture_launch(capture.graph)
    np.testing.assert_array_equal(s["x"].numpy(), start + 11.0)


def test_while_that_never_runs_and_empty_body():
    s = make_state()
    with wp.ScopedCapture(device=CPU) as capture:
        wp.capture_while(s["flag"], lambda: launch(add, s["x"], 1.0))  # flag stays 0
        wp.capture_if(s["flag"], on_true=lambda: None)
    before = s["x"].numpy().copy()
    wp.capture_launch(capture.graph)
    np.testing.assert_array_equal(s["x"].numpy(), before)


# --- graphs as bodies ------------------------------------------------------------------------------
def test_graph_bodies_equal_callable_bodies():
    expected, actual = make_state(), make_state()

    def step_callables(s):
        launch(set_int, s["counter"], 3, dim=1)
        wp.capture_while(s["counter"], lambda: (launch(add, s["x"], 1.0), launch(decrement, s["counter"], dim=1)))
        launch(tick_parity, s["inner"], s["flag"], dim=1)
        wp.capture_if(s["flag"], on_true=lambda: launch(scale, s["x"], 2.0), on_false=lambda: launch(add, s["x"], -1.0))

    with wp.ScopedCapture(device=CPU) as loop_body:
        launch(add, actual["x"], 1.0)
        launch(decrement, actual["counter"], dim=1)
    with wp.ScopedCapture(device=CPU) as doubling:
        launch(scale, actual["x"], 2.0)
    with wp.ScopedCapture(device=CPU) as capture:
        launch(set_int, actual["counter"], 3, dim=1)
        wp.capture_while(actual["counter"], loop_body.graph)
        launch(tick_parity, actual["inner"], actual["flag"], dim=1)
        wp.capture_if(actual["flag"], on_true=doubling.graph, on_false=lambda: launch(add, actual["x"], -1.0))
    graph = capture.graph
    del loop_body, doubling, capture  # the outer graph keeps what its inlined bodies need

    for run in range(4):
        step_callables(expected)
        wp.capture_launch(graph)
        for name in expected:
            assert same_bits(expected[name].numpy(), actual[name].numpy()), f"run {run}: {name}"


def test_graph_body_outside_capture_runs_now():
    s = make_state()
    with wp.ScopedCapture(device=CPU) as body:
        launch(add, s["x"], 1.0)
    start = s["x"].numpy().copy()
    wp.capture_if(s["flag"], on_true=lambda: launch(add, s["x"], 100.0), on_false=body.graph)  # flag 0
    s["counter"].fill_(2)
    wp.capture_while(s["counter"], lambda: (wp.capture_launch(body.graph), launch(decrement, s["counter"], dim=1)))
    np.testing.assert_array_equal(s["x"].numpy(), start + 3.0)


def test_loaded_graph_as_body(tmp_path):
    s = make_state()
    with wp.ScopedCapture(device=CPU, apic=True) as body:
        launch(add, s["x"], 1.0)
    wp.capture_save(body.graph, str(tmp_path / "body"), outputs={"x": s["x"]})
    loaded = wp.capture_load(str(tmp_path / "body"))
    with wp.ScopedCapture(device=CPU) as capture:
        launch(set_int, s["counter"], 3, dim=1)
        # the body runs here, inside capture_while, while ``loaded`` is still bound
        wp.capture_while(s["counter"],
                         lambda: (wp.capture_launch(loaded), launch(decrement, s["counter"], dim=1)))  # noqa: F821
    kept = weakref.ref(loaded)
    del loaded
    graph = capture.graph
    wp.capture_launch(graph)
    wp.capture_launch(graph)
    assert kept() is not None, "the outer graph must keep the loaded graph (its memory and modules)"
    out = wp.empty(N, dtype=wp.float32, device=CPU)
    kept().get_param("x", out)
    expected = np.linspace(-1.0, 1.0, N, dtype=np.float32)
    for _ in range(6):
        expected = expected + np.float32(1.0)
    np.testing.assert_array_equal(out.numpy(), expected)
    np.testing.assert_array_equal(s["x"].numpy(), np.linspace(-1.0, 1.0, N, dtype=np.float32))  # untouched


# --- failures --------------------------------------------------------------------------------------
def test_a_callable_body_with_a_backend_attribute_is_called_not_taken_for_a_graph():
    s = make_state()

    class Step:
        backend = "not a replay backend"  # a user's callable may carry an attribute of that name

        def __call__(self):
            launch(add, s["x"], 1.0)

    start = s["x"].numpy().copy()
    with wp.ScopedCapture(device=CPU) as capture:
        wp.capture_if(s["flag"], on_true=lambda: None, on_false=Step())  # flag 0
    wp.capture_launch(capture.graph)
    np.testing.assert_array_equal(s["x"].numpy(), start + 1.0)
    wp.capture_if(s["flag"], on_true=lambda: None, on_false=Step())  # no capture: runs now
    np.testing.assert_array_equal(s["x"].numpy(), start + 1.0 + 1.0)  # as the kernel adds


def test_bad_condition_and_body_types():
    s = make_state()
    floats = wp.zeros(1, dtype=wp.float32, device=CPU)
    with wp.ScopedCapture(device=CPU) as capture:
        with pytest.raises(TypeError, match="int32"):
            wp.capture_if(floats, on_true=lambda: None)
        with pytest.raises(TypeError, match="int32"):
            wp.capture_while(np.zeros(1, np.int32), lambda: None)
        with pytest.raises(TypeError, match="on_true must be a Callable or a Graph"):
            wp.capture_if(s["flag"], on_true=3)
        launch(add, s["x"], 1.0)
    assert capture.graph.op_count == 1
    with pytest.raises(TypeError, match="while_body"):
        wp.capture_while(wp.ones(1, dtype=wp.int32, device=CPU), "body")


def test_failing_body_abandons_the_capture():
    s = make_state()

    def body():
        launch(add, s["x"], 1.0)
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        with wp.ScopedCapture(device=CPU) as capture:
            wp.capture_while(s["flag"], body)
    assert capture.graph is None and active() is None


def test_failed_body_caught_inside_the_capture_leaves_nothing_behind():
    s = make_state()

    def body():
        launch(add, s["x"], 100.0)
        raise ValueError("boom")

    with wp.ScopedCapture(device=CPU) as capture:
        launch(add, s["x"], 1.0)
        with pytest.raises(ValueError):
            wp.capture_if(s["flag"], on_true=lambda: launch(add, s["x"], 5.0), on_false=body)
        launch(add, s["x"], 2.0)
    assert capture.graph.op_count == 2
    start = s["x"].numpy().copy()
    wp.capture_launch(capture.graph)
    np.testing.assert_array_equal(s["x"].numpy(), start + 3.0)


def test_reading_the_condition_during_capture_is_refused():
    s = make_state()
    with pytest.raises(apic.CaptureError, match="before the captured work has run"):
        with wp.ScopedCapture(device=CPU):
            wp.capture_if(s["flag"], on_true=lambda: s["flag"].numpy())


# --- pause / resume and Device.is_capturing --------------------------------------------------------
def test_pause_runs_eagerly_and_records_nothing():
    s = make_state()
    cpu = wp.get_device(CPU)
    assert not cpu.is_capturing
    start = s["x"].numpy().copy()
    with wp.ScopedCapture(device=CPU) as capture:
        assert cpu.is_capturing
        launch(add, s["x"], 1.0)
        paused = wp.capture_pause(device=CPU)
        assert not cpu.is_capturing and paused.device == cpu
        launch(set_int, s["counter"], 5, dim=1)  # runs now
        assert s["counter"].numpy()[0] == 5  # and can be read now
        scratch = wp.zeros(4, dtype=wp.float32, device=CPU)  # eager memory, not the graph's
        wp.capture_resume(paused)
        assert cpu.is_capturing
        launch(add, s["x"], 2.0)
    assert not cpu.is_capturing
    assert capture.graph.op_count == 2
    np.testing.assert_array_equal(s["x"].numpy(), start)
    s["counter"].zero_()
    wp.capture_launch(capture.graph)
    np.testing.assert_array_equal(s["x"].numpy(), start + 3.0)
    assert s["counter"].numpy()[0] == 0 and not scratch.numpy().any()


def test_pause_resume_errors():
    with pytest.raises(RuntimeError):
        wp.capture_pause(device=CPU)  # nothing to pause
    wp.capture_begin(device=CPU)
    paused = wp.capture_pause()
    with pytest.raises(apic.CaptureError, match="paused"):
        wp.capture_end(device=CPU)
    wp.capture_resume(paused)
    with pytest.raises(apic.CaptureError, match="not paused"):
        wp.capture_resume(paused)
    graph = wp.capture_end(device=CPU)
    assert isinstance(graph, apic.Graph)
    with pytest.raises(apic.CaptureError, match="not paused"):
        wp.capture_resume(paused)


def test_exception_while_paused_abandons_the_capture():
    with pytest.raises(KeyError):
        with wp.ScopedCapture(device=CPU):
            wp.capture_pause()
            raise KeyError("x")
    assert active() is None
    with wp.ScopedCapture(device=CPU) as capture:  # a new capture starts cleanly
        pass
    assert capture.graph.op_count == 0


def test_is_capturing_is_per_thread():
    seen = []
    with wp.ScopedCapture(device=CPU):
        worker = threading.Thread(target=lambda: seen.append(wp.get_device(CPU).is_capturing))
        worker.start()
        worker.join()
        seen.append(wp.get_device(CPU).is_capturing)
    assert seen == [False, True]


# --- save, load and replay in a fresh process ------------------------------------------------------
ITERS = 3


def test_fresh_process_replay_equals_eager(tmp_path):
    def program(s):
        nested(s)
        data_dependent_while(s)
        alternating_if(s)

    expected = make_state()
    for _ in range(ITERS):
        program(expected)
    state = make_state()
    with wp.ScopedCapture(device=CPU, apic=True) as capture:
        program(state)
    wp.capture_save(capture.graph, str(tmp_path / "flow"), outputs=dict(state))
    job = {"mode": "file", "path": str(tmp_path / "flow"), "iters": ITERS,
           "get": {name: str(tmp_path / f"{name}.npy") for name in state}}
    run_child(job, cwd=tmp_path)
    for name in state:
        assert same_bits(np.load(tmp_path / f"{name}.npy"), expected[name].numpy()), name


def test_saved_control_flow_is_checked(tmp_path):
    import copy


    from apic.format import schema

    s = make_state()
    with wp.ScopedCapture(device=CPU, apic=True) as capture:
        data_dependent_while(s)
    wp.capture_save(capture.graph, str(tmp_path / "loop"))
    doc = body_of(tmp_path / "loop.wrp")
    length = len(doc["sequence"]) // 4
    branch = next(i for i, op in enumerate(doc["ops"]) if op["kind"] == schema.WireOp.BRANCH)
    jump = next(i for i, op in enumerate(doc["ops"]) if op["kind"] == schema.WireOp.JUMP)
    region = doc["ops"][branch]["cond"][0]
    cases = [
        ((branch, "target"), length + 1, "past the end"),
        ((jump, "target"), length + 1, "past the end"),
        ((jump, "target"), -1, "outside"),
        ((branch, "cond"), [region, doc["regions"][region]["nbytes"] - 2], "outside region"),
        ((branch, "cond"), 0, "expected a list"),
    ]
    for (index, field), value, message in cases:
        edited = copy.deepcopy(doc)
        edited["ops"][index][field] = value
        with pytest.raises(apic.FormatError, match=message):
            read_doc(edited)
    edited = copy.deepcopy(doc)
    edited["ops"][jump]["target"] = length  # jumping to the end is fine
    read_doc(edited)
