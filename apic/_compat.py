"""Every difference between supported warp-lang versions, found by probing features.

Nothing outside this module looks at ``warp.__version__`` or at where Warp keeps its internals.
Each capability is a named attribute, computed once from what the installed warp actually has.
"""

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

from apic.targets.cpu import ABI_BY_POINTER, ABI_BY_VALUE
from apic.targets.cpu import KERNEL_SUFFIX as CPU_KERNEL_SUFFIX

try:  # warp-lang 1.10 and later keep the internals in warp._src
    from warp._src import build as wp_build
    from warp._src import codegen as wp_codegen
    from warp._src import context as wp_context
    from warp._src import types as wp_types
    from warp._src import utils as wp_utils
except ImportError:  # pragma: no cover - warp-lang <= 1.9, outside the supported range
    from warp import build as wp_build  # type: ignore[no-redef]
    from warp import codegen as wp_codegen  # type: ignore[no-redef]
    from warp import context as wp_context  # type: ignore[no-redef]
    from warp import types as wp_types  # type: ignore[no-redef]
    from warp import utils as wp_utils  # type: ignore[no-redef]
import warp.utils  # noqa: E402,F401  (the public module: apic's shims also replace the names it holds)

WARP_VERSION: str = wp.config.version

# Where Warp keeps its internals (warp._src from 1.10), and so its warp.fem temporaries' store.
_INTERNALS = wp_context.__name__.rsplit(".", 1)[0]
FEM_CACHE_MODULE: str = _INTERNALS + ".fem.cache"
SPARSE_MODULE: str = _INTERNALS + ".sparse"  # where warp.sparse's functions and BsrMatrix are defined

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


def kernel_symbol(module_exec, kernel, adjoint: bool) -> str:
    """The exported symbol name of a kernel's CPU entry point."""
    getter = getattr(module_exec, "get_kernel_mangled_name", None)  # 1.18+
    mangled = getter(kernel) if getter is not None else kernel.get_mangled_name()
    return mangled + CPU_KERNEL_SUFFIX[bool(adjoint)]


def allocator_alloc_name() -> str:
    """Allocator method name: ``alloc`` up to 1.12, ``allocate`` from 1.13."""
    alloc = runtime().cpu_device.get_allocator()
    return "allocate" if hasattr(alloc, "allocate") else "alloc"


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


# --- Saved graphs: module binaries, native object loading, host target -----------------------------
def _cache_folders(module_name: str, module_exec) -> list[tuple[str, str]]:
    """``(stem, folder)`` where warp < 1.19 may keep a module's binaries: hashed name first, then ``strip_hash``."""
    digest = getattr(module_exec, "module_hash", None)
    stems = [f"wp_{module_name}_{digest.hex()[:7]}"] if digest else []
    stems.append(f"wp_{module_name}")
    return [(stem, os.path.join(wp.config.kernel_cache_dir, stem)) for stem in stems]


def module_binary_path(module_name: str, module_exec) -> str:
    """Path of the compiled CPU binary (``.o``) behind a loaded ``module_exec`` in Warp's kernel cache.

    warp 1.19 records it as ``module_exec.binary_path``. Earlier versions keep it at
    ``<kernel cache>/wp_<name>_<hash7>/<same>[.cpu<isa>].o`` (``wp_<name>`` with ``strip_hash``).
    """
    path = getattr(module_exec, "binary_path", None)
    if path:
        return os.fspath(path)
    for stem, folder in _cache_folders(module_name, module_exec):
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


def native_handle_types() -> tuple[type, ...]:
    """Warp classes whose ``id`` is the address of a native object that kernels dereference."""
    names = ("Mesh", "Bvh", "HashGrid", "Volume", "MarchingCubes")
    found = [vars(wp).get(n) for n in names]  # not getattr: warp 1.19 warns on wp.MarchingCubes
    # warp 1.19 moved it to warp.geometry: if that module is not loaded, no such object exists
    geometry = sys.modules.get("warp._src.geometry.marching_cubes")
    found.append(getattr(geometry, "IsoSurfaceMarchingCubes", None))
    return tuple(t for t in found if isinstance(t, type))


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


# --- CUDA (recording alongside Warp's CUDA graph capture; apic.record.cuda, apic.targets.cuda) ----------
# wp_cuda_launch_kernel's parameters by warp-lang version, told apart by their number (argtypes):
# <= 1.12: 8; 1.13-1.14 add a trailing APICLaunchInfo*; 1.15+ add grid_stride and cluster_dim.
_CUDA_LAUNCH_PARAMS = {
    8: ("context", "kernel", "dim", "max_blocks", "block_dim", "smem", "args", "stream"),
    9: ("context", "kernel", "dim", "max_blocks", "block_dim", "smem", "args", "stream", "apic_info"),
    11: ("context", "kernel", "dim", "max_blocks", "block_dim", "grid_stride", "cluster_dim", "smem", "args",
         "stream", "apic_info"),
}


