"""Recording alongside Warp's own CUDA graph capture (``wp.ScopedCapture(device="cuda:N", apic=True)``).

Warp still captures its CUDA graph (every launch, copy and fill is enqueued on the capturing stream
as before), and apic records the same operations, so that the graph can be saved and later
replayed with cuda-python alone (``apic.replay.cuda.loaded_graph``). This module is the recorder (its launch
recording and device checks; what it shares with the CPU recorder is ``apic.record.base``);
``apic.record.cuda.shims`` puts it between Python and Warp:

* **Python-level wrappers** (``wp.launch``, ``Launch.launch``, ``wp.copy``, ``array.zero_/fill_``,
  ``array._init_new``) tell the recorder which kernel is being launched and which arrays an
  operation uses (whole allocations, kept alive), and record allocations made inside the capture.
* **Native sinks** on ``runtime.core`` record what reaches the device: ``wp_cuda_launch_kernel``
  (the packed parameters, grid, block size and dynamic shared memory), ``wp_memcpy_d2d``,
  ``wp_memset_device`` and ``wp_memtile_device``, then call Warp's function unchanged. Any other
  native that would do work on the device (host copies, strided copies, sorts, BVH...) is refused
  with an error naming it while a recording runs on this thread: nothing is silently left out.

Only ``apic=True`` CUDA captures record; others go to Warp exactly as before. The recording is
thread-local and tied to the capturing device.
"""

from __future__ import annotations

import ctypes
import threading

from apic import _compat
from apic.errors import CaptureError
from apic.errors import UnsupportedOperationError as _Unsupported
from apic.record import handles, layout
from apic.record.base import RecorderBase
from apic.record.cuda.control_flow import CudaControlFlow
from apic.record.cuda.params import param_types
from apic.record.launch_args import pointer_value as _as_int
from apic.record.op_addresses import resolve_ops
from apic.record.ops import CudaLaunch, RawBlob
from apic.record.recording import KernelInfo, ModuleInfo, Recording
from apic.targets import cuda as cuda_target

WP_CURRENT_STREAM = 0xFFFFFFFFFFFFFFFF  # Warp's sentinel for "the context's current stream"


class _Local(threading.local):
    # A class default: reading it on a thread that never recorded raises nothing inside getattr, which
    # cost 0.7 us of every wp.capture_launch of a CUDA graph (0.03 us now; benchmarks/cuda_issue.py)
    recorder = None


_local = _Local()


def unsupported(operation: str, hint: str = "") -> _Unsupported:
    """The error for an operation an apic=True CUDA recording cannot record (``hint``: what to do instead)."""
    return _Unsupported(operation, hint, capture="CUDA (apic=True)")


def active() -> "CudaRecorder | None":
    """The CUDA recording running on this thread, if any."""
    return _local.recorder


class CudaModule:
    """A Warp module loaded on the capturing device: the ``Module`` (for its cache paths) and its ``ModuleExec``."""

    def __init__(self, module, module_exec) -> None:
        self.module = module
        self.module_exec = module_exec  # held: keeps the CUmodule (and so the CUfunctions) loaded

    def binary_path(self) -> str:
        return _compat.cuda_module_binary_path(self.module, self.module_exec)


