"""Replayed loops are bounded and interruptible; a file cannot describe a loop that has no condition.

* a ``capture_while`` whose condition never clears stops after ``apic.max_loop_iterations()`` iterations
  (per entry of the loop) with ``apic.LoopLimitError``, having run the body exactly that many times;
* Ctrl-C (SIGINT) stops a replay that loops for ever and raises ``KeyboardInterrupt``;
* a saved graph whose jumps or branches could loop without passing a loop's condition is refused at load.
"""

from __future__ import annotations

import copy
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
import warp as wp

import apic
from apic.format import schema
from wrp_helpers import body_of, read_doc

pytestmark = [pytest.mark.warp_version, pytest.mark.interpreter]

CPU = "cpu"


@wp.kernel
def bump(counter: wp.array(dtype=wp.int32)):
    counter[0] = counter[0] + 1


@wp.kernel
def below(counter: wp.array(dtype=wp.int32), limit: int, flag: wp.array(dtype=wp.int32)):
    flag[0] = wp.where(counter[0] < limit, 1, 0)


@pytest.fixture
def cap():
    before = apic.max_loop_iterations()
    yield apic.set_max_loop_iterations
    apic.set_max_loop_iterations(before)


def endless(counter, flag):
    """A graph whose loop body bumps a counter and never clears the loop's flag."""
    with wp.ScopedCapture(device=CPU) as capture:
        wp.capture_while(flag, lambda: wp.launch(bump, dim=1, inputs=[counter], device=CPU))
    return capture.graph


def test_default_cap_is_upstreams():
    assert apic.max_loop_iterations() == 1 << 24


def test_endless_loop_stops_at_the_cap(cap):
    counter = wp.zeros(1, dtype=wp.int32, device=CPU)
    flag = wp.ones(1, dtype=wp.int32, device=CPU)
    graph = endless(counter, flag)
    cap(1000)
    with pytest.raises(apic.LoopLimitError, match="set_max_loop_iterations"):
        wp.capture_launch(graph)
    assert counter.numpy()[0] == 1000  # the body ran exactly `cap` times, then the replay stopped


def test_cap_counts_each_entry_of_a_loop_afresh(cap):
    """A loop that runs 5 times per replay never hits a cap of 5, however many replays or repeats."""
    counter = wp.zeros(1, dtype=wp.int32, device=CPU)
    flag = wp.zeros(1, dtype=wp.int32, device=CPU)
    with wp.ScopedCapture(device=CPU) as capture:
        wp.launch(below, dim=1, inputs=[counter, 5, flag], device=CPU)
        wp.capture_while(flag, lambda: (wp.launch(bump, dim=1, inputs=[counter], device=CPU),
                                        wp.launch(below, dim=1, inputs=[counter, 5, flag], device=CPU)))
        wp.copy(counter, wp.zeros(1, dtype=wp.int32, device=CPU))  # reset for the next replay
    cap(5)
    for _ in range(3):
        wp.capture_launch(capture.graph)
    capture.graph.launch(4)
    cap(4)
    with pytest.raises(apic.LoopLimitError):
        wp.capture_launch(capture.graph)


def test_cap_zero_is_no_cap(cap):
    counter = wp.zeros(1, dtype=wp.int32, device=CPU)
    flag = wp.zeros(1, dtype=wp.int32, device=CPU)
    with wp.ScopedCapture(device=CPU) as capture:
        wp.launch(below, dim=1, inputs=[counter, 3000, flag], device=CPU)
        wp.capture_while(flag, lambda: (wp.launch(bump, dim=1, inputs=[counter], device=CPU),
                                        wp.launch(below, dim=1, inputs=[counter, 3000, flag], device=CPU)))
    cap(0)
    wp.capture_launch(capture.graph)
    assert counter.numpy()[0] == 3000


@pytest.mark.parametrize("bad", [-1, 1.5, True, 1 << 62])
def test_cap_must_be_a_count(bad):
    with pytest.raises(ValueError):
        apic.set_max_loop_iterations(bad)


