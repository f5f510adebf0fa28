"""Every kernel the test suite launches, in one Warp module so Warp compiles it once.

Generic kernels get all their overloads declared here, up front: an overload added later would
change the module hash and make Warp compile the whole module again. Backward code is generated
only for the one kernel the adjoint tests launch backwards.
"""

from typing import Any

import warp as wp

wp.set_module_options({"enable_backward": False})

SCALAR_DTYPES = (
    wp.int8, wp.int16, wp.int32, wp.int64,
    wp.uint8, wp.uint16, wp.uint32, wp.uint64,
    wp.float16, wp.float32, wp.float64,
)  # fmt: skip
VALUE_DTYPES = (wp.vec3, wp.vec3i, wp.vec4h, wp.mat22, wp.mat33d, wp.quat, wp.transform)
ND_DTYPES = (wp.float32, wp.int16)


@wp.struct
class Pod:
    """A struct without arrays (for arrays of structs and struct fills)."""

    a: wp.float32
    b: wp.int32
    v: wp.vec2


@wp.struct
class Inner:
    arr: wp.array(dtype=wp.float32)
    scale: wp.float32


@wp.struct
class Outer:
    inner: Inner
    idx: wp.array(dtype=wp.int32)
    offset: wp.vec3
    count: wp.int32


# --- scalars ---------------------------------------------------------------------------------------
@wp.kernel
def scalar_accum(s: Any, out: wp.array(dtype=Any)):
    i = wp.tid()
    out[i] = out[i] + s


@wp.kernel
def bool_toggle(s: wp.bool, out: wp.array(dtype=wp.bool)):
    i = wp.tid()
    if s:
        out[i] = not out[i]


SCALAR_ACCUM = {t: wp.overload(scalar_accum, {"s": t, "out": wp.array(dtype=t)}) for t in SCALAR_DTYPES}


# --- arrays ----------------------------------------------------------------------------------------
@wp.kernel
def array_accum(src: wp.array(dtype=Any), dst: wp.array(dtype=Any)):
    i = wp.tid()
    dst[i] = dst[i] + src[i]


@wp.kernel
def bool_xor(src: wp.array(dtype=wp.bool), dst: wp.array(dtype=wp.bool)):
    i = wp.tid()
    if src[i]:
        dst[i] = not dst[i]


ARRAY_ACCUM = {t: wp.overload(array_accum, {"src": wp.array(dtype=t), "dst": wp.array(dtype=t)})
               for t in SCALAR_DTYPES + VALUE_DTYPES[:-1]}


@wp.kernel
def transform_compose(src: wp.array(dtype=wp.transform), dst: wp.array(dtype=wp.transform)):
    i = wp.tid()
    dst[i] = wp.transform_multiply(src[i], dst[i])


@wp.kernel
def accum_2d(src: wp.array2d(dtype=Any), dst: wp.array2d(dtype=Any)):
    i, j = wp.tid()
    dst[i, j] = dst[i, j] + src[i, j]


@wp.kernel
def accum_3d(src: wp.array3d(dtype=Any), dst: wp.array3d(dtype=Any)):
    i, j, k = wp.tid()
    dst[i, j, k] = dst[i, j, k] + src[i, j, k]


@wp.kernel
def accum_4d(src: wp.array4d(dtype=Any), dst: wp.array4d(dtype=Any)):
    i, j, k, l = wp.tid()
    dst[i, j, k, l] = dst[i, j, k, l] + src[i, j, k, l]


ACCUM_ND = {1: ARRAY_ACCUM}
for _ndim, _kernel in ((2, accum_2d), (3, accum_3d), (4, accum_4d)):
    ACCUM_ND[_ndim] = {
        t: wp.overload(_kernel, {"src": wp.array(dtype=t, ndim=_ndim), "dst": wp.array(dtype=t, ndim=_ndim)})
        for t in ND_DTYPES
    }


