"""The CPU recorder: what a running CPU capture has seen, turned into a ``Recording`` at the end.

The shims (``shims.py``, ``launch_shims.py``, ``native_sinks.py``) call in here; nothing in this module
patches Warp. What both recorders share (noting values and allocations, the module and kernel tables,
plain memory ops) is ``apic.record.base``; control flow is ``apic.record.control_flow``; which recorder
records on this thread is ``apic.record.cpu.active_recorder``.
"""

from __future__ import annotations

import ctypes
import dataclasses

from apic import _compat
from apic._compat import wp_types
from apic.errors import BindingError, CaptureError, UnsupportedOperationError
from apic.record.params import Param, unpack
from apic.record.cpu import active_recorder
from apic.record import handles, layout, natives
from apic.record.base import RecorderBase
from apic.record.control_flow import ControlFlowRecording
from apic.record.cpu.active_recorder import active, paused  # noqa: F401  (also asked here: fem.py, sparse.py, tests)
from apic.record.ops import ArrayCopy, ArrayFill, ArraySlot, HandleCall, HandleRef, Launch, NativeCall, ParamSlot
from apic.record.op_addresses import resolve_ops
from apic.record.ops import RawBlob, RawHandle, RawPtr, cpu_launches
from apic.record.recording import KernelInfo, ModuleInfo, Recording
from apic.record.parallel.footprint import footprint_claim
from apic.record.parallel.splittable import written_offsets
from apic.record.parallel.world_split import split_refusal, world_offsets
from apic.targets.cpu import ARRAY_TYPE_INDEXED as _ARRAY_TYPE_INDEXED  # Warp's array type ids for the
from apic.targets.cpu import ARRAY_TYPE_REGULAR as _ARRAY_TYPE_REGULAR  # strided/indexed copy and fill helpers
from apic.targets.cpu import HASH_GRID_BUILD