_INTERRUPTED_CHILD = textwrap.dedent(
    """
    import signal, sys, threading, time
    # A process started in the background by a non-interactive shell (a CI job, `pytest &`) inherits SIGINT
    # ignored, and Python then installs no KeyboardInterrupt handler: Ctrl-C could not stop anything. A user
    # at a terminal has the handler; so does this child.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    import warp as wp
    wp.config.quiet = True
    import apic

    @wp.kernel
    def bump(counter: wp.array(dtype=wp.int32)):
        counter[0] = counter[0] + 1

    counter = wp.zeros(1, dtype=wp.int32, device="cpu")
    flag = wp.ones(1, dtype=wp.int32, device="cpu")
    with wp.ScopedCapture(device="cpu") as capture:
        wp.capture_while(flag, lambda: wp.launch(bump, dim=1, inputs=[counter], device="cpu"))
    apic.set_max_loop_iterations(0)  # no cap: only Ctrl-C can end this replay
    seen = counter.numpy()  # the counter's own memory (CPU), read while the replay runs

    def announce():
        # "ready" once the replay is running (the kernel has counted), not before: a first replay may load
        # or build the native interpreter first, and a Ctrl-C then would stop that instead
        deadline = time.monotonic() + 120
        while seen[0] == 0 and time.monotonic() < deadline:
            time.sleep(0.001)
        print("ready" if seen[0] else "not counting", flush=True)

    threading.Thread(target=announce, daemon=True).start()
    try:
        wp.capture_launch(capture.graph)
    except KeyboardInterrupt:
        # when, on the clock the parent shares (CLOCK_MONOTONIC is system-wide): its exit takes longer
        print("interrupted", counter.numpy()[0] > 0, time.monotonic(), flush=True)
        sys.exit(3)
    print("finished", flush=True)
    """
)


def test_ctrl_c_interrupts_an_endless_replay(tmp_path):
    script = tmp_path / "child.py"
    script.write_text(_INTERRUPTED_CHILD)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (os.getcwd(), os.environ.get("PYTHONPATH", "")) if p))
    child = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, env=env)
    try:
        line = ""
        while line.strip() not in ("ready", "not counting"):  # Warp may print its banner first
            line = child.stdout.readline()
            assert line, child.stderr.read()
        assert line.strip() == "ready", "the replay never ran the loop's kernel"
        sent = time.monotonic()
        child.send_signal(signal.SIGINT)
        out, err = child.communicate(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
    assert child.returncode == 3, (out, err)
    interrupted = out.split()
    assert interrupted[:2] == ["interrupted", "True"], out
    assert float(interrupted[2]) - sent < 5.0, float(interrupted[2]) - sent


# --- files whose control flow could loop without a condition ---------------------------------------
@pytest.fixture(scope="module")
def loop_doc(tmp_path_factory) -> dict:
    counter = wp.zeros(1, dtype=wp.int32, device=CPU)
    flag = wp.zeros(1, dtype=wp.int32, device=CPU)
    with wp.ScopedCapture(device=CPU, apic=True) as capture:
        wp.launch(below, dim=1, inputs=[counter, 4, flag], device=CPU)
        wp.capture_while(flag, lambda: (wp.launch(bump, dim=1, inputs=[counter], device=CPU),
                                        wp.launch(below, dim=1, inputs=[counter, 4, flag], device=CPU)))
    path = tmp_path_factory.mktemp("loops") / "g"
    wp.capture_save(capture.graph, str(path))
    return body_of(path.with_suffix(".wrp"))


def _positions(doc):
    seq = np.frombuffer(doc["sequence"], dtype="<u4").tolist()
    return seq, [doc["ops"][i] for i in seq]


def test_saved_loop_reads(loop_doc):
    read_doc(loop_doc)
    seq, ops = _positions(loop_doc)
    kinds = [op["kind"] for op in ops]
    assert schema.WireOp.BRANCH in kinds and schema.WireOp.JUMP in kinds


def _with_jump_target(doc, target_of):
    doc = copy.deepcopy(doc)
    seq, ops = _positions(doc)
    position = next(p for p, op in enumerate(ops) if op["kind"] == schema.WireOp.JUMP)
    doc["ops"][seq[position]]["target"] = target_of(position, seq, ops)
    return doc


def test_a_jump_to_itself_is_refused(loop_doc):
    doc = _with_jump_target(loop_doc, lambda p, seq, ops: p)
    with pytest.raises(apic.FormatError, match="loop forever"):
        read_doc(doc)


def test_a_backward_jump_past_the_loop_branch_is_refused(loop_doc):
    """Back to the first op (a launch, not the loop's branch): a loop with no condition."""
    doc = _with_jump_target(loop_doc, lambda p, seq, ops: 0)
    with pytest.raises(apic.FormatError, match="sequence: the jump"):
        read_doc(doc)


def test_a_backward_branch_is_refused(loop_doc):
    doc = copy.deepcopy(loop_doc)
    seq, ops = _positions(doc)
    position = next(p for p, op in enumerate(ops) if op["kind"] == schema.WireOp.BRANCH)
    doc["ops"][seq[position]]["target"] = 0
    with pytest.raises(apic.FormatError, match="branches only go forward"):
        read_doc(doc)
