"""Loading and replaying a saved CUDA graph with cuda-python alone (no Warp kernels, no Warp runtime calls).

Loading (``capture_load`` of a file whose ``device`` is CUDA) does, in order:

1. check that the GPU can run the modules (a ``.cubin`` on its major version with an equal or higher
   minor version; a ``.ptx`` on its architecture or a newer one, which the driver JIT-compiles), and
   that the regions fit in the GPU's free memory;
2. ``cuModuleLoadData`` each module, ``cuModuleGetFunction`` each kernel, check each kernel's
   parameter layout against the driver's (``cuFuncGetParamInfo``, where the driver has it), and
   raise its dynamic shared memory limit where a launch needs more than the default;
3. ``cuMemAlloc`` each region (zeroed) and copy in its saved contents;
4. lay out every launch's param blob in host memory with its pointers relocated to the new regions;
5. build one CUDA graph from the ops (kernel nodes; memcpy nodes; memset nodes for memsets and
   fills of 1, 2 or 4-byte values; a small fill kernel for wider or unaligned fills), instantiate
   it once; each ``wp.capture_launch`` then is one ``cuGraphLaunch``.

``graph.mode = "launch"`` walks the ops with ``cuLaunchKernel`` / ``cuMemcpyDtoDAsync`` /
``cuMemsetD*Async`` instead, for comparison. Everything the graph allocated is freed when it is.
"""

from __future__ import annotations

import ctypes
import weakref

import numpy as np
import warp as wp

from apic import bindings as b
from apic import _compat
from apic._compat import cuda_graph_instantiate_call
from apic.cuda_graph import CudaGraph
from apic.errors import ApicError, BindingError, GraphMemoryError, IncompatibleGraphError
from apic.record import ops as rec
from apic.replay.loader import verified_images
from apic.targets import cuda as cuda_target
from apic.targets.cuda import DEFAULT_SMEM

# The fill kernel for fills memset nodes cannot do: dst[i] = src[i % size] for each byte i < total.
# Hand-written PTX (ISA 6.0, sm_50) so that every driver apic can meet JIT-compiles it.
FILL_SYMBOL = "apic_fill_bytes"
FILL_PTX = b"""//
// apic fill kernel: dst[i] = src[i % size] for each byte i < total (grid-stride loop)
//
.version 6.0
.target sm_50
.address_size 64

.visible .entry apic_fill_bytes(
\t.param .u64 apic_fill_bytes_param_0,
\t.param .u64 apic_fill_bytes_param_1,
\t.param .u64 apic_fill_bytes_param_2,
\t.param .u64 apic_fill_bytes_param_3
)
{
\t.reg .pred \t%p<2>;
\t.reg .b16 \t%rs<2>;
\t.reg .b32 \t%r<5>;
\t.reg .b64 \t%rd<11>;

\tld.param.u64 \t%rd1, [apic_fill_bytes_param_0];
\tld.param.u64 \t%rd2, [apic_fill_bytes_param_1];
\tld.param.u64 \t%rd3, [apic_fill_bytes_param_2];
\tld.param.u64 \t%rd4, [apic_fill_bytes_param_3];
\tcvta.to.global.u64 \t%rd1, %rd1;
\tcvta.to.global.u64 \t%rd2, %rd2;
\tmov.u32 \t%r1, %ctaid.x;
\tmov.u32 \t%r2, %ntid.x;
\tmov.u32 \t%r3, %tid.x;
\tmov.u32 \t%r4, %nctaid.x;
\tmul.wide.u32 \t%rd5, %r1, %r2;
\tcvt.u64.u32 \t%rd6, %r3;
\tadd.s64 \t%rd5, %rd5, %rd6;
\tmul.wide.u32 \t%rd7, %r4, %r2;
$L__loop:
\tsetp.ge.u64 \t%p1, %rd5, %rd4;
\t@%p1 bra \t$L__done;
\trem.u64 \t%rd8, %rd5, %rd3;
\tadd.s64 \t%rd9, %rd2, %rd8;
\tld.global.u8 \t%rs1, [%rd9];
\tadd.s64 \t%rd10, %rd1, %rd5;
\tst.global.u8 \t[%rd10], %rs1;
\tadd.s64 \t%rd5, %rd5, %rd7;
\tbra.uni \t$L__loop;
$L__done:
\tret;
}
\x00"""
FILL_BLOCK = 256
FILL_MAX_BLOCKS = 4096
MODES = ("graph", "launch")


