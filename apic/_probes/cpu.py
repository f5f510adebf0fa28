"""The CPU side: the kernel entry ABI, module binaries in Warp's cache, loading them, compiling source."""

from __future__ import annotations

import ctypes
import functools
import inspect
import os
import platform
import re
import sys
import tempfile

import warp as wp

from apic._probes.internals import WARP_VERSION, cache_folders, mangled_name, runtime, wp_build, wp_codegen, wp_context
from apic.targets.cpu import ABI_BY_POINTER, ABI_BY_VALUE
from apic.targets.cpu import KERNEL_SUFFIX as CPU_KERNEL_SUFFIX

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
KERNEL_ABI: str = ABI_BY_VALUE if BOUNDS_BY_VALUE else ABI_BY_POINTER


def kernel_symbol(module_exec, kernel, adjoint: bool) -> str:
    """The exported symbol name of a kernel's CPU entry point."""
    return mangled_name(module_exec, kernel) + CPU_KERNEL_SUFFIX[bool(adjoint)]


# --- Saved graphs: module binaries, native object loading, host target -----------------------------
def module_binary_path(module_name: str, module_exec) -> str:
    """Path of the compiled CPU binary (``.o``) behind a loaded ``module_exec`` in Warp's kernel cache.

    warp 1.19 records it as ``module_exec.binary_path``. Earlier versions keep it at
    ``<kernel cache>/wp_<name>_<hash7>/<same>[.cpu<isa>].o`` (``wp_<name>`` with ``strip_hash``).
    """
    path = getattr(module_exec, "binary_path", None)
    if path:
        return os.fspath(path)
    for stem, folder in cache_folders(module_name, module_exec):
        exact = os.path.join(folder, stem + ".o")
        if os.path.isfile(exact):
            return exact
        try:
            candidates = sorted(f for f in os.listdir(folder) if f.startswith(stem) and f.endswith(".o"))
        except OSError:
            continue
        if len(candidates) == 1:
            return os.path.join(folder, candidates[0])
    raise FileNotFoundError(
        f"cannot find the compiled CPU binary of Warp module '{module_name}' in the kernel cache "
        f"({wp.config.kernel_cache_dir}); was the cache cleared after the capture?"
    )


def module_source_path(binary_path: str) -> str | None:
    """The generated C++ source next to a module binary in the cache, if it is there."""
    folder = os.path.dirname(binary_path)
    stem = os.path.basename(folder)
    path = os.path.join(folder, stem + ".cpp")
    return path if os.path.isfile(path) else None


def _llvm():
    llvm = getattr(runtime(), "llvm", None)
    if llvm is None:
        raise RuntimeError("loading saved CPU graphs needs Warp's LLVM backend (warp-clang), which is not available")
    return llvm


def _legacy_linker_arg() -> list:
    """``wp_load_obj`` takes a ``use_legacy_linker`` flag from warp 1.13 on (with the config option)."""
    llvm = _llvm()
    argtypes = getattr(llvm.wp_load_obj, "argtypes", None)
    takes_flag = len(argtypes) == 3 if argtypes else hasattr(wp.config, "legacy_cpu_linker")
    return [ctypes.c_bool(bool(getattr(wp.config, "legacy_cpu_linker", False)))] if takes_flag else []


def load_object(data: bytes, name: str) -> None:
    """Load a relocatable CPU object (a module's ``.o``) from memory under the LLVM module ``name``.

    Uses ``wp_load_obj_from_bytes`` where Warp has it (1.19+), else a private unnamed (or temporary) file.
    ``name`` must be unique in the process: loading a name twice returns the old module's code.
    """
    llvm = _llvm()
    flag = _legacy_linker_arg()
    from_bytes = getattr(llvm, "wp_load_obj_from_bytes", None) if flag else None
    if from_bytes is not None:
        buffer = ctypes.create_string_buffer(data, len(data))
        result = from_bytes(ctypes.cast(buffer, ctypes.c_void_p), ctypes.c_size_t(len(data)),
                            ctypes.c_char_p(name.encode()), *flag)
    else:
        # Warp reads the object from a path: an unnamed file (Linux O_TMPFILE, reached through
        # /proc/self/fd) leaves nothing behind even if the process dies here; else a temporary file.
        fd, path = None, None
        if getattr(os, "O_TMPFILE", 0) and os.path.isdir("/proc/self/fd"):
            try:
                fd = os.open(tempfile.gettempdir(), os.O_TMPFILE | os.O_RDWR, 0o600)
                path = f"/proc/self/fd/{fd}"
            except OSError:
                fd = None
        if fd is None:
            fd, path = tempfile.mkstemp(prefix="apic-", suffix=".o")
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            result = llvm.wp_load_obj(ctypes.c_char_p(path.encode()), ctypes.c_char_p(name.encode()), *flag)
        finally:
            os.close(fd)
            if not path.startswith("/proc/"):
                os.unlink(path)
    if result != 0:
        raise RuntimeError(f"Warp's LLVM backend could not load the CPU module object '{name}' (error {result})")


