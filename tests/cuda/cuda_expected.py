"""The driver calls a saved CUDA graph's op-by-op replay must make, worked out from its recording: shared by the
tests that check a replay's calls against the stand-in driver library (``benchmarks/cuda_standin.py``): the
Python replay's rows (``test_cuda_rows``) and an exported C library's (``test_export_cuda``)."""

from __future__ import annotations

from apic.record import ops as rec
from apic.replay.cuda import lowering as cuda_lowering
from benchmarks.cuda_standin import Call

ANY = object()  # an argument the comparison skips (a kernelParams array's host address)


def relocated(blob: rec.Blob, regions) -> bytes:
    """``blob``'s bytes with each pointer set to its target in ``regions`` (device addresses)."""
    data = bytearray(blob.data)
    for reloc in blob.relocs:
        data[reloc.at : reloc.at + 8] = (regions[reloc.target.region] + reloc.target.offset).to_bytes(8, "little")
    return bytes(data)


def expected_calls(recording, regions, handle: dict, constants: int, stream: int) -> list[Call]:
    """The calls of one replay of ``recording``, in order: ``regions`` the device address of each region,
    ``handle`` the CUfunction of each kernel symbol (the fill kernel's too), ``constants`` the device address of
    the fill kernel's values."""
    address = lambda ref: regions[ref.region] + ref.offset  # noqa: E731
    calls = []
    for op in recording.ops:
        if isinstance(op, rec.CudaLaunch):
            kernel = recording.kernels[op.kernel]
            blob = relocated(op.params, regions)
            params = b"".join(blob[offset : offset + size] for offset, size in kernel.params)
            calls.append(Call("cuLaunchKernel", (handle[kernel.symbol], *op.grid, *op.block, op.smem, stream, ANY, 0),
                              params))
        elif isinstance(op, rec.Memcpy):
            calls.append(Call("cuMemcpyDtoDAsync", (address(op.dst), address(op.src), op.nbytes, stream)))
        elif isinstance(op, rec.Memset):
            calls.append(Call("cuMemsetD8Async", (address(op.dst), op.value, op.nbytes, stream)))
        elif isinstance(op, rec.Memtile):
            value, total = op.value.data, len(op.value.data) * op.count
            # a memset of 1, 2 or 4-byte elements where the value is one repeated and the address aligned to it
            width = next((w for w in (1, 2, 4) if len(value) % w == 0 and value == value[:w] * (len(value) // w)
                          and address(op.dst) % w == 0), 0)
            if width:
                element = int.from_bytes(value[:width], "little")
                calls.append(Call(f"cuMemsetD{8 * width}Async", (address(op.dst), element, total // width, stream)))
            else:  # the fill kernel: dst, the value's copy in device memory, its size, the bytes in all
                params = b"".join(v.to_bytes(8, "little") for v in (address(op.dst), constants, len(value), total))
                blocks = min(-(-total // cuda_lowering.FILL_BLOCK), cuda_lowering.FILL_MAX_BLOCKS)
                calls.append(Call("cuLaunchKernel", (handle[cuda_lowering.FILL_SYMBOL], blocks, 1, 1,
                                                     cuda_lowering.FILL_BLOCK, 1, 1, 0, stream, ANY, 0), params))
    return calls


def same(found: list[Call], expected: list[Call]) -> None:
    """Assert the recorded calls are the expected ones: names, every argument but ``ANY``, parameter bytes."""
    assert [c.name for c in found] == [c.name for c in expected]
    for k, (f, e) in enumerate(zip(found, expected)):
        assert len(f.args) == len(e.args), (k, f, e)
        assert [a for a, b in zip(f.args, e.args) if b is not ANY] == [b for b in e.args if b is not ANY], (k, f, e)
        assert f.params == e.params, (k, f.name)
