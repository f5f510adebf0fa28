"""Install and remove apic's patches on warp, and restore warp exactly as it was.

Two layers, each with one job:

* **Python-level shims** (``wp.launch``, ``Launch.launch``, ``wp.copy``, ``array.zero_/fill_``,
  ``array._init_new/_init_from_data``, reads such as ``array.numpy``, and the capture API) tell the
  recorder which Python objects an operation uses, so it can keep them alive and know whole
  allocations, then call Warp's own code unchanged: Warp still validates and packs everything.
* **Native sinks** (Warp's ``invoke``, its host memory functions, and every other ``wp_*host*``
  export) sit where Warp would execute. During a CPU capture on this thread they record instead of
  running. Host utilities and memcpy/memset/memtile are recorded whatever Python called them (as
  upstream records them), on the memory of live Warp arrays (``apic.record.native_layer``); other
  natives reached without a recordable API refuse with an error naming the function. Outside a
  capture they call straight through.
"""

from __future__ import annotations

import ctypes
import functools
import inspect
import sys

import warp as wp

from apic import _compat
from apic._compat import wp_context, wp_types
from apic.bindings import dtype_name
from apic.errors import BindingError, CaptureError, UnsupportedOperationError
from apic.params import Param
from apic.record import handles, native_layer, natives, segments
from apic.record.ops import Launch
from apic.record.launch_args import LAUNCH_ARRAY_ARGS, LAUNCH_OTHER_ARGS, launch_arg, launch_arguments
from apic.record.launch_args import pointer_value as _as_int
from apic.record.recorder import active, paused
from apic.record.repeats import repeat_key


_originals: dict[str, object] = {}  # Warp's functions the shims call, saved by ``patch``
_patches = None  # the patch log ``patch`` was given (``apic.installation``'s): ``enable_params`` adds to it


# --- Python-level shims ------------------------------------------------------------------------------
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
    if key is not None and len(recorder.ops) == before + 1 and type(recorder.ops[-1]) is Launch:
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


def _recorded_call(recorder, original, args, kwargs):
    """Run Warp's own implementation with its native memory calls recorded."""
    recorder.api_depth += 1
    try:
        return original(*args, **kwargs)
    finally:
        recorder.api_depth -= 1


def _copy(*args, **kwargs):
    recorder = active()
    if recorder is None:
        return _originals["copy"](*args, **kwargs)
    call = _COPY_SIGNATURE.bind(*args, **kwargs).arguments
    dest, src = call.get("dest"), call.get("src")
    on_cpu = [a.device.is_cpu for a in (dest, src) if hasattr(a, "device")]
    if not any(on_cpu):
        return _originals["copy"](*args, **kwargs)  # a copy between CUDA arrays is not ours to record
    if not all(on_cpu):
        raise UnsupportedOperationError(
            f"wp.copy from {src.device} to {dest.device}", "a CPU capture records host-to-host copies only"
        )
    recorder.note_values([dest, src])
    return _recorded_call(recorder, _originals["copy"], args, kwargs)


def _array_method(name: str, cls: type):
    original = vars(cls)[name]

    @functools.wraps(original)
    def shim(self, *args, **kwargs):
        recorder = active()
        if recorder is None or not self.device.is_cpu:
            return original(self, *args, **kwargs)
        recorder.note_values([self])
        return _recorded_call(recorder, original, (self, *args), kwargs)

    return shim


def _init_new(self, *args, **kwargs):
    result = _originals["array._init_new"](self, *args, **kwargs)
    recorder = active()
    if recorder is not None and self.device is not None and self.device.is_cpu:
        recorder.record_alloc(self)
    return result


def _init_from_data(self, data, dtype, shape, device, copy, pinned):
    recorder = active()
    if recorder is None or not (copy or pinned) or not wp.get_device(device).is_cpu:
        return _originals["array._init_from_data"](self, data, dtype, shape, device, copy, pinned)
    # Warp would convert ``data`` to a temporary NumPy array and wp.copy from a view that does not
    # keep it alive, so the graph would replay a copy from freed memory. Make the source a view
    # that owns its memory (``copy=False`` keeps it in ``_ref``) and copy from it as Warp does:
    # the recorded copy then keeps the source alive.
    host = wp_types.array(data, dtype=dtype, shape=shape, device="cpu", copy=False)
    self._init_new(host.dtype, host.shape, None, device, pinned)
    wp.copy(self, host)


def _read_guard(name: str, cls: type):
    original = vars(cls)[name]

    @functools.wraps(original)
    def shim(self, *args, **kwargs):
        recorder = active()
        if recorder is None or not self.device.is_cpu:
            return original(self, *args, **kwargs)
        if recorder.touches(self):
            raise CaptureError(
                f"array.{name}() reads an array during a CPU capture, before the captured work has run; "
                "read it after wp.capture_launch()"
            )
        # Memory the capture never used reads as it would eagerly. Warp may read through a temporary
        # copy (indexed arrays): that copy must run now, not be recorded into the graph.
        with paused():
            return original(self, *args, **kwargs)

    return shim


