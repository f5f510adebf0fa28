"""The arguments of a ``wp.launch`` call, of a ``Launch`` object and of a Warp native, as both recorders read them."""

from __future__ import annotations

import ctypes

from apic import _compat
from apic.errors import CaptureError

# wp.launch(kernel, dim, inputs, outputs, adj_inputs, adj_outputs, device, stream, adjoint,
# record_tape, record_cmd, ...): the positions of the arguments the recorders need. Read by hand
# rather than with inspect.Signature.bind, which would cost more than the rest of the capture.
LAUNCH_ARRAY_ARGS = (("inputs", 2), ("outputs", 3), ("adj_inputs", 4), ("adj_outputs", 5))
LAUNCH_OTHER_ARGS = (("device", 6), ("stream", 7), ("record_cmd", 10))


def launch_arg(args, kwargs, name: str, position: int, default=None):
    """Argument ``name`` of a ``wp.launch(*args, **kwargs)`` call, at ``position`` if passed positionally."""
    return args[position] if len(args) > position else kwargs.get(name, default)


def launch_arguments(launch) -> list:
    """The Python values a ``Launch`` object's packed parameters were made from (where known)."""
    if _compat.LAUNCH_KEEPS_ARGS:
        return [*(launch.fwd_args or ()), *(launch.adj_args or ())]
    return list(getattr(launch, "_apic_args", {}).values())


def pointer_value(value) -> int:
    """An argument as ctypes code passes it to a Warp native (int, c_void_p, pointer(...), array, byref) as an int."""
    if value is None:
        return 0
    if isinstance(value, int):
        return value
    if isinstance(value, ctypes._SimpleCData):  # c_void_p, c_size_t, c_int, ...
        return value.value or 0
    if isinstance(value, ctypes._Pointer):
        return ctypes.addressof(value.contents)
    if isinstance(value, (ctypes.Array, ctypes.Structure)):
        return ctypes.addressof(value)
    if type(value).__name__ == "CArgObject":  # ctypes.byref(x)
        return ctypes.addressof(value._obj) + getattr(value, "_offset", 0)
    raise CaptureError(f"apic cannot read a pointer argument of type {type(value).__name__}")
