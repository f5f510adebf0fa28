"""Where Warp keeps its internals, its runtime, and the facts about its types that changed between releases.

Shared by the CPU (``apic._probes.cpu``) and CUDA (``apic._probes.cuda_natives``) probes; re-exported by
``apic._compat``.
"""

from __future__ import annotations

import ctypes
import functools
import inspect
import os
import sys

import warp as wp

try:  # warp-lang 1.10 and later keep the internals in warp._src
    from warp._src import build as wp_build
    from warp._src import codegen as wp_codegen
    from warp._src import context as wp_context
    from warp._src import types as wp_types
    from warp._src import utils as wp_utils
except ImportError:  # pragma: no cover - warp-lang <= 1.9, outside the supported range
    # wp_build, wp_codegen, wp_utils: unused here, re-exported to apic._probes.cpu/cuda_natives and apic._compat
    from warp import build as wp_build  # type: ignore[no-redef]  # noqa: F401
    from warp import codegen as wp_codegen  # type: ignore[no-redef]  # noqa: F401
    from warp import context as wp_context  # type: ignore[no-redef]
    from warp import types as wp_types  # type: ignore[no-redef]
    from warp import utils as wp_utils  # type: ignore[no-redef]  # noqa: F401
import warp.utils  # noqa: E402,F401  (the public module: apic's shims also replace the names it holds)
from apic.targets import handle_kinds as hk

WARP_VERSION: str = wp.config.version

# Where Warp keeps its internals (warp._src from 1.10), and so its warp.fem temporaries' store.
_INTERNALS = wp_context.__name__.rsplit(".", 1)[0]
FEM_CACHE_MODULE: str = _INTERNALS + ".fem.cache"
SPARSE_MODULE: str = _INTERNALS + ".sparse"  # where warp.sparse's functions and BsrMatrix are defined

# A ``Launch`` made by ``wp.launch(record_cmd=True)`` keeps the original Python arguments
# (``fwd_args``/``adj_args``) from warp 1.15 on; before, it keeps only their packed ctypes values,
# which do not keep the arrays behind them alive.
LAUNCH_KEEPS_ARGS: bool = "fwd_args" in inspect.signature(wp_context.Launch.__init__).parameters

# Functions that exist only in some versions (None where absent).
invoke_cpu_blocks = getattr(wp_context, "invoke_cpu_blocks", None)
# Cooperative CPU blocks (a kernel's block dispatcher, checked through wp_take_cpu_block_error): 1.19+.
CPU_BLOCKS: bool = invoke_cpu_blocks is not None

# Native `array_t.ndim` is int32 up to 1.12 and int16 (followed by int16 flags) from 1.13; reading
# the low int16 at offset 48 is right for both on little-endian hosts.
ARRAY_T_SIZE = ctypes.sizeof(wp_types.array_t)
# wp.handle (warp-lang 1.13+): a kernel argument that must hold a live native object's id
HANDLE_TYPE = getattr(wp_types, "handle", None)
INDEXEDARRAY_T_SIZE = ctypes.sizeof(wp_types.indexedarray_t)


def runtime():
    """Warp's runtime object, initialising Warp on first use."""
    wp.init()
    return wp_context.runtime


@functools.lru_cache(maxsize=None)
def native_address(name: str) -> int:
    """Address of the function ``wp_<name>`` exported by warp's core library.

    Looked up by item, not attribute, so a shim installed on ``runtime.core`` cannot shadow it.
    """
    return function_address(runtime().core["wp_" + name])


def function_address(cfunc) -> int:
    """The address of a ctypes function object, as an int."""
    return ctypes.cast(cfunc, ctypes.c_void_p).value or 0


def mangled_name(module_exec, kernel) -> str:
    """A kernel's mangled name in its loaded module (``module_exec.get_kernel_mangled_name`` from 1.18)."""
    getter = getattr(module_exec, "get_kernel_mangled_name", None)  # 1.18+
    return getter(kernel) if getter is not None else kernel.get_mangled_name()


@functools.lru_cache(maxsize=None)
def parameters_of(function) -> frozenset:
    """The parameter names this warp-lang's ``function`` takes (keyword arguments come and go between
    releases: ``capture_begin``'s ``capture_mode`` and ``apic``, the handle constructors' options)."""
    return frozenset(inspect.signature(function).parameters)


def quiet_warp() -> None:
    """Silence Warp's informational output (``config.quiet`` up to 1.18, ``config.log_level`` from 1.19)."""
    if hasattr(wp.config, "log_level") and hasattr(wp, "LOG_WARNING"):
        wp.config.log_level = wp.LOG_WARNING
    wp.config.quiet = True


def cache_folders(module_name: str, module_exec) -> list[tuple[str, str]]:
    """``(stem, folder)`` where warp < 1.19 may keep a module's binaries: hashed name first, then ``strip_hash``."""
    digest = getattr(module_exec, "module_hash", None)
    stems = [f"wp_{module_name}_{digest.hex()[:7]}"] if digest else []
    stems.append(f"wp_{module_name}")
    return [(stem, os.path.join(wp.config.kernel_cache_dir, stem)) for stem in stems]


def native_handle_types() -> tuple[type, ...]:
    """Warp classes whose ``id`` is the address of a native object that kernels dereference."""
    found = [vars(wp).get(n) for n in hk.NATIVE]  # not getattr: warp 1.19 warns on wp.MarchingCubes
    # warp 1.19 moved it to warp.geometry: if that module is not loaded, no such object exists
    geometry = sys.modules.get("warp._src.geometry.marching_cubes")
    found.append(getattr(geometry, "IsoSurfaceMarchingCubes", None))
    return tuple(t for t in found if isinstance(t, type))


def launch_bounds_type(kernel_dim: int) -> type:
    """The ctypes type of the launch bounds a kernel of ``kernel_dim`` (``wp.tid`` arity) receives.

    One 32-byte struct up to 1.13; ``launch_bounds_<N>d_t`` from 1.14 (built the way ``wp.launch`` does).
    """
    return type(wp_types.launch_bounds_t((1,) * max(1, int(kernel_dim))))


def kernel_bounds_type(kernel) -> type:
    """The ctypes type of the launch bounds ``kernel`` receives (``Adjoint.kernel_dim`` exists from 1.14)."""
    return launch_bounds_type(getattr(kernel.adj, "kernel_dim", 1))


def bounds_shape(bounds) -> tuple:
    """The launch shape a ``launch_bounds`` struct holds: ``shape[:ndim]`` up to 1.13; from 1.14 the struct is
    templated on the rank, has no ``ndim`` and its whole ``shape`` is the launch's."""
    ndim = getattr(bounds, "ndim", None)
    return tuple(bounds.shape[:ndim] if ndim is not None else bounds.shape)


def is_plain_array_type(arg_type) -> bool:
    """True when a kernel argument's type is a regular ``wp.array`` (not indexed, not Fabric).

    warp 1.19 annotates arguments with light ``_ArrayAnnotation`` objects naming their array class in
    ``_concrete_cls``; earlier versions use ``wp.array`` instances.
    """
    return type(arg_type) is wp.array or getattr(type(arg_type), "_concrete_cls", None) is wp.array
