"""The arguments of a ``wp.launch`` call and of a ``Launch`` object, as both recorders read them."""

from __future__ import annotations

from apic import _compat

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
