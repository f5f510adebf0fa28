"""Every difference between supported warp-lang versions, found by probing features.

Nothing outside this module and the probes it re-exports looks at ``warp.__version__`` or at where
Warp keeps its internals. Each capability is a named attribute, computed once from what the installed
warp actually has. Callers use this module's names (``from apic import _compat``; ``_compat.runtime()``);
the probes behind them live in ``apic._probes``, by job:

* ``internals``: where Warp keeps its internals (``wp_context``, ``wp_types``, ...), its runtime and
  native functions, and what changed in its types (launch bounds, array structs, handle types);
* ``cpu``: the CPU kernel entry ABI, module binaries in Warp's kernel cache, loading them into Warp's
  LLVM backend, the host target, compiling a module's generated C++ again;
* ``cuda``: ``wp_cuda_launch_kernel``'s parameters, CUDA entry names, module binaries, cuda-python's
  driver bindings and compiling generated CUDA source with NVRTC.
"""

from __future__ import annotations

from apic._probes.cpu import (
    BOUNDS_BY_VALUE, KERNEL_ABI, SYSV_X86_64, compile_cpu_source, host_target, kernel_symbol, level_features,
    load_object, loads_objects_from_memory, lookup_symbol, module_binary_path, module_build_options,
    module_source_path, native_target, unload_object,
)
from apic._probes.cuda_natives import (
    compile_cuda_source, cuda_build_options, cuda_capture_info_call, cuda_dependency_args, cuda_driver, cuda_entry_abi,
    cuda_graph_instantiate_call, cuda_kernel_symbol, cuda_launch_params, cuda_module_binary_path, nvrtc_archs,
    warp_native_dir,
)
from apic._probes.internals import (
    ARRAY_T_SIZE, CPU_BLOCKS, FEM_CACHE_MODULE, HANDLE_TYPE, INDEXEDARRAY_T_SIZE, LAUNCH_KEEPS_ARGS, SPARSE_MODULE,
    WARP_VERSION, bounds_shape, function_address, invoke_cpu_blocks, is_plain_array_type, kernel_bounds_type,
    launch_bounds_type, native_address, native_handle_types, parameters_of, quiet_warp, runtime, wp_build,
    wp_codegen, wp_context, wp_types, wp_utils,
)

__all__ = [
    "ARRAY_T_SIZE", "BOUNDS_BY_VALUE", "CPU_BLOCKS", "FEM_CACHE_MODULE", "HANDLE_TYPE", "INDEXEDARRAY_T_SIZE",
    "KERNEL_ABI", "LAUNCH_KEEPS_ARGS", "SPARSE_MODULE", "SYSV_X86_64", "WARP_VERSION", "bounds_shape",
    "compile_cpu_source", "compile_cuda_source", "cuda_build_options", "cuda_driver", "cuda_entry_abi",
    "cuda_capture_info_call", "cuda_dependency_args", "cuda_graph_instantiate_call", "cuda_kernel_symbol",
    "cuda_launch_params", "cuda_module_binary_path",
    "function_address", "host_target", "invoke_cpu_blocks", "is_plain_array_type", "kernel_bounds_type",
    "kernel_symbol", "launch_bounds_type", "level_features", "load_object", "loads_objects_from_memory",
    "lookup_symbol", "module_binary_path",
    "module_build_options", "module_source_path", "native_address", "native_handle_types", "native_target",
    "nvrtc_archs",
    "parameters_of", "quiet_warp", "runtime", "unload_object", "warp_native_dir", "wp_build", "wp_codegen",
    "wp_context", "wp_types", "wp_utils",
]