class CudaReplayError(ApicError, RuntimeError):
    """A CUDA driver call made by apic failed (the message names the call and the driver's error)."""


def driver_module():
    """cuda-python's driver bindings (``cuda.bindings.driver``, or ``cuda.cuda`` in older releases)."""
    return _compat.cuda_driver()  # looked up per call: the offline tests stand a driver in there


def unavailable_reason() -> str | None:
    """Why a CUDA graph cannot be replayed here (no cuda-python, no driver, no GPU), or None if it can."""
    try:
        cu = driver_module()
    except ImportError as error:
        return str(error)
    try:
        err, = cu.cuInit(0)[:1]
        if int(err) != 0:
            return f"the CUDA driver cannot be initialised ({err})"
        err, count = cu.cuDeviceGetCount()
        if int(err) != 0 or count == 0:
            return "no CUDA device"
    except Exception as error:  # no driver library at all
        return f"no CUDA driver ({type(error).__name__}: {error})"
    return None


class _Driver:
    """Calls cuda-python, turning a non-success ``CUresult`` into ``CudaReplayError``."""

    def __init__(self) -> None:
        self.cu = driver_module()

    def __call__(self, name: str, *args):
        try:
            result = getattr(self.cu, name)(*args)
        except RuntimeError as error:
            # cuda-python raises, rather than returning a CUresult, when it cannot load the driver
            # library (cuda.pathfinder's DynamicLibNotFoundError; "Failed to dlopen libcuda.so.1" in
            # 11.x) or the driver lacks the function ('Function "cuX" not found'): a TypeError or
            # OverflowError (a wrong argument) is apic's bug and passes through unchanged.
            raise CudaReplayError(
                f"{name} could not reach the CUDA driver: {type(error).__name__}: {error}"
            ) from error
        err, values = (result[0], result[1:]) if isinstance(result, tuple) else (result, ())
        if int(err) != 0:
            raise CudaReplayError(f"{name} failed: {self.error_name(err)}")
        return values[0] if len(values) == 1 else (values or None)

    def error_name(self, err) -> str:
        try:
            _, name = self.cu.cuGetErrorName(err)
            return name.decode() if isinstance(name, bytes) else str(name)
        except Exception:  # pragma: no cover
            return str(err)

    def attribute(self, name: str, device) -> int:
        return int(self("cuDeviceGetAttribute", getattr(self.cu.CUdevice_attribute, name), device))


def device_ordinal(device) -> int:
    """The CUDA ordinal of ``device`` (None, ``"cuda"``, ``"cuda:N"``, a Warp CUDA device); refuses others."""
    if device is None:
        return 0
    ordinal = getattr(device, "ordinal", None)
    if isinstance(ordinal, int) and getattr(device, "is_cuda", False):
        return ordinal
    text = str(device)
    if text == "cuda":
        return 0
    if text.startswith("cuda:") and text[5:].isdigit():
        return int(text[5:])
    raise ValueError(f"this is a CUDA graph and replays on a CUDA device ('cuda:N'); cannot load it onto {device}")


def check_arch(saved, arch: int) -> None:
    """Refuse, saying why, modules this GPU (``sm_<arch>``) cannot run (the rules: ``apic.targets.cuda.arch_problem``)."""
    for module in saved.modules:
        kind = module.file.rsplit(".", 1)[-1]
        problem = cuda_target.arch_problem(kind, module.arch, module.arch_suffix, arch)
        if problem is None:
            continue
        built = f"sm_{module.arch}{module.arch_suffix}"
        if kind == "cubin":
            raise IncompatibleGraphError(
                f"module '{module.name}' is a CUBIN built for {built}, and this GPU is sm_{arch}: {problem}. "
                "Capture and save the graph again on this kind of GPU, or save PTX, which the driver "
                "compiles for newer GPUs (wp.config.cuda_output = 'ptx' before the capture)"
            )
        raise IncompatibleGraphError(
            f"module '{module.name}' is PTX for {built}, which this GPU (sm_{arch}) cannot run: {problem}. "
            "Capture and save the graph again on this kind of GPU"
        )