class CudaRecorder(CudaControlFlow, RecorderBase):
    """State of one CUDA recording, from ``capture_begin`` to ``capture_end``."""

    def __init__(self, device, stream: int) -> None:
        super().__init__(device)
        self.context = _as_int(device.context)
        self.stream = stream
        self.arch = int(getattr(device, "arch", 0) or 0)
        self.pending: list = []  # kernels being launched through wp.launch / Launch.launch (innermost last)
        self._functions: dict[tuple[int, int], tuple] = {}  # (id(kernel), CUfunction) -> resolved entry
        self._layouts: dict[tuple[int, bool], tuple] = {}
        self._words: dict[tuple[str, str, int], None] = {}  # (kernel, argument, value): nonzero 64-bit ints

    # --- lifecycle ---------------------------------------------------------------------------------
    @classmethod
    def begin(cls, device, stream: int) -> "CudaRecorder":
        if active() is not None:
            raise CaptureError("an apic CUDA capture is already in progress on this thread")
        recorder = cls(device, stream)
        _local.recorder = recorder
        return recorder

    def abort(self) -> None:
        if active() is self:
            _local.recorder = None

    def end(self) -> Recording:
        self.abort()
        regions, resolve = self._ranges.build()
        ops = resolve_ops(self.ops, resolve)
        return Recording(abi=cuda_target.ABI, regions=tuple(regions), modules=tuple(self._module_infos),
                         kernels=tuple(self._kernel_infos), ops=ops, unsaveable=self._dangling_words())

    def _dangling_words(self) -> tuple[str, ...]:
        """Why a saved copy of this graph would be wrong: a 64-bit integer launch argument that holds a
        native handle's id or an address inside memory the capture uses is a plain value in the file, and
        would point at nothing in the process that loads it (the CPU path remaps ids; CUDA does not yet)."""
        reasons = []
        for kernel, label, value in self._words:
            obj = handles.lookup_any(value)
            if obj is not None:
                what = f"the id of a wp.{handles.kind_of(obj)}"
            elif self._ranges.overlaps(value, value + 1):
                what = "a device address inside memory the graph uses"
            else:
                continue
            reasons.append(f"argument '{label}' of a launch of '{kernel}' holds {what} ({value:#x}) as a plain integer")
        return tuple(reasons)

    # --- the device's memory ---------------------------------------------------------------------------
    def owns(self, device) -> bool:
        return device is not None and not device.is_cpu and _as_int(device.context) == self.context

    def _accepts(self, root, api: str) -> bool:
        if not self.owns(root.device):
            raise unsupported(
                f"{api} with an array on {root.device} during an apic capture on {self.device}",
                "a saved CUDA graph holds memory of the capturing device only",
            )
        return True

    # --- native operations -------------------------------------------------------------------------
    def _check_stream(self, stream, what: str) -> None:
        handle = _as_int(stream)
        if handle not in (self.stream, WP_CURRENT_STREAM, 0):
            raise unsupported(
                f"{what} on another stream than the capturing one", "apic records single-stream CUDA captures"
            )

    def record_launch(self, call: dict) -> None:
        """A ``wp_cuda_launch_kernel`` call (its arguments by name, see ``_compat.cuda_launch_params``)."""
        if not self.pending:
            raise unsupported(
                "a CUDA kernel launch that did not come from wp.launch or Launch.launch",
                "apic cannot tell which kernel it is",
            )
        self._check_stream(call["stream"], "a kernel launch")
        fn = _as_int(call["kernel"])
        kernel, module_exec, adjoint = self._resolve(self.pending[-1], fn)
        if _compat.cuda_entry_abi(kernel) != "warp":
            raise unsupported(
                f"a launch of '{kernel.key}' with entry_point_abi={_compat.cuda_entry_abi(kernel)!r}",
                "apic records kernels with Warp's own entry point only",
            )
        types, params_layout, slots, words = self._layout(kernel, adjoint)
        args = call["args"]
        count = len(args) if isinstance(args, ctypes.Array) else None
        if count != len(params_layout):
            raise unsupported(
                f"a launch of '{kernel.key}' with {count} parameters (its signature has {len(params_layout)})",
                "deterministic-mode and other special launches are not recorded",
            )
        addresses = [_as_int(a) for a in args]
        blob = cuda_target.pack(params_layout, addresses)
        dim = int(call["dim"])
        grid = cuda_target.launch_grid(
            dim, int(call["block_dim"]), int(call["max_blocks"]), bool(call.get("grid_stride", 1)),
            int(call.get("cluster_dim", 1)), self.arch or None,
        )
        if grid is None:
            return  # an empty launch runs nothing (Warp launches nothing either)
        for at, label in words:
            value = int.from_bytes(blob[at : at + 8], "little")
            if value:
                self._words[(str(kernel.key), label, value)] = None
        bounds = types[0].from_buffer_copy(blob[: params_layout.sizes[0]])
        index = self._kernel_index(kernel, module_exec, adjoint, fn, params_layout)
        self.keepalive.append(args)
        self._append(CudaLaunch(
            kernel=index, dim=layout.launch_dim(bounds),
            params=RawBlob(blob, layout.blob_pointers(blob, slots), slots),
            grid=grid.grid, block=grid.block, smem=int(call["smem"]),
        ))

    def _resolve(self, kernel, fn: int):
        """The concrete kernel (an overload of a generic one), its loaded module and direction behind ``fn``."""
        key = (id(kernel), fn)
        found = self._functions.get(key)
        if found is not None:
            return found
        candidates = [kernel, *getattr(kernel, "overloads", {}).values()]
        for candidate in candidates:
            if getattr(candidate, "is_generic", False):
                continue  # only its overloads are compiled
            for module_exec in list(candidate.module.execs.values()):
                if module_exec is None or _as_int(getattr(module_exec.device, "context", 0)) != self.context:
                    continue
                try:
                    hooks = module_exec.get_kernel_hooks(candidate)
                except Exception:
                    continue
                for adjoint, entry in ((False, hooks.forward), (True, hooks.backward)):
                    if entry is not None and _as_int(entry) == fn:
                        self.keepalive.append(candidate)
                        found = self._functions[key] = (candidate, module_exec, adjoint)
                        return found
        raise unsupported(
            f"a CUDA launch of '{kernel.key}' apic cannot match to a loaded entry point of that kernel"
        )

    def _layout(self, kernel, adjoint: bool):
        key = (id(kernel), adjoint)
        found = self._layouts.get(key)
        if found is None:
            types = param_types(kernel, adjoint)
            params_layout = cuda_target.param_layout(types)
            slots = array_slots(kernel, types, params_layout, adjoint)
            words = word_slots(kernel, types, params_layout)  # where an id or pointer may hide
            found = self._layouts[key] = (types, params_layout, slots, words)
        return found

    def _kernel_index(self, kernel, module_exec, adjoint: bool, fn: int, params_layout) -> int:
        symbol = _compat.cuda_kernel_symbol(module_exec, kernel, adjoint)
        return self._intern_kernel(
            module_exec, symbol, lambda: ModuleInfo(kernel.module.name, CudaModule(kernel.module, module_exec)),
            lambda module: KernelInfo(module, str(kernel.key), symbol, adjoint, fn,
                                      tuple(zip(params_layout.offsets, params_layout.sizes))))

    # --- Warp's device memory natives (their arguments as ctypes passes them) ---------------------------
    def device_memcpy(self, context, dst, src, nbytes, stream=None) -> None:
        """``wp_memcpy_d2d``."""
        self._check_stream(stream, "wp.copy")
        self.record_memcpy(_as_int(dst), _as_int(src), _as_int(nbytes))

    def device_memset(self, context, dst, value, nbytes, stream=None) -> None:
        """``wp_memset_device``."""
        self._check_stream(stream, "a memset")
        self.record_memset(_as_int(dst), _as_int(value), _as_int(nbytes))

    def device_memtile(self, context, dst, src, srcsize, reps) -> None:
        """``wp_memtile_device`` (``src``: a host pointer to the fill value)."""
        self.record_memtile(_as_int(dst), _as_int(src), _as_int(srcsize), _as_int(reps))


