"""Fills of wide values during an ``apic=True`` CUDA capture, done as pitched memsets that a capture can hold.

For a fill whose value is not 1, 2, 4 or 8 bytes at an address aligned to its size (``wp.vec3`` is 12,
``wp.vec4`` 16), warp-lang 1.12's ``wp_memtile_device`` stages the value in device memory through the legacy
stream, which a graph capture refuses (``cudaErrorStreamCaptureImplicit``). The capture is then invalid, and
the allocations after it fail, so everything after it breaks too (seen on an H200 with 1.12.1). Later warp-lang
passes such values inline.

While apic records a CUDA capture, it does these fills itself on every warp-lang, so that the capture behaves
the same whatever the version. The value is split into ``size / w`` words of ``w`` bytes (4, 2 or 1: the widest
that divides both the value's size and the address). Word ``k`` is set by one pitched memset
(``cuMemsetD2D{8,16,32}Async``) of ``reps`` rows, one word wide, ``size`` bytes apart, starting ``k * w`` bytes in.
A memset node is what the capture records. The recording keeps the fill as a fill
(``apic.record.base.record_memtile``), and a loaded graph replays it as before.
"""

from __future__ import annotations

import ctypes

#: The driver library the memsets are called in (the one Warp and cuda-python load on Linux).
DRIVER_LIBRARY = "libcuda.so.1"
_WARP_INLINE_SIZES = (1, 2, 4, 8)  # sizes warp-lang 1.12 fills with a kernel of its own when aligned to them
_SYMBOLS = {1: "cuMemsetD2D8Async", 2: "cuMemsetD2D16Async", 4: "cuMemsetD2D32Async"}
_WORD_TYPES = {1: ctypes.c_ubyte, 2: ctypes.c_ushort, 4: ctypes.c_uint}
_libraries: dict[str, object] = {}


def done_by_apic(dst: int, size: int) -> bool:
    """Whether apic does a fill of ``size``-byte values at ``dst`` itself (see the module docstring)."""
    return size > 0 and not (size in _WARP_INLINE_SIZES and dst % size == 0)


def memsets(dst: int, value: bytes, reps: int) -> list[tuple[int, int, int, int, int]]:
    """The pitched memsets that tile ``value`` ``reps`` times from ``dst``: ``(width, address, pitch, word,
    rows)`` each, ``width`` being the word's bytes (the memset's element size), ``word`` its value."""
    size = len(value)
    width = next(w for w in (4, 2, 1) if size % w == 0 and dst % w == 0)
    return [(width, dst + k, size, int.from_bytes(value[k : k + width], "little"), reps)
            for k in range(0, size, width)]


def fill(context: int, stream: int, dst: int, value: bytes, reps: int, library: str | None = None) -> None:
    """Tile ``value`` ``reps`` times from device address ``dst`` on ``stream`` of ``context`` (made current
    for the calls, then restored), as pitched memsets. Raises ``RuntimeError`` naming the call that failed."""
    lib = _driver(library or DRIVER_LIBRARY)
    _check(lib.cuCtxPushCurrent_v2(ctypes.c_void_p(context)), "cuCtxPushCurrent")
    try:
        for width, address, pitch, word, rows in memsets(dst, value, reps):
            call = getattr(lib, _SYMBOLS[width])
            _check(call(ctypes.c_uint64(address), ctypes.c_size_t(pitch), _WORD_TYPES[width](word),
                        ctypes.c_size_t(1), ctypes.c_size_t(rows), ctypes.c_void_p(stream)), _SYMBOLS[width])
    finally:
        _check(lib.cuCtxPopCurrent_v2(ctypes.byref(ctypes.c_void_p())), "cuCtxPopCurrent")


def _driver(library: str):
    lib = _libraries.get(library)
    if lib is None:
        lib = _libraries[library] = ctypes.CDLL(library)
    return lib


def _check(status: int, call: str) -> None:
    if status:
        raise RuntimeError(f"{call} failed with CUresult {status} while apic filled an array during a CUDA capture")