def cuda_launch_params() -> tuple[str, ...]:
    """Names of ``wp_cuda_launch_kernel``'s parameters in this warp-lang, in order."""
    argtypes = getattr(runtime().core.wp_cuda_launch_kernel, "argtypes", None) or ()
    names = _CUDA_LAUNCH_PARAMS.get(len(argtypes))
    if names is None:
        raise ImportError(
            f"apic does not recognise wp_cuda_launch_kernel of warp-lang {WARP_VERSION} ({len(argtypes)} parameters)"
        )
    return names


def cuda_kernel_symbol(module_exec, kernel, adjoint: bool) -> str:
    """The name of a kernel's CUDA entry point (``<mangled>_cuda_kernel_forward`` / ``_backward``)."""
    getter = getattr(module_exec, "get_kernel_mangled_name", None)  # 1.18+
    mangled = getter(kernel) if getter is not None else kernel.get_mangled_name()
    if not adjoint and hasattr(wp_codegen, "cuda_kernel_forward_name"):  # 1.19: entry_point_abi options
        return wp_codegen.cuda_kernel_forward_name(kernel, name=mangled)
    return f"{mangled}_cuda_kernel_{'backward' if adjoint else 'forward'}"


def cuda_entry_abi(kernel) -> str:
    """The entry-point ABI of a kernel: ``"warp"`` (by-value params after the bounds) unless 1.19+ says otherwise."""
    return str((getattr(kernel, "options", None) or {}).get("entry_point_abi", "warp"))


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


def cuda_module_binary_path(module, module_exec) -> str:
    """Path of the ``.cubin`` or ``.ptx`` behind a loaded CUDA ``module_exec`` in Warp's kernel cache.

    warp 1.19 records it as ``module_exec.binary_path``; earlier versions keep it at
    ``<kernel cache>/wp_<name>_<hash7>/wp_<name>_<hash7>.sm<arch>[a].{cubin,ptx}``.
    """
    path = getattr(module_exec, "binary_path", None)
    if path:
        return os.fspath(path)
    device = module_exec.device
    arch = getattr(module, "_get_compile_arch", lambda d: d.get_cuda_compile_arch())(device)
    for stem, folder in _cache_folders(module.name, module_exec):
        try:
            names = sorted(os.listdir(folder))
        except OSError:
            continue
        found = [n for n in names if re.fullmatch(re.escape(stem) + rf"\.sm{arch}[a-z]?\.(cubin|ptx)", n)]
        if len(found) > 1:  # both formats in the cache: the one this device loads
            use_ptx = bool(getattr(module, "_use_ptx", lambda d: False)(device))
            found = [n for n in found if n.endswith(".ptx" if use_ptx else ".cubin")]
        if len(found) == 1:
            return os.path.join(folder, found[0])
    raise FileNotFoundError(
        f"cannot find the compiled CUDA binary of Warp module '{module.name}' in the kernel cache "
        f"({wp.config.kernel_cache_dir}); was the cache cleared after the capture?"
    )



# --- cuda-python (replaying a saved CUDA graph; apic.replay.cuda) ------------------------------------------
# Nothing here imports cuda-python when apic is imported: each helper is called with, or imports,
# the driver module only when a CUDA graph is loaded.
def cuda_driver():
    """cuda-python's driver bindings: ``cuda.bindings.driver`` (cuda-python 11.8.4+/12.6+; the only
    name from 13.0, which removed ``cuda.cuda``), else ``cuda.cuda`` (older releases)."""
    try:
        from cuda.bindings import driver  # lazy: cuda-python is optional (the cuda extra)
    except ImportError:
        try:
            from cuda import cuda as driver  # cuda-python before 12.6 / 11.8.4
        except ImportError:
            raise ImportError(
                "replaying a saved CUDA graph needs cuda-python: pip install cuda-python (apic's 'cuda' extra)"
            ) from None
    return driver


def cuda_graph_instantiate_call(driver, graph) -> tuple[str, tuple]:
    """The driver call that instantiates ``graph`` with no flags, as ``(function name, arguments)``;
    it returns ``(CUresult, CUgraphExec)``.

    cuda-python 11.x binds the CUDA 11 ``cuGraphInstantiate(hGraph, logBuffer, bufferSize)``
    (returning the exec *and* an error node) and has ``cuGraphInstantiateWithFlags(hGraph, flags)``;
    from 12.0 ``cuGraphInstantiate(hGraph, flags)`` is the flags form and ``...WithFlags`` is gone.
    """
    if hasattr(driver, "cuGraphInstantiateWithFlags"):
        return "cuGraphInstantiateWithFlags", (graph, 0)
    return "cuGraphInstantiate", (graph, 0)


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


