"""A stand-in CUDA driver library, compiled at run time, that records the calls a loaded graph's replay makes.

It is a real shared object (C, built with the system's C compiler into a folder of the caller's) exporting the
driver entry points apic's op-table rows call by address (``apic.replay.cuda.rows.SYMBOLS``): each call is
recorded (which call, its arguments as 64-bit words, and for ``cuLaunchKernel`` the bytes of each kernel
parameter, for the kernels whose parameter sizes were registered) and returns ``CUDA_SUCCESS``, or the error
it was told to return at a given call. The context calls keep a small stack of current contexts.

Used by the offline tests (``tests/cuda/test_cuda_rows.py``) and benchmarks (``benchmarks/cuda_issue.py``,
``benchmarks/cuda_replay.py``'s floor checked against it), on machines without a GPU.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
from dataclasses import dataclass

from benchmarks.cuda_standin_export import EXPORT_SOURCE

_REPLAY_SOURCE = r"""
#include <stdint.h>
#include <string.h>

enum { CALL_LAUNCH = 1, CALL_MEMCPY, CALL_MEMSET8, CALL_MEMSET16, CALL_MEMSET32, CALL_GRAPH, CALL_GET_CURRENT,
       CALL_PUSH, CALL_POP, CALL_MEMSET2D8, CALL_MEMSET2D16, CALL_MEMSET2D32 };
typedef struct { int64_t call; uint64_t args[11]; int64_t bytes_at; int64_t nbytes; } record_t;
#define MAX_RECORDS (1 << 16)
#define MAX_BYTES (1 << 22)
#define MAX_KERNELS 256
#define MAX_PARAMS 64
static record_t records[MAX_RECORDS];
static int64_t n_records, n_bytes, calls, fail_at = -1, fail_code, logging = 1;
static unsigned char bytes[MAX_BYTES];
static struct { uint64_t fn; int64_t count; int64_t sizes[MAX_PARAMS]; } kernels[MAX_KERNELS];
static int64_t n_kernels;
static uint64_t contexts[64];
int standin_kernel(uint64_t fn, int64_t count, const int64_t *sizes);
static void export_reset(void); /* cuda_standin_export.py's calls: its counters back to the start */
static int64_t depth;

static int note(int64_t call, int n, const uint64_t *args, record_t **out) {
    int64_t index = calls++;
    *out = 0;
    if (logging && n_records < MAX_RECORDS) {
        record_t *r = &records[n_records++];
        memset(r, 0, sizeof *r);
        r->call = call;
        memcpy(r->args, args, 8 * (size_t)n);
        r->bytes_at = n_bytes;
        *out = r;
    }
    return index == fail_at ? (int)fail_code : 0;
}

int cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                   unsigned smem, void *stream, void **params, void **extra) {
    uint64_t args[11] = {(uint64_t)f, gx, gy, gz, bx, by, bz, smem, (uint64_t)stream, (uint64_t)params,
                         (uint64_t)extra};
    record_t *r;
    int err = note(CALL_LAUNCH, 11, args, &r);
    if (!r) return err;
    r->nbytes = -1;  /* a kernel whose parameter sizes were not registered */
    for (int64_t k = 0; k < n_kernels; k++) {
        if (kernels[k].fn != (uint64_t)f) continue;
        int64_t total = 0;
        for (int64_t p = 0; p < kernels[k].count; p++) total += kernels[k].sizes[p];
        if (n_bytes + total > MAX_BYTES) break;
        for (int64_t p = 0; p < kernels[k].count; p++) {
            memcpy(bytes + n_bytes, params[p], (size_t)kernels[k].sizes[p]);
            n_bytes += kernels[k].sizes[p];
        }
        r->nbytes = total;
        break;
    }
    return err;
}

static int stream_call(int64_t call, uint64_t a, uint64_t b, uint64_t c, void *stream) {
    uint64_t args[4] = {a, b, c, (uint64_t)stream};
    record_t *r;
    return note(call, 4, args, &r);
}

int cuMemcpyDtoDAsync_v2(uint64_t dst, uint64_t src, size_t n, void *s) {
    return stream_call(CALL_MEMCPY, dst, src, n, s);
}
int cuMemsetD8Async(uint64_t dst, unsigned char v, size_t n, void *s) {
    return stream_call(CALL_MEMSET8, dst, v, n, s);
}
int cuMemsetD16Async(uint64_t dst, unsigned short v, size_t n, void *s) {
    return stream_call(CALL_MEMSET16, dst, v, n, s);
}
int cuMemsetD32Async(uint64_t dst, unsigned v, size_t n, void *s) { return stream_call(CALL_MEMSET32, dst, v, n, s); }

