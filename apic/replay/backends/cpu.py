"""What the CPU backends share (:mod:`apic.replay.backends`): a loaded graph's host memory (regions
allocated zeroed, 64-byte aligned, owned by the graph), its modules loaded through Warp's LLVM backend under
names unique to the load, its native handles built again, the named-array copies in and out of host memory,
and a replay through the backend's interpreter (``serial_entry`` / ``run_rows``: each backend binds its own
in ``_bind_interpreter``).
"""

from __future__ import annotations

import dataclasses
import itertools
import re
import weakref

import numpy as np
import warp as wp

from apic import _compat
from apic.errors import BindingError, FormatError, GraphMemoryError
from apic.record import bindings as b
from apic.record import handles
from apic.record.recording import ModuleInfo
from apic.replay.backends import Backend
from apic.targets.cpu import CPU_LEVELS

_ALIGN = 64
_load_ids = itertools.count()
_loaded: set[str] = set()  # LLVM module names loaded for graphs and not unloaded yet


class CpuBackend(Backend):
    """A CPU backend: host memory and Warp's CPU modules; a subclass gives the interpreter that runs a lowered
    op table (``_bind_interpreter``), which ``apic.replay.program.Program`` reaches through ``serial_entry``
    and ``run_rows``."""

    device_kind = "cpu"
    keeps_untouched_arrays = True
    records_inline = True  # an apic CPU graph as a branch body of a CPU capture: its ops, inline (record_graph)
    memory_on_host = True
    # the native serial run (``native_interpreter.SERIAL_RUN``), or False where ``_run_table`` (a
    # Python-called interpreter: the Numba dispatcher or the reference one) runs tables; None until bound
    _native = None
    _run_table = None
    _pooled = True  # whether ``_run_table`` runs OP_SPLIT rows on the splitter's pool (the reference one runs them)

    def _bind_interpreter(self) -> None:
        """Bind the interpreter on the first replay (not on import): set ``_native``, or ``_native = False``
        and ``_run_table`` / ``_pooled``."""
        raise NotImplementedError

    def serial_entry(self):
        """The native serial interpreter's entry (called with a call block's address; returns a status), or
        None where this backend's tables run through :meth:`run_rows` (an interpreter called from Python)."""
        native = self._native
        if native is None:
            self._bind_interpreter()
            native = self._native
        return native or None

    def run_rows(self, table, repeats: int, limits, loops: int, threads: int) -> int:
        """Run ``table`` ``repeats`` times through the Python-called interpreter (where :meth:`serial_entry`
        is None); returns its status. A table cut for ``threads`` > 1 runs its splits on the pool."""
        if self._native is None:
            self._bind_interpreter()
        if threads > 1 and self._pooled:
            from apic.replay.parallel.split_pool import workers  # imported already: Program.parallel made the table

            with workers(threads):
                return self._run_table(table, repeats, limits, loops)
        return self._run_table(table, repeats, limits, loops)

    def device(self, requested):
        dev = wp.get_device("cpu" if requested is None else requested)
        if not dev.is_cpu:
            raise ValueError(f"this is a CPU graph and replays on the CPU; cannot load it onto {dev}")
        return dev

    def load(self, saved, images: dict, device, services):
        return load_graph(saved, images, device, services, self)

    def launch(self, graph, stream=None, threads=None) -> None:
        graph.launch(1, threads)  # positional: keyword arguments cost time on every launch

    def launch_many(self, graph, repeats: int, threads=None) -> None:
        graph.launch(repeats, threads)  # every repeat in one native call

    def write_binding(self, graph, binding, arr) -> None:
        address = graph.region_addresses[binding.region]
        if b.is_warp_array(arr):
            b.check_array(binding, arr, "set_param")
            b.binding_view(binding, address)[...] = b.array_view(arr)
            return
        source = b.array_like_copy(binding, arr, f"set_param('{binding.name}')")
        b.typed_view(binding, address, graph)[...] = source

    def read_binding(self, graph, binding, arr) -> None:
        where = f"get_param('{binding.name}')"
        b.check_writable(arr, where)
        address = graph.region_addresses[binding.region]
        if isinstance(arr, np.ndarray):
            view = b.typed_view(binding, address, graph)
            if arr.shape != view.shape or arr.dtype != view.dtype:
                raise BindingError(f"{where}: the array is {arr.dtype} {arr.shape}; expected {view.dtype} {view.shape}")
            arr[...] = view
            return
        b.check_array(binding, arr, "get_param")
        b.array_view(arr)[...] = b.binding_view(binding, address)


