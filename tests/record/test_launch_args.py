"""``wp.launch`` with every kind of argument, launch dimension and launch mode: eager == replay."""

from __future__ import annotations

import gc

import numpy as np
import pytest
import warp as wp

import kernels as K
from conftest import CPU, as_bytes, churn, eager_vs_replay, random_values

pytestmark = [pytest.mark.warp_version, pytest.mark.interpreter]


def _np_dtype(dtype):
    return np.dtype(wp.dtype_to_numpy(getattr(dtype, "_wp_scalar_type_", dtype)))


# --- scalars ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", K.SCALAR_DTYPES, ids=lambda t: t.__name__)
@pytest.mark.parametrize("as_warp_scalar", [False, True], ids=["python", "warp"])
@pytest.mark.parametrize("magnitude", ["small", "large"])
def test_scalar_argument(dtype, as_warp_scalar, magnitude):
    np_dtype = _np_dtype(dtype)
    if np_dtype.kind in "iu":
        value = 3 if magnitude == "small" else int(np.iinfo(np_dtype).max) // 3  # uses the high bytes
    else:
        value = 1.5 if magnitude == "small" else float(np.finfo(np_dtype).max) / 4
    arg = dtype(value) if as_warp_scalar else value

    def make():
        return {"out": wp.array(random_values(16, np_dtype), dtype=dtype, device=CPU)}

    def fn(s):
        wp.launch(K.SCALAR_ACCUM[dtype], dim=16, inputs=[arg, s["out"]], device=CPU)

    eager_vs_replay(fn, make)


def test_bool_scalar_argument():
    def make():
        return {"t": wp.array(random_values(16, np.bool_), dtype=wp.bool, device=CPU),
                "f": wp.array(random_values(16, np.bool_, seed=1), dtype=wp.bool, device=CPU)}

    def fn(s):
        wp.launch(K.bool_toggle, dim=16, inputs=[True, s["t"]], device=CPU)
        wp.launch(K.bool_toggle, dim=16, inputs=[False, s["f"]], device=CPU)

    eager_vs_replay(fn, make)


def test_argument_values_are_frozen_at_capture():
    """A scalar is packed by value at capture: changing the Python variable later changes nothing."""
    state = {"s": 2.0}

    def make():
        return {"out": wp.zeros(4, dtype=wp.float32, device=CPU)}

    def fn(st):
        wp.launch(K.SCALAR_ACCUM[wp.float32], dim=4, inputs=[state["s"], st["out"]], device=CPU)

    graph, replayed = eager_vs_replay(fn, make, repeats=1)
    state["s"] = 100.0
    wp.capture_launch(graph)
    np.testing.assert_array_equal(replayed["out"].numpy(), np.full(4, 4.0, np.float32))


# --- vectors, matrices, quaternions, transforms ----------------------------------------------------
def test_composite_values():
    v = wp.vec3(1.0, -2.0, 3.5)
    vi = wp.vec3i(4, -5, 6)
    m = wp.mat33(1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0)
    q = wp.quat(0.0, 0.0, 0.0, 1.0)
    t = wp.transform(wp.vec3(0.5, 1.5, -2.0), wp.quat(0.0, 1.0, 0.0, 0.0))
    vd = wp.vec2d(0.25, -8.0)

    def make():
        return {"out": wp.zeros(K.VALUES_OUT, dtype=wp.float32, device=CPU)}

    def fn(s):
        wp.launch(K.values_kernel, dim=1, inputs=[v, vi, m, q, t, vd, s["out"]], device=CPU)

    graph, replayed = eager_vs_replay(fn, make)
    assert replayed["out"].numpy()[:3].tolist() == [3.0, -6.0, 10.5]  # three replays of v


def test_composite_values_as_python_sequences():
    """Warp also accepts plain tuples/lists for vector and matrix arguments."""

    def make():
        return {"out": wp.zeros(K.VALUES_OUT, dtype=wp.float32, device=CPU)}

    def fn(s):
        wp.launch(
            K.values_kernel, dim=1, device=CPU,
            inputs=[(1.0, 2.0, 3.0), (1, 2, 3), [[1.0, 0.0, 0.0], [0.0, 2.0, 0.0], [0.0, 0.0, 3.0]],
                    (0.0, 0.0, 0.0, 1.0), wp.transform_identity(), (1.0, 2.0), s["out"]],
        )  # fmt: skip

    eager_vs_replay(fn, make)


