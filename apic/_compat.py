"""Every difference between supported warp-lang versions, found by probing features.

Nothing outside this module looks at ``warp.__version__`` or at where Warp keeps its internals.
Each capability is a named attribute, computed once from what the installed warp actually has.
"""

from __future__ import annotations

import ctypes
import functools
import platform
import re
import sys

import warp as wp

try:  # warp-lang 1.10 and later keep the internals in warp._src
    from warp._src import codegen as wp_codegen
    from warp._src import context as wp_context
    from warp._src import types as wp_types
except ImportError:  # pragma: no cover - warp-lang <= 1.9, outside the supported range
    from warp import codegen as wp_codegen  # type: ignore[no-redef]
    from warp import context as wp_context  # type: ignore[no-redef]
    from warp import types as wp_types  # type: ignore[no-redef]

WARP_VERSION: str = wp.config.version

# --- CPU kernel entry ABI -------------------------------------------------------------------------
# warp 1.9-1.12 export `f(launch_bounds_t dim, args*)` with the 32-byte bounds struct *by value*;
# 1.13 and later export `f(launch_bounds_t* dim, args*)`. Read it off the code generator's template.
_ENTRY_RE = re.compile(r"_cpu_forward\(\s*wp::launch_bounds_t(?:<[^>]*>)?\s*(\*?)\s*dim")


def _probe_bounds_by_value() -> bool:
    templates = [v for k, v in vars(wp_codegen).items() if k.startswith("cpu_module") and isinstance(v, str)]
    match = next(filter(None, map(_ENTRY_RE.search, templates)), None)
    if match is None:
        raise ImportError(
            f"apic does not recognise the CPU kernel entry point of warp-lang {WARP_VERSION}; "
            "supported versions are 1.12 to 1.19"
        )
    return match.group(1) != "*"


BOUNDS_BY_VALUE: bool = _probe_bounds_by_value()

# How a by-value 32-byte struct is passed on this platform. SysV x86-64 puts it on the stack after
# the six register arguments; Win64 and AArch64 pass a pointer to a caller-owned copy instead.
SYSV_X86_64: bool = platform.machine().lower() in ("x86_64", "amd64") and sys.platform != "win32"

# Name of the ABI, written into saved files so a loader can refuse an incompatible one.
KERNEL_ABI: str = "bounds-by-value-v1" if BOUNDS_BY_VALUE else "bounds-by-pointer-v1"

# Functions that exist only in some versions (None where absent).
invoke_cpu_blocks = getattr(wp_context, "invoke_cpu_blocks", None)

# Native `array_t.ndim` is int32 up to 1.12 and int16 (followed by int16 flags) from 1.13; reading
# the low int16 at offset 48 is right for both on little-endian hosts.
ARRAY_T_SIZE = ctypes.sizeof(wp_types.array_t)
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


def kernel_symbol(module_exec, kernel, adjoint: bool) -> str:
    """The exported symbol name of a kernel's CPU entry point."""
    getter = getattr(module_exec, "get_kernel_mangled_name", None)  # 1.18+
    mangled = getter(kernel) if getter is not None else kernel.get_mangled_name()
    return f"{mangled}_cpu_{'backward' if adjoint else 'forward'}"


def allocator_alloc_name() -> str:
    """Allocator method name: ``alloc`` up to 1.12, ``allocate`` from 1.13."""
    alloc = cpu_device().get_allocator()
    return "allocate" if hasattr(alloc, "allocate") else "alloc"


def quiet_warp() -> None:
    """Silence Warp's informational output (``config.quiet`` up to 1.18, ``config.log_level`` from 1.19)."""
    if hasattr(wp.config, "log_level") and hasattr(wp, "LOG_WARNING"):
        wp.config.log_level = wp.LOG_WARNING
    wp.config.quiet = True
