"""apic's use of cuda-python checked against the real bindings, without a GPU or a CUDA driver.

cuda-python converts and checks every argument (types, ranges, struct classes) *before* it loads
the driver library, and on a machine without one it then raises a ``RuntimeError`` (cuda-python
12+: ``cuda.pathfinder``'s ``DynamicLibNotFoundError``; 11.x: "Failed to dlopen libcuda.so.1").
So a call that ends in that error got past the bindings' argument checks, and one that ends in a
``TypeError`` / ``OverflowError`` would fail the same way on a GPU.

``test_load_and_replay_through_the_real_bindings`` loads a saved CUDA graph and replays it in both
modes with every driver call going first to the real cuda-python function (which must accept the
arguments) and then to a stand-in that returns what the driver would, in the tuple shape the
bindings' own docstrings give. The node parameters apic builds (kernelParams arrays, relocated
param blobs, memset and memcpy fields) are read back and checked.

Every test skips, saying why, where cuda-python is not installed (it is the optional ``cuda``
extra), and the ones that call into the bindings skip where a CUDA driver library is present
(there fake handles would reach a real driver: tests/cuda/test_cuda_gpu.py covers that machine).
"""

from __future__ import annotations

import ctypes
import re

import pytest

from apic import _compat, loading
from apic.errors import ApicError, CaptureError
from apic.record import ops as rec
from apic.replay.cuda import loaded_graph as cuda_replay
from test_cuda_offline import ARCH, _document, _read, ptx  # noqa: F401  (ptx is a fixture)

pytestmark = [pytest.mark.warp_version]


def _driver():
    try:
        return _compat.cuda_driver()
    except ImportError:
        pytest.skip("cuda-python is not installed (apic's optional 'cuda' extra)")


def _no_driver_library(cu) -> bool:
    """True where cuda-python cannot load a CUDA driver library at all (cuInit raises)."""
    # A real binding call, as FakeDevice's: a collection inside it may run an earlier test's graph finalizer,
    # whose stand-in must then not call the real binding again (it would wait on the lock cuInit holds)
    FakeDevice.in_real_call = True
    try:
        cu.cuInit(0)
    except RuntimeError:
        return True
    finally:
        FakeDevice.in_real_call = False
    return False


@pytest.fixture
def cu():
    driver = _driver()
    if not _no_driver_library(driver):
        pytest.skip("a CUDA driver library is present: calls with made-up handles would reach it "
                    "(tests/cuda/test_cuda_gpu.py runs the real thing)")
    return driver


def _returned_values(function) -> list[str]:
    """The names of the values after the CUresult in what a binding returns, from its docstring."""
    doc = function.__doc__ or ""
    section = re.split(r"\n\s*Returns\n\s*-+\n", doc, maxsplit=1)
    assert len(section) == 2, f"{function.__name__}: no Returns section in its docstring"
    body = re.split(r"\n\s*(?:See Also|Notes)\n\s*-+\n", section[1], maxsplit=1)[0]
    names = re.findall(r"^\s*(\w+) : ", body, re.M)
    assert body.lstrip().startswith("CUresult"), f"{function.__name__} does not return a CUresult first"
    return names