# --- launch dimensions -----------------------------------------------------------------------------
@wp.kernel
def stamp_1d(out: wp.array(dtype=wp.int32)):
    i = wp.tid()
    out[i] = out[i] * 2 + i + 1


@wp.kernel
def stamp_2d(out: wp.array2d(dtype=wp.int32)):
    i, j = wp.tid()
    out[i, j] = out[i, j] * 2 + i * 10 + j + 1


@wp.kernel
def stamp_3d(out: wp.array3d(dtype=wp.int32)):
    i, j, k = wp.tid()
    out[i, j, k] = out[i, j, k] * 2 + i * 100 + j * 10 + k + 1


@wp.kernel
def stamp_4d(out: wp.array4d(dtype=wp.int32)):
    i, j, k, l = wp.tid()
    out[i, j, k, l] = out[i, j, k, l] * 2 + i * 1000 + j * 100 + k * 10 + l + 1


STAMP = {1: stamp_1d, 2: stamp_2d, 3: stamp_3d, 4: stamp_4d}


# --- composite values ------------------------------------------------------------------------------
@wp.kernel
def values_kernel(
    v: wp.vec3,
    vi: wp.vec3i,
    m: wp.mat33,
    q: wp.quat,
    t: wp.transform,
    vd: wp.vec2d,
    out: wp.array(dtype=wp.float32),
):
    for k in range(3):
        out[k] = out[k] + v[k]
        out[3 + k] = out[3 + k] + wp.float32(vi[k])
        for c in range(3):
            out[6 + 3 * k + c] = out[6 + 3 * k + c] + m[k, c]
    for k in range(4):
        out[15 + k] = out[15 + k] + q[k]
    p = wp.transform_get_translation(t)
    r = wp.transform_get_rotation(t)
    for k in range(3):
        out[19 + k] = out[19 + k] + p[k]
    for k in range(4):
        out[22 + k] = out[22 + k] + r[k]
    for k in range(2):
        out[26 + k] = out[26 + k] + wp.float32(vd[k])


VALUES_OUT = 28


@wp.kernel
def struct_kernel(s: Outer, out: wp.array(dtype=wp.float32)):
    i = wp.tid()
    out[i] = out[i] + s.inner.arr[s.idx[i]] * s.inner.scale + s.offset[i % 3] + wp.float32(s.count)
    s.inner.arr[s.idx[i]] = s.inner.arr[s.idx[i]] + 1.0


@wp.kernel
def pod_accum(src: wp.array(dtype=Pod), dst: wp.array(dtype=Pod), p: Pod):
    i = wp.tid()
    d = dst[i]
    d.a = d.a + src[i].a + p.a
    d.b = d.b + src[i].b + p.b
    d.v = d.v + src[i].v + p.v
    dst[i] = d


# --- indexed arrays --------------------------------------------------------------------------------
@wp.kernel
def indexed_accum(src: wp.indexedarray(dtype=wp.float32), dst: wp.indexedarray(dtype=wp.float32)):
    i = wp.tid()
    dst[i] = dst[i] + src[i]


@wp.kernel
def indexed_accum_2d(src: wp.indexedarray2d(dtype=wp.float32), dst: wp.array2d(dtype=wp.float32)):
    i, j = wp.tid()
    dst[i, j] = dst[i, j] + src[i, j]


# --- adjoints --------------------------------------------------------------------------------------
@wp.kernel(enable_backward=True)
def square_scale(x: wp.array(dtype=wp.float32), s: wp.float32, y: wp.array(dtype=wp.float32)):
    i = wp.tid()
    y[i] = x[i] * x[i] * s


# --- the property test's vocabulary ----------------------------------------------------------------
@wp.kernel
def mad_u32(a: wp.array(dtype=wp.uint32), b: wp.array(dtype=wp.uint32), s: wp.uint32):
    i = wp.tid()
    b[i] = b[i] * wp.uint32(3) + a[i] + s


@wp.kernel
def tick(out: wp.array(dtype=wp.int64)):
    out[0] = out[0] + wp.int64(1)