def load(saved, fetch, origin: str, device):
    """Check and build a :class:`LoadedCudaGraph`: ``fetch(file name)`` returns a module's bytes or None."""
    ordinal = device_ordinal(device)
    images = verified_images(saved, fetch, origin)
    return LoadedCudaGraph(saved, images, ordinal)


class _Resources:
    """Every driver object a loaded graph owns, released together (when the graph is freed)."""

    def __init__(self, cu: _Driver) -> None:
        self.cu = cu
        self.context = None
        self.device = None
        self.stream = None
        self.graph = None
        self.exec = None
        self.modules: list = []
        self.memory: list = []

    def release(self) -> None:
        cu = self.cu.cu
        if self.context is None:
            return
        try:
            cu.cuCtxPushCurrent(self.context)
            cu.cuCtxSynchronize()
            if self.exec is not None:
                cu.cuGraphExecDestroy(self.exec)
            if self.graph is not None:
                cu.cuGraphDestroy(self.graph)
            if self.stream is not None:
                cu.cuStreamDestroy(self.stream)
            for module in self.modules:
                cu.cuModuleUnload(module)
            for pointer in self.memory:
                cu.cuMemFree(pointer)
            cu.cuCtxPopCurrent()
            cu.cuDevicePrimaryCtxRelease(self.device)
        except Exception:  # interpreter shutdown: the driver may be gone already
            pass
        self.context = None