def lookup_symbol(name: str, symbol: str) -> int:
    """Address of ``symbol`` in the loaded LLVM module ``name`` (0 if absent). Never after unload."""
    return int(_llvm().wp_lookup(ctypes.c_char_p(name.encode()), ctypes.c_char_p(symbol.encode())) or 0)


def unload_object(name: str) -> None:
    """Unload the LLVM module ``name`` (quietly does nothing once Warp is shutting down)."""
    try:
        wp_context.runtime.llvm.wp_unload_obj(ctypes.c_char_p(name.encode()))
    except (AttributeError, TypeError):
        pass


@functools.lru_cache(maxsize=None)
def host_target() -> dict:
    """The CPU this process runs on: OS, machine, CPU name and the instruction-set features it has."""
    try:
        from llvmlite import binding as llvm_binding  # lazy, numba's dependency: loading LLVM costs time

        cpu = llvm_binding.get_host_cpu_name()
        features = sorted(k for k, v in llvm_binding.get_host_cpu_features().items() if v)
        known = sorted(llvm_binding.get_host_cpu_features().keys())
    except Exception:  # pragma: no cover - llvmlite without host queries
        cpu, features, known = "unknown", [], []
    return {
        "system": sys.platform,
        "machine": platform.machine().lower(),
        "cpu": cpu,
        "features": features,
        "known_features": known,
        "byteorder": sys.byteorder,
        "pointer_bits": ctypes.sizeof(ctypes.c_void_p) * 8,
    }


# --- Source fallback: a module's CPU build options, and compiling its generated C++ again --------------
def module_build_options(module_name: str, module_exec) -> dict:
    """The options Warp compiled module ``module_name`` with for the CPU (what ``build_cpu`` is given).

    warp 1.19 resolves them with ``Module.resolve_options``; earlier versions take the module's own
    options with ``config.mode`` / ``config.verify_fp`` filled in (they pass no optimization level or
    flags). A module Warp no longer knows gets Warp's defaults.
    """
    module = getattr(wp_context, "user_modules", {}).get(module_name)
    block_dim = int(getattr(module_exec, "block_dim", None) or 256)
    # probed on the class: warp 1.12's Module.__getattr__ recurses on a missing attribute
    if module is not None and hasattr(type(module), "resolve_options"):
        options = dict(module.resolve_options(wp.config, block_dim=block_dim))
    else:
        options = dict((vars(module).get("options") if module is not None else None) or {})
        options["verify_fp"] = bool(getattr(wp.config, "verify_fp", False))
    level = options.get("optimization_level")
    return {
        "mode": str(options.get("mode") or wp.config.mode or "release"),
        "fast_math": bool(options.get("fast_math", False)),
        "fuse_fp": bool(options.get("fuse_fp", True)),
        "verify_fp": bool(options.get("verify_fp", False)),
        "optimization_level": 2 if level is None else int(level),  # Warp's CPU default
        "block_dim": block_dim,
        "enable_tiles_in_stack_memory": bool(options.get("enable_tiles_in_stack_memory", False)),
        "extra_flags": str(options.get("cpu_compiler_flags") or ""),
    }


def compile_cpu_source(source: bytes, options: dict) -> bytes:
    """Compile a module's generated C++ with this process's Warp (``warp._src.build.build_cpu``); the ``.o``.

    Options this warp-lang's ``build_cpu`` does not take are left out (1.12 takes mode, verify_fp,
    fast_math and fuse_fp only, and reads the tile setting from its config).
    """
    if getattr(wp_context, "runtime", None) is None:
        wp.init()
    _llvm()
    accepted = inspect.signature(wp_build.build_cpu).parameters
    kwargs = {key: value for key, value in options.items() if key in accepted}
    with tempfile.TemporaryDirectory(prefix="apic-source-") as folder:
        cpp_path, obj_path = os.path.join(folder, "module.cpp"), os.path.join(folder, "module.o")
        with open(cpp_path, "wb") as f:
            f.write(source)
        wp_build.build_cpu(obj_path, cpp_path, **kwargs)
        with open(obj_path, "rb") as f:
            return f.read()


