"""Bindings of arrays the capture never touched: saved as graph memory, as upstream Warp saves them.

A loaded graph has the parameter: ``set_param`` / ``get_param`` reach it (in this process and in a
fresh one), the saved contents are the array's at save time, and replay leaves it alone.
"""

from __future__ import annotations

import numpy as np
import pytest
import warp as wp

import apic
from persist_helpers import run_child, same_bits

pytestmark = [pytest.mark.warp_version, pytest.mark.interpreter]


@wp.kernel
def _bump(a: wp.array(dtype=float)):
    i = wp.tid()
    a[i] = a[i] + 1.0


def _graph():
    a = wp.zeros(4, dtype=float, device="cpu")
    wp.launch(_bump, dim=4, inputs=[a], device="cpu")
    with wp.ScopedCapture(device="cpu", apic=True) as capture:
        wp.launch(_bump, dim=4, inputs=[a], device="cpu")
    return capture.graph, a


def test_untouched_input_round_trips(tmp_path):
    graph, a = _graph()
    x = wp.array(np.arange(6, dtype=np.float32) * 1.5, device="cpu")
    wp.capture_save(graph, str(tmp_path / "g"), inputs={"x": x}, outputs={"a": a})
    x.fill_(-1.0)  # the saved contents are those at save time

    loaded = wp.capture_load(str(tmp_path / "g"))
    assert loaded.params["x"]["shape"] == (6,) and loaded.params["x"]["dtype"] == "float32"
    out = wp.zeros(6, dtype=float, device="cpu")
    loaded.get_param("x", out)
    assert same_bits(out.numpy(), np.arange(6, dtype=np.float32) * 1.5)

    new = wp.array(np.linspace(0, 1, 6, dtype=np.float32), device="cpu")
    loaded.set_param("x", new)
    wp.capture_launch(loaded)  # replay does not touch it, and it does not disturb replay
    loaded.get_param("x", out)
    assert same_bits(out.numpy(), new.numpy())
    result = wp.zeros(4, dtype=float, device="cpu")
    loaded.get_param("a", result)
    assert same_bits(result.numpy(), a.numpy() + 1.0)
    assert loaded.get_param_ptr("x") not in (None, 0, loaded.get_param_ptr("a"))


def test_untouched_bindings_in_a_fresh_process(tmp_path):
    graph, a = _graph()
    x = wp.array(np.arange(5, dtype=np.int32), device="cpu")
    wp.capture_save(graph, str(tmp_path / "g"), inputs={"x": x}, outputs={"a": a})
    np.save(tmp_path / "x.npy", np.array([7, 8, 9, 10, 11], dtype=np.int32))
    report = run_child({"path": str(tmp_path / "g"), "mode": "file", "iters": 2,
                        "set": {"x": str(tmp_path / "x.npy")},
                        "get": {"x": str(tmp_path / "x_out.npy"), "a": str(tmp_path / "a_out.npy")}}, tmp_path)
    assert report["params"] == ["a", "x"]
    assert same_bits(np.load(tmp_path / "x_out.npy"), np.array([7, 8, 9, 10, 11], dtype=np.int32))
    assert same_bits(np.load(tmp_path / "a_out.npy"), a.numpy() + 2.0)


def test_two_names_and_views_of_one_untouched_array_share_memory(tmp_path):
    graph, a = _graph()
    base = wp.array(np.arange(8, dtype=np.float32), device="cpu")
    wp.capture_save(graph, str(tmp_path / "g"), inputs={"x_in": base, "head": base[:4]},
                    outputs={"x_out": base, "tail": base[4:]})
    loaded = wp.capture_load(str(tmp_path / "g"))
    assert loaded.get_param_ptr("x_in") == loaded.get_param_ptr("x_out") == loaded.get_param_ptr("head")
    assert loaded.get_param_ptr("tail") == loaded.get_param_ptr("x_in") + 16
    loaded.set_param("tail", wp.array(np.full(4, 3.0, dtype=np.float32), device="cpu"))
    whole = wp.zeros(8, dtype=float, device="cpu")
    loaded.get_param("x_out", whole)
    assert same_bits(whole.numpy(), np.array([0, 1, 2, 3, 3, 3, 3, 3], dtype=np.float32))


def test_untouched_strided_and_2d_arrays(tmp_path):
    graph, a = _graph()
    grid = wp.array(np.arange(12, dtype=np.float64).reshape(3, 4), device="cpu")
    strided = grid[:, 1]  # a column: strided view
    wp.capture_save(graph, str(tmp_path / "g"), inputs={"grid": grid, "column": strided})
    loaded = wp.capture_load(str(tmp_path / "g"))
    out = wp.zeros(3, dtype=wp.float64, device="cpu")
    loaded.get_param("column", out)
    assert same_bits(out.numpy(), np.array([1.0, 5.0, 9.0]))


def test_live_graph_is_unchanged_and_saves_again(tmp_path):
    graph, a = _graph()
    regions = len(graph.recording.regions)
    x = wp.zeros(3, dtype=float, device="cpu")
    wp.capture_save(graph, str(tmp_path / "g"), inputs={"x": x})
    assert len(graph.recording.regions) == regions
    wp.capture_launch(graph)
    loaded = wp.capture_load(str(tmp_path / "g"))
    wp.capture_save(loaded, str(tmp_path / "g2"))  # its extra region is an ordinary region now
    again = wp.capture_load(str(tmp_path / "g2"))
    assert sorted(again.params) == ["x"]


def test_array_partly_inside_graph_memory_is_refused(tmp_path):
    outer = wp.zeros(16, dtype=float, device="cpu")
    # an array over the first 4 floats only (no owner): the graph's region is those 16 bytes
    inner = wp.array(ptr=outer.ptr, shape=(4,), dtype=float, device="cpu")
    with wp.ScopedCapture(device="cpu", apic=True) as capture:
        inner.fill_(1.0)
    if any(r.nbytes >= 64 for r in capture.graph.recording.regions):
        pytest.skip("this warp-lang reports the owner's whole allocation for a pointer-made array")
    with pytest.raises(apic.BindingError, match="'outer'.*partly"):
        wp.capture_save(capture.graph, str(tmp_path / "g"), inputs={"outer": outer})
