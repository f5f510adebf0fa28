"""``wp.capture_if`` / ``wp.capture_while`` recorded in an ``apic=True`` CUDA capture, as far as that runs without a
GPU: the CUDA recorder given CPU memory for the device's and Warp's conditional functions played by stand-ins
that call the bodies as Warp does (pause, body, resume), through apic's own ``wp.capture_if`` / ``capture_while``;
and the GPU tests' conditional workload captured on the CPU, replayed bit for bit and read back as the nested
bodies the GPU test expects (tests/cuda/test_cuda_conditional_gpu.py runs it on a GPU).
"""

from __future__ import annotations

import pytest

from apic.record.cuda.conditional_tree import IfNode, WhileNode, conditional_tree, depth_of
from test_cuda_conditional_offline import FileGraph

pytestmark = [pytest.mark.warp_version, pytest.mark.interpreter]

# --- recording, as far as it runs without a GPU -----------------------------------------------------------
class _OfflineCuda:
    """Stands in for a Warp CUDA device on the arrays of an offline recording."""

    is_cpu, is_cuda, context, ordinal = False, True, 0x100, 0

    def __str__(self) -> str:
        return "cuda:0"


class _Recorder:
    """A CUDA recorder that takes CPU memory for the device's (it records; nothing runs)."""

    @staticmethod
    def make():
        from apic.record.cuda.recorder import CudaRecorder

        class Offline(CudaRecorder):
            def owns(self, device) -> bool:
                return isinstance(device, _OfflineCuda)

        return Offline(_OfflineCuda(), 0x1234)


def _array(n: int = 1, dtype=None):
    import warp as wp

    arr = wp.zeros(n, dtype=dtype or wp.int32, device="cpu")
    arr.device = _OfflineCuda()  # what the recorder asks of an array's device
    return arr


class _Warp:
    """Warp's capture_if / capture_while as they call apic's recorder: pause, the body, resume."""

    def __init__(self, recorder) -> None:
        self.recorder = recorder
        self.calls: list = []

    def capture_if(self, condition, on_true=None, on_false=None, stream=None, **kwargs):
        for body in (on_true, on_false):
            if body is not None:
                self.calls.append(("pause", self.recorder.warp_internal))
                body(**kwargs)
                self.calls.append(("resume", self.recorder.warp_internal))

    def capture_while(self, condition, body, stream=None, **kwargs):
        self.calls.append(("pause", self.recorder.warp_internal))
        body(**kwargs)
        self.calls.append(("resume", self.recorder.warp_internal))


def test_the_recorder_writes_the_layouts_the_tree_reads():
    recorder = _Recorder.make()
    warp = _Warp(recorder)
    cond, cond2, data = _array(), _array(), _array(16, None)
    seen = []

    def fill(value):
        recorder.record_memset(data.ptr, value, 64)

    def inner():
        seen.append(recorder.warp_internal)
        fill(2)

    run_if = lambda t, f: warp.capture_if(cond, t, f)  # noqa: E731
    recorder.record_cuda_if(cond, lambda: fill(1), lambda: recorder.record_cuda_while(
        cond2, inner, lambda body: warp.capture_while(cond2, body)), run_if)
    recorder.record_cuda_if(cond, lambda: fill(3), lambda: None, run_if)  # an else that records nothing: dropped
    recorder.record_cuda_while(cond, lambda: None, lambda body: warp.capture_while(cond, body))
    ops = recorder.end().ops
    assert [type(op).__name__ for op in ops] == ["Branch", "Memset", "Jump", "Branch", "Memset", "Jump",
                                                 "Branch", "Memset", "Branch", "Jump"]
    tree = conditional_tree(ops)
    assert [type(item).__name__ for item in tree] == ["IfNode", "IfNode", "WhileNode"]
    assert isinstance(tree[0].otherwise[0], WhileNode) and tree[1].otherwise is None and tree[2].body == ()
    assert seen == [False]  # inside a body apic's capture_pause refuses again
    assert all(internal for _, internal in warp.calls)  # Warp's own pauses and resumes run as Warp's
    assert recorder.warp_internal is False and recorder.conditional_depth == 0


