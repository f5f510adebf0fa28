"""``warp.sparse`` inside a CPU capture: BSR operations recorded, host read-backs refused by name.

warp.sparse builds BSR topologies with native host exports (``wp_bsr_matrix_from_triplets_host``,
``wp_bsr_transpose_host``, ``wp_bsr_compress_inplace_host``) called straight through ctypes, and
launches kernels for everything else. A capture records those exports as ``NativeCall`` ops (their
signatures are in ``apic.record.natives``) when they are reached through a warp.sparse function,
which the shims below wrap: each notes every array the call can reach (its arguments, the arrays of
the matrices, expressions, work arrays and triplet maps it is given) so that the graph keeps them
alive, then runs Warp's own code unchanged.

Warp's sparse code sees ``Device.is_capturing`` and takes its graph-capture paths, as under a CUDA
capture: ``bsr_mm`` wants ``reuse_topology=True``, ``max_new_nnz=`` or a masked topology,
``bsr_set_from_triplets`` and ``bsr_axpy`` size their results by upper bounds. What still needs a
host read of a result, ``BsrMatrix.nnz_sync()`` (and ``status_sync()``) on a matrix the capture has
used, is refused with an error naming the warp.sparse function and the argument that avoids it; on
a matrix the capture never touched it reads the current value, as upstream Warp's CPU capture does.

The shims are installed with the others (``apic.installation.install``), which imports warp.sparse:
code that takes ``from warp.sparse import bsr_mm`` after ``import apic`` gets them. Warp's own
modules that imported warp.sparse names earlier (warp.fem) are pointed at them too.
"""

from __future__ import annotations

import functools
import sys
import threading
import weakref

from apic import _compat
from apic._compat import wp_types
from apic.errors import CaptureError, UnsupportedOperationError
from apic.record.cpu.recorder import active, paused

_MODULE = _compat.SPARSE_MODULE

# The warp.sparse functions that may call a native BSR export or read a block count back.
_FUNCTIONS = (
    "bsr_zeros", "bsr_set_zero", "bsr_set_from_triplets", "bsr_from_triplets", "bsr_set_from_mapped_values",
    "bsr_assign", "bsr_copy", "bsr_set_transpose", "bsr_transposed", "bsr_get_diag", "bsr_set_diag", "bsr_diag",
    "bsr_set_identity", "bsr_identity", "bsr_scale", "bsr_axpy", "bsr_mm", "bsr_mv", "bsr_compress",
)

# How to make each operation capturable when it would read a result back (shown in the error).
_HINTS = {
    "bsr_zeros": "give a row_capacity array an nnz_capacity= (an upper bound of its sum)",
    "bsr_set_zero": "give a row_capacity array an nnz_capacity= (an upper bound of its sum)",
    "bsr_mm": "pass reuse_topology=True with work_arrays filled by an earlier bsr_mm call, max_new_nnz=, or a "
    "masked topology (topology='masked'; masked=True before warp-lang 1.13)",
}
_GENERIC_HINT = "run it before the capture, or read the count after wp.capture_launch()"


_local = threading.local()
_kept: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _reachable(values, found: list, depth: int) -> None:
    """Warp arrays and warp.sparse objects among ``values``, looking ``depth`` levels into the latter."""
    for value in values:
        if value is None or isinstance(value, (bool, int, float, str)):
            continue
        if isinstance(value, (wp_types.array, wp_types.indexedarray)):
            found.append(value)
        elif depth > 0 and type(value) in (tuple, list):
            _reachable(value, found, depth - 1)
        elif depth > 0 and hasattr(value, "__dict__") and any(c.__module__ == _MODULE for c in type(value).__mro__):
            found.append(value)  # a matrix, expression, work arrays or triplet map: kept alive with its arrays
            _reachable(list(vars(value).values()), found, depth - 1)


