"""The launch shims of a CPU capture: ``wp.launch``, ``wp.Launch.launch`` and Warp's ``pack_arg``.

They tell the recorder which Python objects a launch uses (kept alive, whole allocations noted) and
which argument received a named parameter (``apic.param``), then call Warp's own code unchanged:
Warp still validates and packs everything, and its native ``invoke`` (``apic.record.cpu.native_sinks``)
records the launch. A launch seen before records its op again without Warp (``apic.record.cpu.repeats``).
"""

from __future__ import annotations

import functools
import inspect

import warp as wp

from apic import _compat
from apic._compat import wp_context, wp_types
from apic.record.bindings import dtype_name
from apic.errors import BindingError, UnsupportedOperationError
from apic.record.params import Param
from apic.record.cpu.active_recorder import active
from apic.record.launch_args import LAUNCH_ARRAY_ARGS, LAUNCH_OTHER_ARGS, launch_arg, launch_arguments
from apic.record.ops import is_cpu_launch
from apic.record.cpu.repeats import repeat_key

_originals: dict[str, object] = {}  # Warp's functions the shims call, saved by ``patch``
_patches = None  # the patch log ``patch`` was given (``apic.installation``'s): ``enable_params`` adds to it


def _launch(*args, **kwargs):
    recorder = active()
    if recorder is None:
        return _launch_eagerly(args, kwargs)
    # The hot path of a capture. A call seen before records its op again without Warp (see repeats).
    key = repeat_key(args, kwargs)
    if key is not None:
        op = recorder.repeats.get(key)
        if op is not None:
            recorder.ops.append(op)
            return None
    # Arguments read inline. The launch's device is not resolved here: a CUDA array noted by a CPU
    # capture is only kept alive (no region: its memory is not the CPU's).
    n = len(args)
    if not (args[10] if n > 10 else kwargs.get("record_cmd", False)):
        for name, position in LAUNCH_ARRAY_ARGS:
            values = args[position] if n > position else kwargs.get(name)
            if values:
                recorder.note_values(values)
    before = len(recorder.ops)
    recorder.pending_params = []  # named parameters (apic.param) this call packs, for its launch op
    try:
        result = _launch_eagerly(args, kwargs)
    finally:
        recorder.pending_params = None
    if key is not None and len(recorder.ops) == before + 1 and is_cpu_launch(recorder.ops[-1]):
        recorder.repeats[key] = recorder.ops[-1]  # the call made exactly one CPU launch op
    return result


def _launch_eagerly(args, kwargs):
    """Warp's own ``wp.launch`` (whose native invoke a capture records)."""
    result = _originals["launch"](*args, **kwargs)
    if not _compat.LAUNCH_KEEPS_ARGS and isinstance(result, wp_context.Launch):
        # Warp < 1.15: the Launch keeps only packed ctypes values; remember the Python ones.
        fwd = [*launch_arg(args, kwargs, "inputs", 2, ()), *launch_arg(args, kwargs, "outputs", 3, ())]
        adj = [*launch_arg(args, kwargs, "adj_inputs", 4, ()), *launch_arg(args, kwargs, "adj_outputs", 5, ())]
        result._apic_args = {**{(False, i): v for i, v in enumerate(fwd)}, **{(True, i): v for i, v in enumerate(adj)}}
    return result


def _launch_object_launch(self, *args, **kwargs):
    recorder = active()
    if recorder is None or not self.device.is_cpu:
        return _originals["Launch.launch"](self, *args, **kwargs)
    values = launch_arguments(self)
    if any(isinstance(v, (wp_types.array_t, wp_types.indexedarray_t)) for v in values):
        # As upstream: a raw descriptor holds an address but no array that the graph could keep alive.
        raise UnsupportedOperationError(
            f"wp.Launch.launch() of kernel '{self.kernel.key}'",
            "a parameter holds a raw array ctype (set_param_at_index_from_ctype), which keeps no array alive; "
            "pass the warp.array with set_param_at_index() during a CPU capture",
        )
    named = next((v for v in values if type(v) is Param), None)
    if named is not None:
        raise UnsupportedOperationError(
            f"wp.Launch.launch() of kernel '{self.kernel.key}' with the named parameter '{named.name}'",
            "a Launch command holds its arguments packed, so the capture could not find the parameter; "
            "pass apic.param values to wp.launch",
        )
    recorder.keepalive.append(self)
    recorder.note_values(values)
    recorder.launch_module_exec = getattr(self, "module_exec", None)
    try:
        return _originals["Launch.launch"](self, *args, **kwargs)
    finally:
        recorder.launch_module_exec = None


