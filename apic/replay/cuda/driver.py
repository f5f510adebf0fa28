"""The CUDA driver as a loaded CUDA graph calls it: cuda-python's bindings, every failure an apic error."""

from __future__ import annotations

from apic import _compat
from apic.errors import ApicError
from apic.targets.cuda import DRIVER_LIBRARY


class CudaReplayError(ApicError, RuntimeError):
    """A CUDA driver call made by apic failed (the message names the call and the driver's error)."""


def driver_module():
    """cuda-python's driver bindings (``cuda.bindings.driver``, or ``cuda.cuda`` in older releases)."""
    return _compat.cuda_driver()  # looked up per call: the offline tests stand a driver in there


def result_name(code: int) -> str:
    """The driver's name of ``CUresult`` ``code`` (cuda-python's enum), else the number."""
    try:
        return driver_module().CUresult(code).name
    except Exception:  # noqa: BLE001 - no cuda-python, or a code it does not know: the number says it
        return f"CUresult {code}"


def unavailable_reason() -> str | None:
    """Why a CUDA graph cannot be replayed here (no cuda-python, no driver, no GPU), or None if it can."""
    try:
        cu = driver_module()
    except ImportError as error:
        return str(error)
    try:
        err, = cu.cuInit(0)[:1]
        if int(err) != 0:
            return f"the CUDA driver cannot be initialised ({err})"
        err, count = cu.cuDeviceGetCount()
        if int(err) != 0 or count == 0:
            return "no CUDA device"
    except Exception as error:  # no driver library at all
        return f"no CUDA driver ({type(error).__name__}: {error})"
    return None


class Driver:
    """Calls cuda-python, turning a non-success ``CUresult`` into ``CudaReplayError``."""

    def __init__(self) -> None:
        self.cu = driver_module()
        # the C library whose entry points the graph's op-table rows call (apic.replay.cuda.rows): the driver
        # library behind cuda-python; a stand-in for cuda-python names its own (``entry_library``: None where
        # its handles are no library's, and the rows are not made)
        self.library = getattr(self.cu, "entry_library", DRIVER_LIBRARY)

    def __call__(self, name: str, *args):
        try:
            result = getattr(self.cu, name)(*args)
        except RuntimeError as error:
            # cuda-python raises, rather than returning a CUresult, when it cannot load the driver
            # library (cuda.pathfinder's DynamicLibNotFoundError; "Failed to dlopen libcuda.so.1" in
            # 11.x) or the driver lacks the function ('Function "cuX" not found'): a TypeError or
            # OverflowError (a wrong argument) is apic's bug and passes through unchanged.
            raise CudaReplayError(
                f"{name} could not reach the CUDA driver: {type(error).__name__}: {error}"
            ) from error
        err, values = (result[0], result[1:]) if isinstance(result, tuple) else (result, ())
        if int(err) != 0:
            raise CudaReplayError(f"{name} failed: {self.error_name(err)}")
        return values[0] if len(values) == 1 else (values or None)

    def error_name(self, err) -> str:
        try:
            _, name = self.cu.cuGetErrorName(err)
            return name.decode() if isinstance(name, bytes) else str(name)
        except Exception:  # pragma: no cover
            return str(err)

    def attribute(self, name: str, device) -> int:
        return int(self("cuDeviceGetAttribute", getattr(self.cu.CUdevice_attribute, name), device))


def device_ordinal(device) -> int:
    """The CUDA ordinal of ``device`` (None, ``"cuda"``, ``"cuda:N"``, a Warp CUDA device); refuses others."""
    if device is None:
        return 0
    ordinal = getattr(device, "ordinal", None)
    if isinstance(ordinal, int) and getattr(device, "is_cuda", False):
        return ordinal
    text = str(device)
    if text == "cuda":
        return 0
    if text.startswith("cuda:") and text[5:].isdigit():
        return int(text[5:])
    raise ValueError(f"this is a CUDA graph and replays on a CUDA device ('cuda:N'); cannot load it onto {device}")
