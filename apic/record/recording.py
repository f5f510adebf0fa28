"""The finished product of a capture: the single source of truth for replay and for saving."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from apic import _compat
from apic.record.ops import Op
from apic.record.regions import Region


@dataclass(frozen=True)
class ModuleInfo:
    """A compiled Warp module the graph calls into."""

    name: str
    # The live ``ModuleExec`` (None for a loaded graph): holding it keeps the LLVM object loaded, so
    # the function pointers in the program stay valid even if the user reloads or drops the module.
    module_exec: Any = field(default=None, repr=False, compare=False)


@dataclass(frozen=True)
class KernelInfo:
    """One CPU entry point (forward or backward) of a kernel, or a CUDA one (``params`` non-empty)."""

    module: int  # index into Recording.modules
    key: str  # the kernel's Python name, for inspection
    symbol: str  # exported symbol, e.g. "saxpy_2f51673c_cpu_forward"
    adjoint: bool
    address: int = 0  # live function pointer (resolved again after a load)
    # CUDA entry points only: the param blob layout, (offset, size) of each parameter, bounds first
    params: tuple[tuple[int, int], ...] = ()
    # CPU kernels run as cooperative blocks (warp 1.18+ with block_dim > 1): Warp reports a failure of
    # their dispatcher through wp_take_cpu_block_error, which a replay must check, as eager Warp does
    cpu_blocks: bool = False
    # Parallel replay (docs/PARALLEL.md): for a forward kernel proved splittable at capture
    # (apic.record.parallel.splittable.written_offsets), the byte offsets in its packed arguments of the arrays it
    # writes; None for every other entry point, which always runs serially
    split_writes: tuple[int, ...] | None = None
    # ... or, for a kernel proved splittable by world instead (apic.record.parallel.world_split), the byte offsets
    # of the arrays it accesses only at the world's row; its launches split into ranges of whole worlds
    split_world: tuple[int, ...] | None = None
    # ... and it uses tiles: each thread runs its chunks in its own loaded copy of the range object, whose
    # tile memory no other thread's code points into (apic.replay.parallel.range_entry.per_thread_entries)
    split_tiles: bool = False
    # why a forward CPU kernel's launches stay serial (apic.record.parallel.world_split.split_refusal), for
    # parallel_report; not saved
    split_refused: str = ""
    # ... or, for a kernel neither rule proved, its claim to the footprint rule (apic.record.parallel.footprint): each
    # launch is judged at lowering on the index data it holds. Live: a FootprintClaim (it holds the kernel,
    # not saved); loaded: the SealedFootprint its module's manifest seals (apic.format.sealed_claims)
    split_footprint: Any = field(default=None, repr=False, compare=False)

    @property
    def may_split(self) -> bool:
        """Whether launches of this entry point may run split (proved by task or world, or claimed by footprint)."""
        return self.split_writes is not None or self.split_footprint is not None


@dataclass(frozen=True)
class Recording:
    """Ops plus the tables they refer to. Contains no raw addresses except the live ones noted."""

    abi: str  # kernel entry ABI the modules were compiled for (see apic._compat.KERNEL_ABI)
    regions: tuple[Region, ...]
    modules: tuple[ModuleInfo, ...]
    kernels: tuple[KernelInfo, ...]
    ops: tuple[Op, ...]
    handles: tuple = ()  # apic.record.handles.Handle: native objects the ops reach by id (HandleRef)
    # CUDA only: why the graph cannot be saved (a launch argument holds a handle id or a device pointer
    # as a plain integer, which would dangle in another process); it still replays live
    unsaveable: tuple[str, ...] = ()
    invalid_handles: tuple[str, ...] = ()  # wp.handle arguments that held no live object's id (refused at save)
    # named scalar parameters (apic.record.params.ScalarParam, with their values) whose slots the launch blobs list
    params: tuple = ()


def module_source(module_name: str, module_exec) -> tuple[bytes, dict]:
    """The generated C++ of a recorded module and the options it was compiled with.

    A live module's come from Warp's kernel cache (next to its binary); a loaded graph's module keeps
    them (``apic_source``) when the graph was saved with ``source_fallback=True``. Raises
    ``FileNotFoundError`` saying which is missing.
    """
    kept = getattr(module_exec, "apic_source", None)
    if kept is not None:
        return bytes(kept[0]), dict(kept[1])
    if getattr(module_exec, "apic_source_unbound", False):
        raise FileNotFoundError(
            f"Warp module '{module_name}' of this loaded graph has no source bound to its object: the graph file "
            "names a saved source, but not the one the object's kernel manifest names (or the object carries no "
            "manifest), and apic compiles no other"
        )
    if module_exec is None or hasattr(module_exec, "apic_image"):
        raise FileNotFoundError(
            f"Warp module '{module_name}' of this loaded graph has no saved source (the file it was loaded "
            "from was saved without source_fallback=True)"
        )
    binary = _compat.module_binary_path(module_name, module_exec)
    path = _compat.module_source_path(binary)
    if path is None:
        raise FileNotFoundError(
            f"the generated source of Warp module '{module_name}' is not in the kernel cache next to its "
            f"binary ({binary}); was the cache cleared after the capture?"
        )
    with open(path, "rb") as f:
        return f.read(), _compat.module_build_options(module_name, module_exec)