static int pitched(int64_t call, uint64_t dst, size_t pitch, uint64_t v, size_t width, size_t height, void *s) {
    uint64_t args[6] = {dst, pitch, v, width, height, (uint64_t)s};
    record_t *r;
    return note(call, 6, args, &r);
}
int cuMemsetD2D8Async(uint64_t dst, size_t pitch, unsigned char v, size_t w, size_t h, void *s) {
    return pitched(CALL_MEMSET2D8, dst, pitch, v, w, h, s);
}
int cuMemsetD2D16Async(uint64_t dst, size_t pitch, unsigned short v, size_t w, size_t h, void *s) {
    return pitched(CALL_MEMSET2D16, dst, pitch, v, w, h, s);
}
int cuMemsetD2D32Async(uint64_t dst, size_t pitch, unsigned v, size_t w, size_t h, void *s) {
    return pitched(CALL_MEMSET2D32, dst, pitch, v, w, h, s);
}

int cuGraphLaunch(void *exec, void *stream) {
    uint64_t args[2] = {(uint64_t)exec, (uint64_t)stream};
    record_t *r;
    return note(CALL_GRAPH, 2, args, &r);
}

int cuCtxGetCurrent(uint64_t *out) {
    record_t *r;
    *out = depth ? contexts[depth - 1] : 0;
    return note(CALL_GET_CURRENT, 1, out, &r);
}

int cuCtxPushCurrent_v2(uint64_t ctx) {
    record_t *r;
    int err = note(CALL_PUSH, 1, &ctx, &r);
    if (!err && depth < 64) contexts[depth++] = ctx;
    return err;
}

int cuCtxPopCurrent_v2(uint64_t *out) {
    uint64_t top = depth ? contexts[depth - 1] : 0;
    record_t *r;
    int err = note(CALL_POP, 1, &top, &r);
    if (!err && depth) { depth--; if (out) *out = top; }
    return err;
}

