"""What apic cannot record raises a clear error during capture; it never runs or drops silently."""

from __future__ import annotations

import numpy as np
import pytest
import warp as wp

import apic
import kernels as K
from apic.record.cpu.recorder import active
from conftest import CPU

pytestmark = [pytest.mark.warp_version, pytest.mark.interpreter]

F32 = K.ARRAY_ACCUM[wp.float32]


def _arrays(n=8):
    return (wp.array(np.arange(n, dtype=np.float32), device=CPU), wp.zeros(n, dtype=wp.float32, device=CPU))


def test_nested_capture_is_refused():
    with wp.ScopedCapture(device=CPU):
        with pytest.raises(apic.CaptureError, match="already in progress"):
            wp.capture_begin(device=CPU)
        with pytest.raises(apic.CaptureError, match="already in progress"):
            with wp.ScopedCapture(device=CPU):
                pass
    assert active() is None


def test_capture_end_without_begin():
    with pytest.raises(apic.CaptureError, match="no CPU graph capture is in progress"):
        wp.capture_end(device=CPU)
    with pytest.raises(RuntimeError):  # CaptureError is also a RuntimeError, as Warp users expect
        wp.capture_end(device=CPU)


def test_capture_end_twice():
    wp.capture_begin(device=CPU)
    graph = wp.capture_end(device=CPU)
    assert isinstance(graph, apic.Graph) and graph.op_count == 0
    with pytest.raises(apic.CaptureError, match="no CPU graph capture is in progress"):
        wp.capture_end(device=CPU)


def test_external_capture_is_refused_on_cpu():
    with pytest.raises(apic.CaptureError, match="external=True"):
        wp.capture_begin(device=CPU, external=True)
    assert active() is None


def _core():
    from apic._compat import runtime

    return runtime().core


@pytest.mark.parametrize(
    "call,native",
    [
        # a utility apic records, reached directly, on memory that is no Warp array (recorded on Warp arrays)
        (lambda a, b: _core().wp_array_scan_float_host(_HOST.ctypes.data, b.ptr, 8, *([4, 4, 1] if _SCAN_7 else []),
                                                       True), "wp_array_scan_float_host"),
        # a native host function apic does not record (refused before Warp's code runs: the arguments are never read)
        (lambda a, b: _core().wp_mesh_create_host(0, 0, 0, 0, 0, 0, 0), "wp_mesh_create_host"),
    ],
    ids=["utility_called_directly", "unknown_native"],
)
def test_unknown_native_call_is_refused(call, native):
    a, b = _arrays()
    with pytest.raises(apic.UnsupportedOperationError, match=native) as caught:
        with wp.ScopedCapture(device=CPU) as capture:
            wp.launch(F32, dim=8, inputs=[a, b], device=CPU)
            call(a, b)
    assert caught.value.operation.startswith(native)
    assert isinstance(caught.value, NotImplementedError)
    assert capture.graph is None, "a partly recorded graph was handed out"
    assert active() is None
    assert not b.numpy().any(), "the launch before the refused call ran during capture"


_HOST = np.zeros(8, dtype=np.float32)
_SCAN_7 = len(getattr(_core().wp_array_scan_float_host, "argtypes", None) or ()) == 7


@pytest.mark.parametrize(
    "call,match",
    [
        (lambda a, b: wp.utils.array_sum(a), r"array_sum\(\) without out"),
        (lambda a, b: wp.utils.array_inner(a, b), r"array_inner\(\) without out"),
        (lambda a, b: wp.utils.runlength_encode(wp.zeros(4, dtype=wp.int32, device=CPU),
                                                wp.zeros(4, dtype=wp.int32, device=CPU),
                                                wp.zeros(4, dtype=wp.int32, device=CPU)), "without run_count"),
        (lambda a, b: wp.utils.array_scan(
            wp.array(ptr=a.ptr + 28, shape=(8,), strides=(-4,), dtype=wp.float32, device=CPU), b), "negative stride"),
    ],
    ids=["array_sum_host_return", "array_inner_host_return", "runlength_host_return", "negative_stride"],
)
def test_utility_forms_that_cannot_be_recorded_are_refused(call, match):
    a, b = _arrays()
    with pytest.raises(apic.UnsupportedOperationError, match=match):
        with wp.ScopedCapture(device=CPU):
            call(a, b)
    assert active() is None
    assert not b.numpy().any()