class Recorder(ControlFlowRecording, RecorderBase):
    """State of one CPU capture, from ``capture_begin`` to ``capture_end``."""

    def __init__(self, device, apic: bool) -> None:
        super().__init__(device)
        self.apic = apic
        # (id(hooks), adjoint) -> (kernel index, number of kernel arguments): one lookup per launch
        self._entry_points: dict[tuple[int, bool], tuple[int, int]] = {}
        self._launches: dict[tuple, Launch] = {}  # identical launches share one op (found before packing)
        self.repeats: dict[tuple, Launch] = {}  # wp.launch calls seen before -> their op (apic.record.cpu.repeats)
        self._layouts: dict[tuple, layout.ArgsLayout] = {}  # (id(kernel), param types) -> layout
        self._handles: dict[int, object] = {}  # id -> Mesh / Bvh / HashGrid / Volume the ops reach
        self.api_depth = 0  # > 0 while inside a Python-level API whose native calls are recorded
        self.invalid_handles: list[str] = []  # wp.handle arguments that hold no live object's id
        self.launch_module_exec = None  # the loaded module a Launch object being launched holds (launch_shims)
        # (adjoint, argument index, apic.Param) packed by the wp.launch call in progress (None: no call)
        self.pending_params: list | None = None
        self._params: dict = {}  # name -> apic.record.params.ScalarParam of every named parameter the ops hold

    # --- lifecycle ---------------------------------------------------------------------------------
    @classmethod
    def begin(cls, device, apic: bool) -> "Recorder":
        if active() is not None:
            raise CaptureError("Graph capture already in progress on this thread (nested captures are not supported)")
        recorder = cls(device, apic)
        active_recorder.set_active(recorder)
        return recorder

    def abort(self) -> None:
        active_recorder.forget(self)

    def end(self) -> Recording:
        """Stop recording and resolve every address into a region reference."""
        self.abort()
        if any(op is None for op in self.ops):  # pragma: no cover - a control-flow body left unfinished
            raise CaptureError("a wp.capture_if / capture_while body was not finished when the capture ended")
        for value in self._ranges.words_among(handles.live_ids()):
            self.note_handle(handles.lookup(value))  # an id stored in memory the ops use
        regions, resolve = self._ranges.build()
        index = {value: i for i, value in enumerate(self._handles)}
        params = self._param_values()
        ops = resolve_ops(self.ops, resolve, lambda value: HandleRef(index[value]))
        return Recording(
            abi=_compat.KERNEL_ABI,
            regions=tuple(regions),
            modules=tuple(self._module_infos),
            kernels=tuple(self._kernel_infos),
            ops=ops,
            handles=tuple(handles.describe(obj, resolve) for obj in self._handles.values()),
            invalid_handles=tuple(dict.fromkeys(self.invalid_handles)),
            params=params,
        )

    # --- named scalar parameters (apic.param) ------------------------------------------------------------
    def note_param(self, spec) -> None:
        """A named parameter the ops hold: one name, one type (its value is read from the ops at the end)."""
        known = self._params.setdefault(spec.name, spec)
        if (known.dtype, known.np_dtype, known.elem_shape) != (spec.dtype, spec.np_dtype, spec.elem_shape):
            raise BindingError(f"parameter '{spec.name}' is used as {known.dtype} and as {spec.dtype} in one capture; "
                               "one name is one parameter of one type")

    def _param_slots(self, kernel, entries, layout_) -> tuple:
        """``ParamSlot`` of each ``(argument index, apic.Param)`` packed into a blob of ``layout_``."""
        slots = []
        for index, param in entries:
            field = getattr(layout_.struct_type, f"a{index}")
            if field.size != param.spec.nbytes:  # pragma: no cover - pack_arg checked the argument's type
                raise BindingError(f"parameter '{param.name}' ({param.spec.nbytes} bytes) packed into a "
                                   f"{field.size}-byte argument of kernel '{kernel.key}'")
            self.note_param(param.spec)
            slots.append(ParamSlot(field.offset, param.name))
        return tuple(sorted(slots))

    def _param_values(self) -> tuple:
        """Each named parameter with its value, read from the blobs; every launch must agree on it."""
        values: dict = {}
        for op in cpu_launches(self.ops):
            for blob in (op.args, op.adj_args):
                for slot in () if blob is None else blob.params:
                    spec = self._params[slot.name]
                    data = bytes(blob.data[slot.at : slot.at + spec.nbytes])
                    first = values.setdefault(slot.name, data)
                    if first != data:
                        raise CaptureError(
                            f"parameter '{slot.name}' was passed with two values in one capture "
                            f"({unpack(spec, first)!r} and {unpack(spec, data)!r}); a named parameter has one "
                            "value at a time (change it with graph.set_param after the capture)")
        return tuple(
            dataclasses.replace(spec, value=values.get(name, spec.value)) for name, spec in self._params.items()
        )

    # --- native handles (Mesh, Bvh, HashGrid, Volume) --------------------------------------------------
    def note_handle(self, obj) -> None:
        """The ops reach ``obj`` by id: keep it, and make the arrays it was built over part of the graph."""
        if obj.id in self._handles:
            return
        kind = handles.kind_of(obj)
        if kind is None:
            raise CaptureError(f"{type(obj).__name__} is not a native handle apic records")
        self._handles[obj.id] = obj
        self.keepalive.append(obj)
        for _, arr in handles.handle_arrays(kind, obj):
            if arr is not None:
                self._note_allocation(arr)
                self._ranges.note(arr.ptr, arr.ptr + arr.size * wp_types.type_size_in_bytes(arr.dtype), used=True)

    def _handle_words(self, data: bytes, words) -> list:
        """``(offset, RawHandle)`` for each 64-bit integer argument that holds a live handle's id."""
        found = []
        for at in words:
            value = int.from_bytes(data[at : at + 8], "little")
            obj = handles.lookup(value) if value else None
            if obj is not None:
                self.note_handle(obj)
                found.append((at, RawHandle(value)))
        return found

    def record_handle_call(self, name: str, args: tuple) -> None:
        """A native method of a handle (``wp_mesh_refit_host(id)``, ...; see ``handles.NATIVE_CALLS``)."""
        obj = handles.lookup(int(args[0]))
        if obj is None:
            raise CaptureError(f"wp_{name}: {int(args[0]):#x} is not the id of a live Warp object")
        self.note_handle(obj)
        handle = RawHandle(obj.id)
        if name != HASH_GRID_BUILD:
            self._append(HandleCall(name, handle, tuple(int(a) for a in args[1:])))
            return
        type_id, radius, points = int(args[1]), float(args[2]), int(args[3])
        elem_size = handles.GRID_POINT_SIZES.get(type_id)
        if elem_size is None:
            raise UnsupportedOperationError(f"wp_{name} (native)", f"unknown hash grid point type {type_id}")
        blob = _descriptor_blob(points, _ARRAY_TYPE_REGULAR, elem_size, "wp.HashGrid.build")
        groups = None
        if len(args) > 4 and args[4]:  # warp 1.19: the groups' array descriptor (a temporary), kept as a blob
            groups = _descriptor_blob(int(args[4]), _ARRAY_TYPE_REGULAR, 4, "wp.HashGrid.build")
        self._append(HandleCall(name, handle, (type_id,), radius, blob, groups))

    # --- the device's memory ---------------------------------------------------------------------------
    def _accepts(self, root, api: str) -> bool:
        return root.device.is_cpu  # a CUDA array noted by a CPU capture is only kept alive (no region)

    def _note_value(self, value) -> None:
        if type(value) is Param:  # a named parameter: the graph has it even where no launch packs it (dim 0)
            self.note_param(value.spec)

    def touches(self, arr) -> bool:
        """Whether the capture so far has used any memory of ``arr`` (an indexed array's data or indices)."""
        if isinstance(arr, wp_types.indexedarray):
            return self.touches(arr.data) or any(i is not None and self.touches(i) for i in arr.indices)
        return bool(arr.ptr) and self._ranges.overlaps(arr.ptr, arr.ptr + max(arr.capacity, 1))

    # --- native operations -------------------------------------------------------------------------
    def record_launch(self, kernel, hooks, params, adjoint: bool, cpu_blocks: bool = False) -> None:
        """A CPU kernel invocation (what Warp's ``invoke``, or ``invoke_cpu_blocks``, would have run).

        The hot path of a capture: the packed parameters are copied into the op, nothing else of
        ``params`` is kept (the arrays behind them were noted by the ``wp.launch`` shim).
        """
        entry = self._entry_points.get((id(hooks), adjoint))
        if entry is None:
            entry = self._entry_point(kernel, hooks, adjoint, cpu_blocks, params)
        pending = self.pending_params
        if params[0].size == 0:
            return  # a zero-size launch (a Launch object after set_dim(0)) runs no thread: nothing to replay
        kernel_index, nargs = entry
        fwd = params[1 : 1 + nargs]
        fwd_layout = self._args_layout(kernel, fwd)
        adj = params[1 + nargs :] if adjoint else None
        adj_layout = self._args_layout(kernel, adj) if adjoint else None
        bounds = bytes(params[0])
        args_data = fwd_layout.pack(fwd)
        adj_data = adj_layout.pack(adj) if adjoint else None
        fwd_slots = adj_slots = ()
        if pending:  # named parameters (apic.param) packed by this wp.launch call: where each one landed
            fwd_slots = self._param_slots(kernel, [(i, p) for a, i, p in pending if not a], fwd_layout)
            if adjoint:
                adj_slots = self._param_slots(kernel, [(i, p) for a, i, p in pending if a], adj_layout)
        # A simulation step repeats the same launch (same kernel, bounds and arguments) many times:
        # such launches share one immutable op, so resolving and lowering it happens once.
        key = (kernel_index, bounds, args_data, adj_data, fwd_slots, adj_slots)
        op = self._launches.get(key)
        if op is None:
            op = self._launches[key] = Launch(
                kernel=kernel_index,
                dim=layout.launch_dim(params[0]),
                bounds=RawBlob(bounds),
                args=self._args_blob(args_data, fwd_layout, fwd_slots, kernel.key),
                adj_args=self._args_blob(adj_data, adj_layout, adj_slots, kernel.key) if adjoint else None,
            )
            self._append(op)
        else:
            self.ops.append(op)

    def _args_blob(self, data: bytes, args_layout: layout.ArgsLayout, params: tuple = (), kernel: str = "") -> RawBlob:
        pointers = layout.blob_pointers(data, args_layout.slots)
        if args_layout.words:
            # a uint64 parameter is the user's number, never a handle id to remap
            words = [at for at in args_layout.words if all(at != slot.at for slot in params)]
            pointers += tuple(self._handle_words(data, words))
        for at in args_layout.handles:
            # A wp.handle argument must hold a live object's id: one that holds none is refused at save, as
            # upstream does (a live replay dereferences it as eager Warp would).
            value = int.from_bytes(data[at : at + 8], "little")
            if value and handles.lookup(value) is None:
                self.invalid_handles.append(f"{value:#x}, held by a wp.handle argument of kernel '{kernel}' (byte {at} "
                                            "of its packed arguments)")
        return RawBlob(data, pointers, args_layout.slots, params)

    def _args_layout(self, kernel, params) -> layout.ArgsLayout:
        # keyed by id: hashing a Warp Kernel costs more than this whole lookup (kept alive by hooks)
        key = (id(kernel), tuple(map(type, params)))
        found = self._layouts.get(key)
        if found is None:
            found = self._layouts[key] = layout.args_layout(kernel, key[1])
            self.keepalive.append(kernel)
        return found

    def _entry_point(self, kernel, hooks, adjoint: bool, cpu_blocks: bool, params) -> tuple[int, int]:
        """The first launch of an entry point in this capture: its kernel table index and arity."""
        fn = hooks.backward if adjoint else hooks.forward
        if fn is None:
            raise CaptureError(f"kernel '{kernel.key}' has no {'backward' if adjoint else 'forward'} entry point")
        self.keepalive.append(hooks)  # keeps id(hooks) unique for the capture's lifetime
        index = self._new_kernel_index(kernel, hooks, fn, adjoint)
        if cpu_blocks and not self._kernel_infos[index].cpu_blocks:
            self._kernel_infos[index] = dataclasses.replace(self._kernel_infos[index], cpu_blocks=True)
        nargs = len(kernel.adj.args)
        info = self._kernel_infos[index]
        if not adjoint and not info.cpu_blocks and info.split_writes is None:
            # decided once per entry point, from the kernel's source and its argument struct; an analysis
            # that fails on an unforeseen kernel leaves it serial, never the capture broken
            world, tiles, footprint = None, False, None
            try:
                layout = self._args_layout(kernel, params[1 : 1 + nargs])
                writes = written_offsets(kernel, layout)
                if writes is None:
                    writes, world, tiles = world_offsets(kernel, layout) or (None, None, False)
                if writes is None:
                    footprint = footprint_claim(kernel, layout)
            except Exception as error:  # noqa: BLE001 - unknown means serial
                writes, world, tiles, footprint = None, None, False, None
                refused = f"the analysis failed: {error!r}"
            else:
                refused = "" if writes is not None else split_refusal(kernel)
            self._kernel_infos[index] = dataclasses.replace(info, split_writes=writes, split_world=world,
                                                            split_tiles=tiles, split_refused=refused,
                                                            split_footprint=footprint)
        entry = self._entry_points[(id(hooks), adjoint)] = (index, nargs)
        return entry

    def _new_kernel_index(self, kernel, hooks, fn, adjoint: bool) -> int:
        module_exec = _find_module_exec(kernel, hooks, self.launch_module_exec)
        symbol = _compat.kernel_symbol(module_exec, kernel, adjoint)
        return self._intern_kernel(
            module_exec, symbol, lambda: ModuleInfo(kernel.module.name, module_exec),
            lambda module: KernelInfo(module, str(kernel.key), symbol, adjoint, _compat.function_address(fn)))

    def record_array_copy(self, dst_desc: int, src_desc: int, dst_type: int, src_type: int, elem_size: int) -> None:
        dst = _descriptor_blob(dst_desc, dst_type, elem_size, "wp.copy")
        src = _descriptor_blob(src_desc, src_type, elem_size, "wp.copy")
        self._append(ArrayCopy(dst, src, dst_type, src_type, elem_size))

    def record_native_call(self, name: str, args: tuple) -> None:
        """A call of one of Warp's native host utilities (``wp_<name>``, see ``natives``)."""
        args, sig, layout = natives.recorded_call(name, args)
        if layout is not None:
            # As upstream: the capacity layout as captured is restored before the transpose at replay, so
            # that a destination whose offsets were reset in between is rebuilt, within the recorded capacity.
            self.record_memtile(args[6], args[6], 4 * len(layout), 1)
        values = []
        for kind, value, nbytes in zip(sig.params, args, sig.reach(args)):
            if kind == natives.OPT and not value:
                value = 0  # an optional pointer left null: recorded as the integer 0
            elif kind != natives.INT:
                value = RawPtr(value, value, value + nbytes)
            values.append(value)
        self._append(NativeCall(name, tuple(values)))

    def record_array_fill(self, desc: int, array_type: int, value: int, value_size: int) -> None:
        # the element size of a fill is the size of the value being tiled
        dst = _descriptor_blob(desc, array_type, value_size, "array.fill_")
        self._append(ArrayFill(dst, array_type, RawBlob(ctypes.string_at(value, value_size))))