# wp.utils functions that end in a recorded native call (see apic.record.natives), and the parameter
# whose None asks for a host return value, which a record-only capture cannot produce.
_UTILITIES = {
    "array_scan": None, "radix_sort_pairs": None, "segmented_sort_pairs": None,
    "runlength_encode": "run_count", "array_sum": "out", "array_inner": "out",
}


def _utility(name: str, original):
    host_return = _UTILITIES[name]
    signature = inspect.signature(original)

    @functools.wraps(original)
    def shim(*args, **kwargs):
        recorder = active()
        if recorder is None:
            return original(*args, **kwargs)
        arrays = [v for v in (*args, *kwargs.values()) if isinstance(v, wp_types.array)]
        if not any(a.device.is_cpu for a in arrays):
            return original(*args, **kwargs)  # CUDA work is not ours to record
        if host_return is not None and signature.bind(*args, **kwargs).arguments.get(host_return) is None:
            if name == "runlength_encode" and _no_values(signature, args, kwargs):
                return original(*args, **kwargs)  # returns 0 without touching memory, as upstream records it
            raise UnsupportedOperationError(
                f"wp.utils.{name} without {host_return}",
                f"its host return value would be read before the captured work has run; pass {host_return}=",
            )
        if any(stride < 0 for a in arrays for stride in a.strides):
            raise UnsupportedOperationError(f"wp.utils.{name} on an array with a negative stride")
        if name == "segmented_sort_pairs" and not segments.check(signature.bind(*args, **kwargs).arguments):
            return None  # as upstream 1.19: no element or no segment, nothing to sort and nothing recorded
        recorder.note_values(arrays)
        return _recorded_call(recorder, original, args, kwargs)

    return shim


def _no_values(signature, args, kwargs) -> bool:
    """Whether a ``runlength_encode`` call encodes no value (``value_count=0``, or an empty ``values``)."""
    call = signature.bind(*args, **kwargs).arguments
    count = call.get("value_count")
    return (count if count is not None else getattr(call.get("values"), "size", 1)) == 0


# --- native sinks ------------------------------------------------------------------------------------
def _invoke_sink(original, cpu_blocks: bool = False):
    @functools.wraps(original)
    def sink(kernel, hooks, params, adjoint):
        recorder = active()
        if recorder is None:
            return original(kernel, hooks, params, adjoint)
        recorder.record_launch(kernel, hooks, params, adjoint, cpu_blocks)

    return sink


def _as_number(value):
    """A float argument stays a float (a hash grid's radius); anything else as ``_as_int``."""
    return value if isinstance(value, float) else _as_int(value)


def _recording_sink(name: str, original, record, where: str, convert=_as_int, outside_api=None):
    """A native host function that, during a capture, calls ``record(recorder, args)`` instead.

    It records only when reached from a recordable Python API (``where`` names them for the error),
    or, given ``outside_api(recorder, name, args)`` (which notes the memory the call reaches, or
    refuses it), from anywhere; ``convert`` turns each argument as ctypes code passes it into a number.
    """

    @functools.wraps(original)
    def sink(*args):
        recorder = active()
        if recorder is None:
            return original(*args)
        values = tuple(map(convert, args))
        if recorder.api_depth == 0:
            if outside_api is None:
                raise UnsupportedOperationError(f"wp_{name} (native)", f"apic records it only when called through {where}")
            outside_api(recorder, name, values)
        record(recorder, values)
        return True  # success, for the callers that check it

    return sink


def _memory_sink(name: str, original, method: str):
    """A host memory function (memcpy, memset, ...) recorded from wp.copy / zero_ / fill_."""
    record = lambda recorder, args: getattr(recorder, method)(*args)  # noqa: E731
    # Upstream records memcpy / memset / memtile at the native layer too, whatever Python called them.
    return _recording_sink(name, original, record, "wp.copy, array.zero_ or array.fill_",
                           outside_api=native_layer.note_memory_arguments)


# Native host memory functions and the recorder method that records each (same argument order).
_MEMORY_SINKS = {
    "memcpy_h2h": "record_memcpy",
    "memset_host": "record_memset",
    "memtile_host": "record_memtile",
    "array_copy_host": "record_array_copy",
    "array_fill_host": "record_array_fill",
}

# Host exports that are safe to run during a capture: allocation, and queries that change nothing.
_NATIVE_ALLOWED = ("alloc_host", "free_host", "is_", "get_", "_get", "float_to_", "half_bits", "cuda_")


def _utility_sink(name: str, original):
    """A native host utility (``apic.record.natives``) recorded from its ``wp.utils`` or warp.sparse function."""
    record = lambda recorder, args: recorder.record_native_call(name, args)  # noqa: E731
    # Upstream records these at the native layer, whatever Python called them (see native_layer).
    return _recording_sink(name, original, record, natives.api_of(name), outside_api=native_layer.note_arguments)


def _handle_sink(name: str, original):
    """A native method of a Mesh / Bvh / HashGrid (``apic.record.handles``) recorded from its Python method."""
    record = lambda recorder, args: recorder.record_handle_call(name, args)  # noqa: E731
    # Upstream records these at the native layer too, whatever Python called them (see native_layer).
    return _recording_sink(name, original, record, "its wp.Mesh / wp.Bvh / wp.HashGrid method", _as_number,
                           outside_api=native_layer.note_handle_arguments)