class FakeDevice:
    """Stands in for the CUDA driver behind the real cuda-python module (see the module docstring)."""

    # A garbage collection inside a real binding call can run the finalizer of a graph an earlier test
    # loaded (through its own stand-in), which calls the driver again: the real binding would then wait
    # forever on the driver-loading lock it holds, so a nested call, from any stand-in, skips it.
    in_real_call = False
    # the library whose entry points a loaded graph's op-table rows call (apic.replay.cuda.driver.Driver.library):
    # none, as this stand-in's handles are no library's, unless a test gives the stand-in C library's path
    entry_library = None

    def __init__(self, cu, arch: int = ARCH, init_error=None, entry_library=None):
        self.cu = cu
        self.entry_library = entry_library
        self.arch = arch
        self.init_error = init_error
        self.calls: list[tuple] = []
        self.symbols: dict[int, str] = {}
        self.param_info: dict[str, tuple] = {}
        self.next_handle = 0x1000
        self.next_address = 0x7F0000000000
        self.capture_status = cu.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_NONE  # of every stream
        self.stream_context = 0x100  # the context every stream belongs to (0x100: the primary one)
        self.driver_version = 12080  # what cuDriverGetVersion reports (CUDA 12.8)
        self.conditions: list[int] = []  # the int32 each 4-byte cuMemcpyDtoH reads next (host-evaluated conditions)
        self.body_graphs: dict[int, list] = {}  # conditional node -> the body graphs the driver made for it
        self.capture_graph = None  # the graph a capturing stream builds (cuStreamGetCaptureInfo), made on first ask
        self._kept: list = []  # host memory the stand-in hands out as the driver's (phGraph_out arrays)

    def __getattr__(self, name):
        real = getattr(self.cu, name)
        if not (name.startswith("cu") and callable(real) and not isinstance(real, type)):
            return real  # enums, structs, handle types: the real ones
        def call(*args):
            return self._call(name, real, args)

        call.__doc__ = real.__doc__  # apic reads a binding's signature from it (_compat.cuda_dependency_args)
        return call

    def _handle(self, kind):
        self.next_handle += 0x10
        return getattr(self.cu, kind)(self.next_handle)

    def _call(self, name, real, args):
        if not FakeDevice.in_real_call:
            FakeDevice.in_real_call = True
            try:
                real(*args)
            except RuntimeError:
                pass  # the arguments passed the bindings' checks; only the driver library is missing
            else:  # pragma: no cover - the fixture skips where a driver library exists
                raise AssertionError(f"{name} reached a CUDA driver")
            finally:
                FakeDevice.in_real_call = False
        self.calls.append((name, args))
        cu, ok = self.cu, self.cu.CUresult.CUDA_SUCCESS
        values: tuple = ()
        if name == "cuInit" and self.init_error is not None:
            return (self.init_error,)
        if name == "cuDeviceGetCount":
            values = (1,)
        elif name == "cuDeviceGet":
            values = (cu.CUdevice(args[0]),)
        elif name == "cuDeviceGetAttribute":
            major = args[0] == cu.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
            values = (self.arch // 10 if major else self.arch % 10,)
        elif name == "cuDeviceGetName":
            values = (b"Offline GPU".ljust(args[0], b"\0"),)
        elif name in ("cuDevicePrimaryCtxRetain", "cuCtxPopCurrent"):
            values = (cu.CUcontext(0x100),)
        elif name == "cuStreamGetCtx":
            values = (cu.CUcontext(self.stream_context),)
        elif name == "cuStreamIsCapturing":
            values = (self.capture_status,)
        elif name == "cuMemGetInfo":
            values = (1 << 34, 1 << 35)
        elif name == "cuStreamCreate":
            values = (self._handle("CUstream"),)
        elif name == "cuModuleLoadData":
            values = (self._handle("CUmodule"),)
        elif name == "cuModuleGetFunction":
            fn = self._handle("CUfunction")
            self.symbols[int(fn)] = args[1].decode()
            values = (fn,)
        elif name == "cuFuncGetParamInfo":
            params = self.param_info.get(self.symbols[int(args[0])], ())
            if args[1] >= len(params):
                return (cu.CUresult.CUDA_ERROR_INVALID_VALUE, 0, 0)
            values = params[args[1]]
        elif name == "cuMemAlloc":
            values = (cu.CUdeviceptr(self.next_address),)
            self.next_address += -(-args[0] // 256) * 256 + 256
        elif name == "cuGraphCreate":
            values = (self._handle("CUgraph"),)
        elif name == "cuDriverGetVersion":
            values = (self.driver_version,)
        elif name == "cuGraphConditionalHandleCreate":
            values = (self._handle("CUgraphConditionalHandle"),)
        elif name == "cuGraphAddNode":
            node = self._handle("CUgraphNode")
            params = args[-1]
            if params.type == cu.CUgraphNodeType.CU_GRAPH_NODE_TYPE_CONDITIONAL:
                # the driver's out-parameter: phGraph_out (at byte 32 of CUgraphNodeParams) points at the bodies
                bodies = (ctypes.c_void_p * params.conditional.size)(
                    *[int(self._handle("CUgraph")) for _ in range(params.conditional.size)])
                self._kept.append(bodies)
                ctypes.c_void_p.from_address(params.getPtr() + 32).value = ctypes.addressof(bodies)
                self.body_graphs[int(node)] = [int(b) for b in bodies]
            values = (node,)
        elif name.startswith("cuGraphAdd"):
            values = (self._handle("CUgraphNode"),)
        elif name.startswith("cuStreamGetCaptureInfo"):
            if self.capture_graph is None:
                self.capture_graph = self._handle("CUgraph")
            previous = [cu.CUgraphNode(0x99)]  # what the caller's capture added last
            values = (self.capture_status, 7, self.capture_graph, previous)
            values += ((None,) if len(_returned_values(real)) == 6 else ()) + (len(previous),)
        elif name == "cuMemcpyDtoH" and args[2] == 4 and self.conditions:
            ctypes.c_int32.from_address(int(args[0])).value = self.conditions.pop(0)
        elif name.startswith("cuGraphInstantiate"):
            values = (self._handle("CUgraphExec"),)
        elif name == "cuGetErrorName":
            values = (cu.CUresult(args[0]).name.encode(),)
        expected = _returned_values(real)
        assert len(values) == len(expected), f"{name} returns {expected} after its CUresult, the stand-in {values}"
        return (ok, *values)

    def named(self, name) -> list[tuple]:
        return [args for n, args in self.calls if n == name]


def _load(cu, monkeypatch, ptx_text, **fake):
    device = FakeDevice(cu, **fake)
    monkeypatch.setattr(_compat, "cuda_driver", lambda: device)
    saved = _read(_document(ptx_text)[0])
    images = {m.file: ptx_text.encode("latin-1") for m in saved.modules}
    for kernel in saved.recording.kernels:
        device.param_info[kernel.symbol] = tuple(tuple(p) for p in kernel.params)
    return device, saved, loading.load(saved, images.get, "the test's modules", "cuda:0")


# --- the driver module and its API, as installed -----------------------------------------------------------
def test_driver_module_is_found():
    cu = _driver()
    assert cuda_replay.driver_module() is cu
    for name in ("CUDA_KERNEL_NODE_PARAMS", "CUDA_MEMCPY3D", "CUDA_MEMSET_NODE_PARAMS", "CUdeviceptr", "CUstream",
                 "CUgraphNode", "CUresult", "CUmemorytype", "CUfunction_attribute", "CUdevice_attribute"):
        assert hasattr(cu, name), name


def test_graph_instantiate_is_the_flags_form():
    cu = _driver()
    name, args = _compat.cuda_graph_instantiate_call(cu, "graph")
    signature = getattr(cu, name).__doc__.strip().splitlines()[0]
    assert re.fullmatch(rf"{name}\(hGraph, unsigned long long flags\)", signature), signature
    assert args == ("graph", 0)
    assert _returned_values(getattr(cu, name)) == ["phGraphExec"]


def test_struct_fields_apic_sets_exist():
    """Structs are Cython classes without a __dict__: a misspelt field raises, so the load test would catch it."""
    cu = _driver()
    params = cu.CUDA_KERNEL_NODE_PARAMS()
    with pytest.raises(AttributeError):
        params.gridDim = 1
    array = (ctypes.c_void_p * 2)(1, 2)
    params.kernelParams = ctypes.addressof(array)  # cuda-python takes the void** as an int address
    assert int(params.kernelParams) == ctypes.addressof(array)
    params.func = cu.CUfunction(0x40)
    assert int(params.func) == 0x40


def test_without_a_driver_the_errors_are_apics(cu):
    reason = cuda_replay.unavailable_reason()
    assert reason and "driver" in reason
    with pytest.raises(cuda_replay.CudaReplayError, match="cuInit could not reach the CUDA driver") as info:
        cuda_replay.Driver()("cuInit", 0)
    assert isinstance(info.value, ApicError)


def test_loading_without_a_driver_raises_an_apic_error(cu, ptx):
    saved = _read(_document(ptx)[0])
    images = {m.file: ptx.encode("latin-1") for m in saved.modules}
    with pytest.raises(cuda_replay.CudaReplayError, match="the CUDA driver cannot be initialised"):
        loading.load(saved, images.get, "the test's modules", "cuda:0")


def test_loading_without_a_device_raises_an_apic_error(cu, ptx, monkeypatch):
    with pytest.raises(cuda_replay.CudaReplayError, match="CUDA_ERROR_NO_DEVICE"):
        _load(cu, monkeypatch, ptx, init_error=cu.CUresult.CUDA_ERROR_NO_DEVICE)


# --- a whole load and replay, every call checked by the real bindings -------------------------------------
@pytest.mark.parametrize("arch", [ARCH, 90])
def test_load_and_replay_through_the_real_bindings(cu, ptx, monkeypatch, arch):
    device, saved, graph = _load(cu, monkeypatch, ptx, arch=arch)
    recording = saved.recording
    assert graph.arch == arch and graph.device_name == "Offline GPU"
    assert len(device.named("cuModuleLoadData")) == 2  # the graph's module and the fill kernel
    if hasattr(cu, "cuFuncGetParamInfo"):  # cuda-python 12.4+
        assert device.named("cuFuncGetParamInfo")  # the layout check ran against the (stand-in) driver
    cluster = [a for a in device.named("cuFuncSetAttribute")
               if a[1] == cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED]
    assert len(cluster) == (len(recording.kernels) if arch >= 90 else 0)

    regions = graph.region_addresses
    launches = [op for op in recording.ops if isinstance(op, rec.CudaLaunch)]
    kernel_nodes = device.named("cuGraphAddKernelNode")
    fills = [n for n in kernel_nodes if int(n[3].func) == int(graph._fill)]  # the 6-byte fill
    assert len(fills) == 1 and len(kernel_nodes) == len(launches) + 1
    previous = None
    for op, (_graph, deps, count, params) in zip(launches, [n for n in kernel_nodes if n not in fills]):
        assert count == len(deps) and (previous is None or len(deps) == 1)
        assert (params.gridDimX, params.gridDimY, params.gridDimZ) == op.grid
        assert (params.blockDimX, params.blockDimY, params.blockDimZ) == op.block
        kernel = recording.kernels[op.kernel]
        pointers = (ctypes.c_void_p * len(kernel.params)).from_address(int(params.kernelParams))
        blob = pointers[0]
        assert [p - blob for p in pointers] == [offset for offset, _ in kernel.params]
        data = bytearray(ctypes.string_at(blob, len(op.params.data)))
        for reloc in op.params.relocs:
            address = int.from_bytes(data[reloc.at : reloc.at + 8], "little")
            assert address == regions[reloc.target.region] + reloc.target.offset
            data[reloc.at : reloc.at + 8] = bytes(8)
        assert bytes(data) == op.params.data  # everything but the relocated pointers as saved
        previous = params

    fill = fills[0][3]
    values = (ctypes.c_void_p * 4).from_address(int(fill.kernelParams))
    dst, src, size, total = (ctypes.c_uint64.from_address(v).value for v in values)
    assert (dst, size, total) == (regions[2] + 4, 6, 60)
    assert ctypes.c_uint64.from_address(values[1]).value == src

    memsets = device.named("cuGraphAddMemsetNode")
    assert [(m[3].elementSize, m[3].width, m[3].value) for m in memsets] == [(1, 64, 0), (4, 16, 0x3F800000)]
    assert all(int(m[3].dst) == regions[2] and m[3].height == 1 for m in memsets)
    (copy,) = device.named("cuGraphAddMemcpyNode")
    assert (int(copy[3].dstDevice), int(copy[3].srcDevice), copy[3].WidthInBytes) == (regions[0], regions[1], 32)
    assert len(device.named("cuGraphInstantiate") + device.named("cuGraphInstantiateWithFlags")) == 1

    graph.launch()
    assert len(device.named("cuGraphLaunch")) == 1
    graph.launch(mode="launch", stream=0x1234)  # a raw stream handle, as wp.Stream.cuda_stream gives
    launched = device.named("cuLaunchKernel")
    assert len(launched) == len(kernel_nodes)
    assert [a[9] for a in launched] == [int(n[3].kernelParams) for n in kernel_nodes]
    assert all(int(a[8]) == 0x1234 for a in launched)
    assert [a[1:3] for a in device.named("cuMemsetD8Async")] == [(0, 64)]
    assert [a[1:3] for a in device.named("cuMemsetD32Async")] == [(0x3F800000, 16)]
    assert len(device.named("cuMemcpyDtoDAsync")) == 1
    graph.synchronize()
    assert len(graph.read_region(0)) == 32  # the stand-in copies nothing back, so only the call is checked
    assert [a[1:] for a in device.named("cuMemcpyDtoH")] == [(regions[0], 32)]
    # every upload (region contents, zero fills, fill constants) lands before the first replay can start
    names = [name for name, _ in device.calls]
    last_upload = max(i for i, n in enumerate(names)
                      if n in ("cuMemcpyHtoD", "cuMemsetD8") and i < names.index("cuGraphLaunch"))
    assert "cuCtxSynchronize" in names[last_upload : names.index("cuGraphLaunch")]
    uploads = [(int(a[0]), bytes(a[1]), a[2]) for a in device.named("cuMemcpyHtoD")]
    assert uploads[:2] == [(regions[i], saved.contents[i], 32) for i in (0, 1)]  # + the fill constants
    assert [a[1:] for a in device.named("cuMemsetD8")] == [(0, 64)]  # the graph-owned region starts zeroed
    before = len(device.calls)
    graph._finalizer()  # everything the graph made goes back to the driver
    released = [name for name, _ in device.calls[before:]]
    for name in ("cuGraphExecDestroy", "cuGraphDestroy", "cuStreamDestroy", "cuModuleUnload", "cuMemFree",
                 "cuDevicePrimaryCtxRelease"):
        assert name in released, name
    assert released.count("cuMemFree") == len(recording.regions) + 1  # + the fill constants


def test_the_rows_are_made_only_with_a_driver_library(cu, ptx, monkeypatch):
    """Replays run as op-table rows calling the driver library by address where it opens
    (tests/cuda/test_cuda_rows.py with a stand-in library, tests/cuda/test_cuda_gpu.py with the real one); with
    a stand-in for cuda-python and no library, they go through cuda-python as before."""
    from apic.replay.cuda import driver as cuda_driver, rows as cuda_rows

    device, _saved, graph = _load(cu, monkeypatch, ptx)
    graph.launch()
    assert graph._rows is None and len(device.named("cuGraphLaunch")) == 1
    real = cuda_driver.Driver.__new__(cuda_driver.Driver)
    real.cu = cu  # the real bindings: still None without the library
    assert cuda_rows.driver_entries(real, library="libapic-no-such-driver.so") is None


def test_set_param_lands_before_the_next_replay(cu, ptx, monkeypatch):
    """set_param copies from pageable memory on the legacy stream; replays run on a non-blocking stream."""
    import numpy as np
    import warp as wp

    from apic.record.bindings import Binding

    device, saved, graph = _load(cu, monkeypatch, ptx)
    graph.bindings["x"] = Binding("x", "input", 0, 0, 32, "float32", (8,), (4,), 4, "<f4", ())
    graph.set_param("x", wp.array(np.ones(8, dtype=np.float32), device="cpu"))
    names = [name for name, _ in device.calls]
    last_copy = len(names) - 1 - names[::-1].index("cuMemcpyHtoD")
    assert "cuCtxSynchronize" in names[last_copy:]


def test_a_parameter_layout_that_differs_from_the_driver_is_refused(cu, ptx, monkeypatch):
    """The stand-in reports a layout other than the file's: the check must see it (not swallow it)."""
    real_load = loading.load

    def load_with_other_layout(saved, fetch, origin, where):
        device = _compat.cuda_driver()
        for symbol, params in list(device.param_info.items()):
            device.param_info[symbol] = ((params[0][0], params[0][1]),) + tuple((o + 8, n) for o, n in params[1:])
        return real_load(saved, fetch, origin, where)

    monkeypatch.setattr(loading, "load", load_with_other_layout)
    if not hasattr(cu, "cuFuncGetParamInfo"):
        pytest.skip("cuda-python before 12.4 has no cuFuncGetParamInfo: there is no layout check to test")
    with pytest.raises(cuda_replay.IncompatibleGraphError, match=r"parameter 1 is \[offset \d+"):
        _load(cu, monkeypatch, ptx)


def test_a_wrong_argument_to_the_layout_check_is_not_swallowed(cu, ptx, monkeypatch):
    """Only 'this driver cannot tell' ends the check quietly: apic's own TypeError passes through."""
    if not hasattr(cu, "cuFuncGetParamInfo"):
        pytest.skip("cuda-python before 12.4 has no cuFuncGetParamInfo")
    device = FakeDevice(cu)
    monkeypatch.setattr(_compat, "cuda_driver", lambda: device)
    graph = cuda_replay.LoadedCudaGraph.__new__(cuda_replay.LoadedCudaGraph)
    graph._cu = cuda_replay.Driver()
    saved = _read(_document(ptx)[0])
    with pytest.raises(TypeError):
        graph._check_params("not a CUfunction", saved.recording.kernels[0])


# --- a replay inside the caller's own capture ----------------------------------------------------------------
class _WarpStream:
    """What apic reads of a ``wp.Stream``: its handle."""

    def __init__(self, handle: int) -> None:
        self.cuda_stream = handle


class _WarpGraph:
    """Stands in for the ``warp.Graph`` Warp is capturing into."""


class _CapturingDevice:
    """What apic reads of a Warp CUDA device while Warp captures on it: its current stream and ``captures``."""

    def __init__(self, handle: int = 0x4321) -> None:
        self.stream = _WarpStream(handle)
        self.graph = _WarpGraph()
        self.captures = {self.stream: self.graph}


@pytest.mark.parametrize("mode", ["graph", "launch"])
def test_a_replay_on_a_capturing_stream_enqueues_its_ops_there(cu, ptx, monkeypatch, mode):
    """Both modes add the ops one by one to the caller's capture (no cuGraphLaunch), on its stream."""
    device, _saved, graph = _load(cu, monkeypatch, ptx)
    device.capture_status = cu.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_ACTIVE
    graph.launch(stream=0x5678, mode=mode)
    assert not device.named("cuGraphLaunch")
    launched = device.named("cuLaunchKernel")
    assert len(launched) == len(device.named("cuGraphAddKernelNode"))
    assert all(int(a[8]) == 0x5678 for a in launched)
    assert [int(a[0]) for a in device.named("cuStreamIsCapturing")] == [0x5678]


def test_without_a_stream_the_replay_joins_warps_capture_on_the_device(cu, ptx, monkeypatch):
    """stream=None while Warp captures on the graph's device: the device's current stream, and Warp's graph holds
    the loaded graph (its nodes use the loaded graph's memory)."""
    device, _saved, graph = _load(cu, monkeypatch, ptx)
    device.capture_status = cu.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_ACTIVE
    graph.device = warp_device = _CapturingDevice()
    graph.launch()
    graph.launch()
    assert {int(a[8]) for a in device.named("cuLaunchKernel")} == {0x4321}
    assert warp_device.graph._apic_held_graphs == [graph]
    for call in (graph.synchronize, lambda: graph.read_region(0)):
        with pytest.raises(CaptureError, match="while a graph capture runs on cuda:0.*forbids"):
            call()


def test_set_and_get_param_are_refused_while_warp_captures_on_the_device(cu, ptx, monkeypatch):
    import numpy as np
    import warp as wp

    from apic.record.bindings import Binding

    device, _saved, graph = _load(cu, monkeypatch, ptx)
    graph.bindings["x"] = Binding("x", "input", 0, 0, 32, "float32", (8,), (4,), 4, "<f4", ())
    graph.device = _CapturingDevice()
    before = len(device.calls)
    with pytest.raises(CaptureError, match=r"set_param\('x'\)"):
        graph.set_param("x", wp.array(np.ones(8, dtype=np.float32), device="cpu"))
    with pytest.raises(CaptureError, match=r"get_param\('x'\)"):
        graph.get_param("x", wp.zeros(8, dtype=wp.float32, device="cpu"))
    assert len(device.calls) == before  # refused before any driver call


def test_a_graph_freed_while_warp_captures_is_released_after_the_capture(cu, ptx, monkeypatch):
    """Releasing synchronizes the context and frees memory, which would invalidate the capture (seen on an H100):
    it waits until no capture runs, then the next replay of any loaded graph (or release_pending) does it."""
    from apic.replay.cuda import resources as cuda_resources

    device, _saved, graph = _load(cu, monkeypatch, ptx)
    _device2, _saved2, other = _load(cu, monkeypatch, ptx)
    resources = graph._resources
    resources.warp_device = warp_device = _CapturingDevice()
    before = len(device.calls)
    graph._finalizer()  # as a garbage collection inside the capture would
    assert device.calls[before:] == [] and resources in cuda_resources.PENDING
    cuda_resources.release_pending()  # the capture still runs: nothing yet
    assert device.calls[before:] == [] and resources.context is not None
    warp_device.captures = {}  # the capture ended
    other.launch()
    released = [name for name, _ in device.calls[before:]]
    for name in ("cuCtxSynchronize", "cuGraphExecDestroy", "cuModuleUnload", "cuMemFree", "cuDevicePrimaryCtxRelease"):
        assert name in released, name
    assert resources.context is None and resources not in cuda_resources.PENDING


def test_a_replay_into_an_invalidated_capture_is_refused(cu, ptx, monkeypatch):
    device, _saved, graph = _load(cu, monkeypatch, ptx)
    device.capture_status = cu.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_INVALIDATED
    for mode in ("graph", "launch"):
        with pytest.raises(CaptureError, match="an earlier error invalidated that capture"):
            graph.launch(stream=0x5678, mode=mode)
    assert not device.named("cuLaunchKernel") and not device.named("cuGraphLaunch")


def test_a_stream_of_another_context_is_refused(cu, ptx, monkeypatch):
    device, _saved, graph = _load(cu, monkeypatch, ptx)
    device.stream_context = 0x200
    with pytest.raises(CaptureError, match="another CUDA context"):
        graph.launch(stream=0x5678)
    assert not device.named("cuLaunchKernel") and not device.named("cuGraphLaunch")


def test_a_stream_query_the_driver_refuses_is_an_apic_error(cu, ptx, monkeypatch):
    """E.g. the legacy stream while another stream captures in global mode (CUDA_ERROR_STREAM_CAPTURE_IMPLICIT)."""
    device, _saved, graph = _load(cu, monkeypatch, ptx)
    call = device._call

    def refusing(name, real, args):
        if name == "cuStreamIsCapturing":
            return (cu.CUresult.CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, device.capture_status)
        return call(name, real, args)

    monkeypatch.setattr(device, "_call", refusing)
    with pytest.raises(CaptureError, match="CUDA_ERROR_STREAM_CAPTURE_IMPLICIT"):
        graph.launch(stream=0)


def test_apic_cuda_graphs_become_bodies_warps_conditionals_take():
    """capture_if / capture_while on CUDA hand Warp a captured graph's Warp graph, and a loaded graph as a callable
    that replays it on the stream Warp uses."""
    from apic import capture_flow
    from apic.cuda_graph import CapturedCudaGraph, CudaGraph

    warp_graph = object()
    captured = CapturedCudaGraph.__new__(CapturedCudaGraph)
    captured.warp_graph = warp_graph
    assert capture_flow._warp_body(captured, None, None) is warp_graph

    class Loaded(CudaGraph):
        def __init__(self):
            self.streams = []

        def launch(self, stream=None):
            self.streams.append(stream)

    loaded, device, given = Loaded(), _CapturingDevice(), _WarpStream(0x77)
    capture_flow._warp_body(loaded, None, device)(extra=1)
    capture_flow._warp_body(loaded, given, device)()
    assert loaded.streams == [device.stream, given]
    body = lambda: None  # noqa: E731
    assert capture_flow._warp_body(body, None, device) is body and capture_flow._warp_body(None, None, device) is None