def _descriptor_blob(address: int, array_type: int, elem_size: int, api: str) -> RawBlob:
    """Copy a native array descriptor (array_t or indexedarray_t) out of Warp's temporary."""
    if array_type == _ARRAY_TYPE_REGULAR:
        size, indexed = _compat.ARRAY_T_SIZE, False
    elif array_type == _ARRAY_TYPE_INDEXED:
        size, indexed = _compat.INDEXEDARRAY_T_SIZE, True
    else:
        raise UnsupportedOperationError(f"{api} on a Fabric array", "only regular and indexed arrays are recorded")
    data = ctypes.string_at(address, size)
    return RawBlob(data, tuple(layout.descriptor_pointers(data, ArraySlot(0, elem_size, indexed))))


def _find_module_exec(kernel, hooks, held=None):
    """The loaded module that owns ``hooks`` (kept by the graph so its code stays loaded).

    ``held`` is the one a ``wp.Launch`` object holds: a module that gained kernels after the Launch
    was made is loaded again under a new hash, and only the Launch still holds the old one.
    """
    for module_exec in [held, *kernel.module.execs.values()]:
        # kernel_hooks is keyed by kernel up to 1.18 and by mangled name from 1.19
        if module_exec is not None and any(h is hooks for h in module_exec.kernel_hooks.values()):
            return module_exec
    raise CaptureError(f"cannot find the loaded module of kernel '{kernel.key}'")