def _refusing_sink(name: str, original):
    @functools.wraps(original)
    def sink(*args):
        if active() is not None:
            raise UnsupportedOperationError(f"{name} (native)", "apic does not record this Warp native call yet")
        return original(*args)

    return sink


def patch_natives(patches) -> None:
    """Patch Warp's native entry points into ``patches``. Needs an initialised runtime, so runs at first capture."""
    runtime = _compat.runtime()
    patches.set(wp_context, "invoke", _invoke_sink(wp_context.invoke))
    if _compat.invoke_cpu_blocks is not None:
        patches.set(wp_context, "invoke_cpu_blocks", _invoke_sink(_compat.invoke_cpu_blocks, cpu_blocks=True))
    core = runtime.core
    sinks = {}
    for attr, value in list(vars(core).items()):
        name = attr[3:]
        if not attr.startswith("wp_") or not isinstance(value, ctypes._CFuncPtr):
            continue
        if "host" not in name and name not in _MEMORY_SINKS:
            continue
        if name in _MEMORY_SINKS:
            sinks[name] = _memory_sink(name, value, _MEMORY_SINKS[name])
            patches.set(core, attr, sinks[name])
        elif name in natives.NAMES:
            patches.set(core, attr, _utility_sink(name, value))
        elif name in handles.NATIVE_CALLS:
            patches.set(core, attr, _handle_sink(name, value))
        elif not any(token in name for token in _NATIVE_ALLOWED):
            patches.set(core, attr, _refusing_sink(attr, value))
    # The CPU device binds memset/memtile to the native functions once, at init.
    cpu = runtime.cpu_device
    patches.set(cpu, "memset", sinks["memset_host"])
    patches.set(cpu, "memtile", sinks["memtile_host"])


# --- install / uninstall -------------------------------------------------------------------------
def _array_classes():
    """Warp's array classes that define their own ``zero_``/``fill_`` (indexed, fixed, fabric...)."""
    classes = []
    for value in vars(wp_types).values():
        if isinstance(value, type) and ("zero_" in vars(value) or "fill_" in vars(value)):
            classes.append(value)
    return classes


def patch(patches) -> None:
    """Put the Python-level shims over Warp's functions and methods, recording each change in ``patches``."""
    global _COPY_SIGNATURE, _patches
    _patches = patches
    _originals["launch"] = wp_context.launch
    _originals["copy"] = wp_context.copy
    _originals["Launch.launch"] = vars(wp_context.Launch)["launch"]
    _originals["array._init_new"] = vars(wp_types.array)["_init_new"]
    _originals["array._init_from_data"] = vars(wp_types.array)["_init_from_data"]
    launch_params = list(inspect.signature(wp_context.launch).parameters)
    if len(launch_params) <= 10 or any(launch_params[i] != name for name, i in LAUNCH_ARRAY_ARGS + LAUNCH_OTHER_ARGS):
        raise ImportError(f"apic does not recognise the signature of wp.launch in warp-lang {_compat.WARP_VERSION}")
    _COPY_SIGNATURE = inspect.signature(wp_context.copy)

    for owner in (wp, wp_context):
        patches.set(owner, "launch", functools.wraps(_originals["launch"])(_launch))
        patches.set(owner, "copy", functools.wraps(_originals["copy"])(_copy))
    patches.set(wp_context.Launch, "launch", _launch_object_launch)
    if not _compat.LAUNCH_KEEPS_ARGS:
        # Up to warp 1.14 a Launch keeps only packed ctypes values, which do not keep arrays alive;
        # note the Python values (set_param_by_name and set_params go through set_param_at_index).
        _originals["Launch.set_param_at_index"] = vars(wp_context.Launch)["set_param_at_index"]
        patches.set(wp_context.Launch, "set_param_at_index", _launch_object_set_param)
        _originals["Launch.set_param_at_index_from_ctype"] = vars(wp_context.Launch)["set_param_at_index_from_ctype"]
        patches.set(wp_context.Launch, "set_param_at_index_from_ctype", _launch_object_set_ctype)
    patches.set(wp_types.array, "_init_new", _init_new)
    patches.set(wp_types.array, "_init_from_data", _init_from_data)
    for cls in _array_classes():
        for name in ("zero_", "fill_"):
            if name in vars(cls):
                patches.set(cls, name, _array_method(name, cls))
        for name in ("numpy", "list"):
            if name in vars(cls):
                patches.set(cls, name, _read_guard(name, cls))
    # Warp modules imported before apic (warp.fem, warp.optim, ...) hold their own names for these
    # functions: point every one at the shim, so `import apic` after them behaves as before them.
    owners = [m for key, m in list(sys.modules.items()) if m is not None and (key == "warp" or key.startswith("warp."))]
    for name in _UTILITIES:
        original = vars(_compat.wp_utils)[name]
        shim = _utility(name, original)
        for owner in owners:
            if vars(owner).get(name) is original:
                patches.set(owner, name, shim)
