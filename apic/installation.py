"""Installing apic into warp and removing it again: the one owner of the patch logs.

``import apic`` calls :func:`install`; ``apic.uninstall()`` calls :func:`uninstall`, which undoes every
patch in reverse order and leaves warp exactly as it was. What is patched where:

* at install, the Python-level shims (``apic.record.cpu.shims``, ``apic.record.cpu.launch_shims``), the Mesh/Bvh/HashGrid methods
  (``apic.record.cpu.handle_shims``), warp.sparse (``apic.record.cpu.sparse``), the capture API
  (``apic.capture``), saving and loading (``apic.persist``), and the CUDA recording's wrappers
  (``apic.record.cuda.shims``), layered on top of the CPU shims;
* at the first ``apic.param`` (or at install, when one exists), Warp's ``pack_arg``
  (``apic.record.cpu.launch_shims.enable_params``: no cost for programs that never make one);
* at the first CPU capture, Warp's native host functions (``apic.record.cpu.native_sinks``; they need an initialised runtime) and warp.fem's
  temporaries (once warp.fem is imported); at the first ``apic=True`` CUDA capture, the CUDA natives.

Nothing below this module imports it: a capture reaches the lazy steps through ``apic.patches.before_capture``.
"""  # noqa: E501 (long docstring lines kept: rewrapping would change __doc__)

from __future__ import annotations

import warp as wp

from apic import _compat, capture, patches, persist
from apic.record import params
from apic._compat import wp_context
from apic.errors import CaptureError
from apic.record.cuda import shims as cuda_shims
from apic.record.cpu import fem, handle_shims, launch_shims, native_sinks, shims, sparse

_python = patches.Patches()  # Python-level patches, from install on
_native = patches.Patches()  # Warp's native host functions, from the first CPU capture on
_cuda_native = patches.Patches()  # Warp's CUDA natives, from the first apic=True CUDA capture on

# Upstream's saving and loading (warp 1.13+ has its native APIC, which must never see an apic graph;
# warp <= 1.12 has none: uninstall deletes them there).
_PERSIST = ("capture_save", "capture_load", "capture_load_from_bytes")
# apic's own persistence calls, beside upstream's in the ``wp`` namespace (uninstall removes them)
_PERSIST_APIC = ("capture_save_to_bytes",)


def install() -> None:
    """Install the Python-level shims (idempotent). Native sinks follow at the first capture."""
    if _python:
        return
    shims.patch(_python)
    handle_shims.patch(_python)
    capture.patch(_python)
    for owner in (wp, wp_context):
        for name in _PERSIST:
            _python.set(owner, name, getattr(persist, name))
    for name in _PERSIST_APIC:
        _python.set(wp, name, getattr(persist, name))
    sparse.install(_python)  # warp.sparse functions (their native BSR calls) and BsrMatrix read-backs
    cuda_shims.patch(_python)  # recording alongside Warp's CUDA capture (apic=True), layered on top
    patches.set_before_capture(_before_capture)
    params.set_on_create(launch_shims.enable_params)  # the first apic.param routes Warp's pack_arg
    if params.created():  # placeholders made before an uninstall / install cycle still work
        launch_shims.enable_params()


def uninstall() -> None:
    """Remove every patch and leave warp exactly as it was before ``import apic``."""
    patches.set_before_capture(None)
    params.set_on_create(None)
    capture.abort_all()
    cuda_shims.abort()
    _cuda_native.restore()
    _native.restore()
    _python.restore()
    _compat.native_address.cache_clear()


def is_installed() -> bool:
    """Whether apic's patches are on warp (``import apic`` installs them)."""
    return bool(_python)


def ensure_native_sinks() -> None:
    """What a CPU capture needs: Warp's native host functions patched, and warp.fem's temporaries."""
    if not _python:
        raise CaptureError("apic is uninstalled; call apic.install() first")
    if not _native:
        native_sinks.patch_natives(_native)
    fem.install(_python)  # warp.fem temporaries, once warp.fem is imported (idempotent)


def ensure_cuda_native_sinks() -> None:
    """What an ``apic=True`` CUDA capture needs: Warp's CUDA launch and device memory natives patched."""
    if not _python:
        raise CaptureError("apic is uninstalled; call apic.install() first")
    if not _cuda_native:
        cuda_shims.patch_natives(_cuda_native)


def _before_capture(cuda_capture: bool) -> None:
    if cuda_capture:
        ensure_cuda_native_sinks()
    else:
        ensure_native_sinks()