# --- arrays: dtypes, dimensions, views -------------------------------------------------------------
def _value_array(dtype, n, seed):
    np_dtype = _np_dtype(dtype)
    shape = (n, *getattr(dtype, "_shape_", ()))
    return wp.array(random_values(shape, np_dtype, seed), dtype=dtype, device=CPU)


@pytest.mark.parametrize("dtype", K.SCALAR_DTYPES + K.VALUE_DTYPES[:-1], ids=lambda t: t.__name__)
def test_array_dtypes(dtype):
    def make():
        return {"src": _value_array(dtype, 32, 1), "dst": _value_array(dtype, 32, 2)}

    def fn(s):
        wp.launch(K.ARRAY_ACCUM[dtype], dim=32, inputs=[s["src"], s["dst"]], device=CPU)

    eager_vs_replay(fn, make)


def test_bool_arrays():
    def make():
        return {"src": wp.array(random_values(32, np.bool_, 1), device=CPU),
                "dst": wp.array(random_values(32, np.bool_, 2), device=CPU)}

    def fn(s):
        wp.launch(K.bool_xor, dim=32, inputs=[s["src"], s["dst"]], device=CPU)

    eager_vs_replay(fn, make)


def test_transform_arrays():
    def make():
        rot = [wp.quat_from_axis_angle(wp.vec3(0.0, 0.0, 1.0), 0.5 * k) for k in range(8)]
        src = wp.array([wp.transform(wp.vec3(float(k), 1.0, -1.0), rot[k]) for k in range(8)], dtype=wp.transform,
                       device=CPU)
        dst = wp.array([wp.transform_identity()] * 8, dtype=wp.transform, device=CPU)
        return {"src": src, "dst": dst}

    def fn(s):
        wp.launch(K.transform_compose, dim=8, inputs=[s["src"], s["dst"]], device=CPU)

    eager_vs_replay(fn, make)


@pytest.mark.parametrize("ndim", [1, 2, 3, 4])
@pytest.mark.parametrize("dtype", K.ND_DTYPES, ids=lambda t: t.__name__)
def test_array_dimensions(ndim, dtype):
    shape = (3, 4, 2, 5)[:ndim]

    def make():
        return {"src": wp.array(random_values(shape, _np_dtype(dtype), 1), dtype=dtype, device=CPU),
                "dst": wp.array(random_values(shape, _np_dtype(dtype), 2), dtype=dtype, device=CPU)}

    def fn(s):
        wp.launch(K.ACCUM_ND[ndim][dtype], dim=shape, inputs=[s["src"], s["dst"]], device=CPU)

    eager_vs_replay(fn, make)


# Views of the source and destination buffers: (description, view function, launch dims).
VIEWS = [
    ("slice", lambda a: a[4:20], 16),
    ("step2", lambda a: a[::2], 16),
    ("step3_offset", lambda a: a[1::3], 11),
    ("row_of_2d", lambda a: a.reshape((4, 8))[2], 8),
    ("column_of_2d", lambda a: a.reshape((8, 4))[:, 1], 8),
    ("single_element", lambda a: a[7:8], 1),
]


@pytest.mark.parametrize("name,view,n", VIEWS, ids=[v[0] for v in VIEWS])
def test_1d_views(name, view, n):
    def make():
        return {"src": wp.array(random_values(32, np.float32, 1), device=CPU),
                "dst": wp.array(random_values(32, np.float32, 2), device=CPU)}

    def fn(s):
        wp.launch(K.ARRAY_ACCUM[wp.float32], dim=n, inputs=[view(s["src"]), view(s["dst"])], device=CPU)

    eager_vs_replay(fn, make)


ND_VIEWS = [
    ("transpose", lambda a: a.transpose(), (6, 4)),
    ("strided_2d", lambda a: a[::2, 1::2], (2, 3)),
    ("sub_block", lambda a: a[1:3, 2:5], (2, 3)),
    ("transpose_of_slice", lambda a: a[1:4].transpose(), (6, 3)),
]


@pytest.mark.parametrize("name,view,dim", ND_VIEWS, ids=[v[0] for v in ND_VIEWS])
def test_2d_views(name, view, dim):
    def make():
        return {"src": wp.array(random_values((4, 6), np.float32, 1), device=CPU),
                "dst": wp.array(random_values((4, 6), np.float32, 2), device=CPU)}

    def fn(s):
        wp.launch(K.ACCUM_ND[2][wp.float32], dim=dim, inputs=[view(s["src"]), view(s["dst"])], device=CPU)

    eager_vs_replay(fn, make)