def _wrap(name: str, original):
    @functools.wraps(original)
    def shim(*args, **kwargs):
        recorder = active()
        if recorder is None:
            return original(*args, **kwargs)
        found: list = []
        _reachable([*args, *kwargs.values()], found, 3)
        arrays = [v for v in found if isinstance(v, (wp_types.array, wp_types.indexedarray))]
        devices = [a.device if isinstance(a, wp_types.array) else a.data.device for a in arrays]
        if devices and not any(d.is_cpu for d in devices):
            return original(*args, **kwargs)  # CUDA work is not ours to record
        recorder.note_values(arrays)
        kept = _kept.setdefault(recorder, set())  # ids of the sparse objects this graph keeps alive
        for value in found:
            if id(value) not in kept and not isinstance(value, (wp_types.array, wp_types.indexedarray)):
                kept.add(id(value))
                recorder.keepalive.append(value)
        outermost = not getattr(_local, "depth", 0)
        _local.depth = getattr(_local, "depth", 0) + 1
        recorder.api_depth += 1
        try:
            return original(*args, **kwargs)
        except (UnsupportedOperationError, CaptureError) as error:
            if not outermost:
                raise
            reason = getattr(error, "reason", None)  # a host read-back (see _host_read_guard)
            detail = f"{error.operation} {reason}; {_HINTS.get(name, _GENERIC_HINT)}" if reason else str(error)
            raise UnsupportedOperationError(f"warp.sparse.{name}", detail) from error
        finally:
            recorder.api_depth -= 1
            _local.depth -= 1

    shim.__apic_original__ = original
    return shim


def _host_read_guard(method: str, original, what: str):
    """``BsrMatrix.nnz_sync`` / ``status_sync``: refused on a matrix the capture has used, else read now."""

    @functools.wraps(original)
    def guard(self, *args, **kwargs):
        recorder = active()
        if recorder is None or not self.device.is_cpu or recorder.device != self.device:
            return original(self, *args, **kwargs)
        arrays = [self.offsets, getattr(self, "row_counts", None), getattr(self, "_status", None)]
        # As upstream: a status read is refused in any CPU capture once the matrix has a status array (an
        # operation recorded later in the capture may set it, on replay only); a block count only once used.
        outright = method == "status_sync" and getattr(self, "_status", None) is not None
        if outright or any(a is not None and recorder.touches(a) for a in arrays):
            reason = (
                f"reads {what} back to the host, but a sparse operation recorded in a CPU capture sets it "
                "only at replay"
                if outright else f"reads {what} back to the host, but this capture has used or changed the matrix: a "
                "topology update or other work it records runs only at replay"
            )
            error = UnsupportedOperationError(
                f"BsrMatrix.{method}()", f"it {reason}; call {method}() after wp.capture_launch()"
            )
            error.reason = reason
            raise error
        # A matrix the capture never used reads as it would eagerly (upstream's CPU capture pauses too).
        with paused():
            return original(self, *args, **kwargs)

    return guard


_GUARDS = {"nnz_sync": "the matrix's block count (offsets[nrow])", "status_sync": "the sparse status code"}


def install(patches) -> None:
    """Wrap warp.sparse's functions and ``BsrMatrix`` read-backs (recorded in ``patches``, undone with them)."""
    try:
        sparse = __import__(_MODULE, fromlist=["BsrMatrix"])
    except ImportError:  # pragma: no cover - every supported warp-lang has it
        return
    shims = {}
    for name in _FUNCTIONS:
        original = vars(sparse).get(name)
        if callable(original) and type(original).__name__ == "function":
            shims[name] = (original, _wrap(name, original))
    # warp.sparse re-exports them, and Warp modules imported earlier (warp.fem) hold their own names
    owners = [m for key, m in list(sys.modules.items()) if m is not None and (key == "warp" or key.startswith("warp."))]
    for owner in owners:
        own = vars(owner)
        for name, (original, shim) in shims.items():
            if own.get(name) is original:
                patches.set(owner, name, shim)
    matrix = sparse.BsrMatrix
    for method, what in _GUARDS.items():
        original = vars(matrix).get(method)
        if original is not None:
            patches.set(matrix, method, _host_read_guard(method, original, what))
