"""Fills apic does itself during a CUDA capture (``apic.record.cuda_fill``), checked without a GPU.

Which fills apic takes over from Warp, that the pitched memsets it makes tile the value exactly (each call
applied to a byte buffer as the driver applies it), and the calls themselves against the stand-in driver
library (``benchmarks/cuda_standin.py``): the context pushed and popped, each memset's arguments, and a failing
call named. On a GPU, tests/cuda/test_cuda_gpu.py's workload fills 12 and 16-byte values during its captures,
eager against replayed.
"""

from __future__ import annotations

import numpy as np
import pytest

from apic.record import cuda_fill
from benchmarks import cuda_standin

pytestmark = [pytest.mark.warp_version]


@pytest.mark.parametrize(("dst", "size", "by_apic"), [
    (0x1000, 1, False), (0x1001, 1, False), (0x1000, 2, False), (0x1001, 2, True), (0x1000, 4, False),
    (0x1002, 4, True), (0x1000, 8, False), (0x1004, 8, True), (0x1000, 12, True), (0x1000, 16, True),
    (0x1000, 3, True), (0x1000, 0, False),
])
def test_which_fills_apic_does_itself(dst, size, by_apic):
    """Everything but the 1, 2, 4 and 8-byte values at addresses aligned to them, which every warp-lang fills
    with a kernel of its own."""
    assert cuda_fill.done_by_apic(dst, size) is by_apic


def _apply(memory: np.ndarray, base: int, memsets) -> None:
    """Apply ``memsets`` to ``memory`` (which starts at address ``base``) as the driver's pitched memsets do."""
    for width, address, pitch, word, rows in memsets:
        assert address % width == 0 and pitch % width == 0, "the driver needs both aligned to the element size"
        data = word.to_bytes(width, "little")
        for row in range(rows):
            at = address - base + row * pitch
            memory[at : at + width] = np.frombuffer(data, np.uint8)


@pytest.mark.parametrize("offset", range(8))
def test_the_memsets_tile_the_value_exactly(offset):
    """Every size from 1 to 40 bytes, at every alignment of the address, 0 to 5 repetitions: the bytes written are
    the value tiled, and nothing around them changes."""
    rng = np.random.default_rng(offset)
    base = 0x10000
    for size in range(1, 41):
        for reps in range(6):
            value = rng.integers(0, 256, size, dtype=np.uint8).tobytes()
            memory = np.full(64 + size * reps, 0xA5, dtype=np.uint8)
            dst = base + 16 + offset
            calls = cuda_fill.memsets(dst, value, reps)
            assert len(calls) == size // calls[0][0]
            _apply(memory, base, calls)
            expected = np.full_like(memory, 0xA5)
            expected[16 + offset : 16 + offset + size * reps] = np.frombuffer(value * reps, np.uint8)
            assert np.array_equal(memory, expected), (size, reps, offset)


def test_the_widest_word_that_divides_both_size_and_address():
    assert {c[0] for c in cuda_fill.memsets(0x1000, bytes(12), 3)} == {4}
    assert {c[0] for c in cuda_fill.memsets(0x1002, bytes(12), 3)} == {2}
    assert {c[0] for c in cuda_fill.memsets(0x1000, bytes(6), 3)} == {2}
    assert {c[0] for c in cuda_fill.memsets(0x1001, bytes(12), 3)} == {1}


@pytest.fixture(scope="module")
def standin(tmp_path_factory):
    if cuda_standin.compiler() is None:
        pytest.skip("no C compiler (cc, gcc or clang) to build the stand-in CUDA driver library")
    return cuda_standin.StandIn(str(tmp_path_factory.mktemp("standin")))


def test_the_driver_calls(standin):
    standin.reset()
    value = bytes(range(1, 13))  # a wp.vec3's 12 bytes
    cuda_fill.fill(0x100, 0x5678, 0x2000, value, 7, library=standin.path)
    calls = standin.calls()
    assert [c.name for c in calls] == ["cuCtxPushCurrent"] + ["cuMemsetD2D32Async"] * 3 + ["cuCtxPopCurrent"]
    assert calls[0].args == (0x100,)
    words = [int.from_bytes(value[k : k + 4], "little") for k in (0, 4, 8)]
    assert [c.args for c in calls[1:4]] == [(0x2000 + k, 12, w, 1, 7, 0x5678) for k, w in zip((0, 4, 8), words)]
    assert standin.depth == 0  # the context is as it was


def test_a_failing_memset_is_named_and_the_context_popped(standin):
    standin.reset()
    standin.fail(2, 1)  # the push is call 0: the second memset fails with CUDA_ERROR_INVALID_VALUE
    with pytest.raises(RuntimeError, match=r"cuMemsetD2D16Async failed with CUresult 1"):
        cuda_fill.fill(0x100, 0x5678, 0x2002, bytes(6), 3, library=standin.path)
    names = [c.name for c in standin.calls()]
    assert names == ["cuCtxPushCurrent", "cuMemsetD2D16Async", "cuMemsetD2D16Async", "cuCtxPopCurrent"]
    assert standin.depth == 0