def test_4d_transposed_views():
    shape = (2, 3, 4, 5)

    def make():
        return {"src": wp.array(random_values(shape, np.int16, 1), dtype=wp.int16, device=CPU),
                "dst": wp.array(random_values(shape, np.int16, 2), dtype=wp.int16, device=CPU)}

    def fn(s):
        axes = (3, 1, 0, 2)
        wp.launch(K.ACCUM_ND[4][wp.int16], dim=(5, 3, 2, 4), device=CPU,
                  inputs=[s["src"].transpose(axes), s["dst"].transpose(axes)])

    eager_vs_replay(fn, make)


def test_same_buffer_through_two_views():
    """Two overlapping views of one allocation keep their aliasing in the replay."""

    def make():
        return {"buf": wp.array(random_values(32, np.float32, 3), device=CPU)}

    def fn(s):
        wp.launch(K.ARRAY_ACCUM[wp.float32], dim=16, inputs=[s["buf"][0:16], s["buf"][8:24]], device=CPU)

    eager_vs_replay(fn, make)


def test_array_with_grad_and_null_array():
    """An array with a gradient buffer, and a None array argument (NULL descriptor)."""

    def make():
        x = wp.array(random_values(8, np.float32, 1), device=CPU, requires_grad=True)
        return {"x": x, "grad": x.grad, "y": wp.zeros(8, dtype=wp.float32, device=CPU)}

    def fn(s):
        wp.launch(K.ARRAY_ACCUM[wp.float32], dim=8, inputs=[s["x"], s["y"]], device=CPU)
        wp.launch(K.ARRAY_ACCUM[wp.float32], dim=0, inputs=[None, s["y"]], device=CPU)

    eager_vs_replay(fn, make)


# --- structs ---------------------------------------------------------------------------------------
def _outer(arr, idx, scale=2.0):
    inner = K.Inner()
    inner.arr = arr
    inner.scale = scale
    outer = K.Outer()
    outer.inner = inner
    outer.idx = idx
    outer.offset = wp.vec3(1.0, 2.0, 3.0)
    outer.count = 5
    return outer


def test_nested_struct_holding_arrays():
    def make():
        arr = wp.array(random_values(10, np.float32, 1), device=CPU)
        idx = wp.array(np.array([9, 0, 3, 3, 7, 1, 2, 8], np.int32), device=CPU)
        return {"arr": arr, "idx": idx, "out": wp.zeros(8, dtype=wp.float32, device=CPU), "s": _outer(arr, idx)}

    def fn(s):
        wp.launch(K.struct_kernel, dim=8, inputs=[s["s"], s["out"]], device=CPU)

    eager_vs_replay(fn, make)


def test_struct_whose_arrays_are_views():
    def make():
        base = wp.array(random_values(20, np.float32, 1), device=CPU)
        idx = wp.array(np.array([0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 0], np.int32), device=CPU)
        return {"base": base, "idx": idx, "out": wp.zeros(8, dtype=wp.float32, device=CPU),
                "s": _outer(base[::2], idx[2:], scale=-1.0)}

    def fn(s):
        wp.launch(K.struct_kernel, dim=8, inputs=[s["s"], s["out"]], device=CPU)

    eager_vs_replay(fn, make)


def test_struct_values_and_arrays_of_structs():
    def pods(seed):
        data = random_values((6, 4), np.int32, seed)
        items = []
        for row in data:
            p = K.Pod()
            p.a, p.b, p.v = float(row[0]), int(row[1]), wp.vec2(float(row[2]), float(row[3]))
            items.append(p)
        return wp.array(items, dtype=K.Pod, device=CPU)

    p = K.Pod()
    p.a, p.b, p.v = 0.5, -3, wp.vec2(1.0, 2.0)

    def make():
        return {"src": pods(1), "dst": pods(2)}

    def fn(s):
        wp.launch(K.pod_accum, dim=6, inputs=[s["src"], s["dst"], p], device=CPU)

    eager_vs_replay(fn, make)