def test_a_failing_body_leaves_nothing_of_its_conditional():
    recorder = _Recorder.make()
    warp = _Warp(recorder)
    cond, data = _array(), _array(16)
    recorder.record_memset(data.ptr, 7, 64)

    def failing():
        recorder.record_memset(data.ptr, 1, 64)
        raise RuntimeError("body failed")

    with pytest.raises(RuntimeError, match="body failed"):
        recorder.record_cuda_if(cond, failing, None, lambda t, f: warp.capture_if(cond, t, f))
    with pytest.raises(RuntimeError, match="body failed"):
        recorder.record_cuda_while(cond, failing, lambda body: warp.capture_while(cond, body))
    assert [type(op).__name__ for op in recorder.ops] == ["Memset"]
    assert recorder.warp_internal is False


def test_capture_if_and_while_on_cuda_go_through_the_recorder(monkeypatch):
    """apic's wp.capture_if / capture_while with an apic=True CUDA recording: Warp's functions get recording
    bodies, Warp's own capture_pause / capture_resume pass, a pause from a body and graph bodies are refused."""
    import warp as wp

    from apic import capture
    from apic.errors import UnsupportedOperationError
    from apic.record.cuda import recorder as cuda_recorder

    recorder = _Recorder.make()
    monkeypatch.setattr(cuda_recorder, "active", lambda: recorder)
    paused = []

    def warp_if(condition, on_true=None, on_false=None, stream=None, **kwargs):
        for body in (on_true, on_false):
            if body is not None:
                wp.capture_pause(stream="s")  # as Warp's capture_if does, through the patched name
                body(**kwargs)
                wp.capture_resume("g", stream="s")

    def warp_while(condition, body, stream=None, **kwargs):
        wp.capture_pause(stream="s")
        body(**kwargs)
        wp.capture_resume("g", stream="s")

    monkeypatch.setitem(capture._originals, "capture_if", warp_if)
    monkeypatch.setitem(capture._originals, "capture_while", warp_while)
    monkeypatch.setitem(capture._originals, "capture_pause", lambda **kw: paused.append(kw) or "g")
    monkeypatch.setitem(capture._originals, "capture_resume", lambda graph, **kw: None)
    cond, data = _array(), _array(16)
    wp.capture_if(cond, on_true=lambda scale: recorder.record_memset(data.ptr, scale, 64),
                  on_false=lambda scale: None, scale=5)
    wp.capture_while(cond, lambda: recorder.record_memset(data.ptr, 0, 4))
    assert len(paused) == 3  # the if's two bodies and the while's
    ops = recorder.end().ops
    assert [type(item).__name__ for item in conditional_tree(ops)] == ["IfNode", "WhileNode"]
    assert ops[1].value == 5

    def pausing():
        wp.capture_pause(stream="s")

    recorder = _Recorder.make()
    with pytest.raises(UnsupportedOperationError, match="wp.capture_pause"):
        wp.capture_while(cond, pausing)
    for body in (FileGraph.__new__(FileGraph), 3):
        with pytest.raises(UnsupportedOperationError, match=r"wp.capture_if with a (FileGraph|int) as its on_true"):
            wp.capture_if(cond, on_true=body)
    assert recorder.ops == []


def test_the_gpu_conditional_workload_replays_bit_for_bit_on_the_cpu():
    """The GPU tests' conditional step, captured on the CPU: every replay as eager (so a GPU failure is the GPU's)."""
    import numpy as np
    import warp as wp

    import cuda_conditional_workload as cc

    state, eager = cc.make_state("cpu"), cc.make_state("cpu")
    cc.step(state, "cpu")
    cc.step(eager, "cpu")
    with wp.ScopedCapture(device="cpu") as cap:
        cc.step(state, "cpu")
    flags = []
    for run in range(4):
        wp.capture_launch(cap.graph)
        cc.step(eager, "cpu")
        got, expected = cc.snapshot(state, "cpu"), cc.snapshot(eager, "cpu")
        assert all(np.array_equal(got[k].view(np.uint8), expected[k].view(np.uint8)) for k in got), run
        flags.append(int(got["flag"][0]))
    assert flags == [1, 0, 1, 0]  # the if / else took each side
    # the layout the CUDA recorder shares reads back as the GPU test expects it (test_cuda_conditional_gpu.py)
    tree = conditional_tree(cap.graph.recording.ops)
    nodes = [item for item in tree if isinstance(item, (IfNode, WhileNode))]
    assert [type(n).__name__ for n in nodes] == ["IfNode", "IfNode", "WhileNode", "WhileNode", "IfNode", "WhileNode"]
    assert nodes[0].otherwise is not None and nodes[1].otherwise is None
    assert isinstance(nodes[3].body[-1], WhileNode) and isinstance(nodes[4].then[0], WhileNode)
    assert depth_of(tree) == 2
