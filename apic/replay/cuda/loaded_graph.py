"""Loading and replaying a saved CUDA graph with cuda-python alone (no Warp kernels, no Warp runtime calls).

Loading (``capture_load`` of a file whose ``device`` is CUDA; ``apic.loading.load`` checks the
module images and hands them here) does, in order:

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
``cuMemsetD*Async`` instead. Both modes run as op-table rows in one call of apic's native interpreter
(``rows.py``: the driver called by address, no Python per op), but for ``mode="launch"`` of a graph with
``wp.capture_if`` / ``capture_while``: its conditions are read on the host, one stream synchronisation per test
(``apic.replay.cuda.conditional``). Everything the graph allocated is freed when it is.

Inside a caller's own capture (``wp.ScopedCapture`` without ``apic``, ``wp.capture_begin(external=True)``,
the body of Warp's ``capture_if`` / ``capture_while``, or a stream capture begun with cuda-python), a
replay on the capturing stream enqueues the ops one by one in both modes, so that they become nodes of
the caller's graph (the caller's graph then holds this graph's memory: keep this graph alive as long
as it; a Warp capture holds it for you). With ``stream=None`` that is the current stream of the
graph's device when Warp captures on it. A stream of another CUDA context, a capture an earlier error
invalidated, and the calls that wait for the device (``set_param``, ``get_param``, ``synchronize``,
``capture_save``) while Warp captures on the device are refused with a ``CaptureError`` saying why.
"""

from __future__ import annotations

import weakref

import warp as wp

from apic.errors import GraphMemoryError, IncompatibleGraphError
from apic.record import ops as rec
from apic.replay.cuda.driver import CudaReplayError, Driver, device_ordinal, driver_module  # noqa: F401
from apic.replay import backends
from apic.replay.cuda import resources as cuda_resources, rows as cuda_rows
from apic.replay.cuda.binding_io import CudaBindingIO
from apic.replay.cuda.resources import ContextGuard, Resources
from apic.replay.cuda.driver import unavailable_reason  # noqa: F401  (public here: the CLI and tests ask it)
from apic.replay.cuda.conditional import (SET_CONDITION_PTX, SET_CONDITION_SYMBOL, build_graph, check_support,
                                          has_conditional_steps)
from apic.replay.cuda.lowering import FILL_PTX, FILL_SYMBOL, lower, needs_fill_kernel
from apic.record.cuda.conditional_tree import has_conditionals
from apic.replay.named_params import NamedParams
from apic.replay.cuda.run import CudaRun
from apic.targets import cuda as cuda_target
from apic.targets.cuda import DEFAULT_SMEM

def check_arch(saved, arch: int) -> None:
    """Refuse, saying why, modules this GPU (``sm_<arch>``) cannot run (the rules: ``apic.targets.cuda.arch_problem``)."""  # noqa: E501
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