def _launch_object_set_param(self, index, value, adjoint=False):
    """Warp < 1.15: remember the Python value behind a replaced parameter (see ``_launch``)."""
    _originals["Launch.set_param_at_index"](self, index, value, adjoint)
    vars(self).setdefault("_apic_args", {})[(bool(adjoint), index)] = value


def _launch_object_set_ctype(self, index, value, *args, **kwargs):
    """Warp < 1.15: the value behind a parameter replaced by a ctype (refused by ``_launch_object_launch``
    if it is an array descriptor); ``adjoint`` where the method takes it."""
    _originals["Launch.set_param_at_index_from_ctype"](self, index, value, *args, **kwargs)
    adjoint = bool(args[0] if args else kwargs.get("adjoint", False))
    vars(self).setdefault("_apic_args", {})[(adjoint, index)] = value


def _pack_arg(kernel, arg_type, arg_name, value, device, adjoint=False):
    """Warp's ``pack_arg``; a named parameter (``apic.Param``) is packed as its value, and a CPU capture
    notes which argument of the launch in progress received it (``Recorder.pending_params``)."""
    if type(value) is not Param:
        return _originals["pack_arg"](kernel, arg_type, arg_name, value, device, adjoint)
    if dtype_name(arg_type) != value.spec.dtype:
        raise BindingError(
            f"Error launching kernel '{kernel.key}': argument '{arg_name}' is {dtype_name(arg_type)}, but the named "
            f"parameter '{value.name}' passed to it is {value.spec.dtype}")
    dev = device if isinstance(device, wp_context.Device) else wp.get_device(device)
    recorder = active()
    if dev.is_cpu and recorder is not None:
        if recorder.pending_params is None:  # a wp.Launch command's parameter, set during the capture
            raise UnsupportedOperationError(
                f"the named parameter '{value.name}' given to a wp.Launch command of kernel '{kernel.key}'",
                "a Launch command holds its arguments packed, so the capture could not find the parameter; "
                "pass apic.param values to wp.launch")
        index = next(i for i, a in enumerate(kernel.adj.args) if a.label == arg_name)
        recorder.pending_params.append((bool(adjoint), index, value))
    elif not dev.is_cpu and (recorder is not None or dev.is_capturing):
        raise UnsupportedOperationError(
            f"the named parameter '{value.name}' in a launch of kernel '{kernel.key}' on {dev}",
            "named parameters are recorded by CPU captures only; pass the value itself")
    return _originals["pack_arg"](kernel, arg_type, arg_name, value.warp_value(arg_type), device, adjoint)


def enable_params() -> None:
    """Route Warp's ``pack_arg`` through ``_pack_arg`` (on the first ``apic.param``: no cost before).

    A no-op while apic is uninstalled; ``apic.installation`` calls it at install when a parameter exists.
    """
    if _patches and wp_context.pack_arg is not _pack_arg:
        _originals["pack_arg"] = wp_context.pack_arg
        _patches.set(wp_context, "pack_arg", _pack_arg)


def patch(patches) -> None:
    """Put the launch shims over Warp's, recording each change in ``patches``."""
    global _patches
    _patches = patches
    _originals["launch"] = wp_context.launch
    _originals["Launch.launch"] = vars(wp_context.Launch)["launch"]
    launch_params = list(inspect.signature(wp_context.launch).parameters)
    if len(launch_params) <= 10 or any(launch_params[i] != name for name, i in LAUNCH_ARRAY_ARGS + LAUNCH_OTHER_ARGS):
        raise ImportError(f"apic does not recognise the signature of wp.launch in warp-lang {_compat.WARP_VERSION}")
    for owner in (wp, wp_context):
        patches.set(owner, "launch", functools.wraps(_originals["launch"])(_launch))
    patches.set(wp_context.Launch, "launch", _launch_object_launch)
    if not _compat.LAUNCH_KEEPS_ARGS:
        # Up to warp 1.14 a Launch keeps only packed ctypes values, which do not keep arrays alive;
        # note the Python values (set_param_by_name and set_params go through set_param_at_index).
        _originals["Launch.set_param_at_index"] = vars(wp_context.Launch)["set_param_at_index"]
        patches.set(wp_context.Launch, "set_param_at_index", _launch_object_set_param)
        _originals["Launch.set_param_at_index_from_ctype"] = vars(wp_context.Launch)["set_param_at_index_from_ctype"]
        patches.set(wp_context.Launch, "set_param_at_index_from_ctype", _launch_object_set_ctype)
