"""The CUDA recording's place between Python and Warp: wrappers of Warp's Python API and sinks on its CUDA natives.

Installed by ``apic.installation`` (the wrappers at install, layered over apic's CPU shims; the natives at
the first ``apic=True`` CUDA capture), they tell ``apic.record.cuda.recorder``'s recorder what a launch or copy
uses and record what reaches the device, only while a recording runs on this thread.
"""

from __future__ import annotations

import ctypes
import functools

import warp as wp

from apic import _compat
from apic._compat import wp_context, wp_types
from apic.record.cuda import fill as cuda_fill, recorder as cuda_recorder
from apic.record.launch_args import LAUNCH_ARRAY_ARGS, launch_arg, launch_arguments
from apic.record.launch_args import pointer_value as _as_int


# --- Python-level wrappers -------------------------------------------------------------------------
def _wrap_launch(inner):
    @functools.wraps(inner)
    def launch(*args, **kwargs):
        recorder = cuda_recorder.active()
        if recorder is None or launch_arg(args, kwargs, "record_cmd", 10, False):
            return inner(*args, **kwargs)
        stream = launch_arg(args, kwargs, "stream", 7)
        device = stream.device if stream is not None else wp.get_device(launch_arg(args, kwargs, "device", 6))
        if not recorder.owns(device):
            return inner(*args, **kwargs)
        kernel = launch_arg(args, kwargs, "kernel", 0)
        for name, position in LAUNCH_ARRAY_ARGS:
            recorder.note_values(launch_arg(args, kwargs, name, position, ()) or (), f"wp.launch('{kernel.key}')")
        recorder.pending.append(kernel)
        try:
            return inner(*args, **kwargs)
        finally:
            recorder.pending.pop()

    return launch


def _wrap_launch_object(inner):
    def launch(self, *args, **kwargs):
        recorder = cuda_recorder.active()
        if recorder is None or not recorder.owns(self.device):
            return inner(self, *args, **kwargs)
        recorder.keepalive.append(self)
        recorder.note_values(launch_arguments(self), f"Launch.launch('{self.kernel.key}')")
        recorder.pending.append(self.kernel)
        try:
            return inner(self, *args, **kwargs)
        finally:
            recorder.pending.pop()

    return launch


def _wrap_copy(inner):
    @functools.wraps(inner)
    def copy(dest, src, *args, **kwargs):
        recorder = cuda_recorder.active()
        if recorder is not None and any(recorder.owns(getattr(a, "device", None)) for a in (dest, src)):
            recorder.note_values([dest, src], "wp.copy")
        return inner(dest, src, *args, **kwargs)

    return copy


def _wrap_array_method(name: str, inner):
    @functools.wraps(inner)
    def method(self, *args, **kwargs):
        recorder = cuda_recorder.active()
        if recorder is not None and recorder.owns(self.device):
            recorder.note_values([self], f"array.{name}")
        return inner(self, *args, **kwargs)

    return method


def _wrap_init_new(inner):
    def _init_new(self, *args, **kwargs):
        result = inner(self, *args, **kwargs)
        recorder = cuda_recorder.active()
        if recorder is not None and recorder.owns(self.device):
            recorder.record_alloc(self)
        return result

    return _init_new


def patch(patches) -> None:
    """Layer the Python-level wrappers over Warp (and apic's CPU shims); ``patches`` undoes them."""
    for owner in (wp, wp_context):
        patches.set(owner, "launch", _wrap_launch(owner.launch))
        patches.set(owner, "copy", _wrap_copy(owner.copy))
    patches.set(wp_context.Launch, "launch", _wrap_launch_object(vars(wp_context.Launch)["launch"]))
    patches.set(wp_types.array, "_init_new", _wrap_init_new(vars(wp_types.array)["_init_new"]))
    for value in list(vars(wp_types).values()):
        if isinstance(value, type):
            for name in ("zero_", "fill_"):
                if name in vars(value):
                    patches.set(value, name, _wrap_array_method(name, vars(value)[name]))


# --- native sinks ------------------------------------------------------------------------------------
def _launch_sink(original, names):
    @functools.wraps(original)
    def sink(*args):
        recorder = cuda_recorder.active()
        if recorder is not None:
            call = dict(zip(names, args))
            if _as_int(call["context"]) == recorder.context:
                recorder.record_launch(call)
        return original(*args)

    return sink


def _memory_sink(original, method: str):
    @functools.wraps(original)
    def sink(*args):
        recorder = cuda_recorder.active()
        if recorder is not None and args and _as_int(args[0]) == recorder.context:
            getattr(recorder, method)(*args)
        return original(*args)

    return sink


def _memtile_sink(original):
    """``wp_memtile_device``: recorded, and done by apic itself (``apic.record.cuda.fill``: warp-lang 1.12's own
    fill breaks a capture)."""
    @functools.wraps(original)
    def sink(context, dst, src, srcsize, reps):
        recorder = cuda_recorder.active()
        if recorder is None or _as_int(context) != recorder.context:
            return original(context, dst, src, srcsize, reps)
        recorder.device_memtile(context, dst, src, srcsize, reps)
        at, size, count = _as_int(dst), _as_int(srcsize), _as_int(reps)
        if count == 0 or size == 0:
            return None
        stream = _as_int(_compat.runtime().core.wp_cuda_context_get_stream(recorder.context))  # Warp's current
        cuda_fill.fill(recorder.context, stream, at, ctypes.string_at(_as_int(src), size), count)
        return None

    return sink


def _refusing_sink(name: str, original):
    @functools.wraps(original)
    def sink(*args):
        if cuda_recorder.active() is not None:
            raise cuda_recorder.unsupported(
                f"{name} (native) during an apic CUDA capture", "apic does not record this Warp operation on CUDA yet"
            )
        return original(*args)

    return sink


_MEMORY_SINKS = {"memcpy_d2d": "device_memcpy", "memset_device": "device_memset"}
# Natives that move or compute device data and that apic does not record (refused during a recording).
_REFUSED = ("memcpy_h2d", "memcpy_d2h", "memcpy_p2p", "memcpy_peer", "memcpy_batch", "cuda_graph_insert_memcpy",
            "cuda_graph_update_memcpy")


def patch_natives(patches) -> None:
    """Patch Warp's CUDA launch and device memory natives into ``patches`` (needs an initialised runtime)."""
    core = _compat.runtime().core
    names = _compat.cuda_launch_params()
    patches.set(core, "wp_cuda_launch_kernel", _launch_sink(core.wp_cuda_launch_kernel, names))
    for attr, value in list(vars(core).items()):
        if not attr.startswith("wp_") or not isinstance(value, ctypes._CFuncPtr):
            continue
        name = attr[3:]
        if name == "memtile_device":
            patches.set(core, attr, _memtile_sink(value))
        elif name in _MEMORY_SINKS:
            patches.set(core, attr, _memory_sink(value, _MEMORY_SINKS[name]))
        elif name.startswith(_REFUSED) or (
            name.endswith("_device") and not name.startswith(("alloc_", "free_", "cuda_"))
            and not name.endswith("_destroy_device")
        ):
            patches.set(core, attr, _refusing_sink(attr, value))


def abort() -> None:
    """Abandon this thread's CUDA recording, if any (``apic.uninstall``)."""
    recorder = cuda_recorder.active()
    if recorder is not None:
        recorder.abort()
