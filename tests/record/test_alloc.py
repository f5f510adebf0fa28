"""Arrays allocated inside a capture: graph-owned memory, alive exactly as long as the graph.

Allocation happens once, at capture time; what Warp does to initialise the memory (zeroing,
filling, copying) is recorded and so runs again at every replay, as in a CUDA graph.
"""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest
import warp as wp

import kernels as K
from conftest import CPU, churn, eager_vs_replay, random_values

pytestmark = [pytest.mark.warp_version, pytest.mark.interpreter]

F32 = K.ARRAY_ACCUM[wp.float32]


def _make():
    return {"a": wp.array(random_values(8, np.float32, 1), device=CPU),
            "out": wp.array(random_values(8, np.float32, 2), device=CPU)}


def _filled(dst, src):
    wp.copy(dst, src)
    return dst


def _contiguous_strided(a):
    wide = wp.zeros(16, dtype=wp.float32, device=CPU)
    wp.copy(wide[::2], a)
    return wide[::2].contiguous()


# Each allocator, as a function of the source array ``a``: every one fully defines the new contents.
ALLOCATORS = [
    ("zeros", lambda a: wp.zeros(8, dtype=wp.float32, device=CPU)),
    ("ones", lambda a: wp.ones(8, dtype=wp.float32, device=CPU)),
    ("full", lambda a: wp.full(8, 2.5, dtype=wp.float32, device=CPU)),
    ("zeros_like", lambda a: wp.zeros_like(a)),
    ("ones_like", lambda a: wp.ones_like(a)),
    ("full_like", lambda a: wp.full_like(a, -3.0)),
    ("clone", lambda a: wp.clone(a)),
    ("empty_then_copy", lambda a: _filled(wp.empty(8, dtype=wp.float32, device=CPU), a)),
    ("empty_like_then_copy", lambda a: _filled(wp.empty_like(a), a)),
    ("array_from_numpy", lambda a: wp.array(np.arange(8, dtype=np.float32), device=CPU)),
    ("array_from_list", lambda a: wp.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0], dtype=wp.float32, device=CPU)),
    ("contiguous_of_strided", _contiguous_strided),
    ("zeros_2d_flattened", lambda a: wp.zeros((2, 4), dtype=wp.float32, device=CPU).flatten()),
]


@pytest.mark.parametrize("name,alloc", ALLOCATORS, ids=[a[0] for a in ALLOCATORS])
def test_temporary_allocated_in_capture(name, alloc):
    """A temporary is allocated, initialised, written by a kernel and copied to the output."""

    def fn(s):
        tmp = alloc(s["a"])
        wp.launch(F32, dim=8, inputs=[s["a"], tmp], device=CPU)  # tmp += a
        wp.launch(F32, dim=8, inputs=[tmp, s["out"]], device=CPU)  # out += tmp
        s["tmp"] = tmp

    graph, state = eager_vs_replay(fn, _make)
    assert any(region.owned for region in graph.recording.regions)


def _pod(k):
    p = K.Pod()
    p.a, p.b, p.v = float(k), k, wp.vec2(float(k), -float(k))
    return p


# ``wp.array(data)`` inside a capture: the copy from host data is recorded and repeated at replay,
# so the host data (often a temporary NumPy conversion) must live as long as the graph.
HOST_DATA = [
    ("numpy_temporary", lambda: wp.array(np.arange(8, dtype=np.float32), device=CPU), "f"),
    ("converted_float64", lambda: wp.array(np.arange(8, dtype=np.float64), dtype=wp.float32, device=CPU), "f"),
    ("strided_numpy", lambda: wp.array(np.arange(16, dtype=np.float32)[::2], device=CPU), "f"),
    ("python_list", lambda: wp.array([float(k) for k in range(8)], dtype=wp.float32, device=CPU), "f"),
    ("inferred_float64", lambda: wp.array([1.0, 2.0, 3.0], device=CPU), "d"),
    ("requires_grad", lambda: wp.array(np.ones(8, np.float32), device=CPU, requires_grad=True), "f"),
    ("vec3_from_nx3", lambda: wp.array(np.ones((4, 3), np.float32), dtype=wp.vec3, device=CPU), "v"),
    ("structs_from_list", lambda: wp.array([_pod(k) for k in range(3)], dtype=K.Pod, device=CPU), "p"),
    ("reshaped", lambda: wp.array(np.arange(16, dtype=np.float32), shape=(4, 4), device=CPU), "m"),
]


