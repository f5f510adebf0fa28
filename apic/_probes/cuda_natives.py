"""The CUDA side: ``wp_cuda_launch_kernel``'s parameters, entry names, module binaries, cuda-python, NVRTC.

Nothing here imports cuda-python when apic is imported: each helper is called with, or imports, the
driver module only when a CUDA graph is loaded.
"""

from __future__ import annotations

import inspect
import os
import re
import tempfile

import warp as wp

from apic._probes.internals import WARP_VERSION, cache_folders, mangled_name, runtime, wp_build, wp_codegen

# --- CUDA (recording alongside Warp's CUDA graph capture; apic.record.cuda.recorder, apic.targets.cuda) ----------
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
    mangled = mangled_name(module_exec, kernel)
    if not adjoint and hasattr(wp_codegen, "cuda_kernel_forward_name"):  # 1.19: entry_point_abi options
        return wp_codegen.cuda_kernel_forward_name(kernel, name=mangled)
    return f"{mangled}_cuda_kernel_{'backward' if adjoint else 'forward'}"


def cuda_entry_abi(kernel) -> str:
    """The entry-point ABI of a kernel: ``"warp"`` (by-value params after the bounds) unless 1.19+ says otherwise."""
    return str((getattr(kernel, "options", None) or {}).get("entry_point_abi", "warp"))


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
    for stem, folder in cache_folders(module.name, module_exec):
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


# --- cuda-python (replaying a saved CUDA graph; apic.replay.cuda.loaded_graph) -----------------------------------
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


def cuda_dependency_args(driver, name: str, dependencies: list) -> tuple:
    """The dependency arguments of the driver call ``name`` (``cuGraphAddNode``,
    ``cuStreamUpdateCaptureDependencies``): ``(dependencies, count)`` in cuda-python 12.x, whose
    functions of that name take no edge data, ``(dependencies, None, count)`` from 13.0, where they do."""
    doc = (getattr(driver, name).__doc__ or "").split("\n", 1)[0]
    if "dependencyData" in doc:
        return (dependencies, None, len(dependencies))
    return (dependencies, len(dependencies))


def cuda_capture_info_call(driver) -> str:
    """The driver call that returns a capturing stream's graph and dependencies, as
    ``(status, id, graph, dependencies, ..., count)``: ``cuStreamGetCaptureInfo`` in cuda-python 12 and 13
    (13.0 adds the edge data before the count), ``cuStreamGetCaptureInfo_v2`` where a binding still has it."""
    if hasattr(driver, "cuStreamGetCaptureInfo_v2"):
        return "cuStreamGetCaptureInfo_v2"
    return "cuStreamGetCaptureInfo"


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


