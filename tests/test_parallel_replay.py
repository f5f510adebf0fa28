"""The splittability analysis behind the parallel CPU replay: atomics and cross-task memory stay serial.

Verdicts come from each kernel's source, so these tests need no compilation. A kernel is split only
when every write lands at the task id; each refused shape below is one way a split launch could differ
from Warp's serial task loop.
"""

import pytest
import warp as wp

from apic.replay.splittable import kernel_verdict, launch_arrays_disjoint
from tests import kernels as K
from tests import persist_kernels as P


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


REFUSED = {
    _atomic_add: "atomic_add",
    _atomic_max: "atomic_max",
    _inplace_add: "in-place update",
    _inplace_shared: "in-place update",
    _write_other: "index other than the task id",
    _read_neighbour_of_written: "reads out",
    _user_func: "not a Warp builtin",
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
    _elementwise_math, K.array_accum, K.scalar_accum, K.accum_2d, K.accum_3d, K.accum_4d,
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