@pytest.mark.parametrize("name,build,target", HOST_DATA, ids=[h[0] for h in HOST_DATA])
def test_array_from_host_data_in_capture(name, build, target):
    def make():
        return {"f": wp.zeros(8, dtype=wp.float32, device=CPU), "d": wp.zeros(3, dtype=wp.float64, device=CPU),
                "v": wp.zeros(4, dtype=wp.vec3, device=CPU), "p": wp.zeros(3, dtype=K.Pod, device=CPU),
                "m": wp.full((4, 4), 1.0, dtype=wp.float32, device=CPU)}

    def fn(s):
        wp.copy(s[target], build())

    eager_vs_replay(fn, make)


def test_allocated_array_is_readable_after_replay():
    def fn(s):
        s["tmp"] = wp.zeros(8, dtype=wp.float32, device=CPU)
        wp.launch(F32, dim=8, inputs=[s["a"], s["tmp"]], device=CPU)

    eager, replayed = _make(), _make()
    fn(eager)
    with wp.ScopedCapture(device=CPU) as capture:
        fn(replayed)
    for _ in range(3):  # zeroing is recorded: every replay starts again from zero
        wp.capture_launch(capture.graph)
        assert np.array_equal(replayed["tmp"].numpy().view(np.uint32), eager["tmp"].numpy().view(np.uint32))


def test_allocation_with_gradient():
    def fn(s):
        tmp = wp.zeros(8, dtype=wp.float32, device=CPU, requires_grad=True)
        wp.launch(F32, dim=8, inputs=[s["a"], tmp.grad], device=CPU)
        wp.copy(tmp, tmp.grad)
        wp.launch(F32, dim=8, inputs=[tmp, s["out"]], device=CPU)

    eager_vs_replay(fn, _make)


def test_allocations_of_every_shape_and_dtype():
    def fn(s):
        v = wp.full((2, 3), wp.vec3(1.0, 2.0, 3.0), dtype=wp.vec3, device=CPU)
        i = wp.zeros((2, 2, 2, 2), dtype=wp.int32, device=CPU)
        h = wp.ones(5, dtype=wp.float16, device=CPU)
        b = wp.full(4, True, dtype=wp.bool, device=CPU)
        e = wp.zeros(0, dtype=wp.float32, device=CPU)  # empty: nothing to allocate or record
        wp.launch(K.stamp_4d, dim=(2, 2, 2, 2), inputs=[i], device=CPU)
        s["out_v"].assign(v.flatten())
        wp.copy(s["out_h"], h)
        wp.copy(s["out_b"], b)
        wp.copy(s["out_i"], i.flatten())
        wp.copy(s["out_e"], e)

    def make():
        return {"out_v": wp.zeros(6, dtype=wp.vec3, device=CPU), "out_h": wp.zeros(5, dtype=wp.float16, device=CPU),
                "out_b": wp.zeros(4, dtype=wp.bool, device=CPU), "out_i": wp.full(16, 3, dtype=wp.int32, device=CPU),
                "out_e": wp.zeros(0, dtype=wp.float32, device=CPU)}

    eager_vs_replay(fn, make)


def _capture_with_temporary():
    """A graph whose only link to its temporary is the graph itself."""
    a = wp.array(np.arange(8, dtype=np.float32), device=CPU)
    out = wp.zeros(8, dtype=wp.float32, device=CPU)
    with wp.ScopedCapture(device=CPU) as capture:
        tmp = wp.zeros(8, dtype=wp.float32, device=CPU)
        wp.launch(F32, dim=8, inputs=[a, tmp], device=CPU)
        wp.launch(F32, dim=8, inputs=[tmp, tmp], device=CPU)  # tmp = 2a
        wp.copy(out, tmp)
    return capture.graph, out, weakref.ref(tmp)


def test_graph_owned_memory_lives_as_long_as_the_graph():
    graph, out, tmp_ref = _capture_with_temporary()
    gc.collect()
    assert tmp_ref() is not None, "the graph does not keep its own allocation alive"
    churn()
    for _ in range(3):
        wp.capture_launch(graph)
        np.testing.assert_array_equal(out.numpy(), 2 * np.arange(8, dtype=np.float32))
    del graph
    gc.collect()
    assert tmp_ref() is None, "the graph's allocation outlives the graph"


def test_two_graphs_own_separate_temporaries():
    g1, out1, _ = _capture_with_temporary()
    g2, out2, _ = _capture_with_temporary()
    wp.capture_launch(g1)
    wp.capture_launch(g2)
    wp.capture_launch(g1)
    np.testing.assert_array_equal(out1.numpy(), out2.numpy())
