"""What the CPU and the CUDA recorders share: noting the values an operation uses, allocations, the
module and kernel tables, and the plain memory ops.

A recorder (``apic.record.cpu.recorder.Recorder`` for the CPU, ``apic.record.cuda.recorder.CudaRecorder`` for CUDA)
says which memory is its device's (``_accepts``) and what else a value may be (``_note_value``); the
rest is here, so that both record an allocation, a copy or a module the same way.
"""

from __future__ import annotations

import ctypes

from apic._compat import wp_types
from apic.record.op_addresses import intern_op
from apic.record.ops import Alloc, Memcpy, Memset, Memtile, RawBlob, RawPtr
from apic.record.recording import ModuleInfo
from apic.record.regions import ArrayInfo, RegionTableBuilder


class RecorderBase:
    """State every recording holds from ``capture_begin`` to ``capture_end``."""

    def __init__(self, device) -> None:
        self.device = device
        self.ops: list = []
        self.keepalive: list = []  # Python objects whose memory the ops use
        self._noted: set[int] = set()  # ids of values already noted (kept alive, so ids stay unique)
        self._ranges = RegionTableBuilder()
        self._interned: dict = {}  # every distinct op, to itself
        self._modules: dict[int, int] = {}  # id(module_exec) -> index
        self._module_infos: list[ModuleInfo] = []
        self._kernels: dict[tuple[int, str], int] = {}  # (id(module_exec), symbol) -> index
        self._kernel_infos: list = []  # apic.record.recording.KernelInfo

    def _append(self, op) -> None:
        self.ops.append(intern_op(op, self._interned, self._ranges))

    # --- the device's memory ---------------------------------------------------------------------------
    def _accepts(self, root, api: str) -> bool:  # pragma: no cover - each recorder says
        """Whether the allocation ``root`` (used by ``api``) is memory of the recorded device; may refuse it."""
        raise NotImplementedError

    def _note_value(self, value) -> None:
        """A value an operation uses that is neither a number, a struct nor None (a hook: nothing here)."""

    # --- context from the Python-level API ---------------------------------------------------------------
    def note_values(self, values, api: str = "") -> None:
        """Keep ``values`` alive and note the whole allocations behind any Warp arrays among them
        (``api``: the operation that uses them, for an error)."""
        noted = self._noted
        for value in values:
            if id(value) in noted or value is None or isinstance(value, (int, float, bool)):
                continue
            if hasattr(type(value), "_constructors"):  # a @wp.struct instance
                # Its fields can be reassigned between launches (and after the capture): walk it
                # every time, and keep the arrays in it alive themselves, not through the struct.
                self.note_values([getattr(value, name) for name, _ in type(value)._constructors], api)
                continue
            self._note_value(value)
            noted.add(id(value))
            self.keepalive.append(value)
            self._note_arrays(value, api)

    def _note_arrays(self, value, api: str) -> None:
        if isinstance(value, wp_types.array):
            self._note_allocation(value, api)
            if getattr(value, "grad", None) is not None:
                self._note_allocation(value.grad, api)
        elif isinstance(value, wp_types.indexedarray):
            self._note_arrays(value.data, api)
            for index in value.indices:
                if index is not None:
                    self._note_arrays(index, api)

    def _note_allocation(self, arr, api: str = "", owned: bool = False) -> None:
        """The whole allocation behind ``arr`` (a view's root), with its type facts where it is one array."""
        root = arr
        while isinstance(getattr(root, "_ref", None), wp_types.array):
            root = root._ref
        if not root.ptr or not root.capacity or not self._accepts(root, api):
            return
        nbytes = root.size * wp_types.type_size_in_bytes(root.dtype)
        info = None
        if root.is_contiguous and nbytes == root.capacity:
            info = ArrayInfo(wp_types.type_repr(root.dtype), tuple(root.shape), tuple(root.strides))
        self._ranges.note(root.ptr, root.ptr + root.capacity, used=owned, owned=owned, array=info)

    def record_alloc(self, arr) -> None:
        """An array allocated inside the capture: the graph owns its memory from now on (saved by size)."""
        if not arr.ptr:
            return
        self.keepalive.append(arr)
        self._note_allocation(arr, "an allocation", owned=True)
        self._append(Alloc(RawPtr(arr.ptr, arr.ptr, arr.ptr + arr.capacity), arr.capacity))

    # --- the module and kernel tables ------------------------------------------------------------------
    def _intern_kernel(self, module_exec, symbol: str, new_module, new_kernel) -> int:
        """The index of entry point ``symbol`` of the loaded ``module_exec``, added on its first use:
        ``new_module()`` makes the module's ``ModuleInfo`` (on the module's first use), and
        ``new_kernel(module index)`` the ``KernelInfo``."""
        key = (id(module_exec), symbol)
        index = self._kernels.get(key)
        if index is None:
            module_index = self._modules.get(id(module_exec))
            if module_index is None:
                module_index = self._modules[id(module_exec)] = len(self._module_infos)
                self._module_infos.append(new_module())
            index = self._kernels[key] = len(self._kernel_infos)
            self._kernel_infos.append(new_kernel(module_index))
        return index

    # --- plain memory ops --------------------------------------------------------------------------------
    # A zero-byte memory op does nothing, and Warp may pass it a null pointer (zero_() of an empty
    # array): record nothing, as eager Warp does nothing.
    def record_memcpy(self, dst: int, src: int, nbytes: int) -> None:
        if nbytes == 0:
            return
        self._append(Memcpy(RawPtr(dst, dst, dst + nbytes), RawPtr(src, src, src + nbytes), nbytes))

    def record_memset(self, dst: int, value: int, nbytes: int) -> None:
        if nbytes == 0:
            return
        self._append(Memset(RawPtr(dst, dst, dst + nbytes), value & 0xFF, nbytes))

    def record_memtile(self, dst: int, src: int, srcsize: int, reps: int) -> None:
        """``reps`` copies of the ``srcsize`` bytes at the host address ``src`` (the fill value, kept now)."""
        if srcsize * reps == 0:
            return
        value = ctypes.string_at(src, srcsize)
        self._append(Memtile(RawPtr(dst, dst, dst + srcsize * reps), RawBlob(value), reps))
