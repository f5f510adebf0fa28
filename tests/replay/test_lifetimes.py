"""Lifetimes and copies of loaded graphs' parameters (issue 11, item 7).

Every view apic hands out keeps its graph's memory alive; ``get_param`` never writes into a
read-only array; ``set_param`` from any array-like copies, never aliases.
"""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest
import warp as wp

import apic

pytestmark = [pytest.mark.warp_version, pytest.mark.interpreter]

N = 64


@wp.kernel
def _affine(x: wp.array(dtype=float), y: wp.array(dtype=float)):
    i = wp.tid()
    y[i] = x[i] * 2.0 + 1.0


@pytest.fixture(scope="module")
def saved_path(tmp_path_factory):
    folder = tmp_path_factory.mktemp("lifetimes")
    x = wp.array(np.arange(N, dtype=np.float32), device="cpu")
    y = wp.zeros(N, dtype=float, device="cpu")
    with wp.ScopedCapture(device="cpu", apic=True) as cap:
        wp.launch(_affine, dim=N, inputs=[x, y], device="cpu")
    wp.capture_save(cap.graph, str(folder / "g"), inputs={"x": x}, outputs={"y": y})
    return str(folder / "g")


def churn() -> list:
    """Allocate and fill a lot, so freed memory is reused and overwritten."""
    blocks = [np.full(1 << 18, -7.0, dtype=np.float32) for _ in range(256)]  # 256 MiB in 1 MiB blocks
    gc.collect()
    return blocks


def test_param_numpy_outlives_the_graph(saved_path):
    graph = wp.capture_load(saved_path)
    wp.capture_launch(graph)
    y = graph.param_numpy("y")
    x = graph.param_numpy("x")
    expected = np.arange(N, dtype=np.float32) * 2 + 1
    alive = weakref.ref(graph)
    del graph
    gc.collect()
    assert alive() is not None, "a view must keep its graph alive"
    blocks = churn()
    assert np.array_equal(y, expected), "the view reads freed memory"
    x[...] = 5.0  # writing is safe too
    assert np.all(x == 5.0)
    del blocks
    # the graph is still usable through the view's owner, and replays with the written input
    wp.capture_launch(alive())
    assert np.all(y == 11.0)
    del x, y
    gc.collect()
    assert alive() is None, "dropping the views frees the graph"


def test_get_param_into_read_only_numpy_raises(saved_path):
    graph = wp.capture_load(saved_path)
    wp.capture_launch(graph)
    target = np.zeros(N, dtype=np.float32)
    target.flags.writeable = False
    with pytest.raises(apic.BindingError, match="read-only"):
        graph.get_param("y", target)
    assert np.all(target == 0)
    writable = np.zeros(N, dtype=np.float32)
    graph.get_param("y", writable)
    assert np.array_equal(writable, np.arange(N, dtype=np.float32) * 2 + 1)


def test_get_param_into_read_only_warp_array_raises(saved_path):
    graph = wp.capture_load(saved_path)
    wp.capture_launch(graph)
    source = np.zeros(N, dtype=np.float32)
    source.flags.writeable = False
    target = wp.array(source, dtype=float, device="cpu", copy=False)
    assert target.ptr == source.ctypes.data, "the Warp array must alias the read-only memory for this test"
    with pytest.raises(apic.BindingError, match="read-only"):
        graph.get_param("y", target)
    assert np.all(source == 0)


def sources():
    yield "numpy", lambda v: v.copy(), lambda s: s.__setitem__(slice(None), 99.0)
    yield "list", lambda v: v.tolist(), lambda s: s.__setitem__(slice(None), [99.0] * N)
    yield "memoryview", lambda v: memoryview(v.copy()), lambda s: s.cast("B").__setitem__(slice(None), b"\x01" * 4 * N)
    yield "warp", lambda v: wp.array(v, dtype=float, device="cpu"), lambda s: s.fill_(99.0)


@pytest.mark.parametrize("kind,make,mutate", list(sources()), ids=[k for k, _, _ in sources()])
def test_set_param_copies(saved_path, kind, make, mutate):
    graph = wp.capture_load(saved_path)
    values = np.linspace(-3, 3, N, dtype=np.float32)
    source = make(values)
    graph.set_param("x", source)
    mutate(source)
    assert np.array_equal(graph.param_numpy("x"), values), f"set_param from {kind} aliased the source"
    wp.capture_launch(graph)
    assert np.array_equal(graph.param_numpy("y"), values * 2 + 1)


def test_set_param_from_torch_copies(saved_path):
    torch = pytest.importorskip("torch", reason="torch not installed")
    graph = wp.capture_load(saved_path)
    values = np.linspace(-3, 3, N, dtype=np.float32)
    source = torch.tensor(values)
    graph.set_param("x", source)
    source.fill_(99.0)
    assert np.array_equal(graph.param_numpy("x"), values)


def test_set_param_refuses_wrong_shapes(saved_path):
    graph = wp.capture_load(saved_path)
    with pytest.raises(apic.BindingError, match="shape"):
        graph.set_param("x", np.zeros(N + 1, dtype=np.float32))
    with pytest.raises(apic.BindingError, match="dtype"):
        graph.set_param("x", np.zeros(N, dtype=np.complex64))
