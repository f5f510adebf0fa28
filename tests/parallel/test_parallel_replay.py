"""The splittability analysis behind the parallel CPU replay: atomics and cross-task memory stay serial.

Verdicts come from each kernel's source, so these tests need no compilation. A kernel is split only
when every write lands at the task id; each refused shape below is one way a split launch could differ
from Warp's serial task loop.
"""

import numpy as np
import pytest
import warp as wp

from apic.replay.parallel import threaded_launch
from apic.record.parallel.splittable import kernel_verdict, launch_arrays_disjoint
import kernels as K
import persist_kernels as P

pytestmark = [pytest.mark.warp_version, pytest.mark.interpreter]


@wp.func
def _twice(x: float):
    return 2.0 * x


@wp.kernel
def _atomic_add(x: wp.array(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    wp.atomic_add(out, 0, x[i])


@wp.kernel
def _atomic_max(x: wp.array(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    wp.atomic_max(out, i, x[i])


@wp.kernel
def _inplace_add(x: wp.array(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] += x[i]


@wp.kernel
def _inplace_shared(x: wp.array(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    out[0] += x[i]


@wp.kernel
def _write_other(x: wp.array(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    out[i + 1] = x[i]


@wp.kernel
def _read_neighbour_of_written(out: wp.array(dtype=float)):
    i = wp.tid()
    if i > 0:
        out[i] = out[i - 1] + 1.0


@wp.kernel
def _user_func(x: wp.array(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = _twice(x[i])


@wp.func
def _store_into(a: wp.array(dtype=float), i: int, x: float):
    a[i] = x
    return x


@wp.func
def _atomic_in_func(a: wp.array(dtype=float), x: float):
    wp.atomic_add(a, 0, x)
    return x


@wp.func
def _calls_pure(x: float):
    return _twice(x) + wp.sin(x)


@wp.kernel
def _user_func_writes(x: wp.array(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = _store_into(x, 0, x[i])


@wp.kernel
def _user_func_atomic(x: wp.array(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = _atomic_in_func(x, 1.0)


@wp.kernel
def _user_func_nested(x: wp.array(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = _calls_pure(x[i])


@wp.kernel
def _tid_reassigned(x: wp.array(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    i = i // 2
    out[i] = x[i]


@wp.kernel
def _tid_transposed(x: wp.array2d(dtype=float), out: wp.array2d(dtype=float)):
    i, j = wp.tid()
    out[j, i] = x[i, j]


@wp.kernel
def _passes_written_to_call(out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = float(wp.lower_bound(out, 1.0))


@wp.kernel
def _elementwise_math(x: wp.array(dtype=float), y: wp.array(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    acc = float(0.0)
    for k in range(8):
        acc = acc + wp.sin(x[i] * float(k)) * y[(i + k) % 4]
    out[i] = out[i] + acc


@wp.kernel
def _tid_bumped(x: wp.array(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    i += 1
    out[i] = x[i]


@wp.kernel
def _tid_shadowed_by_loop(x: wp.array(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    for i in range(3):
        out[i] = x[i]


@wp.kernel
def _tid_twice(x: wp.array(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    j = wp.tid()
    out[j] = x[i]


@wp.kernel
def _nested_subscript_write(out: wp.array2d(dtype=float)):
    i, j = wp.tid()
    out[i][j] = 1.0


@wp.kernel
def _local_vector_component(out: wp.array(dtype=wp.vec3)):
    i = wp.tid()
    v = out[i]
    v[0] = 1.0
    out[i] = v


@wp.kernel
def _prints(out: wp.array(dtype=float)):
    i = wp.tid()
    print(i)
    out[i] = 1.0


@wp.kernel
def _volume_store(volume: wp.uint64, out: wp.array(dtype=float)):
    i = wp.tid()
    wp.volume_store_f(volume, i, 0, 0, 1.0)
    out[i] = 1.0


REFUSED = {
    _volume_store: "volume_store_f",
    _tid_bumped: "index other than the task id",
    _tid_shadowed_by_loop: "index other than the task id",
    _tid_twice: "index other than the task id",
    _nested_subscript_write: "not a kernel argument",
    _local_vector_component: "not a kernel argument",
    _prints: "print",
    _atomic_add: "atomic_add",
    _atomic_max: "atomic_max",
    _inplace_add: "in-place update",
    _inplace_shared: "in-place update",
    _write_other: "index other than the task id",
    _read_neighbour_of_written: "reads out",
    _user_func_writes: "stores through a subscript",
    _user_func_atomic: "atomic_add",
    _tid_reassigned: "index other than the task id",
    _tid_transposed: "index other than the task id",
    _passes_written_to_call: "reads out",
    P.kinetic: "atomic_add",
    K.tick: "index other than the task id",
    K.indexed_accum: "not a plain wp.array",
    K.pod_accum: "writes through a field",
    K.struct_kernel: "not a kernel argument",
}


@pytest.mark.parametrize("kernel", list(REFUSED), ids=lambda k: k.key)
def test_cross_task_kernels_stay_serial(kernel):
    verdict = kernel_verdict(kernel)
    assert not verdict.splittable
    assert REFUSED[kernel] in verdict.reason


ACCEPTED = [
    _elementwise_math, _user_func, _user_func_nested, K.array_accum, K.scalar_accum, K.accum_2d, K.accum_3d, K.accum_4d,
    K.stamp_1d, K.stamp_4d, K.bool_toggle, K.transform_compose, K.mad_u32,
    P.apply_scaled, P.diffuse, P.gravity, P.integrate, P.square,
]  # fmt: skip


@pytest.mark.parametrize("kernel", ACCEPTED, ids=lambda k: k.key)
def test_task_local_kernels_split(kernel):
    verdict = kernel_verdict(kernel)
    assert verdict.splittable, verdict.reason


def test_every_suite_kernel_gets_a_verdict():
    """No kernel of the suite makes the analysis raise; each one gets a reason."""
    for mod in (K, P):
        for value in vars(mod).values():
            if isinstance(value, wp.Kernel):
                assert kernel_verdict(value).reason


def test_overlapping_launch_arrays_refused():
    assert launch_arrays_disjoint([(1000, 64)], [(2000, 64)])
    assert not launch_arrays_disjoint([(1000, 64)], [(1060, 64)])  # a read array overlaps a written one
    assert not launch_arrays_disjoint([(1000, 64), (1032, 64)], [])  # two written arrays overlap
    assert launch_arrays_disjoint([(1000, 64), (1064, 64)], [(0, 0)])


# --- split launches, bit for bit against eager ------------------------------------------------------
_RNG = np.random.default_rng(15)


def _pair(values, dtype=None):
    """The same initial contents twice: one for the eager launch, one for the split launch."""
    kw = {} if dtype is None else {"dtype": dtype}
    return wp.array(values, device="cpu", **kw), wp.array(values.copy(), device="cpu", **kw)


def _bits(a):
    return a.numpy().view(np.uint8)


def _eager_vs_split(kernel, dim, make_inputs, threads=2, min_tasks=1):
    """Launch eagerly and split on identical inputs; return (split?, eager outputs, split outputs)."""
    eager_in, split_in = make_inputs()
    wp.launch(kernel, dim=dim, inputs=eager_in, device="cpu")
    did_split = threaded_launch.launch(kernel, dim, split_in, threads=threads, min_tasks_per_thread=min_tasks)
    eager_out = [_bits(a) for a in eager_in if isinstance(a, wp.array)]
    split_out = [_bits(a) for a in split_in if isinstance(a, wp.array)]
    return did_split, eager_out, split_out


def _assert_same(eager_out, split_out):
    assert len(eager_out) == len(split_out)
    for e, s in zip(eager_out, split_out):
        np.testing.assert_array_equal(e, s)


def _elementwise_inputs(n):
    def make():
        x, y, out = (_RNG.standard_normal(k).astype(np.float32) for k in (n, 4, n))
        xs, ys, outs = _pair(x), _pair(y), _pair(out)
        return [xs[0], ys[0], outs[0]], [xs[1], ys[1], outs[1]]

    return make


@pytest.mark.parametrize("threads", [2, 3, 7])
@pytest.mark.parametrize("n", [1, 7, 1000, 40_001])
def test_split_1d_is_bit_identical(n, threads):
    did_split, eager_out, split_out = _eager_vs_split(_elementwise_math, n, _elementwise_inputs(n), threads)
    assert did_split == (n >= 2)  # one task is never split
    _assert_same(eager_out, split_out)


@pytest.mark.parametrize("ndim", [2, 3, 4])
@pytest.mark.parametrize("dtype", K.ND_DTYPES)
def test_split_nd_generic_overloads_bit_identical(ndim, dtype):
    shape = (5, 4, 3, 2)[:ndim]
    np_dtype = {wp.float32: np.float32, wp.int16: np.int16}[dtype]

    def make():
        src, dst = (_pair((_RNG.standard_normal(shape) * 100).astype(np_dtype)) for _ in range(2))
        return [src[0], dst[0]], [src[1], dst[1]]

    did_split, eager_out, split_out = _eager_vs_split(K.ACCUM_ND[ndim][dtype], shape, make, threads=3)
    assert did_split
    _assert_same(eager_out, split_out)


@pytest.mark.parametrize("ndim", [1, 2, 3, 4])
def test_split_launch_dims_bit_identical(ndim):
    shape = (6, 5, 4, 3)[:ndim]

    def make():
        out = _pair(_RNG.integers(-1000, 1000, size=shape).astype(np.int32))
        return [out[0]], [out[1]]

    did_split, eager_out, split_out = _eager_vs_split(K.STAMP[ndim], shape, make)
    assert did_split
    _assert_same(eager_out, split_out)


def test_split_composite_values_bit_identical():
    n = 257

    def make():
        src, dst = (_pair(_RNG.standard_normal((n, 7)).astype(np.float32)) for _ in range(2))
        as_t = lambda a: wp.array(a.numpy(), dtype=wp.transform, device="cpu")  # noqa: E731
        pairs = [(as_t(src[0]), as_t(src[1])), (as_t(dst[0]), as_t(dst[1]))]
        return [p[0] for p in pairs], [p[1] for p in pairs]

    did_split, eager_out, split_out = _eager_vs_split(K.transform_compose, n, make)
    assert did_split
    _assert_same(eager_out, split_out)


def test_split_two_written_arrays_and_2d_stencil():
    n = 513

    def make_integrate():
        x, v, f = (_pair(_RNG.standard_normal((n, 3)).astype(np.float32), wp.vec3) for _ in range(3))
        return [x[0], v[0], f[0], 0.01], [x[1], v[1], f[1], 0.01]

    did_split, eager_out, split_out = _eager_vs_split(P.integrate, n, make_integrate)
    assert did_split
    _assert_same(eager_out, split_out)

    def make_diffuse():
        src, dst = (_pair(_RNG.standard_normal((33, 17)).astype(np.float32)) for _ in range(2))
        return [src[0], dst[0], 0.25], [src[1], dst[1], 0.25]

    did_split, eager_out, split_out = _eager_vs_split(P.diffuse, (33, 17), make_diffuse)
    assert did_split
    _assert_same(eager_out, split_out)


def test_atomic_kernel_runs_serial_and_matches_eager():
    n = 10_000

    def make():
        x, out = _pair(_RNG.standard_normal((n, 3)).astype(np.float32), wp.vec3), _pair(np.zeros(1, np.float32))
        return [x[0], out[0]], [x[1], out[1]]

    did_split, eager_out, split_out = _eager_vs_split(P.kinetic, n, make)
    assert not did_split
    _assert_same(eager_out, split_out)


def test_aliased_written_array_runs_serial():
    """array_accum(src=a, dst=a): splittable kernel, but the launch aliases what it writes."""
    n = 1000
    kernel = K.ARRAY_ACCUM[wp.float32]
    a = wp.array(_RNG.standard_normal(n).astype(np.float32), device="cpu")
    b = wp.array(a.numpy(), device="cpu")
    wp.launch(kernel, dim=n, inputs=[a, a], device="cpu")
    assert not threaded_launch.launch(kernel, n, [b, b], threads=2, min_tasks_per_thread=1)
    np.testing.assert_array_equal(_bits(a), _bits(b))


def test_small_launch_not_fanned_out():
    did_split, eager_out, split_out = _eager_vs_split(_elementwise_math, 100, _elementwise_inputs(100), min_tasks=4096)
    assert not did_split
    _assert_same(eager_out, split_out)


def test_threads_must_be_positive():
    with pytest.raises(ValueError, match="threads"):
        threaded_launch.launch(_elementwise_math, 1, [], threads=0)


def test_struct_argument_launch_runs_serial():
    """apply_scaled reads an array through a struct: its memory is outside the overlap check."""
    n = 10_000
    s_eager, s_split = P.Scaled(), P.Scaled()
    data = _RNG.standard_normal(n).astype(np.float32)
    s_eager.data, s_split.data = wp.array(data, device="cpu"), wp.array(data, device="cpu")
    s_eager.scale = s_split.scale = 0.5
    out = _pair(_RNG.standard_normal(n).astype(np.float32))
    wp.launch(P.apply_scaled, dim=n, inputs=[s_eager, out[0]], device="cpu")
    assert not threaded_launch.launch(P.apply_scaled, n, [s_split, out[1]], threads=2, min_tasks_per_thread=1)
    np.testing.assert_array_equal(_bits(out[0]), _bits(out[1]))


def test_strided_written_array_runs_serial():
    n = 1000
    kernel = K.ARRAY_ACCUM[wp.float32]
    src = _pair(_RNG.standard_normal(n).astype(np.float32))
    dst = _pair(_RNG.standard_normal(2 * n).astype(np.float32))
    wp.launch(kernel, dim=n, inputs=[src[0], dst[0][::2]], device="cpu")
    assert not threaded_launch.launch(kernel, n, [src[1], dst[1][::2]], threads=2, min_tasks_per_thread=1)
    np.testing.assert_array_equal(_bits(dst[0]), _bits(dst[1]))