# --- indexed arrays --------------------------------------------------------------------------------
def test_indexed_arrays():
    def make():
        src = wp.array(random_values(16, np.float32, 1), device=CPU)
        dst = wp.array(random_values(16, np.float32, 2), device=CPU)
        si = wp.array(np.array([15, 0, 3, 3, 9, 2], np.int32), device=CPU)
        di = wp.array(np.array([1, 4, 5, 8, 12, 14], np.int32), device=CPU)
        return {"src": src, "dst": dst, "si": si, "di": di}

    def fn(s):
        src = wp.indexedarray(s["src"], [s["si"]])
        dst = wp.indexedarray(s["dst"], [s["di"]])
        wp.launch(K.indexed_accum, dim=6, inputs=[src, dst], device=CPU)

    eager_vs_replay(fn, make)


def test_indexed_2d_with_partial_indices_over_a_view():
    def make():
        base = wp.array(random_values((6, 8), np.float32, 1), device=CPU)
        rows = wp.array(np.array([5, 0, 2], np.int32), device=CPU)
        return {"base": base, "rows": rows, "out": wp.zeros((3, 4), dtype=wp.float32, device=CPU)}

    def fn(s):
        src = wp.indexedarray(s["base"][:, ::2], [s["rows"], None])
        wp.launch(K.indexed_accum_2d, dim=(3, 4), inputs=[src, s["out"]], device=CPU)

    eager_vs_replay(fn, make)


# --- launch dimensions -----------------------------------------------------------------------------
@pytest.mark.parametrize("ndim", [1, 2, 3, 4])
def test_launch_dims(ndim):
    shape = (3, 2, 4, 2)[:ndim]

    def make():
        return {"out": wp.zeros(shape, dtype=wp.int32, device=CPU)}

    def fn(s):
        wp.launch(K.STAMP[ndim], dim=shape, inputs=[s["out"]], device=CPU)

    eager_vs_replay(fn, make)


def test_launch_dim_smaller_than_array():
    def make():
        return {"out": wp.zeros((4, 4), dtype=wp.int32, device=CPU)}

    def fn(s):
        wp.launch(K.stamp_2d, dim=(2, 3), inputs=[s["out"]], device=CPU)
        wp.launch(K.stamp_1d, dim=5, inputs=[s["out"].flatten()], device=CPU)

    eager_vs_replay(fn, make)


@pytest.mark.parametrize("dim", [0, (0,), (3, 0), (0, 2, 2), (2, 2, 0, 1)], ids=str)
def test_zero_size_launch_records_nothing(dim):
    ndim = 1 if isinstance(dim, int) else len(dim)
    shape = (3, 2, 2, 1)[:ndim]

    def make():
        return {"out": wp.zeros(shape, dtype=wp.int32, device=CPU)}

    def fn(s):
        wp.launch(K.STAMP[ndim], dim=dim, inputs=[s["out"]], device=CPU)

    graph, _ = eager_vs_replay(fn, make)
    assert graph.op_count == 0


def test_zero_size_launch_between_real_ones():
    def make():
        return {"out": wp.zeros(6, dtype=wp.int32, device=CPU), "empty": wp.zeros(0, dtype=wp.int32, device=CPU)}

    def fn(s):
        wp.launch(K.stamp_1d, dim=6, inputs=[s["out"]], device=CPU)
        wp.launch(K.stamp_1d, dim=0, inputs=[s["empty"]], device=CPU)
        wp.launch(K.stamp_1d, dim=3, inputs=[s["out"][3:]], device=CPU)

    graph, _ = eager_vs_replay(fn, make)
    assert graph.op_count == 2


# --- adjoint launches ------------------------------------------------------------------------------
def test_adjoint_launch():
    def make():
        x = wp.array(random_values(8, np.float32, 1), device=CPU)
        return {"x": x, "y": wp.zeros(8, dtype=wp.float32, device=CPU),
                "adj_x": wp.array(random_values(8, np.float32, 2), device=CPU),
                "adj_y": wp.array(random_values(8, np.float32, 3), device=CPU)}

    def fn(s):
        wp.launch(K.square_scale, dim=8, inputs=[s["x"], 3.0], outputs=[s["y"]], device=CPU)
        wp.launch(
            K.square_scale, dim=8, inputs=[s["x"], 3.0], outputs=[s["y"]],
            adj_inputs=[s["adj_x"], 0.0], adj_outputs=[s["adj_y"]], adjoint=True, device=CPU,
        )  # fmt: skip

    eager_vs_replay(fn, make)