class LoadedCudaGraph(CudaGraph):
    """A CUDA graph loaded from a ``.wrp``, replayed with cuda-python (see the module docstring).

    ``wp.capture_launch(graph)`` replays it on ``stream`` (a ``wp.Stream``, a ``CUstream`` or its
    handle; default: the graph's own stream). ``set_param`` / ``get_param`` move data between Warp
    arrays (CPU or CUDA) and the graph's device memory, synchronously.
    """

    def __init__(self, saved, images: dict[str, bytes], ordinal: int) -> None:
        self._cu = cu = _Driver()
        self.saved = saved
        self.recording = saved.recording
        self.apic = True
        self.is_loaded = True
        self.mode = "graph"
        self.bindings = {b.name: b for b in saved.bindings}
        self._images = images
        res = self._resources = _Resources(cu)
        self._finalizer = weakref.finalize(self, res.release)

        try:
            cu("cuInit", 0)
        except CudaReplayError as error:
            raise CudaReplayError(
                f"cannot replay a CUDA graph here: the CUDA driver cannot be initialised ({error})"
            ) from error
        count = int(cu("cuDeviceGetCount"))
        if ordinal >= count:
            raise ValueError(f"cannot load the graph onto cuda:{ordinal}: this machine has {count} CUDA device(s)")
        res.device = cu("cuDeviceGet", ordinal)
        self.ordinal = ordinal
        self.arch = 10 * cu.attribute("CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR", res.device) + cu.attribute(
            "CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR", res.device
        )
        name = cu("cuDeviceGetName", 256, res.device)
        self.device_name = (name.split(b"\0", 1)[0].decode(errors="replace") if isinstance(name, bytes) else str(name))
        self.device = _warp_device(ordinal)
        check_arch(saved, self.arch)
        res.context = cu("cuDevicePrimaryCtxRetain", res.device)
        with self._current():
            self._check_memory()
            res.stream = cu("cuStreamCreate", 1)  # CU_STREAM_NON_BLOCKING
            self._functions = self._load_modules()
            self.region_addresses = self._allocate_regions()
            self._plan = self._lower()
            if self._plan:
                self._build_graph()
            # The uploads above (cuMemcpyHtoD from pageable memory, cuMemsetD8) go to the legacy stream and
            # may still be in flight when they return; replays run on a non-blocking stream, which does
            # not wait for the legacy one. Let every upload land before the first replay can start.
            cu("cuCtxSynchronize")

    # --- loading -----------------------------------------------------------------------------------
    def _current(self):
        graph = self

        class _Guard:
            def __enter__(self):
                graph._cu("cuCtxPushCurrent", graph._resources.context)

            def __exit__(self, *exc):
                graph._cu("cuCtxPopCurrent")

        return _Guard()

    def _check_memory(self) -> None:
        free, _total = self._cu("cuMemGetInfo")
        needed = sum(max(r.nbytes, 1) for r in self.recording.regions)
        if needed > int(free):
            raise GraphMemoryError(
                f"this graph's {len(self.recording.regions)} memory regions need {needed:,} bytes, more than the "
                f"{int(free):,} bytes free on cuda:{self.ordinal}"
            )

    def _load_module(self, image: bytes, name: str):
        cu = self._cu
        data = image if not name.endswith(".ptx") or image.endswith(b"\0") else image + b"\0"
        try:
            module = cu("cuModuleLoadData", data)
        except CudaReplayError as error:
            hint = " (the driver may be too old to compile this PTX)" if name.endswith(".ptx") else ""
            raise IncompatibleGraphError(f"cannot load CUDA module '{name}' on cuda:{self.ordinal}{hint}: {error}")
        self._resources.modules.append(module)
        return module

    def _load_modules(self) -> list:
        cu = self._cu
        loaded = {}
        for entry in self.saved.modules:
            if entry.file not in loaded:
                loaded[entry.file] = self._load_module(self._images[entry.file], entry.file)
        smem: dict[int, int] = {}
        for op in self.recording.ops:
            if isinstance(op, rec.CudaLaunch):
                smem[op.kernel] = max(smem.get(op.kernel, 0), op.smem)
        functions = []
        for index, kernel in enumerate(self.recording.kernels):
            module = loaded[self.saved.modules[kernel.module].file]
            try:
                fn = cu("cuModuleGetFunction", module, kernel.symbol.encode())
            except CudaReplayError:
                raise IncompatibleGraphError(f"kernel '{kernel.key}': {kernel.symbol} is not in its CUDA module")
            self._check_params(fn, kernel)
            if smem.get(index, 0) > DEFAULT_SMEM:
                attribute = cu.cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
                cu("cuFuncSetAttribute", fn, attribute, smem[index])
            if self.arch >= 90:  # cluster dims above 8 are compiled in and need the non-portable opt-in
                attribute = getattr(cu.cu.CUfunction_attribute,
                                    "CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED", None)
                if attribute is not None:
                    try:
                        cu.cu.cuFuncSetAttribute(fn, attribute, 1)  # best effort, as Warp does
                    except RuntimeError:  # a driver without the attribute's function: clusters stay portable
                        pass
            functions.append(fn)
        if any(self._needs_fill_kernel(op) for op in self.recording.ops):
            fill_module = self._load_module(FILL_PTX, "apic_fill.ptx")
            self._fill = cu("cuModuleGetFunction", fill_module, FILL_SYMBOL.encode())
        return functions

    def _check_params(self, fn, kernel) -> None:
        """Compare the saved param layout with the driver's (``cuFuncGetParamInfo``, CUDA 12.4+ drivers)."""
        get = getattr(self._cu.cu, "cuFuncGetParamInfo", None)
        if get is None:
            return
        for i, expected in enumerate(kernel.params):
            try:
                result = get(fn, i)
            except RuntimeError:  # cuda-python could not find the function in this driver: it cannot tell
                return
            if int(result[0]) != 0:
                if i == 0:
                    return  # this driver cannot tell
                raise IncompatibleGraphError(
                    f"kernel '{kernel.key}' has {i} parameters in its module, the graph file says {len(kernel.params)}"
                )
            actual = (int(result[1]), int(result[2]))
            if actual != tuple(expected):
                raise IncompatibleGraphError(
                    f"kernel '{kernel.key}': parameter {i} is [offset {actual[0]}, {actual[1]} bytes] in its module, "
                    f"[offset {expected[0]}, {expected[1]} bytes] in the graph file"
                )
        try:
            extra = get(fn, len(kernel.params))
        except RuntimeError:  # as above
            return
        if int(extra[0]) == 0:
            raise IncompatibleGraphError(
                f"kernel '{kernel.key}' has more parameters in its module than the graph file's {len(kernel.params)}"
            )

    def _allocate_regions(self) -> list[int]:
        cu = self._cu
        addresses = []
        for region, contents in zip(self.recording.regions, self.saved.contents):
            pointer = cu("cuMemAlloc", max(region.nbytes, 1))
            self._resources.memory.append(pointer)
            address = int(pointer)
            if contents:
                cu("cuMemcpyHtoD", pointer, contents, len(contents))
            elif region.nbytes:
                cu("cuMemsetD8", pointer, 0, region.nbytes)
            addresses.append(address)
        return addresses

    @staticmethod
    def _memset_width(op) -> int:
        """The element size (1, 2, 4) of a memset node that can do this fill, or 0."""
        if isinstance(op, rec.Memset):
            return 1
        if isinstance(op, rec.Memtile):
            size = len(op.value.data)
            value = op.value.data
            for width in (1, 2, 4):
                if size % width == 0 and value == value[:width] * (size // width):
                    return width
        return 0

    def _needs_fill_kernel(self, op) -> bool:
        return isinstance(op, rec.Memtile) and (
            not self._memset_width(op) or op.dst.offset % self._memset_width(op)
        )

    def _lower(self) -> list[tuple]:
        """One step per op: ("kernel", fn, grid, block, smem, params), ("memcpy", ...), ("memset", ...)."""
        cu = self._cu
        regions = self.region_addresses

        def address(ref: rec.Ref) -> int:
            return regions[ref.region] + ref.offset

        # Host arena of relocated param blobs (each distinct blob once), and device constants for fills.
        blobs, at, size = {}, {}, 0
        fills, fill_size = {}, 0
        for op in self.recording.ops:
            if isinstance(op, rec.CudaLaunch) and id(op.params) not in blobs:
                blobs[id(op.params)] = op.params
                at[id(op.params)] = size
                size += -(-max(len(op.params.data), 1) // 16) * 16
            elif self._needs_fill_kernel(op) and op.value.data not in fills:
                fills[op.value.data] = fill_size
                fill_size += -(-len(op.value.data) // 16) * 16
        self._arena = arena = np.zeros(max(size, 16), dtype=np.uint8)
        base = arena.ctypes.data
        for key, blob in blobs.items():
            data = bytearray(blob.data)
            for reloc in blob.relocs:
                data[reloc.at : reloc.at + 8] = address(reloc.target).to_bytes(8, "little")
            arena[at[key] : at[key] + len(data)] = np.frombuffer(bytes(data), dtype=np.uint8)
        constants = 0
        if fills:
            staging = bytearray(fill_size)
            for value, offset in fills.items():
                staging[offset : offset + len(value)] = value
            pointer = cu("cuMemAlloc", fill_size)
            self._resources.memory.append(pointer)
            cu("cuMemcpyHtoD", pointer, bytes(staging), fill_size)
            constants = int(pointer)

        self._keep = []  # kernelParams arrays and fill arguments, alive as long as the plan
        plan = []
        for op in self.recording.ops:
            if isinstance(op, rec.CudaLaunch):
                kernel = self.recording.kernels[op.kernel]
                start = base + at[id(op.params)]
                params = (ctypes.c_void_p * len(kernel.params))(*[start + offset for offset, _ in kernel.params])
                self._keep.append(params)
                plan.append(("kernel", self._functions[op.kernel], op.grid, op.block, op.smem, ctypes.addressof(params)))
            elif isinstance(op, rec.Memcpy):
                plan.append(("memcpy", address(op.dst), address(op.src), op.nbytes))
            elif isinstance(op, rec.Memset):
                plan.append(("memset", address(op.dst), op.value, 1, op.nbytes))
            elif isinstance(op, rec.Memtile) and not self._needs_fill_kernel(op):
                width = self._memset_width(op)
                value = int.from_bytes(op.value.data[:width], "little")
                plan.append(("memset", address(op.dst), value, width, len(op.value.data) * op.count // width))
            elif isinstance(op, rec.Memtile):
                total = len(op.value.data) * op.count
                values = (ctypes.c_uint64 * 4)(address(op.dst), constants + fills[op.value.data], len(op.value.data), total)
                params = (ctypes.c_void_p * 4)(*[ctypes.addressof(values) + 8 * i for i in range(4)])
                self._keep += [values, params]
                blocks = min(-(-total // FILL_BLOCK), FILL_MAX_BLOCKS)
                plan.append(("kernel", self._fill, (blocks, 1, 1), (FILL_BLOCK, 1, 1), 0, ctypes.addressof(params)))
            elif isinstance(op, rec.Alloc):
                continue
            else:  # pragma: no cover - the reader lets no other kind into a CUDA graph
                raise TypeError(f"cannot replay a {type(op).__name__} op on CUDA")
        return plan

    def _build_graph(self) -> None:
        cu = self._cu
        driver = cu.cu
        res = self._resources
        res.graph = cu("cuGraphCreate", 0)
        previous: list = []
        for step in self._plan:
            if step[0] == "kernel":
                _, fn, grid, block, smem, params = step
                node_params = driver.CUDA_KERNEL_NODE_PARAMS()
                node_params.func = fn
                node_params.gridDimX, node_params.gridDimY, node_params.gridDimZ = grid
                node_params.blockDimX, node_params.blockDimY, node_params.blockDimZ = block
                node_params.sharedMemBytes = smem
                node_params.kernelParams = params
                node = cu("cuGraphAddKernelNode", res.graph, previous, len(previous), node_params)
            elif step[0] == "memcpy":
                _, dst, src, nbytes = step
                copy = driver.CUDA_MEMCPY3D()
                copy.srcMemoryType = driver.CUmemorytype.CU_MEMORYTYPE_DEVICE
                copy.dstMemoryType = driver.CUmemorytype.CU_MEMORYTYPE_DEVICE
                copy.srcDevice = driver.CUdeviceptr(src)
                copy.dstDevice = driver.CUdeviceptr(dst)
                copy.srcPitch = copy.dstPitch = nbytes
                copy.srcHeight = copy.dstHeight = 1
                copy.WidthInBytes, copy.Height, copy.Depth = nbytes, 1, 1
                node = cu("cuGraphAddMemcpyNode", res.graph, previous, len(previous), copy, res.context)
            else:
                _, dst, value, width, count = step
                memset = driver.CUDA_MEMSET_NODE_PARAMS()
                memset.dst = driver.CUdeviceptr(dst)
                memset.value = value
                memset.elementSize = width
                memset.width = count
                memset.height = 1
                memset.pitch = count * width
                node = cu("cuGraphAddMemsetNode", res.graph, previous, len(previous), memset, res.context)
            previous = [node]
        name, args = cuda_graph_instantiate_call(driver, res.graph)  # differs between cuda-python 11 and 12+
        res.exec = cu(name, *args)

    # --- replay ------------------------------------------------------------------------------------
    def _stream(self, stream):
        driver = self._cu.cu
        if stream is None:
            return self._resources.stream
        handle = getattr(stream, "cuda_stream", stream)  # a wp.Stream, a CUstream or a raw handle
        return handle if isinstance(handle, driver.CUstream) else driver.CUstream(int(handle or 0))

    def launch(self, stream=None, mode: str | None = None) -> None:
        """Replay once: one ``cuGraphLaunch`` (``mode="graph"``), or op by op (``mode="launch"``)."""
        mode = self.mode if mode is None else mode
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        if not self._plan:
            return
        cu = self._cu
        stream = self._stream(stream)
        with self._current():
            if mode == "graph":
                cu("cuGraphLaunch", self._resources.exec, stream)
                return
            driver = cu.cu
            for step in self._plan:
                if step[0] == "kernel":
                    _, fn, grid, block, smem, params = step
                    cu("cuLaunchKernel", fn, *grid, *block, smem, stream, params, 0)
                elif step[0] == "memcpy":
                    _, dst, src, nbytes = step
                    cu("cuMemcpyDtoDAsync", driver.CUdeviceptr(dst), driver.CUdeviceptr(src), nbytes, stream)
                else:
                    _, dst, value, width, count = step
                    name = {1: "cuMemsetD8Async", 2: "cuMemsetD16Async", 4: "cuMemsetD32Async"}[width]
                    cu(name, driver.CUdeviceptr(dst), value, count, stream)

    def synchronize(self) -> None:
        """Wait for every replay of this graph (on any stream of its context) to finish."""
        with self._current():
            self._cu("cuCtxSynchronize")

    # --- named parameters ----------------------------------------------------------------------------
    @property
    def params(self) -> dict:
        return {name: b.describe() for name, b in self.bindings.items()}

    def _binding(self, name: str, method: str):
        binding = self.bindings.get(name)
        if binding is None:
            known = ", ".join(sorted(self.bindings)) or "none"
            raise BindingError(f"{method}(): the graph has no parameter named {name!r} (its parameters: {known})")
        return binding

    def _check(self, binding, arr, method: str) -> None:
        where = f"{method}('{binding.name}')"
        if not b.is_warp_array(arr):
            raise TypeError(f"{where}: expected a Warp array, got {type(arr).__name__}")
        problems = []
        if b.dtype_name(arr.dtype) != binding.dtype:
            problems.append(f"dtype {b.dtype_name(arr.dtype)} (expected {binding.dtype})")
        if tuple(arr.shape) != tuple(binding.shape):
            problems.append(f"shape {tuple(arr.shape)} (expected {tuple(binding.shape)})")
        if problems:
            raise BindingError(f"{where}: the array does not match the binding: " + ", ".join(problems))

    def _read_span(self, binding) -> tuple[np.ndarray, int]:
        """The device bytes the binding can reach, on the host, and where its first element is in them."""
        lo, hi = binding.extent()
        host = np.empty(max(hi - lo, 1), dtype=np.uint8)
        if hi > lo:
            self._cu("cuMemcpyDtoH", host.ctypes.data, self.region_addresses[binding.region] + lo, hi - lo)
        return host, binding.offset - lo

    def set_param(self, name: str, arr) -> None:
        """Copy the Warp array ``arr`` (CPU or CUDA; dtype and shape must match) into the named parameter."""
        binding = self._binding(name, "set_param")
        self._check(binding, arr, "set_param")
        if not binding.nbytes:
            return
        source = np.ascontiguousarray(arr.numpy()).view(np.uint8).reshape(-1)
        with self._current():
            self._cu("cuCtxSynchronize")
            host, start = self._read_span(binding)
            view = b.raw_view(host.ctypes.data + start, binding.elem_size, binding.shape, binding.strides)
            view[...] = source.view(np.dtype((np.void, binding.elem_size))).reshape(binding.shape)
            lo, hi = binding.extent()
            self._cu("cuMemcpyHtoD", self.region_addresses[binding.region] + lo, host.ctypes.data, hi - lo)
            self._cu("cuCtxSynchronize")  # landed before a replay on the non-blocking stream reads it

    def get_param(self, name: str, arr) -> None:
        """Copy the named parameter into the Warp array ``arr`` (CPU or CUDA; dtype and shape must match)."""
        binding = self._binding(name, "get_param")
        self._check(binding, arr, "get_param")
        if not binding.nbytes:
            return
        with self._current():
            self._cu("cuCtxSynchronize")
            host, start = self._read_span(binding)
        elements = b.raw_view(host.ctypes.data + start, binding.elem_size, binding.shape, binding.strides)
        packed = np.ascontiguousarray(elements)
        if arr.device.is_cpu:
            b.array_view(arr)[...] = packed
            return
        staging = wp.array(ptr=packed.ctypes.data, dtype=arr.dtype, shape=arr.shape, device="cpu")
        wp.copy(arr, staging)
        wp.synchronize_device(arr.device)

    def get_param_ptr(self, name: str):
        """Device address of the named parameter's first element, or None if there is no such parameter."""
        binding = self.bindings.get(name)
        return None if binding is None else self.region_addresses[binding.region] + binding.offset

    # --- what saving again needs -------------------------------------------------------------------------
    def read_region(self, index: int) -> bytes:
        nbytes = self.recording.regions[index].nbytes
        host = np.empty(max(nbytes, 1), dtype=np.uint8)
        with self._current():
            self._cu("cuCtxSynchronize")
            if nbytes:
                self._cu("cuMemcpyDtoH", host.ctypes.data, self.region_addresses[index], nbytes)
        return host[:nbytes].tobytes()

    def module_image(self, index: int):
        entry = self.saved.modules[index]
        return self._images[entry.file], (entry.arch, entry.arch_suffix, entry.file.rsplit(".", 1)[1])

    def __repr__(self) -> str:
        return (f"<apic.LoadedCudaGraph cuda:{self.ordinal} sm_{self.arch} ops={self.op_count} "
                f"regions={len(self.recording.regions)} mode={self.mode}>")


def _warp_device(ordinal: int):
    """Warp's device object for ``cuda:<ordinal>`` where Warp sees it, else the name."""
    try:
        return wp.get_device(f"cuda:{ordinal}")
    except Exception:
        return f"cuda:{ordinal}"