/* control, for the tests */
void standin_clear(void) { n_records = n_bytes = calls = 0; fail_at = -1; }
void standin_reset(void) { standin_clear(); n_kernels = depth = 0; logging = 1; export_reset(); }
void standin_logging(int64_t on) { logging = on; }
void standin_fail(int64_t at, int64_t code) { fail_at = at; fail_code = code; }
void standin_set_current(uint64_t ctx) { depth = ctx ? 1 : 0; contexts[0] = ctx; }
int64_t standin_depth(void) { return depth; }
int64_t standin_calls(void) { return calls; }
int64_t standin_count(void) { return n_records; }
const record_t *standin_records(void) { return records; }
const unsigned char *standin_bytes(void) { return bytes; }
int standin_kernel(uint64_t fn, int64_t count, const int64_t *sizes) {
    if (n_kernels >= MAX_KERNELS || count > MAX_PARAMS) return 1;
    kernels[n_kernels].fn = fn;
    kernels[n_kernels].count = count;
    memcpy(kernels[n_kernels].sizes, sizes, 8 * (size_t)count);
    n_kernels++;
    return 0;
}
int standin_noop(void) { return 0; }
"""

# the driver library the tests build: the replay's calls above and an exported library's open, copies and close
STANDIN_SOURCE = _REPLAY_SOURCE + EXPORT_SOURCE

# the call kinds the stand-in records (``CALL_*`` in its source)
CALLS = {1: "cuLaunchKernel", 2: "cuMemcpyDtoDAsync", 3: "cuMemsetD8Async", 4: "cuMemsetD16Async",
         5: "cuMemsetD32Async", 6: "cuGraphLaunch", 7: "cuCtxGetCurrent", 8: "cuCtxPushCurrent", 9: "cuCtxPopCurrent",
         10: "cuMemsetD2D8Async", 11: "cuMemsetD2D16Async", 12: "cuMemsetD2D32Async",
         # an exported library's open, copies and close (cuda_standin_export.py)
         13: "cuInit", 14: "cuDeviceGet", 15: "cuDevicePrimaryCtxRetain", 16: "cuDevicePrimaryCtxRelease",
         17: "cuModuleLoadData", 18: "cuModuleUnload", 19: "cuModuleGetFunction", 20: "cuFuncSetAttribute",
         21: "cuMemAlloc", 22: "cuMemFree", 23: "cuMemcpyHtoD", 24: "cuMemcpyDtoH", 25: "cuMemsetD8",
         26: "cuCtxSynchronize", 27: "cuDeviceGetAttribute", 28: "cuStreamSynchronize"}
_ARITY = {1: 11, 2: 4, 3: 4, 4: 4, 5: 4, 6: 2, 7: 1, 8: 1, 9: 1, 10: 6, 11: 6, 12: 6, 13: 1, 14: 1, 15: 2, 16: 1,
          17: 1, 18: 1, 19: 2, 20: 3, 21: 2, 22: 1, 23: 2, 24: 2, 25: 3, 26: 0, 27: 2, 28: 1}
_WITH_BYTES = {1, 17, 19, 23}  # the calls whose bytes are kept: parameters, module image, kernel name, data


class _Record(ctypes.Structure):
    _fields_ = [("call", ctypes.c_int64), ("args", ctypes.c_uint64 * 11), ("bytes_at", ctypes.c_int64),
                ("nbytes", ctypes.c_int64)]


def compiler() -> str | None:
    """The C compiler the stand-ins are built with (``$CC``, else cc, gcc or clang on the path), or None."""
    named = os.environ.get("CC")
    if named and shutil.which(named):
        return shutil.which(named)
    return next((found for found in map(shutil.which, ("cc", "gcc", "clang")) if found), None)


def build(source: str, folder: str, name: str) -> str:
    """Compile C ``source`` into the shared object ``folder/lib<name>.so``; its path. Raises ``RuntimeError``
    (with the compiler's output) where there is no C compiler or it fails."""
    cc = compiler()
    if cc is None:
        raise RuntimeError("no C compiler (cc, gcc or clang; or $CC) to build the stand-in driver library")
    path_c = os.path.join(folder, f"{name}.c")
    path_so = os.path.join(folder, f"lib{name}.so")
    with open(path_c, "w") as f:
        f.write(source)
    done = subprocess.run([cc, "-O2", "-shared", "-fPIC", "-o", path_so, path_c], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{cc} could not build {path_c}: {done.stderr.strip()}")
    return path_so


@dataclass(frozen=True)
class Call:
    """One call the stand-in recorded: its name, its arguments (64-bit words), and for a kernel launch the
    bytes of its parameters (None for a kernel whose parameter sizes were not registered)."""

    name: str
    args: tuple[int, ...]
    params: bytes | None = None


class StandIn:
    """The built stand-in library, loaded: its recorded calls and its controls."""

    def __init__(self, folder: str) -> None:
        self.path = build(STANDIN_SOURCE, folder, "apic_standin_cuda")
        self.lib = lib = ctypes.CDLL(self.path)
        lib.standin_records.restype = ctypes.POINTER(_Record)
        lib.standin_bytes.restype = ctypes.c_void_p
        for name in ("standin_count", "standin_calls", "standin_depth"):
            getattr(lib, name).restype = ctypes.c_int64
        lib.standin_kernel.argtypes = [ctypes.c_uint64, ctypes.c_int64, ctypes.POINTER(ctypes.c_int64)]
        lib.standin_set_current.argtypes = [ctypes.c_uint64]
        lib.standin_fail.argtypes = [ctypes.c_int64, ctypes.c_int64]
        lib.standin_logging.argtypes = [ctypes.c_int64]
        self.reset()

    def reset(self) -> None:
        """Forget every recorded call, registered kernel, failure and context."""
        self.lib.standin_reset()

    def clear(self) -> None:
        """Forget the recorded calls and any failure to come (registered kernels and contexts stay)."""
        self.lib.standin_clear()

    def kernel(self, function: int, sizes) -> None:
        """Record the bytes of the parameters of ``cuLaunchKernel(function, ...)``: ``sizes`` bytes each."""
        sizes = list(sizes)
        if self.lib.standin_kernel(function, len(sizes), (ctypes.c_int64 * max(len(sizes), 1))(*sizes)):
            raise RuntimeError("the stand-in driver library takes at most 256 kernels of 64 parameters")

    def fail(self, at: int, code: int) -> None:
        """Make call number ``at`` (from 0, counting every call since the reset) return ``code``."""
        self.lib.standin_fail(at, code)

    def set_current(self, context: int) -> None:
        """Make ``context`` (0: none) the only current context."""
        self.lib.standin_set_current(context)

    @property
    def depth(self) -> int:
        """How many contexts are pushed."""
        return self.lib.standin_depth()

    @property
    def count(self) -> int:
        """Calls made since the reset (recorded or not)."""
        return self.lib.standin_calls()

    def logging(self, on: bool) -> None:
        """Record calls (the default) or only count them (for timings)."""
        self.lib.standin_logging(int(on))

    def calls(self) -> list[Call]:
        """The recorded calls, in order."""
        count = self.lib.standin_count()
        records = (_Record * count).from_address(ctypes.addressof(self.lib.standin_records().contents)) if count else []
        return _calls(records, ctypes.string_at(self.lib.standin_bytes(), max(r.bytes_at + r.nbytes for r in records))
                      if count and any(r.nbytes > 0 for r in records) else b"")

    def noop_address(self) -> int:
        """The address of ``int standin_noop(void)``: a C function that does nothing."""
        return ctypes.cast(self.lib.standin_noop, ctypes.c_void_p).value


def _calls(records, data: bytes) -> list[Call]:
    found = []
    for r in records:
        params = None
        if r.call in _WITH_BYTES and r.nbytes >= 0:
            params = data[r.bytes_at : r.bytes_at + r.nbytes]
        found.append(Call(CALLS[r.call], tuple(r.args[: _ARITY[r.call]]), params))
    return found


def read_dump(path: str) -> list[Call]:
    """The calls a stand-in recorded in another process, which wrote them with ``standin_dump(path)``."""
    with open(path, "rb") as f:
        data = f.read()
    count, nbytes = (int.from_bytes(data[k : k + 8], "little") for k in (0, 8))
    size = ctypes.sizeof(_Record) * count
    records = (_Record * count).from_buffer_copy(data, 16) if count else []
    return _calls(records, data[16 + size : 16 + size + nbytes])
