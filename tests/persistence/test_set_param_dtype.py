"""``set_param`` with an array of another dtype: converted only where every value converts exactly.

README says ``set_param`` checks dtype; a NumPy float64 array given to a float32 input was narrowed
silently (NumPy's ``same_kind`` casting). An array's own dtype (NumPy, a memoryview's format) is now
converted only where NumPy's ``safe`` casting holds (float16 into float32, int16 into int32), else refused
with a ``BindingError`` naming both dtypes; a nested list of Python numbers has no dtype of its own and is
converted as ``np.array(value).astype(dtype)`` converts it, an integer that does not fit refused. Each
accepted value replays as the eager run on the same float32 / int32 values.
"""

from __future__ import annotations

import array

import numpy as np
import pytest
import warp as wp

import apic
from persist_helpers import same_bits

pytestmark = [pytest.mark.warp_version, pytest.mark.interpreter]

N = 8


@wp.kernel
def _scale_shift(x: wp.array(dtype=float), k: wp.array(dtype=wp.int32), y: wp.array(dtype=float)):
    i = wp.tid()
    y[i] = x[i] * 1.5 + float(k[i])


def _eager(x: np.ndarray, k: np.ndarray) -> np.ndarray:
    y = wp.zeros(N, dtype=float, device="cpu")
    wp.launch(_scale_shift, dim=N, inputs=[wp.array(x, dtype=float, device="cpu"),
                                           wp.array(k, dtype=wp.int32, device="cpu"), y], device="cpu")
    return y.numpy()


@pytest.fixture(scope="module", params=["file", "bytes"])
def graph(request, tmp_path_factory):
    """The launch captured, saved with inputs x, k and output y, and loaded (from a file, or from memory)."""
    x, k = wp.zeros(N, dtype=float, device="cpu"), wp.zeros(N, dtype=wp.int32, device="cpu")
    y = wp.zeros(N, dtype=float, device="cpu")
    wp.launch(_scale_shift, dim=N, inputs=[x, k, y], device="cpu")  # compiled before the capture
    with wp.ScopedCapture(device="cpu", apic=True) as cap:
        wp.launch(_scale_shift, dim=N, inputs=[x, k, y], device="cpu")
    names = dict(inputs={"x": x, "k": k}, outputs={"y": y})
    if request.param == "bytes":
        return wp.capture_load_from_bytes(*apic.capture_save_to_bytes(cap.graph, **names))
    stem = str(tmp_path_factory.mktemp("dtype") / "g")
    wp.capture_save(cap.graph, stem, **names)
    return wp.capture_load(stem, device="cpu")


def _replayed(graph, x, k) -> np.ndarray:
    graph.set_param("x", x)
    graph.set_param("k", k)
    wp.capture_launch(graph)
    out = np.empty(N, dtype=np.float32)
    graph.get_param("y", out)
    return out


RNG = np.random.default_rng(3)
X64 = RNG.standard_normal(N) / 3.0  # float64 values a float32 cannot all hold
K = np.arange(N, dtype=np.int32) - 3


@pytest.mark.parametrize("value, dtype", [
    (X64, "float64"),
    (np.longdouble(1) * X64, str(np.dtype(np.longdouble))),
    (memoryview(array.array("d", X64)), "float64"),
    (X64.astype(np.int64), "int64"),
], ids=["float64", "longdouble", "memoryview of doubles", "int64"])
def test_an_array_narrowed_is_refused_naming_both_dtypes(graph, value, dtype):
    with pytest.raises(apic.BindingError, match=rf"set_param\('x'\): dtype {dtype} \(expected float32; "):
        graph.set_param("x", value)


def test_integers_narrowed_are_refused(graph):
    with pytest.raises(apic.BindingError, match=r"dtype int64 \(expected int32; "):
        graph.set_param("k", K.astype(np.int64))
    with pytest.raises(apic.BindingError, match="values a int32 cannot hold"):
        graph.set_param("k", [2**31] + [0] * (N - 1))  # a list: its numbers checked, not wrapped


def test_what_converts_exactly_is_taken(graph):
    x32 = X64.astype(np.float32)
    expected = _eager(x32, K)
    assert same_bits(_replayed(graph, x32, K), expected)
    x16 = X64.astype(np.float16)  # float16 -> float32 is exact
    assert same_bits(_replayed(graph, x16, K.astype(np.int16)), _eager(x16.astype(np.float32), K))
    # a list of Python floats has no dtype of its own: read as NumPy reads it, then converted
    assert same_bits(_replayed(graph, X64.tolist(), K.tolist()), expected)