def loaded_modules() -> frozenset[str]:
    """The LLVM names of the module objects loaded for graphs that are still alive."""
    return frozenset(_loaded)


def _unload(handle: str) -> None:
    _loaded.discard(handle)
    _compat.unload_object(handle)


class LoadedModule:
    """A module binary loaded for a loaded graph; holds the code in place like a live ``ModuleExec``."""

    def __init__(self, name: str, image: bytes, native_types: tuple[str, ...], cpu_level: str | None = None) -> None:
        safe = re.sub(r"[^A-Za-z0-9_]", "_", name)[:64]
        self.handle = f"apic_load_{next(_load_ids)}_{safe}"
        self.apic_image = image  # kept so that a loaded graph can be saved again
        self.native_types = tuple(native_types)
        # the CPU level the object was compiled for (None: a host's): code built again from the module's
        # source for this graph (range entries) is built for it too, so it computes the same bits
        self.apic_cpu_level = cpu_level
        _compat.load_object(image, self.handle)
        _loaded.add(self.handle)
        self._unload = weakref.finalize(self, _unload, self.handle)
        self._unload.atexit = False  # at interpreter exit Warp may already be gone

    def lookup(self, symbol: str) -> int:
        """The address of ``symbol``; never asked of an unloaded module (warp <= 1.12 would crash)."""
        if not self._unload.alive or self.handle not in _loaded:
            raise RuntimeError(f"module {self.handle} was unloaded")
        return _compat.lookup_symbol(self.handle, symbol)


def _allocate(nbytes: int, index: int) -> tuple[np.ndarray, int, np.ndarray]:
    """A zeroed buffer with ``nbytes`` usable bytes at a 64-byte aligned address; (owner, address, view)."""
    try:
        owner = np.zeros(nbytes + _ALIGN, dtype=np.uint8)
    except (MemoryError, ValueError):
        raise GraphMemoryError(f"cannot allocate {nbytes:,} bytes for region {index} of the graph") from None
    pad = -owner.ctypes.data % _ALIGN
    return owner, owner.ctypes.data + pad, owner[pad : pad + nbytes]


