"""What an export reads of a loaded CPU graph, in one place: the attributes of ``apic.Graph`` (and of what
``capture_load`` made of the file) that the export depends on. Every other module of ``apic.c_library`` works from
the ``Snapshot`` made here, so a change to how a loaded graph holds its memory, modules or program is
adapted here only.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

import numpy as np
import warp as wp

from apic.errors import BindingError


@dataclass(frozen=True)
class Snapshot:
    """One loaded graph as the export sees it (addresses are this load's)."""

    table: np.ndarray  # the serial op table (int64 rows of ``table.OP_COLUMNS``)
    loops: int  # loop heads in the table
    arena: np.ndarray  # a copy of the arena the table points into (uint8)
    arena_address: int  # where the arena itself lies
    region_addresses: tuple[int, ...]
    region_sizes: tuple[int, ...]
    kernel_addresses: tuple[int, ...]
    kernel_symbols: tuple[str, ...]  # per kernel: its symbol
    kernel_modules: tuple[int, ...]  # per kernel: the index of its module in ``module_images``
    module_images: tuple[bytes, ...]  # per distinct module object: its ELF bytes
    module_names: tuple[str, ...]
    bindings: tuple  # apic.record.bindings.Binding, by name
    scalars: tuple  # (name, dtype, packed value, arena offsets)
    op_kinds: tuple[str, ...]  # per op of the recording: its type's name, and the native it calls if any
    handle_kinds: tuple[str, ...]  # the kinds of the native handles the graph builds (Mesh, Bvh, ...)
    block_kernels: tuple[str, ...]  # kernels that run in CPU blocks (Warp's fiber runtime)
    # the kept graph: its memory stays alive (and its addresses valid) while the snapshot is used
    graph: object = None

    def region_bytes(self, index: int) -> bytes:
        """The bytes region ``index`` holds now."""
        size = self.region_sizes[index]
        return ctypes.string_at(self.region_addresses[index], size) if size else b""


def is_cpu_graph(graph) -> bool:
    """Whether ``graph`` is a CPU ``apic.Graph`` (a loaded CUDA graph is another type)."""
    return getattr(graph, "program", None) is not None and str(getattr(graph, "device", "")).startswith("cpu")


def snapshot(graph) -> Snapshot:
    """The ``Snapshot`` of the loaded CPU graph ``graph`` (``apic.capture_load``'s result)."""
    recording = graph.recording
    program = graph.program
    # one object per distinct image: two module entries of the same bytes would define their symbols twice
    files: dict[bytes, int] = {}  # image -> index among distinct module objects
    images, names, kernel_modules = [], [], []
    module_index = []
    for info in recording.modules:
        image = bytes(info.module_exec.apic_image)
        if image not in files:
            files[image] = len(images)
            images.append(image)
            names.append(info.name)
        module_index.append(files[image])
    for kernel in recording.kernels:
        kernel_modules.append(module_index[kernel.module])
    scalars = []
    for name, scalar in graph.scalars.items():
        offsets = program.param_offsets.get(name)
        scalars.append((name, scalar.dtype, bytes(graph.param_values[name]),
                        tuple(int(o) for o in (offsets if offsets is not None else ()))))
    op_kinds = []
    for op in recording.ops:
        native = getattr(op, "name", None)
        op_kinds.append(type(op).__name__ + (f" (wp_{native})" if isinstance(native, str) else ""))
    return Snapshot(
        table=np.array(program.table, dtype=np.int64, copy=True), loops=int(program.loops),
        arena=np.array(program.arena, dtype=np.uint8, copy=True), arena_address=int(program.arena.ctypes.data),
        region_addresses=tuple(int(a) for a in graph.region_addresses),
        region_sizes=tuple(int(r.nbytes) for r in recording.regions),
        kernel_addresses=tuple(int(k.address) for k in recording.kernels),
        kernel_symbols=tuple(k.symbol for k in recording.kernels), kernel_modules=tuple(kernel_modules),
        module_images=tuple(images), module_names=tuple(names),
        bindings=tuple(graph.bindings.values()), scalars=tuple(scalars), op_kinds=tuple(op_kinds),
        handle_kinds=tuple(h.kind for h in recording.handles),
        block_kernels=tuple(k.key for k in recording.kernels if getattr(k, "cpu_blocks", False)),
        graph=graph,
    )


def python_replay(graph, inputs: dict, scalars: dict, repeats: int) -> dict[str, bytes]:
    """Replay ``graph`` (loaded) ``repeats`` times after setting ``inputs`` (name -> bytes of an array
    binding) and ``scalars`` (name -> value); every array binding's bytes after it. For tests and the
    benchmark: the Python side of a comparison with the exported library."""
    for name, data in inputs.items():
        view = graph.param_numpy(name)
        if view.nbytes != len(data):
            raise BindingError(f"{name}: {len(data)} bytes for a binding of {view.nbytes}")
        np.copyto(view, np.frombuffer(data, dtype=view.dtype).reshape(view.shape))
    for name, value in scalars.items():
        graph.set_param(name, value)
    for _ in range(repeats):
        wp.capture_launch(graph)
    return {name: graph.param_numpy(name).tobytes() for name in graph.bindings}