def cuda_build_options(module) -> dict:
    """The options Warp compiles the Warp ``module`` with for CUDA (what ``build_cuda`` is given), plus
    ``strip_hash``, ``llvm_cuda`` and ``extra_cuda_include_dirs`` (what a source fallback cannot carry).

    warp 1.19 resolves them with ``Module.resolve_options``; earlier versions take the module's own
    options with ``config.mode`` / ``config.optimization_level`` / ``config.verify_fp`` /
    ``config.llvm_cuda`` filled in. An unset optimization level is Warp's CUDA default, 3.
    """
    if hasattr(type(module), "resolve_options"):  # probed on the class: warp 1.12's __getattr__ recurses
        options = dict(module.resolve_options(wp.config))
    else:
        options = dict(vars(module).get("options") or {})
        options["verify_fp"] = bool(getattr(wp.config, "verify_fp", False))
        options["llvm_cuda"] = bool(getattr(wp.config, "llvm_cuda", False))  # build_cuda reads the config
        if options.get("optimization_level") is None:
            options["optimization_level"] = getattr(wp.config, "optimization_level", None)
    level = options.get("optimization_level")
    return {
        "mode": str(options.get("mode") or wp.config.mode or "release"),
        "optimization_level": 3 if level is None else int(level),
        "verify_fp": bool(options.get("verify_fp", False)),
        "fast_math": bool(options.get("fast_math", False)),
        "fuse_fp": bool(options.get("fuse_fp", True)),
        "lineinfo": bool(options.get("lineinfo", False)),
        "strip_hash": bool(options.get("strip_hash", False)),
        "llvm_cuda": bool(options.get("llvm_cuda", False)),
        "extra_cuda_include_dirs": tuple(options.get("extra_cuda_include_dirs") or ()),
    }


def nvrtc_archs() -> tuple[int, ...]:
    """The GPU architectures this Warp's NVRTC compiles for (empty where Warp has no CUDA compiler)."""
    return tuple(sorted(getattr(runtime(), "nvrtc_supported_archs", None) or ()))


def warp_native_dir() -> str:
    """The folder of Warp's native headers, which NVRTC includes generated CUDA source from."""
    return os.path.join(os.path.dirname(os.path.abspath(wp.__file__)), "native")


def compile_cuda_source(source: bytes, options: dict, arch: int, suffix: str, kind: str, name: str) -> bytes:
    """Compile a module's generated CUDA source with this process's Warp (``warp._src.build.build_cuda``,
    NVRTC: no GPU needed) to a ``kind`` (``"cubin"`` / ``"ptx"``) for ``sm_<arch><suffix>``; its bytes.

    ``name`` is the file name the source is compiled under. The precompiled-header folder is the one
    Warp uses (``get_nvrtc_pch_dir`` from 1.19, ``get_pch_dir`` or the build folder before).
    """
    rt = runtime()
    accepted = inspect.signature(wp_build.build_cuda).parameters
    kwargs = {"config": options["mode"], "optimization_level": options["optimization_level"],
              "verify_fp": options["verify_fp"], "fast_math": options["fast_math"], "fuse_fp": options["fuse_fp"],
              "lineinfo": options["lineinfo"], "arch_suffix": suffix}
    with tempfile.TemporaryDirectory(prefix="apic-cuda-source-") as folder:
        cu_path = os.path.join(folder, name)
        out_path = os.path.join(folder, f"{name[: -len('.cu')]}.sm{arch}{suffix}.{kind}")
        with open(cu_path, "wb") as f:
            f.write(source)
        pch = getattr(rt, "get_nvrtc_pch_dir", None)
        pch_dir = pch() if pch is not None else (rt.get_pch_dir() or folder)
        wp_build.build_cuda(cu_path, arch, out_path, pch_dir=pch_dir,
                            **{key: value for key, value in kwargs.items() if key in accepted})
        with open(out_path, "rb") as f:
            return f.read()


def is_plain_array_type(arg_type) -> bool:
    """True when a kernel argument's type is a regular ``wp.array`` (not indexed, not Fabric).

    warp 1.19 annotates arguments with light ``_ArrayAnnotation`` objects naming their array class in
    ``_concrete_cls``; earlier versions use ``wp.array`` instances.
    """
    return type(arg_type) is wp.array or getattr(type(arg_type), "_concrete_cls", None) is wp.array