class LoadedCudaGraph(CudaRun, CudaBindingIO, NamedParams):
    """A CUDA graph loaded from a ``.wrp``, replayed with cuda-python (see the module docstring): loading
    here, replay in :class:`apic.replay.cuda.run.CudaRun`, binding I/O in
    :class:`apic.replay.cuda.binding_io.CudaBindingIO`.

    ``wp.capture_launch(graph)`` replays it on ``stream`` (a ``wp.Stream``, a ``CUstream`` or its
    handle; default: the graph's own stream). ``set_param`` / ``get_param`` move data between Warp
    arrays (CPU or CUDA) and the graph's device memory, synchronously.
    """

    def __init__(self, saved, images: dict[str, bytes], ordinal: int, sources) -> None:
        """``sources``: what compiles a module's saved source for this GPU (``apic.format.cuda_source``:
        ``for_device``, ``rebuilt_after_rejection``, ``kept_source``), given by the loader so that
        replay does not import the file format."""
        self._cu = cu = Driver()
        self._sources = sources
        self.saved = saved
        self.recording = saved.recording
        self.apic = True
        self.is_loaded = True
        self.mode = "graph"
        self.bindings = {b.name: b for b in saved.bindings}
        self._images = images
        res = self._resources = Resources(cu)
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
        self.device = res.warp_device = _warp_device(ordinal)
        cuda_resources.release_pending()
        # modules this GPU cannot run, or whose object is missing, are compiled from a saved source (if any)
        self.saved, self._images = self._sources.for_device(saved, images, self.arch, check_arch)
        res.context = cu("cuDevicePrimaryCtxRetain", res.device)
        with self.current():
            self._check_memory()
            res.stream = cu("cuStreamCreate", 1)  # CU_STREAM_NON_BLOCKING
            self._functions = self._load_modules()
            self.region_addresses = self._allocate_regions()
            lowered = lower(self.recording, self.region_addresses, self._functions, getattr(self, "_fill", None), cu,
                            res.memory)
            self._plan, self._keep = lowered.plan, lowered.keep
            if self._plan:
                self._keep += build_graph(self._plan, cu, res, getattr(self, "_set_condition", None))
            # the replays as op-table rows (apic.replay.cuda.rows), where the driver library's entry points are found;
            # a plan with conditional steps has no launch-mode rows (its conditions are read on the host)
            entries = cuda_rows.driver_entries(cu) if self._plan else None
            self._rows = cuda_rows.CudaRows(self._plan, entries, res.context, res.stream, res.exec,
                                            launch=not has_conditional_steps(self._plan)) if entries else None
            # The uploads above (cuMemcpyHtoD from pageable memory, cuMemsetD8) go to the legacy stream and
            # may still be in flight when they return; replays run on a non-blocking stream, which does
            # not wait for the legacy one. Let every upload land before the first replay can start.
            cu("cuCtxSynchronize")

    # --- loading -----------------------------------------------------------------------------------
    @property
    def op_count(self) -> int:
        """Number of recorded ops."""
        return len(self.recording.ops)

    @property
    def backend(self):
        """The ``cuda`` replay backend (``apic.replay.backends``): it replays, copies and saves it."""
        return backends.get("cuda")

    def current(self) -> ContextGuard:
        """A ``with`` block with the graph's context current (made once: a replay enters it every time)."""
        guard = self.__dict__.get("_context_guard")
        if guard is None:
            guard = self._context_guard = ContextGuard(self._cu, self._resources.context)
        return guard

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
            raise IncompatibleGraphError(
                f"cannot load CUDA module '{name}' on cuda:{self.ordinal}{hint}: {error}"
            ) from error
        self._resources.modules.append(module)
        return module

    def _load_modules(self) -> list:
        cu = self._cu
        loaded = {}
        for index, entry in enumerate(self.saved.modules):
            if entry.file not in loaded:
                try:
                    loaded[entry.file] = self._load_module(self._images[entry.file], entry.file)
                except IncompatibleGraphError as error:  # rejected by the driver: compiled from source, if saved
                    self.saved = self._sources.rebuilt_after_rejection(self.saved, index, self._images, self.arch,
                                                                       error)
                    entry = self.saved.modules[index]
                    loaded[entry.file] = self._load_module(self._images[entry.file], entry.file)
        smem: dict[int, int] = {}
        for op in self.recording.ops:
            if rec.is_cuda_launch(op):
                smem[op.kernel] = max(smem.get(op.kernel, 0), op.smem)
        functions = []
        for index, kernel in enumerate(self.recording.kernels):
            module = loaded[self.saved.modules[kernel.module].file]
            try:
                fn = cu("cuModuleGetFunction", module, kernel.symbol.encode())
            except CudaReplayError as error:
                raise IncompatibleGraphError(
                    f"kernel '{kernel.key}': {kernel.symbol} is not in its CUDA module"
                ) from error
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
        if has_conditionals(self.recording.ops):  # conditional nodes: refused before anything else is built
            check_support(cu)
            condition_module = self._load_module(SET_CONDITION_PTX, "apic_set_condition.ptx")
            self._set_condition = cu("cuModuleGetFunction", condition_module, SET_CONDITION_SYMBOL.encode())
        if any(needs_fill_kernel(op) for op in self.recording.ops):
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

    def module_source(self, index: int):
        """``(source, options, name)`` module ``index`` was saved with (``source_fallback=True``), or None."""
        return self._sources.kept_source(self.saved.modules[index], self._images)

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
