"""Fills apic does itself during a CUDA capture (``apic.record.cuda.fill``), checked without a GPU.

That the memsets apic makes tile the value exactly (each call applied to a byte buffer as the driver applies
it), and the calls themselves against the stand-in driver library (``benchmarks/cuda_standin.py``): the context
pushed and popped, each memset's arguments, and a failing call named. On a GPU, tests/cuda/test_cuda_gpu.py's
workload fills 1, 2, 4, 8, 12 and 16-byte values during its captures, eager against replayed.
"""

from __future__ import annotations

import numpy as np
import pytest

from apic.record.cuda import fill as cuda_fill
from benchmarks import cuda_standin

pytestmark = [pytest.mark.warp_version]


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


def test_a_value_of_one_word_is_one_plain_memset(standin):
    standin.reset()
    cuda_fill.fill(0x100, 0x5678, 0x2000, bytes.fromhex("0000c03f"), 9, library=standin.path)
    calls = standin.calls()
    assert [c.name for c in calls] == ["cuCtxPushCurrent", "cuMemsetD32Async", "cuCtxPopCurrent"]
    assert calls[1].args == (0x2000, 0x3FC00000, 9, 0x5678)  # float32 1.5, nine of them
    standin.reset()
    cuda_fill.fill(0x100, 0x5678, 0x2001, b"\x07", 5, library=standin.path)  # one byte at an odd address
    assert [c.args for c in standin.calls() if c.name == "cuMemsetD8Async"] == [(0x2001, 7, 5, 0x5678)]


def test_a_failing_memset_is_named_and_the_context_popped(standin):
    standin.reset()
    standin.fail(2, 1)  # the push is call 0: the second memset fails with CUDA_ERROR_INVALID_VALUE
    with pytest.raises(RuntimeError, match=r"cuMemsetD2D16Async failed with CUresult 1"):
        cuda_fill.fill(0x100, 0x5678, 0x2002, bytes(6), 3, library=standin.path)
    names = [c.name for c in standin.calls()]
    assert names == ["cuCtxPushCurrent", "cuMemsetD2D16Async", "cuMemsetD2D16Async", "cuCtxPopCurrent"]
    assert standin.depth == 0