def array_slots(kernel, types: list, params_layout: cuda_target.ParamLayout, adjoint: bool) -> tuple:
    """The array descriptors (``ArraySlot``) inside a param blob: pointers that need relocating."""
    args = kernel.adj.args
    found = []
    entries = [(a, False) for a in args] + ([(a, True) for a in args] if adjoint else [])
    for i, (arg, adj) in enumerate(entries, start=1):
        label = f"adj_{arg.label}" if adj else arg.label
        found += layout.array_slots(arg.type, types[i], params_layout.offsets[i], label)
    return tuple(found)


def word_slots(kernel, types: list, params_layout: cuda_target.ParamLayout) -> tuple[tuple[int, str], ...]:
    """``(offset, argument label)`` of every 64-bit integer (``uint64``, ``int64``, ``wp.handle``) among the
    forward arguments in a param blob: where a native handle's id or a raw pointer may hide."""
    found = []
    for i, arg in enumerate(kernel.adj.args, start=1):
        found += [(at, arg.label) for at in layout.word_slots(arg.type, types[i], params_layout.offsets[i])]
    return tuple(found)


def refuse_while_recording(api: str) -> None:
    """Refuse what would pause an apic CUDA recording or hide ops from it (Warp's own pauses around the
    bodies of a conditional it builds are let through: ``apic.record.cuda.control_flow``)."""
    recorder = active()
    if recorder is not None and not recorder.warp_internal:
        raise _Unsupported(api, "apic records linear CUDA graphs only", capture="CUDA (apic=True)")
