"""Fills during an ``apic=True`` CUDA capture, done by apic as memsets that a capture can hold.

warp-lang 1.12.1's ``wp_memtile_device`` fails inside a graph capture for every value size: CUDA error 906
(``cudaErrorStreamCaptureImplicit``: the legacy stream would depend on the capturing stream). The capture is then
invalid, and every allocation and launch after it fails too. This was seen on an H200, for a 4-byte
``fill_(1.5)``, in Warp's own capture as well as in apic's. warp-lang 1.19 fills inside a capture correctly.

While apic records a CUDA capture, it does every fill itself, on every warp-lang, so that the capture behaves
the same whatever the version. The value is split into ``size / w`` words of ``w`` bytes (4, 2 or 1: the widest
that divides both the value's size and the address):

* a value of one word is one memset (``cuMemsetD{8,16,32}Async``);
* a wider value is one pitched memset per word (``cuMemsetD2D{8,16,32}Async``). Word ``k`` covers ``reps`` rows
  one word wide, ``size`` bytes apart, starting ``k * w`` bytes in.

A memset node is what the capture records. The recording keeps the fill as a fill
(``apic.record.base.record_memtile``), and a loaded graph replays it as before.
"""

from __future__ import annotations

import ctypes

from apic.targets.cuda import DRIVER_LIBRARY

_PITCHED = {1: "cuMemsetD2D8Async", 2: "cuMemsetD2D16Async", 4: "cuMemsetD2D32Async"}
_PLAIN = {1: "cuMemsetD8Async", 2: "cuMemsetD16Async", 4: "cuMemsetD32Async"}
_WORD_TYPES = {1: ctypes.c_ubyte, 2: ctypes.c_ushort, 4: ctypes.c_uint}
_libraries: dict[str, object] = {}


def memsets(dst: int, value: bytes, reps: int) -> list[tuple[int, int, int, int, int]]:
    """The memsets that tile ``value`` ``reps`` times from ``dst``: ``(width, address, pitch, word, rows)`` each,
    ``width`` being the word's bytes (the memset's element size), ``word`` its value; ``pitch == width`` for a
    value of one word (a plain memset of ``rows`` words)."""
    size = len(value)
    width = next(w for w in (4, 2, 1) if size % w == 0 and dst % w == 0)
    return [(width, dst + k, size, int.from_bytes(value[k : k + width], "little"), reps)
            for k in range(0, size, width)]


def fill(context: int, stream: int, dst: int, value: bytes, reps: int, library: str | None = None) -> None:
    """Tile ``value`` ``reps`` times from device address ``dst`` on ``stream`` of ``context`` (made current
    for the calls, then restored), as memsets. Raises ``RuntimeError`` naming the call that failed."""
    lib = _driver(library or DRIVER_LIBRARY)
    _check(lib.cuCtxPushCurrent_v2(ctypes.c_void_p(context)), "cuCtxPushCurrent")
    try:
        for width, address, pitch, word, rows in memsets(dst, value, reps):
            target, word = ctypes.c_uint64(address), _WORD_TYPES[width](word)
            if pitch == width:
                name = _PLAIN[width]
                status = getattr(lib, name)(target, word, ctypes.c_size_t(rows), ctypes.c_void_p(stream))
            else:
                name = _PITCHED[width]
                status = getattr(lib, name)(target, ctypes.c_size_t(pitch), word, ctypes.c_size_t(1),
                                            ctypes.c_size_t(rows), ctypes.c_void_p(stream))
            _check(status, name)
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
