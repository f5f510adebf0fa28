"""``wp.copy``, ``array.zero_``, ``array.fill_`` and ``array.assign``: eager == replay, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
import warp as wp

import kernels as K
from conftest import CPU, churn, eager_vs_replay, random_values

pytestmark = [pytest.mark.warp_version, pytest.mark.interpreter]

FILL_DTYPES = K.SCALAR_DTYPES + (wp.bool,) + K.VALUE_DTYPES


def _np_scalar(dtype):
    return np.dtype(wp.dtype_to_numpy(getattr(dtype, "_wp_scalar_type_", dtype)))


def _array(dtype, n, seed, shape=None):
    shape = shape or (n,)
    inner = getattr(dtype, "_shape_", ())
    return wp.array(random_values((*shape, *inner), _np_scalar(dtype), seed), dtype=dtype, device=CPU)


def _fill_value(dtype):
    """A fill value of ``dtype`` with a distinct, exactly representable bit pattern."""
    if dtype is wp.bool:
        return True
    if hasattr(dtype, "_shape_"):
        n = int(np.prod(dtype._shape_))
        if dtype in (wp.quat, wp.transform):
            return dtype(*[float(k + 1) for k in range(n)])
        values = [k - 3 for k in range(n)]
        return np.array(values).reshape(dtype._shape_).tolist() if len(dtype._shape_) > 1 else values
    return 5 if _np_scalar(dtype).kind in "iu" else -2.5


# --- wp.copy ---------------------------------------------------------------------------------------
def test_copy_contiguous():
    def make():
        return {"a": _array(wp.float32, 16, 1), "b": _array(wp.float32, 16, 2), "c": _array(wp.float32, 16, 3)}

    def fn(s):
        wp.launch(K.ARRAY_ACCUM[wp.float32], dim=16, inputs=[s["a"], s["b"]], device=CPU)
        wp.copy(s["c"], s["b"])
        wp.copy(s["a"], s["c"])

    eager_vs_replay(fn, make)


@pytest.mark.parametrize(
    "dest_offset,src_offset,count", [(0, 0, 5), (3, 0, 4), (0, 7, 9), (10, 2, 6), (15, 15, 1)], ids=str
)
def test_copy_offsets_and_count(dest_offset, src_offset, count):
    def make():
        return {"src": _array(wp.int32, 16, 1), "dst": _array(wp.int32, 16, 2)}

    def fn(s):
        wp.launch(K.ARRAY_ACCUM[wp.int32], dim=16, inputs=[s["dst"], s["src"]], device=CPU)
        wp.copy(s["dst"], s["src"], dest_offset=dest_offset, src_offset=src_offset, count=count)

    eager_vs_replay(fn, make)


def test_copy_between_dtypes_of_equal_shape():
    """vec3 arrays, 2-D arrays, and a zero-size copy (which does nothing)."""

    def make():
        return {"v1": _array(wp.vec3, 8, 1), "v2": _array(wp.vec3, 8, 2),
                "m1": _array(wp.float64, 0, 3, shape=(4, 5)), "m2": _array(wp.float64, 0, 4, shape=(4, 5)),
                "e1": wp.zeros(0, dtype=wp.int8, device=CPU), "e2": wp.zeros(0, dtype=wp.int8, device=CPU)}

    def fn(s):
        wp.copy(s["v2"], s["v1"])
        wp.copy(s["m2"], s["m1"])
        wp.copy(s["e2"], s["e1"])
        wp.launch(K.ARRAY_ACCUM[wp.vec3], dim=8, inputs=[s["v2"], s["v1"]], device=CPU)

    eager_vs_replay(fn, make)


STRIDED_COPIES = [
    ("strided_src", lambda a, b: (b[:8], a[::2])),
    ("strided_dst", lambda a, b: (b[1::2], a[:8])),
    ("both_strided", lambda a, b: (b[::2], a[1::2])),
    ("transposed_2d", lambda a, b: (b.reshape((4, 4)), a.reshape((4, 4)).transpose())),
    ("column_to_row", lambda a, b: (b.reshape((4, 4))[1], a.reshape((4, 4))[:, 2])),
    ("sub_block_2d", lambda a, b: (b.reshape((4, 4))[1:3, 0:2], a.reshape((4, 4))[2:4, 1:3])),
]


@pytest.mark.parametrize("name,views", STRIDED_COPIES, ids=[c[0] for c in STRIDED_COPIES])
def test_copy_strided(name, views):
    def make():
        return {"a": _array(wp.float32, 16, 1), "b": _array(wp.float32, 16, 2)}

    def fn(s):
        wp.launch(K.ARRAY_ACCUM[wp.float32], dim=16, inputs=[s["b"], s["a"]], device=CPU)
        dst, src = views(s["a"], s["b"])
        wp.copy(dst, src)

    eager_vs_replay(fn, make)


def test_copy_strided_3d_and_4d():
    def make():
        return {"a3": _array(wp.int16, 0, 1, shape=(2, 3, 4)), "b3": _array(wp.int16, 0, 2, shape=(4, 3, 2)),
                "a4": _array(wp.uint8, 0, 3, shape=(2, 2, 3, 2)), "b4": _array(wp.uint8, 0, 4, shape=(2, 3, 2, 2))}

    def fn(s):
        wp.copy(s["b3"], s["a3"].transpose())
        wp.copy(s["b4"], s["a4"].transpose((0, 2, 1, 3)))
        wp.launch(K.ACCUM_ND[3][wp.int16], dim=(2, 3, 4), inputs=[s["b3"].transpose(), s["a3"]], device=CPU)

    eager_vs_replay(fn, make)


def test_copy_indexed_arrays():
    def make():
        return {"src": _array(wp.float32, 16, 1), "dst": _array(wp.float32, 16, 2),
                "si": wp.array(np.array([3, 1, 4, 1, 5, 9], np.int32), device=CPU),
                "di": wp.array(np.array([0, 2, 4, 6, 8, 10], np.int32), device=CPU)}

    def fn(s):
        src = wp.indexedarray(s["src"], [s["si"]])
        dst = wp.indexedarray(s["dst"], [s["di"]])
        wp.launch(K.ARRAY_ACCUM[wp.float32], dim=16, inputs=[s["dst"], s["src"]], device=CPU)
        wp.copy(dst, src)  # indexed to indexed
        wp.copy(s["dst"][10:16], src)  # indexed to regular
        wp.copy(dst, s["src"][::2][:6])  # strided regular to indexed

    eager_vs_replay(fn, make)


def test_copy_with_gradients():
    """wp.copy also copies the gradient buffers when both arrays have one."""

    def make():
        a = wp.array(random_values(8, np.float32, 1), device=CPU, requires_grad=True)
        b = wp.array(random_values(8, np.float32, 2), device=CPU, requires_grad=True)
        a.grad.fill_(3.0)
        return {"a": a, "b": b, "ga": a.grad, "gb": b.grad}

    def fn(s):
        wp.launch(K.ARRAY_ACCUM[wp.float32], dim=8, inputs=[s["ga"], s["a"]], device=CPU)
        wp.copy(s["b"], s["a"])

    eager_vs_replay(fn, make)


def test_assign():
    def make():
        return {"a": _array(wp.float32, 8, 1), "b": _array(wp.float32, 8, 2), "c": _array(wp.float32, 16, 3)}

    def fn(s):
        wp.launch(K.ARRAY_ACCUM[wp.float32], dim=8, inputs=[s["a"], s["b"]], device=CPU)
        s["a"].assign(s["b"])
        s["c"][::2].assign(s["b"])

    eager_vs_replay(fn, make)


def test_assign_from_numpy_is_kept_alive():
    """``assign`` wraps host data in a temporary Warp array; the graph keeps that memory alive."""

    def make():
        return {"a": _array(wp.float32, 8, 1), "b": _array(wp.float32, 8, 2)}

    def fn(s):
        s["a"].assign(np.arange(8, dtype=np.float64) * 0.5)  # converted: a temporary float32 copy
        wp.launch(K.ARRAY_ACCUM[wp.float32], dim=8, inputs=[s["a"], s["b"]], device=CPU)

    graph, state = eager_vs_replay(fn, make, repeats=1)
    churn()
    wp.capture_launch(graph)
    expected = random_values(8, np.float32, 2) + 2 * (np.arange(8) * 0.5).astype(np.float32)
    np.testing.assert_array_equal(state["b"].numpy(), expected)


# --- zero_ -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", FILL_DTYPES, ids=lambda t: t.__name__)
def test_zero_contiguous_and_strided(dtype):
    def make():
        return {"a": _array(dtype, 12, 1), "b": _array(dtype, 12, 2), "c": _array(dtype, 0, 3, shape=(3, 4))}

    def fn(s):
        s["a"].zero_()
        s["b"][1::3].zero_()
        s["c"].transpose()[1:3].zero_()

    eager_vs_replay(fn, make)


def test_zero_between_launches():
    """zero_ runs at its place in the sequence, every replay."""

    def make():
        return {"a": _array(wp.int64, 8, 1), "b": _array(wp.int64, 8, 2)}

    def fn(s):
        wp.launch(K.ARRAY_ACCUM[wp.int64], dim=8, inputs=[s["a"], s["b"]], device=CPU)
        s["a"].zero_()
        wp.launch(K.ARRAY_ACCUM[wp.int64], dim=8, inputs=[s["b"], s["a"]], device=CPU)

    eager_vs_replay(fn, make)


# --- fill_ -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", FILL_DTYPES, ids=lambda t: t.__name__)
def test_fill_contiguous_and_strided(dtype):
    value = _fill_value(dtype)

    def make():
        return {"a": _array(dtype, 12, 1), "b": _array(dtype, 12, 2), "c": _array(dtype, 0, 3, shape=(3, 4))}

    def fn(s):
        s["a"].fill_(value)
        s["b"][::2].fill_(value)
        s["c"][:, 1:3].fill_(value)

    eager_vs_replay(fn, make)


def test_fill_with_warp_scalars_and_zero_size():
    def make():
        return {"a": _array(wp.float16, 8, 1), "b": _array(wp.uint16, 8, 2),
                "e": wp.zeros(0, dtype=wp.int32, device=CPU)}

    def fn(s):
        s["a"].fill_(wp.float16(0.75))
        s["b"].fill_(wp.uint16(65535))
        s["e"].fill_(7)
        s["e"].zero_()

    graph, _ = eager_vs_replay(fn, make)
    assert graph.op_count == 2


def _pod(a, b, v):
    p = K.Pod()
    p.a, p.b, p.v = a, b, wp.vec2(*v)
    return p


def test_fill_and_zero_struct_arrays():
    def make():
        items = [_pod(float(k), k * 3, (k, -k)) for k in range(10)]
        return {"a": wp.array(items, dtype=K.Pod, device=CPU), "b": wp.array(items, dtype=K.Pod, device=CPU)}

    def fn(s):
        s["a"].fill_(_pod(1.5, -7, (2.0, 3.0)))
        s["b"][::3].fill_(_pod(-0.5, 9, (4.0, 5.0)))
        s["b"][1::3].zero_()
        s["a"][4:6].zero_()

    eager_vs_replay(fn, make)


def test_fill_and_zero_indexed_arrays():
    def make():
        return {"a": _array(wp.float32, 12, 1), "idx": wp.array(np.array([11, 0, 5, 6], np.int32), device=CPU)}

    def fn(s):
        view = wp.indexedarray(s["a"], [s["idx"]])
        view.fill_(4.25)
        wp.indexedarray(s["a"], [s["idx"][1:3]]).zero_()

    eager_vs_replay(fn, make)


def test_fill_4d_strided():
    def make():
        return {"a": _array(wp.int32, 0, 1, shape=(2, 3, 2, 4))}

    def fn(s):
        s["a"][:, ::2, :, 1::2].fill_(-9)
        s["a"].transpose((3, 2, 1, 0))[0].fill_(12)

    eager_vs_replay(fn, make)