def test_tape_backward():
    """A wp.Tape's backward pass (adjoint launches issued by Warp itself) is captured too."""

    def make():
        x = wp.array(random_values(8, np.float32, 1), device=CPU, requires_grad=True)
        y = wp.zeros(8, dtype=wp.float32, device=CPU, requires_grad=True)
        y.grad.fill_(1.0)
        return {"x": x, "y": y, "x_grad": x.grad, "y_grad": y.grad}

    def fn(s):
        tape = wp.Tape()
        with tape:
            wp.launch(K.square_scale, dim=8, inputs=[s["x"], 0.5], outputs=[s["y"]], device=CPU)
        tape.backward()

    eager_vs_replay(fn, make)


# --- Launch objects --------------------------------------------------------------------------------
def test_recorded_launch_objects():
    def make():
        src = wp.array(random_values(8, np.float32, 1), device=CPU)
        dst = wp.array(random_values(8, np.float32, 2), device=CPU)
        cmd = wp.launch(K.ARRAY_ACCUM[wp.float32], dim=8, inputs=[src, dst], device=CPU, record_cmd=True)
        return {"src": src, "dst": dst, "cmd": cmd}

    def fn(s):
        s["cmd"].launch()
        s["cmd"].launch()

    graph, _ = eager_vs_replay(fn, make)
    assert graph.op_count == 2


def test_zero_size_launch_object_records_nothing():
    def make():
        out = wp.zeros(4, dtype=wp.int32, device=CPU)
        cmd = wp.launch(K.stamp_1d, dim=4, inputs=[out], device=CPU, record_cmd=True)
        cmd.set_dim(0)
        return {"out": out, "cmd": cmd}

    def fn(s):
        s["cmd"].launch()

    graph, _ = eager_vs_replay(fn, make)
    assert graph.op_count == 0


def test_launch_object_made_inside_capture():
    def make():
        return {"src": wp.array(random_values(8, np.float32, 1), device=CPU),
                "dst": wp.array(random_values(8, np.float32, 2), device=CPU)}

    def fn(s):
        cmd = wp.launch(K.ARRAY_ACCUM[wp.float32], dim=8, inputs=[s["src"], s["dst"]], device=CPU, record_cmd=True)
        cmd.launch()
        cmd.set_param_at_index(0, s["dst"])
        cmd.launch()

    eager_vs_replay(fn, make)


def test_launch_object_outlives_user_references():
    src = wp.array(np.arange(8, dtype=np.float32), device=CPU)
    dst = wp.zeros(8, dtype=wp.float32, device=CPU)
    cmd = wp.launch(K.ARRAY_ACCUM[wp.float32], dim=8, inputs=[src, dst], device=CPU, record_cmd=True)
    with wp.ScopedCapture(device=CPU) as capture:
        cmd.launch()
    del cmd, src
    gc.collect()
    churn()
    for _ in range(2):
        wp.capture_launch(capture.graph)
    np.testing.assert_array_equal(dst.numpy(), 2 * np.arange(8, dtype=np.float32))


# --- external arrays passed straight to wp.launch --------------------------------------------------
class InterfaceOnly:
    """An object exposing only ``__array_interface__`` (it owns a NumPy buffer)."""

    def __init__(self, data: np.ndarray):
        self._data = data
        self.__array_interface__ = data.__array_interface__


def _external_case(wrap):
    def make():
        src = random_values(16, np.float32, 1)
        dst = random_values(16, np.float32, 2)
        return {"src_np": src, "dst_np": dst, "src": wrap(src), "dst": wrap(dst)}

    def fn(s):
        wp.launch(K.ARRAY_ACCUM[wp.float32], dim=16, inputs=[s["src"], s["dst"]], device=CPU)

    graph, replayed = eager_vs_replay(fn, make)
    return replayed


def test_numpy_arrays_to_launch():
    _external_case(lambda a: a)


def test_numpy_strided_view_to_launch():
    def make():
        return {"src": random_values(32, np.float32, 1), "dst": random_values(32, np.float32, 2)}

    def fn(s):
        wp.launch(K.ARRAY_ACCUM[wp.float32], dim=16, inputs=[s["src"][::2], s["dst"][1::2]], device=CPU)

    eager_vs_replay(fn, make)


def test_array_interface_object_to_launch():
    _external_case(InterfaceOnly)


