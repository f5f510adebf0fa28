"""Property test: random sequences of launches, copies, fills, zeroes and temporaries over a pool
of arrays give the same bytes eagerly and replayed."""

from __future__ import annotations

import numpy as np
import pytest
import warp as wp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kernels as K
from conftest import CPU, eager_vs_replay

pytestmark = [pytest.mark.warp_version, pytest.mark.interpreter]

N = 16  # elements per pool array
POOL = 4  # arrays in the pool

array_index = st.integers(0, POOL - 1)
u32 = st.integers(0, 2**32 - 1)
# A 1-D view of a pool array: (start, step) with room for at least 2 elements.
view = st.tuples(st.integers(0, N // 2 - 1), st.sampled_from([1, 2, 3]))


def _view(arr, spec):
    start, step = spec
    return arr[start::step]


@st.composite
def copies(draw):
    src_off, dst_off = draw(st.integers(0, N - 1)), draw(st.integers(0, N - 1))
    count = draw(st.integers(1, N - max(src_off, dst_off)))
    dst, src = draw(array_index), draw(array_index)
    # memcpy between overlapping ranges is undefined (its result may depend on the addresses)
    overlapping = dst == src and src_off < dst_off + count and dst_off < src_off + count
    return ("copy", dst, (src + 1) % POOL if overlapping else src, dst_off, src_off, count)


@st.composite
def strided_copies(draw):
    dst = draw(array_index)
    src = draw(array_index.filter(lambda i: i != dst))  # no overlapping copies (see ``copies``)
    return ("copy_strided", dst, src, draw(view), draw(view))


operations = st.one_of(
    st.tuples(st.just("launch"), array_index, array_index, u32),
    st.tuples(st.just("launch_views"), array_index, array_index, view, view, u32),
    copies(),
    strided_copies(),
    st.tuples(st.just("fill"), array_index, u32, view),
    st.tuples(st.just("zero"), array_index, view),
    st.tuples(st.just("temporary"), array_index, array_index, u32),
    st.tuples(st.just("launch_cmd"), array_index, array_index, u32),
)


def _apply(op, pool):
    kind = op[0]
    if kind == "launch":
        _, a, b, s = op
        wp.launch(K.mad_u32, dim=N, inputs=[pool[a], pool[b], s], device=CPU)
    elif kind == "launch_views":
        _, a, b, va, vb, s = op
        src, dst = _view(pool[a], va), _view(pool[b], vb)
        n = min(src.shape[0], dst.shape[0])
        wp.launch(K.mad_u32, dim=n, inputs=[src, dst, s], device=CPU)
    elif kind == "copy":
        _, dst, src, dst_off, src_off, count = op
        wp.copy(pool[dst], pool[src], dest_offset=dst_off, src_offset=src_off, count=count)
    elif kind == "copy_strided":
        _, dst, src, vd, vs = op
        d, s = _view(pool[dst], vd), _view(pool[src], vs)
        n = min(d.shape[0], s.shape[0])
        wp.copy(d[:n], s[:n])
    elif kind == "fill":
        _, a, value, v = op
        _view(pool[a], v).fill_(value)
    elif kind == "zero":
        _, a, v = op
        _view(pool[a], v).zero_()
    elif kind == "temporary":
        _, a, b, s = op
        tmp = wp.clone(pool[a])
        wp.launch(K.mad_u32, dim=N, inputs=[pool[b], tmp, s], device=CPU)
        wp.copy(pool[b], tmp)
    elif kind == "launch_cmd":
        _, a, b, s = op
        cmd = wp.launch(K.mad_u32, dim=N, inputs=[pool[a], pool[b], s], device=CPU, record_cmd=True)
        cmd.launch()
    else:  # pragma: no cover - the strategy makes no other kind
        raise AssertionError(kind)


def _make_pool():
    gen = np.random.default_rng(1234)
    return {f"a{i}": wp.array(gen.integers(0, 2**32, N, dtype=np.uint32), device=CPU) for i in range(POOL)}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(operations, min_size=1, max_size=12))
def test_random_sequences_replay_like_eager(ops):
    def fn(state):
        pool = [state[f"a{i}"] for i in range(POOL)]
        for op in ops:
            _apply(op, pool)

    eager_vs_replay(fn, _make_pool, repeats=3)