def test_refused_call_does_not_spoil_the_next_capture():
    a, b = _arrays()
    with pytest.raises(apic.UnsupportedOperationError):
        with wp.ScopedCapture(device=CPU):
            wp.utils.array_sum(a)
    with wp.ScopedCapture(device=CPU) as capture:
        wp.launch(F32, dim=8, inputs=[a, b], device=CPU)
    wp.capture_launch(capture.graph)
    np.testing.assert_array_equal(b.numpy(), a.numpy())


def test_native_calls_outside_capture_still_run():
    """The native sinks call straight through when no capture runs on this thread."""
    a, b = _arrays()
    with wp.ScopedCapture(device=CPU):
        pass  # installs the native sinks
    wp.utils.array_scan(a, b)
    np.testing.assert_array_equal(b.numpy(), np.cumsum(np.arange(8, dtype=np.float32)))


def test_copy_between_cpu_and_cuda_is_refused():
    if wp.get_cuda_device_count() == 0:
        pytest.skip("no CUDA device on this machine: a CPU<->CUDA copy cannot be attempted")
    host, _ = _arrays()
    device = wp.zeros(8, dtype=wp.float32, device="cuda:0")
    with pytest.raises(apic.UnsupportedOperationError, match="host-to-host"):
        with wp.ScopedCapture(device=CPU):
            wp.copy(device, host)


@pytest.mark.parametrize("reader", ["numpy", "list", "str"])
def test_reading_a_captured_array_is_refused(reader):
    a, b = _arrays()
    read = {"numpy": lambda x: x.numpy(), "list": lambda x: x.list(), "str": str}[reader]
    with pytest.raises(apic.CaptureError, match="before the captured work has run"):
        with wp.ScopedCapture(device=CPU):
            wp.launch(F32, dim=8, inputs=[a, b], device=CPU)
            read(b)
    assert active() is None


@pytest.mark.parametrize("used", ["written", "read", "view_of_it", "allocated"])
def test_reading_any_used_memory_is_refused(used):
    a, b = _arrays(16)
    with pytest.raises(apic.CaptureError, match="before the captured work has run"):
        with wp.ScopedCapture(device=CPU):
            if used == "allocated":
                tmp = wp.zeros(4, dtype=wp.float32, device=CPU)
                tmp.numpy()
            wp.launch(F32, dim=8, inputs=[a[:8], b[8:]], device=CPU)
            {"written": b, "read": a, "view_of_it": a[2:4]}.get(used, a).numpy()


def test_reading_indexed_array_over_captured_memory_is_refused():
    a, b = _arrays()
    idx = wp.array(np.array([1, 3], np.int32), device=CPU)
    with pytest.raises(apic.CaptureError, match="before the captured work has run"):
        with wp.ScopedCapture(device=CPU):
            b.zero_()
            wp.indexedarray(b, [idx]).numpy()


def test_reading_untouched_memory_works_and_records_nothing():
    a, b = _arrays()
    c = wp.array(np.arange(8, dtype=np.float32) * 3, device=CPU)
    idx = wp.array(np.array([1, 3], np.int32), device=CPU)
    with wp.ScopedCapture(device=CPU) as capture:
        wp.launch(F32, dim=8, inputs=[a, b], device=CPU)
        assert c.numpy().tolist() == [0, 3, 6, 9, 12, 15, 18, 21]
        assert wp.indexedarray(c, [idx]).numpy().tolist() == [3, 9]  # read through a temporary copy
    assert capture.graph.op_count == 1
    wp.capture_launch(capture.graph)
    np.testing.assert_array_equal(b.numpy(), a.numpy())


def test_failing_launch_inside_capture_abandons_it():
    a, _ = _arrays()
    with pytest.raises(RuntimeError):
        with wp.ScopedCapture(device=CPU) as capture:
            wp.launch(F32, dim=8, inputs=[a, wp.zeros(8, dtype=wp.int32, device=CPU)], device=CPU)  # wrong dtype
    assert capture.graph is None
    assert active() is None


def test_launching_a_graph_during_a_capture_records_it():
    """As a CUDA graph launched during stream capture: its ops are recorded, nothing runs now."""
    a, b = _arrays()
    with wp.ScopedCapture(device=CPU) as first:
        wp.launch(F32, dim=8, inputs=[a, b], device=CPU)
    with wp.ScopedCapture(device=CPU) as second:
        wp.capture_launch(first.graph)
        first.graph.launch(repeats=2)
    assert not b.numpy().any(), "the graph ran during the capture"
    assert second.graph.op_count == 3
    wp.capture_launch(second.graph)
    np.testing.assert_array_equal(b.numpy(), 3 * a.numpy())