def test_torch_cpu_tensors_to_launch():
    torch = pytest.importorskip("torch", reason="torch is not installed: torch CPU tensors cannot be tested")
    _external_case(lambda a: torch.from_numpy(a))


def _dlpack_error(value):
    """The exception type eager Warp raises for ``value`` as an array argument, or None."""
    out = wp.zeros(4, dtype=wp.float32, device=CPU)
    try:
        wp.launch(K.ARRAY_ACCUM[wp.float32], dim=4, inputs=[value, out], device=CPU)
    except Exception as error:  # noqa: BLE001 - we want whatever eager Warp raises
        return type(error)
    return None


class DLPackOnly:
    """An object exposing only the DLPack protocol."""

    def __init__(self, data: np.ndarray):
        self._data = data

    def __dlpack__(self, stream=None, **kwargs):
        return self._data.__dlpack__()

    def __dlpack_device__(self):
        return self._data.__dlpack_device__()


@pytest.mark.parametrize("kind", ["capsule", "dlpack_object"])
def test_dlpack_values_behave_as_eager(kind):
    data = np.arange(4, dtype=np.float32)
    make_value = (lambda: data.__dlpack__()) if kind == "capsule" else (lambda: DLPackOnly(data))
    eager_error = _dlpack_error(make_value())
    if eager_error is None:
        _external_case(lambda a: DLPackOnly(a) if kind == "dlpack_object" else a.__dlpack__())
        return
    out = wp.zeros(4, dtype=wp.float32, device=CPU)
    with pytest.raises(eager_error):
        with wp.ScopedCapture(device=CPU):
            wp.launch(K.ARRAY_ACCUM[wp.float32], dim=4, inputs=[make_value(), out], device=CPU)
    # the failed capture left nothing running: a new capture starts and replays
    with wp.ScopedCapture(device=CPU) as capture:
        wp.launch(K.ARRAY_ACCUM[wp.float32], dim=4, inputs=[wp.from_dlpack(make_value()), out], device=CPU)
    wp.capture_launch(capture.graph)
    np.testing.assert_array_equal(out.numpy(), data)


def test_dlpack_imported_array_to_launch():
    """``wp.from_dlpack`` is the supported way in; the result is an ordinary Warp array."""
    _external_case(lambda a: wp.from_dlpack(a))


def test_numpy_temporary_is_kept_alive_by_the_graph():
    out = wp.zeros(16, dtype=wp.float32, device=CPU)
    with wp.ScopedCapture(device=CPU) as capture:
        wp.launch(K.ARRAY_ACCUM[wp.float32], dim=16, inputs=[np.arange(16, dtype=np.float32), out], device=CPU)
    graph = capture.graph
    del capture
    gc.collect()
    churn()
    for run in range(1, 4):
        wp.capture_launch(graph)
        np.testing.assert_array_equal(out.numpy(), run * np.arange(16, dtype=np.float32))


@pytest.mark.parametrize("kind", ["interface", "torch"])
def test_external_temporaries_are_kept_alive(kind):
    if kind == "torch":
        torch = pytest.importorskip("torch", reason="torch is not installed: torch CPU tensors cannot be tested")
        make_src = lambda: torch.arange(16, dtype=torch.float32)  # noqa: E731
    else:
        make_src = lambda: InterfaceOnly(np.arange(16, dtype=np.float32))  # noqa: E731
    out = wp.zeros(16, dtype=wp.float32, device=CPU)
    with wp.ScopedCapture(device=CPU) as capture:
        wp.launch(K.ARRAY_ACCUM[wp.float32], dim=16, inputs=[make_src(), out], device=CPU)
    graph = capture.graph
    del capture
    gc.collect()
    churn()
    wp.capture_launch(graph)
    wp.capture_launch(graph)
    np.testing.assert_array_equal(out.numpy(), 2 * np.arange(16, dtype=np.float32))


def test_external_output_written_by_replay():
    dst = np.zeros(8, np.float32)
    src = wp.array(np.arange(8, dtype=np.float32), device=CPU)
    with wp.ScopedCapture(device=CPU) as capture:
        wp.launch(K.ARRAY_ACCUM[wp.float32], dim=8, inputs=[src, dst], device=CPU)
    assert not dst.any()
    wp.capture_launch(capture.graph)
    assert np.array_equal(as_bytes(dst), as_bytes(np.arange(8, dtype=np.float32)))
