"""Named parameters of loaded graphs: params, set_param, get_param, get_param_ptr, and their errors."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
import warp as wp

import apic
from persist_helpers import same_bits

pytestmark = [pytest.mark.warp_version, pytest.mark.interpreter]


@wp.kernel
def _scale(x: wp.array(dtype=wp.vec3), s: float, y: wp.array(dtype=wp.vec3)):
    i = wp.tid()
    y[i] = x[i] * s


@wp.kernel
def _add_rows(m: wp.array2d(dtype=float), out: wp.array(dtype=float)):
    i, j = wp.tid()
    wp.atomic_add(out, i, m[i, j])


N = 6


@pytest.fixture(scope="module")
def graph(tmp_path_factory):
    folder = tmp_path_factory.mktemp("params")
    x = wp.array(np.arange(3 * N, dtype=np.float32).reshape(N, 3), dtype=wp.vec3, device="cpu")
    y = wp.zeros(N, dtype=wp.vec3, device="cpu")
    m = wp.array(np.ones((4, 5), dtype=np.float32), device="cpu")
    rows = wp.zeros(4, dtype=float, device="cpu")
    with wp.ScopedCapture(device="cpu", apic=True) as cap:
        wp.launch(_scale, dim=N, inputs=[x, 2.0, y], device="cpu")
        rows.zero_()
        wp.launch(_add_rows, dim=(4, 5), inputs=[m, rows], device="cpu")
    wp.capture_save(cap.graph, str(folder / "g"), inputs={"x": x, "m": m}, outputs={"y": y, "rows": rows})
    return wp.capture_load(str(folder / "g"))


def test_params_describe_bindings(graph):
    params = graph.params
    assert set(params) == {"x", "m", "y", "rows"}
    assert params["x"] == {"size": N * 12, "kind": "input", "dtype": "vec3f", "shape": (N,), "strides": (12,)}
    assert params["m"]["shape"] == (4, 5) and params["m"]["dtype"] == "float32" and params["m"]["size"] == 80
    assert params["rows"]["kind"] == "output"
    assert graph.is_loaded


def test_set_launch_get(graph):
    new_x = np.random.default_rng(1).standard_normal((N, 3)).astype(np.float32)
    graph.set_param("x", wp.array(new_x, dtype=wp.vec3, device="cpu"))
    graph.set_param("m", wp.array(np.full((4, 5), 0.5, np.float32), device="cpu"))
    wp.capture_launch(graph)
    y = wp.empty(N, dtype=wp.vec3, device="cpu")
    graph.get_param("y", y)
    assert same_bits(y.numpy(), new_x * np.float32(2.0))
    rows = wp.empty(4, dtype=float, device="cpu")
    graph.get_param("rows", rows)
    assert np.array_equal(rows.numpy(), np.full(4, 2.5, np.float32))


def test_get_param_ptr(graph):
    ptr = graph.get_param_ptr("x")
    assert isinstance(ptr, int) and ptr
    values = np.arange(3 * N, dtype=np.float32) + 100
    graph.set_param("x", wp.array(values.reshape(N, 3), dtype=wp.vec3, device="cpu"))
    raw = np.ctypeslib.as_array((ctypes.c_float * (3 * N)).from_address(ptr))
    assert np.array_equal(raw, values)
    assert graph.get_param_ptr("missing") is None


def test_strided_user_arrays(graph):
    """set_param/get_param accept non-contiguous arrays of the right dtype and shape."""
    big = wp.array(np.arange(4 * 10, dtype=np.float32).reshape(4, 10), device="cpu")
    view = big[:, ::2]
    assert not view.is_contiguous
    graph.set_param("m", view)
    back = wp.zeros((4, 10), dtype=float, device="cpu")
    graph.get_param("m", back[:, 1::2])
    assert np.array_equal(back.numpy()[:, 1::2], big.numpy()[:, ::2])
    assert np.all(back.numpy()[:, ::2] == 0)


@pytest.mark.parametrize("method", ["set_param", "get_param"])
def test_wrong_name(graph, method):
    with pytest.raises(apic.BindingError, match=r"no parameter named 'nope' \(its parameters: m, rows, x, y\)"):
        getattr(graph, method)("nope", wp.zeros(N, dtype=wp.vec3, device="cpu"))
    with pytest.raises(RuntimeError):  # upstream Warp raises RuntimeError here too
        getattr(graph, method)("nope", wp.zeros(N, dtype=wp.vec3, device="cpu"))


@pytest.mark.parametrize("method", ["set_param", "get_param"])
def test_wrong_dtype(graph, method):
    with pytest.raises(apic.BindingError, match=r"dtype vec3d \(expected vec3f\)"):
        getattr(graph, method)("x", wp.zeros(N, dtype=wp.vec3d, device="cpu"))
    with pytest.raises(apic.BindingError, match=r"dtype float32 \(expected vec3f\)"):
        # same byte size (18 floats = 6 vec3f), other dtype and shape
        getattr(graph, method)("x", wp.zeros(3 * N, dtype=float, device="cpu"))


@pytest.mark.parametrize("method", ["set_param", "get_param"])
def test_wrong_shape(graph, method):
    with pytest.raises(apic.BindingError, match=r"shape \(5, 4\) \(expected \(4, 5\)\)$"):
        getattr(graph, method)("m", wp.zeros((5, 4), dtype=float, device="cpu"))  # same size, other shape


@pytest.mark.parametrize("method", ["set_param", "get_param"])
def test_wrong_size(graph, method):
    with pytest.raises(apic.BindingError, match=r"shape \(7,\) \(expected \(6,\)\), 84 bytes \(expected 72\)"):
        getattr(graph, method)("x", wp.zeros(N + 1, dtype=wp.vec3, device="cpu"))


def test_not_an_array(graph):
    """set_param copies from any array-like (tests/replay/test_lifetimes.py); get_param writes only into a
    Warp or NumPy array."""
    with pytest.raises(TypeError, match="expected a Warp array"):
        graph.get_param("x", [0.0] * N)
    with pytest.raises(apic.BindingError, match="shape"):
        graph.set_param("x", "not an array")


def test_param_numpy_view(graph):
    view = graph.param_numpy("m")
    assert view.shape == (4, 5) and view.dtype == np.float32
    view[...] = 3.0
    out = wp.empty((4, 5), dtype=float, device="cpu")
    graph.get_param("m", out)
    assert np.all(out.numpy() == 3.0)
    assert graph.param_numpy("x").shape == (N, 3)


def test_live_graph_has_no_params():
    a = wp.zeros(4, dtype=float, device="cpu")
    with wp.ScopedCapture(device="cpu", apic=True) as cap:
        a.fill_(1.0)
    live = cap.graph
    assert not live.is_loaded and live.params == {}
    for method in ("set_param", "get_param"):
        with pytest.raises(RuntimeError, match="only supported on loaded APIC graphs"):
            getattr(live, method)("a", a)
    with pytest.raises(RuntimeError, match="only supported on loaded APIC graphs"):
        live.get_param_ptr("a")


def test_binding_of_a_view(tmp_path):
    """A binding is the array given (here a slice), not its whole allocation."""
    base = wp.array(np.arange(10, dtype=np.float32), device="cpu")
    with wp.ScopedCapture(device="cpu", apic=True) as cap:
        base.fill_(1.0)
    wp.capture_save(cap.graph, str(tmp_path / "v"), outputs={"tail": base[6:]})
    loaded = wp.capture_load(str(tmp_path / "v"))
    assert loaded.params["tail"]["shape"] == (4,)
    tail = wp.array(np.full(4, 9.0, np.float32), device="cpu")
    loaded.set_param("tail", tail)
    full = np.ctypeslib.as_array((ctypes.c_float * 10).from_address(loaded.get_param_ptr("tail") - 24))
    assert np.array_equal(full, [0, 1, 2, 3, 4, 5, 9, 9, 9, 9])
    wp.capture_launch(loaded)
    assert np.all(full == 1.0)
