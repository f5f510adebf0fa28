"""The native sinks of a CPU capture: Warp's ``invoke``, its host memory functions, and every other
``wp_*host*`` export, patched where Warp would execute.

During a CPU capture on this thread they record instead of running. Host utilities and
memcpy/memset/memtile are recorded whatever Python called them (as upstream records them), on the
memory of live Warp arrays (``apic.record.cpu.native_layer``); other natives reached without a recordable
API refuse with an error naming the function. Outside a capture they call straight through.
"""

from __future__ import annotations

import ctypes
import functools

from apic import _compat
from apic._compat import wp_context
from apic.errors import UnsupportedOperationError
from apic.record import handles, natives
from apic.record.cpu import native_layer
from apic.record.cpu.active_recorder import active
from apic.record.launch_args import pointer_value as _as_int


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
                raise UnsupportedOperationError(
                    f"wp_{name} (native)", f"apic records it only when called through {where}"
                )
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
