"""The CPU target: how apic calls a Warp CPU kernel and names what it saves for one.

Pure knowledge of layouts and names (no Warp, no NumPy): the recorder, the ``.wrp`` reader and writer
and the replay program all read these instead of spelling them again.

* **Entry ABI.** A Warp CPU kernel is exported as ``<mangled>_cpu_forward`` / ``_cpu_backward`` and
  called ``f(bounds, args*)``: warp 1.12 passes its 32-byte ``launch_bounds_t`` by value
  (:data:`ABI_BY_VALUE`), 1.13 and later by pointer (:data:`ABI_BY_POINTER`). A saved graph names the
  ABI its modules were compiled for; ``apic._compat.KERNEL_ABI`` is this warp-lang's.
* **Descriptors.** ``wp::array_t`` (56 bytes: data, grad, shape[4], strides[4], ndim and flags) and
  ``wp::indexedarray_t`` (104 bytes: an ``array_t``, indices[4], shape[4]), the same in every supported
  version; the pointers a loaded graph relocates sit at :data:`ARRAY_T_POINTER_SLOTS` /
  :data:`INDEXEDARRAY_T_POINTER_SLOTS`.
* **Module files.** One object file per Warp module, ``<name>.<first 16 hex digits of its SHA-256>.o``.
* **Handle calls.** The native methods of a Mesh / Bvh / HashGrid a CPU capture records.
"""

from __future__ import annotations

import reprlib
import struct

from apic.targets import aarch64, files, x86_64

NAME = "cpu"

# --- entry ABI ------------------------------------------------------------------------------------------
ABI_BY_POINTER = "bounds-by-pointer-v1"  # warp 1.13+: f(launch_bounds_t* dim, args*)
ABI_BY_VALUE = "bounds-by-value-v1"  # warp <= 1.12: f(launch_bounds_t dim, args*), the 32-byte struct by value
KERNEL_ABIS = (ABI_BY_POINTER, ABI_BY_VALUE)
KERNEL_SUFFIX = {False: "_cpu_forward", True: "_cpu_backward"}  # of every Warp CPU kernel entry point

# --- bounds layout ----------------------------------------------------------------------------------------
# warp <= 1.13: launch_bounds_t is int shape[4], int ndim, (pad), size_t size: 32 bytes. From 1.14 the
# bounds of a rank-N launch are launch_bounds_<N>d_t; ranks 1 and 2 are 24 bytes, 3 and 4 are 32.
LEGACY_BOUNDS_SIZE = 32
BOUNDS_SIZES = (24, 32)

# --- array descriptors (ArrayCopy / ArrayFill, kernel arguments) -----------------------------------------
ARRAY_TYPE_REGULAR = 0  # Warp's array type ids
ARRAY_TYPE_INDEXED = 1
# wp::array_t: data @0, grad @8, shape[4] @16, strides[4] @32, ndim (int16) @48, from warp 1.13 an int16 of
# flags @50, padding to 56. wp::indexedarray_t: an array_t, then indices[4] @56 and shape[4] @88. Every
# reader of a descriptor takes these from here.
ARRAY_T_SIZE = 56  # wp::array_t, every supported version
INDEXEDARRAY_T_SIZE = 104  # wp::indexedarray_t
ARRAY_T = struct.Struct("<QQ4i4ih")  # data, grad, shape[4], strides[4], ndim
# the same with ndim and flags as one int32: a saved descriptor's flags are 0
ARRAY_T_STRICT = struct.Struct("<QQ4i4ii")
ARRAY_T_SHAPE_AT = 16
ARRAY_T_SHAPE = struct.Struct("<4i")  # at ARRAY_T_SHAPE_AT
ARRAY_T_SHAPE_STRIDES = struct.Struct("<4i4i")  # at ARRAY_T_SHAPE_AT
ARRAY_T_NDIM_AT = 48
ARRAY_T_NDIM = struct.Struct("<h")  # at ARRAY_T_NDIM_AT
ARRAY_T_FLAGS = slice(50, ARRAY_T_SIZE)  # warp 1.13+ flags and the padding after them
ARRAY_T_POINTER_SLOTS = (0, 8)  # data, grad
ARRAY_T_POINTERS = slice(0, 16)  # both pointer words: all zero in the descriptor of a None array
INDEXED_INDICES_AT = ARRAY_T_SIZE  # indices[4] of an indexedarray_t, after its array_t
INDEXEDARRAY_T_POINTER_SLOTS = (0, 8, 56, 64, 72, 80)  # data, grad, indices[4]
INDEXED_TAIL = struct.Struct("<4Q4i")  # indices[4] @56, shape[4] @88 of an indexedarray_t
INDEX_ELEM_SIZE = 4  # index buffers are int32

# --- module files -------------------------------------------------------------------------------------------
MODULE_EXTENSION = ".o"
MODULE_FILE = files.read_rule(r"\.o", files.READ_STEM_MAX)  # what a reader accepts


def module_file_name(name: str, sha256: str, extension: str = MODULE_EXTENSION) -> str:
    """The content-addressed file name of a module binary (or, with ``extension=".cpp"``, of its saved
    source) inside ``<stem>_modules/``."""
    return files.file_name(name, sha256, extension)


# --- handle calls ---------------------------------------------------------------------------------------------
# The native exports a CPU capture records for a handle method (Mesh.refit, Bvh.refit / rebuild,
# HashGrid.build / reserve), as the recorder records them and the reader accepts them.
HASH_GRID_BUILD = "hash_grid_update_host"  # the one that takes a radius and array descriptors (points, groups)
HASH_GRID_RESERVE = "hash_grid_reserve_host"
HANDLE_CALLS = ("mesh_refit_host", "bvh_refit_host", "bvh_rebuild_host", HASH_GRID_BUILD, HASH_GRID_RESERVE)


# --- CPU families: instruction-set levels (``capture_save(cpu_target=...)``), feature macros ------------------
# One module per family (targets/x86_64.py, targets/aarch64.py); a family adds its module here, and a CPUID-like
# probe of its own in apic._probes (apic._probes.host.cpu_identity dispatches on the machine).
_FAMILIES = (x86_64, aarch64)
CPU_LEVELS = {name: f for family in _FAMILIES for name, f in family.CPU_LEVELS.items()}
FEATURE_MACROS = {name: m for family in _FAMILIES for name, m in family.FEATURE_MACROS.items()}
FAMILY_NAMES = tuple(family.NAME for family in _FAMILIES)  # for messages that list what apic runs on


def cpu_family(machine: str | None = None, level: str | None = None):
    """The facts module of the CPU family of ``machine`` (``platform.machine()``), or of the one whose level
    ``level`` is; None for a family apic does not know."""
    for family in _FAMILIES:
        if machine is not None and machine.lower() in family.MACHINES or level in family.CPU_LEVELS:
            return family
    return None


def check_cpu_level(level) -> None:
    """Refuse (``ValueError``) a ``cpu_target`` that is not None nor one of ``CPU_LEVELS``."""
    if level is not None and (not isinstance(level, str) or level not in CPU_LEVELS):
        raise ValueError(f"cpu_target={reprlib.repr(level)} is not a CPU level apic compiles for; use one of "
                         f"{', '.join(CPU_LEVELS)}, or None for the objects Warp built for this CPU")