def load_graph(saved, images: dict[str, bytes], device, services, backend):
    """Allocate, fill, load and lower: the loaded ``apic.Graph``, replayed by ``backend``. ``services`` (from the
    loader): ``graph_type`` (``apic.Graph``, the type made here), ``sources`` (``apic.format.source``: a module's
    saved source), ``check_handle_data``, ``id_arrays`` (``apic.format.manifest_check.check``: the arrays of
    handle ids each launch passes, checked at replay) and ``compiled`` (the module files whose object was compiled
    here rather than saved)."""
    id_arrays, compiled, source_format = services.id_arrays, services.compiled, services.sources
    recording = saved.recording
    buffers, addresses, views, regions = [], [], [], []
    for region, contents in zip(recording.regions, saved.contents):
        owner, address, view = _allocate(region.nbytes, region.id)
        if contents:
            view[:] = np.frombuffer(contents, dtype=np.uint8)
        buffers.append(owner)
        addresses.append(address)
        views.append(view)
        regions.append(dataclasses.replace(region, address=address))

    loaded: dict[str, LoadedModule] = {}
    modules = []
    level = saved.target.get("cpu") if saved.target.get("cpu") in CPU_LEVELS else None
    for entry in saved.modules:
        if entry.file not in loaded:
            try:
                loaded[entry.file] = LoadedModule(entry.name, images[entry.file], entry.native_types,
                                                  None if entry.file in compiled else level)
            except RuntimeError as error:  # Warp's loader rejected the object: its source, if saved
                images[entry.file] = source_format.rebuilt_after_rejection(entry, images, error,
                                                                           saved.writer.get("warp"))
                loaded[entry.file] = LoadedModule(entry.name, images[entry.file], entry.native_types)
            # for range entries and a later save: only the source the object's kernel manifest names
            loaded[entry.file].apic_source = source_format.kept_source(entry, images)
            loaded[entry.file].apic_source_unbound = entry.source is not None and loaded[entry.file].apic_source is None
        modules.append(ModuleInfo(entry.name, loaded[entry.file]))

    kernels = []
    for kernel in recording.kernels:
        file = saved.modules[kernel.module].file
        # Every symbol name is in the object file's string table, NUL-terminated (ELF, COFF, Mach-O);
        # checking there first keeps names the JIT would not find (and would complain about) from it.
        found = kernel.symbol.encode() + b"\0" in images[file]
        address = modules[kernel.module].module_exec.lookup(kernel.symbol) if found else 0
        if not address:
            raise FormatError(f"kernel '{kernel.key}': symbol {kernel.symbol} is not in module file '{file}'")
        kernels.append(dataclasses.replace(kernel, address=address))

    rebuilt = _rebuild_handles(saved, addresses, views, services.check_handle_data)
    live = dataclasses.replace(recording, regions=tuple(regions), modules=tuple(modules), kernels=tuple(kernels),
                               handles=rebuilt)
    return services.graph_type(
        live, device, apic=True, keepalive=buffers, is_loaded=True, region_addresses=addresses,
        kernel_addresses=[k.address for k in kernels], bindings=saved.bindings, id_arrays=id_arrays,
        backend=backend,
    )


def _rebuild_handles(saved, addresses: list[int], views: list[np.ndarray], check_handle_data) -> tuple:
    """Build every native handle again over the loaded regions; write the new ids into saved memory.

    What the native builders read is checked first (``apic.format.handles.check_handle_data``).
    """
    rebuilt = []
    for index, (handle, data) in enumerate(zip(saved.recording.handles, saved.volume_data)):
        check_handle_data(index, handle, views)  # before Warp's native builder reads it
        try:
            obj = handles.rebuild(handle, lambda ref: addresses[ref.region] + ref.offset, data)
        except (RuntimeError, ValueError, TypeError) as error:  # Warp's own checks of what the file holds
            raise FormatError(f"invalid apic graph file: handles[{index}]: Warp could not build the "
                              f"wp.{handle.kind} it describes: {error}") from error
        rebuilt.append(dataclasses.replace(handle, obj=obj))
    _write_slot_ids(saved.handle_slots, [handle.obj.id for handle in rebuilt], views)
    return tuple(rebuilt)


def _write_slot_ids(slots, ids: list[int], views: list[np.ndarray]) -> None:
    """Write each slot's handle id into the loaded memory: region by region with NumPy where the slots are
    whole aligned words (an array of a million mesh ids), else one at a time."""
    if not slots:
        return
    table = np.array(slots, dtype=np.int64)
    values = np.array(ids, dtype=np.uint64)[table[:, 2]]
    for region in np.unique(table[:, 0]).tolist():
        view = views[region]
        rows = table[:, 0] == region
        offsets = table[rows, 1]
        if view.nbytes % 8 == 0 and view.ctypes.data % 8 == 0 and not (offsets % 8).any():
            view.view(np.uint64)[offsets // 8] = values[rows]
            continue
        for offset, value in zip(offsets.tolist(), values[rows].tolist()):
            view[offset : offset + 8].view(np.uint64)[0] = value
