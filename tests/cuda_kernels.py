"""Kernels for the CUDA tests: every argument kind Warp passes to a CUDA kernel, in one Warp module.

The offline tests compile this module to PTX (no GPU needed) and compare the parameter list of each
``.entry`` with the param blob apic packs; the GPU tests launch them. Backward code is generated, so
that the adjoint entry points are checked too.
"""

import warp as wp

wp.set_module_options({"enable_backward": True})

SCALARS = (
    wp.bool, wp.int8, wp.uint8, wp.int16, wp.uint16, wp.int32, wp.uint32, wp.int64, wp.uint64,
    wp.float16, wp.float32, wp.float64,
)  # fmt: skip


@wp.struct
class Inner:
    h: wp.float16
    v: wp.vec3d
    ids: wp.array(dtype=wp.int32)


@wp.struct
class Outer:
    flag: wp.int8
    inner: Inner
    m: wp.mat22h
    xs: wp.array2d(dtype=wp.vec3)
    scale: wp.float32


@wp.kernel
def scalars(
    b: wp.bool, i8: wp.int8, u8: wp.uint8, i16: wp.int16, u16: wp.uint16, i32: wp.int32, u32: wp.uint32,
    i64: wp.int64, u64: wp.uint64, f16: wp.float16, f32: wp.float32, f64: wp.float64, out: wp.array(dtype=wp.float64),
):
    i = wp.tid()
    s = float(i32) + float(i8) + float(u8) + float(i16) + float(u16) + float(u32) + float(f32) + float(f16)
    if b:
        s = s + 1.0
    out[i] = wp.float64(s) + f64 + wp.float64(i64) + wp.float64(u64)


@wp.kernel
def composites(
    a: wp.int8, v2h: wp.vec2h, c: wp.int8, v3: wp.vec3, v4d: wp.vec4d, m22: wp.mat22, m33d: wp.mat33d, m44h: wp.mat44h,
    q: wp.quat, qd: wp.quatd, t: wp.transform, td: wp.transformd, sv: wp.spatial_vector, v3i: wp.vec3i,
    out: wp.array(dtype=wp.float32),
):
    i = wp.tid()
    out[i] = (float(a) + float(v2h[1]) + float(c) + v3[2] + float(v4d[3]) + m22[1, 1] + float(m33d[2, 2]) + float(m44h[3, 3])
              + q[3] + float(qd[3]) + t.p[0] + float(td.p[1]) + sv[5] + float(v3i[2]))


@wp.kernel
def arrays(
    a1: wp.array(dtype=wp.float32), a2: wp.array2d(dtype=wp.vec3), a3: wp.array3d(dtype=wp.int8),
    a4: wp.array4d(dtype=wp.float64), n: wp.int16, m: wp.array(dtype=wp.mat33),
):
    i = wp.tid()
    a1[i] = a1[i] + float(n) + float(a3[0, 0, 0]) + float(a4[0, 0, 0, 0]) + a2[0, 0][1] + m[0][1, 1]


@wp.kernel
def indexed(
    x1: wp.indexedarray(dtype=wp.float32), x2: wp.indexedarray2d(dtype=wp.float32),
    x3: wp.indexedarray3d(dtype=wp.vec2), x4: wp.indexedarray4d(dtype=wp.int32), out: wp.array(dtype=wp.float32),
):
    i = wp.tid()
    out[i] = x1[i] + x2[0, 0] + x3[0, 0, 0][1] + float(x4[0, 0, 0, 0])


@wp.kernel
def structs(o: Outer, k: wp.int8, inner: Inner, out: wp.array(dtype=wp.float32)):
    i = wp.tid()
    out[i] = o.scale * float(o.flag) + float(o.inner.h) + float(o.inner.v[0]) + o.xs[0, 0][1] + float(k) + float(inner.h)


@wp.kernel
def dims2(x: wp.array2d(dtype=wp.float32), s: wp.float32):
    i, j = wp.tid()
    x[i, j] = x[i, j] * s


@wp.kernel
def dims3(x: wp.array3d(dtype=wp.float32), s: wp.float32):
    i, j, k = wp.tid()
    x[i, j, k] = x[i, j, k] * s


@wp.kernel
def dims4(x: wp.array4d(dtype=wp.float32), s: wp.float64):
    i, j, k, l = wp.tid()
    x[i, j, k, l] = x[i, j, k, l] * float(s)


@wp.kernel
def saxpy(a: wp.float32, x: wp.array(dtype=wp.float32), y: wp.array(dtype=wp.float32)):
    i = wp.tid()
    y[i] = a * x[i] + y[i]


@wp.kernel
def square_sum(x: wp.array(dtype=wp.float32), out: wp.array(dtype=wp.float32)):
    i = wp.tid()
    wp.atomic_add(out, 0, x[i] * x[i])


KERNELS = (scalars, composites, arrays, indexed, structs, dims2, dims3, dims4, saxpy, square_sum)

# warp 1.15+: "lean" kernels without a grid-stride loop, launched over a 3-D grid
if "grid_stride" in __import__("inspect").signature(wp.kernel).parameters:

    @wp.kernel(grid_stride=False)
    def lean(x: wp.array(dtype=wp.float32), s: wp.float32):
        i = wp.tid()
        x[i] = x[i] * s

    KERNELS = (*KERNELS, lean)
else:
    lean = None


# --- for the GPU tests only (not in KERNELS: their layouts hold nothing the kernels above do not) ----------------
@wp.kernel
def handles(mesh: wp.uint64, bvh: wp.uint64, grid: wp.uint64, points: wp.array(dtype=wp.vec3),
            dist: wp.array(dtype=wp.float32), counts: wp.array(dtype=wp.int32)):
    """Queries a Mesh, a Bvh and a HashGrid by id: the distance to the closest point, the boxes and points near."""
    i = wp.tid()
    p = points[i]
    d = float(-1.0)
    q = wp.mesh_query_point_no_sign(mesh, p, 1.0e6)
    if q.result:
        d = wp.length(wp.mesh_eval_position(mesh, q.face, q.u, q.v) - p)
    dist[i] = d
    n = int(0)
    box = wp.bvh_query_aabb(bvh, p - wp.vec3(0.5), p + wp.vec3(0.5))
    index = int(0)
    while wp.bvh_query_next(box, index):
        n += 1
    near = wp.hash_grid_query(grid, p, 0.5)
    for _j in near:
        n += 100
    counts[i] = n


@wp.kernel
def countdown(counter: wp.array(dtype=wp.int32), condition: wp.array(dtype=wp.int32)):
    """One loop iteration's bookkeeping: the counter goes down, the condition says whether it is still above 0."""
    counter[0] = counter[0] - 1
    condition[0] = wp.where(counter[0] > 0, 1, 0)


@wp.kernel
def tick(x: wp.array(dtype=wp.int32)):
    """A tiny launch (the benchmark's graph of 1,000 of them uses one like it)."""
    i = wp.tid()
    x[i] = x[i] + 1


@wp.kernel
def flip(flag: wp.array(dtype=wp.int32)):
    """A condition that alternates from one step to the next (both sides of an if run over two steps)."""
    flag[0] = 1 - flag[0]
