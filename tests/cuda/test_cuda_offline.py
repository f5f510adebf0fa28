"""CUDA support checked without a GPU: Warp compiles modules to PTX with NVRTC and no device present.

* the param blob apic packs for a kernel (``apic.targets.cuda``) has exactly the parameters of
  the kernel's ``.entry`` in the PTX: count, size, alignment and so offset, for scalars of every
  dtype, vectors, matrices, quaternions, transforms, arrays of 1-4 dimensions, indexed arrays, nested
  structs holding arrays, launch bounds of 1-4 dimensions, forward and adjoint entry points;
* those types are the ones Warp itself packs (``wp.launch(..., record_cmd=True).params``);
* the grid and block apic computes follow ``wp_cuda_launch_kernel`` (``native/warp.cu``);
* a CUDA graph file round-trips through the writer and the validating reader, which refuses
  malformed CUDA fields, and a CUBIN saved for one GPU architecture is refused on another.
"""

from __future__ import annotations

import ctypes
import glob
import os
import subprocess
import sys

import numpy as np
import pytest
import warp as wp

import apic
import cuda_kernels as ck
from apic import _compat
from apic.cuda_graph import CudaGraph
from apic.errors import FormatError, IncompatibleGraphError
from apic.record import ops as rec
from apic.record.recording import KernelInfo, ModuleInfo, Recording
from apic.record.regions import Region
from apic.record.cuda import params as cuda_params
from apic.record.cuda import recorder as record_cuda
from apic.targets import cuda as cp
from apic.targets.target import CUDA
from wrp_helpers import read_doc

pytestmark = [pytest.mark.warp_version, pytest.mark.interpreter]

ARCH = 75  # an architecture every NVRTC that Warp 1.12-1.19 ships compiles for


def _nvrtc_reason() -> str | None:
    if not hasattr(wp, "compile_aot_module"):
        return f"warp-lang {wp.config.version} has no compile_aot_module to compile CUDA code without a GPU"
    archs = getattr(_compat.runtime(), "nvrtc_supported_archs", None)
    if not archs or ARCH not in archs:
        return f"warp-lang {wp.config.version} cannot compile CUDA code here (no NVRTC for sm_{ARCH})"
    return None


@pytest.fixture(scope="module")
def ptx(tmp_path_factory):
    """The PTX of tests/cuda_kernels.py, compiled for sm_75 by Warp's NVRTC (no GPU needed)."""
    reason = _nvrtc_reason()
    if reason:
        pytest.skip(reason)
    out = tmp_path_factory.mktemp("ptx")
    wp.compile_aot_module(ck.saxpy.module, arch=ARCH, module_dir=str(out), use_ptx=True)
    (path,) = glob.glob(str(out / "*.ptx"))
    with open(path, encoding="latin-1") as f:
        return f.read()


@pytest.fixture(scope="module")
def cubin(tmp_path_factory):
    reason = _nvrtc_reason()
    if reason:
        pytest.skip(reason)
    out = tmp_path_factory.mktemp("cubin")
    wp.compile_aot_module(ck.saxpy.module, arch=ARCH, module_dir=str(out), use_ptx=False)
    (path,) = glob.glob(str(out / "*.cubin"))
    with open(path, "rb") as f:
        return path, f.read()


def _symbol(kernel, adjoint: bool) -> str:
    return _compat.cuda_kernel_symbol(None, kernel, adjoint)


# --- param blob layout vs. the PTX .entry ------------------------------------------------------------
@pytest.mark.parametrize("adjoint", [False, True], ids=["forward", "backward"])
@pytest.mark.parametrize("kernel", ck.KERNELS, ids=lambda k: k.key)
def test_param_layout_matches_ptx_entry(ptx, kernel, adjoint):
    entries = cp.ptx_entries(ptx)
    expected = entries[_symbol(kernel, adjoint)]
    types = cuda_params.param_types(kernel, adjoint)
    layout = cp.param_layout(types)
    nargs = len(kernel.adj.args)
    assert len(layout) == len(expected) == 1 + nargs * (2 if adjoint else 1)
    assert list(zip(layout.sizes, layout.aligns)) == expected  # size and alignment of every parameter
    assert layout == cp.layout_of(expected)  # hence the same offsets as the device-side layout
    assert layout.sizes[0] in (24, 32)  # the launch bounds come first


def test_ptx_holds_every_kernel_entry(ptx):
    entries = cp.ptx_entries(ptx)
    for kernel in ck.KERNELS:
        assert _symbol(kernel, False) in entries and _symbol(kernel, True) in entries
    assert cp.ptx_target(ptx) == (ARCH, "")


def test_bounds_size_follows_the_kernel_dimension(ptx):
    entries = cp.ptx_entries(ptx)
    per_dim = {1: ck.saxpy, 2: ck.dims2, 3: ck.dims3, 4: ck.dims4}
    for kernel in per_dim.values():
        bounds = entries[_symbol(kernel, False)][0][0]
        dims = getattr(kernel.adj, "kernel_dim", 1)
        assert cuda_params.param_types(kernel, False)[0] is _compat.launch_bounds_type(dims)
        assert ctypes.sizeof(cuda_params.param_types(kernel, False)[0]) == bounds


def test_cubin_holds_every_kernel_entry(cubin):
    path, image = cubin
    from apic.targets.cuda import module_arch

    assert image[:4] == b"\x7fELF"
    assert module_arch(path, image) == (ARCH, "", "cubin")
    for kernel in ck.KERNELS:
        assert _symbol(kernel, False).encode() + b"\0" in image


# --- the types are the ones Warp packs --------------------------------------------------------------
def _inputs(kernel):
    """Arguments for a launch of ``kernel`` (CPU arrays: only the packed types and bytes matter)."""
    f32 = wp.zeros(8, dtype=wp.float32, device="cpu")
    if kernel is ck.scalars:
        return [True, -3, 200, -7, 9, 11, 12, -13, 14, 0.5, 1.5, 2.5, wp.zeros(8, dtype=wp.float64, device="cpu")]
    if kernel is ck.composites:
        return [1, wp.vec2h(1.0, 2.0), 3, wp.vec3(1.0, 2.0, 3.0), wp.vec4d(1.0, 2.0, 3.0, 4.0),
                wp.mat22(1.0, 2.0, 3.0, 4.0),
                wp.mat33d(), wp.mat44h(), wp.quat(0.0, 0.0, 0.0, 1.0), wp.quatd(0.0, 0.0, 0.0, 1.0), wp.transform(),
                wp.transformd(), wp.spatial_vector(), wp.vec3i(1, 2, 3), f32]
    if kernel is ck.arrays:
        return [f32, wp.zeros((2, 3), dtype=wp.vec3, device="cpu"), wp.zeros((2, 2, 2), dtype=wp.int8, device="cpu"),
                wp.zeros((1, 2, 1, 2), dtype=wp.float64, device="cpu"), 5, wp.zeros(2, dtype=wp.mat33, device="cpu")]
    if kernel is ck.indexed:
        idx = wp.array([0, 1], dtype=wp.int32, device="cpu")
        return [wp.indexedarray(f32, [idx]),
                wp.indexedarray(wp.zeros((2, 2), dtype=wp.float32, device="cpu"), [idx, None]),
                wp.indexedarray(wp.zeros((2, 2, 2), dtype=wp.vec2, device="cpu"), [None, idx, None]),
                wp.indexedarray(wp.zeros((2, 2, 2, 2), dtype=wp.int32, device="cpu"), [None, None, None, idx]), f32]
    if kernel is ck.structs:
        inner = ck.Inner()
        inner.ids = wp.zeros(3, dtype=wp.int32, device="cpu")
        outer = ck.Outer()
        outer.inner = inner
        outer.xs = wp.zeros((2, 2), dtype=wp.vec3, device="cpu")
        outer.scale = 2.0
        return [outer, 7, inner, f32]
    if kernel in (ck.dims2, ck.dims3, ck.dims4):
        ndim = {ck.dims2: 2, ck.dims3: 3, ck.dims4: 4}[kernel]
        return [wp.zeros((2,) * ndim, dtype=wp.float32, device="cpu"), 2.0]
    if kernel is ck.saxpy:
        return [2.0, f32, wp.zeros(8, dtype=wp.float32, device="cpu")]
    if kernel is ck.square_sum:
        return [f32, wp.zeros(1, dtype=wp.float32, device="cpu")]
    return [f32, 2.0]  # lean


@pytest.mark.parametrize("adjoint", [False, True], ids=["forward", "backward"])
@pytest.mark.parametrize("kernel", ck.KERNELS, ids=lambda k: k.key)
def test_param_types_are_what_warp_packs(kernel, adjoint):
    inputs = _inputs(kernel)
    # the adjoint of an indexed array is a plain array of its (indexed) shape
    adj = [wp.zeros(v.shape, dtype=v.dtype, device="cpu") if isinstance(v, wp.indexedarray) else v
           for v in _inputs(kernel)]
    extra = {"adjoint": True, "adj_inputs": adj} if adjoint else {}
    cmd = wp.launch(kernel, dim=4, inputs=inputs, device="cpu", record_cmd=True, **extra)
    types = cuda_params.param_types(kernel, adjoint)
    assert [type(p) for p in cmd.params] == types
    layout = cp.param_layout(types)
    blob = cp.pack_objects(layout, cmd.params)
    assert len(blob) == layout.size
    for param, at, size in zip(cmd.params, layout.offsets, layout.sizes):
        assert blob[at : at + size] == bytes(param)
    # every pointer in the blob is a field of an array descriptor apic knows about
    slots = record_cuda.array_slots(kernel, types, layout, adjoint)
    pointers = {at for slot in slots for at in range(slot.at, slot.at + (104 if slot.indexed else 56))}
    from apic.record.layout import blob_pointers

    assert all(at in pointers for at, _ in blob_pointers(blob, slots))
    assert len(blob_pointers(blob, slots)) >= 1


def test_adjoint_of_an_indexed_array_is_a_plain_array():
    types = cuda_params.param_types(ck.indexed, adjoint=True)
    n = len(ck.indexed.adj.args)
    from apic._compat import wp_types

    assert types[1:5] == [wp_types.indexedarray_t] * 4
    assert types[1 + n : 5 + n] == [wp_types.array_t] * 4


def test_pack_reads_each_parameter_at_its_address():
    types = [ctypes.c_int8, ctypes.c_double, ctypes.c_uint16 * 3, ctypes.c_int32]
    values = [types[0](-2), types[1](1.25), types[2](1, 2, 3), types[3](7)]
    layout = cp.param_layout(types)
    assert layout.offsets == (0, 8, 16, 24) and layout.size == 28
    blob = cp.pack_objects(layout, values)
    assert blob[0:1] == b"\xfe" and blob[8:16] == bytes(values[1]) and blob[16:22] == bytes(values[2])
    with pytest.raises(ValueError):
        cp.pack(layout, [ctypes.addressof(v) for v in values[:3]])


# --- grid and block ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "args, grid",
    [
        ((1000, 256), (4, 1, 1)),
        ((1024, 256), (4, 1, 1)),
        ((1025, 256), (5, 1, 1)),
        ((1, 256), (1, 1, 1)),
        ((1000, 0), (4, 1, 1)),  # block_dim <= 0 means 256
        ((1000, -5), (4, 1, 1)),
        ((1000, 256, 2), (2, 1, 1)),  # max_blocks caps the grid
        ((1000, 256, 100), (4, 1, 1)),
        ((1000, 256, -1), (4, 1, 1)),
        ((((1 << 31) + 5) * 64, 64), (2147483647, 1, 1)),  # int overflow: the cap (INT32_MAX)
        ((((1 << 31) + 5) * 64, 64, 4096), (4096, 1, 1)),
    ],
)
def test_grid_stride_grid(args, grid):
    got = cp.launch_grid(*args)
    assert got.grid == grid
    assert got.block == (args[1] if args[1] > 0 else 256, 1, 1)


def test_grid_stride_clusters():
    # a natural grid must be a whole number of clusters; one cut by max_blocks is rounded down
    assert cp.launch_grid(8 * 128, 128, cluster_dim=4, arch=90).grid == (8, 1, 1)
    assert cp.launch_grid(100 * 128, 128, max_blocks=10, cluster_dim=4, arch=90).grid == (8, 1, 1)
    with pytest.raises(ValueError):
        cp.launch_grid(6 * 128, 128, cluster_dim=4, arch=90)
    with pytest.raises(ValueError):
        cp.launch_grid(100 * 128, 128, max_blocks=3, cluster_dim=4, arch=90)
    # before sm_90 Warp launches without clusters
    assert cp.launch_grid(6 * 128, 128, cluster_dim=4, arch=86).grid == (6, 1, 1)


@pytest.mark.parametrize(
    "dim, block, grid",
    [
        (1000, 256, (4, 1, 1)),
        (1, 32, (1, 1, 1)),
        (65536 * 256, 256, (65536, 1, 1)),  # x holds 2**24 threads
        (65536 * 256 * 3, 256, (65536, 3, 1)),
        (65536 * 256 * 3 + 1, 256, (65536, 4, 1)),
        (65536 * 65535 * 256 * 2, 256, (65536, 65535, 2)),
        ((1 << 24) * 5, 1024, (16384, 5, 1)),
        (1000, 0, (4, 1, 1)),
    ],
)
def test_lean_grid(dim, block, grid):
    got = cp.launch_grid(dim, block, grid_stride=False)
    assert got.grid == grid
    assert grid[0] * grid[1] * grid[2] * got.block[0] >= dim  # every thread index is covered


def test_lean_grid_clusters():
    assert cp.launch_grid(8 * 128, 128, grid_stride=False, cluster_dim=4, arch=90).grid == (8, 1, 1)
    with pytest.raises(ValueError):
        cp.launch_grid(6 * 128, 128, grid_stride=False, cluster_dim=4, arch=90)
    got = cp.launch_grid((1 << 24) // 1000 * 1000 * 8, 1000, grid_stride=False, cluster_dim=8, arch=90)
    assert got.grid[0] % 8 == 0


def test_empty_launch_launches_nothing():
    assert cp.launch_grid(0, 256) is None
    assert cp.launch_grid(0, 256, grid_stride=False) is None


def test_warp_agrees_on_the_block_count():
    """Warp 1.15+ mirrors the native block count in Python; apic's grid covers exactly those blocks."""
    from apic._compat import wp_context

    blocks = getattr(wp_context, "_cuda_grid_blocks", None)
    if blocks is None:
        pytest.skip(f"warp-lang {wp.config.version} has no Python mirror of the CUDA grid computation")
    for dim, block in ((1, 1), (1000, 256), (12345, 128), (65536 * 256 * 3 + 1, 256), (10**9, 0)):
        got = cp.launch_grid(dim, block, grid_stride=True)
        assert got.grid[0] == blocks(dim, block)


def test_launch_signature_is_known():
    names = _compat.cuda_launch_params()
    assert names[:5] == ("context", "kernel", "dim", "max_blocks", "block_dim")
    assert ("grid_stride" in names) == (ck.lean is not None)  # the versions with lean kernels launch with grid_stride
    assert "smem" in names and "args" in names and "stream" in names


# --- PTX parsing ----------------------------------------------------------------------------------------
def test_ptx_entries_parses_every_form():
    text = """
    .version 8.0
    .target sm_90a
    .address_size 64
    .visible .entry k_cuda_kernel_forward(
        .param .align 8 .b8 k_param_0[32],
        .param .f32 k_param_1,
        .param .u8 k_param_2,
        .param .align 2 .b8 k_param_3[6],
        .param .u64 .ptr .global .align 8 k_param_4,
        .param .s16 k_param_5
    )
    { ret; }
    .entry empty() { ret; }
    """
    entries = cp.ptx_entries(text)
    assert entries["k_cuda_kernel_forward"] == [(32, 8), (4, 4), (1, 1), (6, 2), (8, 8), (2, 2)]
    assert entries["empty"] == []
    assert cp.ptx_target(text) == (90, "a")
    assert cp.layout_of(entries["k_cuda_kernel_forward"]).offsets == (0, 32, 36, 38, 48, 56)


# --- the file format ---------------------------------------------------------------------------------------
class FileGraph(CudaGraph):
    """A CUDA graph made by hand from a recording and compiled module bytes (what saving reads)."""

    def __init__(self, recording, contents, image, module_arch, arch=ARCH):
        self.recording = recording
        self._contents = contents
        self._image = image
        self._module_arch = module_arch
        self.arch = arch
        self.device_name = "offline"
        self.device = "cuda:0"
        self.bindings = {}
        self.region_addresses = [0x10000 * (i + 1) for i in range(len(recording.regions))]

    def read_region(self, index):
        return self._contents[index]

    def module_image(self, index):
        return self._image, self._module_arch


def _saxpy_recording():
    """saxpy(2.0, x, y) over 8 floats, then a copy, a memset, two fills and an allocation."""
    kernel = ck.saxpy
    types = cuda_params.param_types(kernel, False)
    layout = cp.param_layout(types)
    x = wp.zeros(8, dtype=wp.float32, device="cpu")
    cmd = wp.launch(kernel, dim=8, inputs=[2.0, x, x], device="cpu", record_cmd=True)
    blob = bytearray(cp.pack_objects(layout, cmd.params))
    slots = record_cuda.array_slots(kernel, types, layout, False)
    relocs = []
    for slot in slots:
        blob[slot.at : slot.at + 8] = bytes(8)  # the data pointer becomes a relocation
        relocs.append(rec.Reloc(slot.at, rec.Ref(0 if slot is slots[0] else 1, 0)))
    grid = cp.launch_grid(8, 256)
    params = [(o, s) for o, s in zip(layout.offsets, layout.sizes)]
    kernels = (KernelInfo(0, "saxpy", _symbol(kernel, False), False, 0, tuple(params)),)
    regions = (Region(0, 32, False), Region(1, 32, False), Region(2, 64, True))
    ops = (
        rec.CudaLaunch(0, (8,), rec.Blob(bytes(blob), tuple(relocs), slots), grid.grid, grid.block, 0),
        rec.Memcpy(rec.Ref(0, 0), rec.Ref(1, 0), 32),
        rec.Memset(rec.Ref(2, 0), 0, 64),
        rec.Memtile(rec.Ref(2, 0), rec.Blob(b"\x00\x00\x80\x3f"), 16),
        rec.Memtile(rec.Ref(2, 4), rec.Blob(b"\x01\x02\x03\x04\x05\x06"), 10),
        rec.Alloc(rec.Ref(2, 0), 64),
    )
    recording = Recording("cuda-params-v1", regions, (ModuleInfo("cuda_kernels"),), kernels, ops + ops[:1])
    contents = [np.arange(8, dtype=np.float32).tobytes(), np.ones(8, dtype=np.float32).tobytes(), None]
    return recording, contents


def _document(ptx_text, module_arch=(ARCH, "", "ptx"), arch=ARCH):
    from apic.format import writer

    recording, contents = _saxpy_recording()
    graph = FileGraph(recording, contents, ptx_text.encode("latin-1"), module_arch, arch)
    return writer.document(graph, [])


def _read(doc):

    return read_doc(doc)


def test_cuda_file_round_trip(ptx):
    doc, images = _document(ptx)
    saved = _read(doc)
    assert saved.device == {"kind": "cuda", "arch": ARCH, "name": "offline"}
    assert saved.recording.abi == "cuda-params-v1"
    (name,) = images
    assert name.endswith(".ptx") and saved.modules[0].file == name
    assert saved.modules[0].arch == ARCH and saved.modules[0].arch_suffix == ""
    kernel = saved.recording.kernels[0]
    assert kernel.symbol == _symbol(ck.saxpy, False)
    layout = cp.param_layout(cuda_params.param_types(ck.saxpy, False))
    assert kernel.params == tuple(zip(layout.offsets, layout.sizes))
    kinds = [op.kind for op in saved.recording.ops]
    assert kinds == [rec.OpKind.CUDA_LAUNCH, rec.OpKind.MEMCPY, rec.OpKind.MEMSET, rec.OpKind.MEMTILE,
                     rec.OpKind.MEMTILE, rec.OpKind.ALLOC, rec.OpKind.CUDA_LAUNCH]
    launch = saved.recording.ops[0]
    assert launch is saved.recording.ops[-1]  # stored once, run twice
    assert launch.grid == (1, 1, 1) and launch.block == (256, 1, 1) and launch.smem == 0
    assert [r.target.region for r in launch.params.relocs] == [0, 1]
    assert saved.contents[2] is None and saved.contents[0] == np.arange(8, dtype=np.float32).tobytes()
    # the launch's param blob agrees with the PTX entry, as the loader's driver check will see it
    entry = cp.layout_of(cp.ptx_entries(ptx)[kernel.symbol])
    assert list(kernel.params) == list(zip(entry.offsets, entry.sizes))


def _edit(doc, path, value):
    import copy

    doc = copy.deepcopy(doc)
    target = doc
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value(target[path[-1]]) if callable(value) else value
    return doc


@pytest.mark.parametrize(
    "path, value, message",
    [
        (("abi",), "bounds-by-pointer-v1", "ABI"),
        (("device", "kind"), "metal", "unknown device kind"),
        (("device", "arch"), "86", "expected an integer"),
        (("modules", 0, "file"), lambda f: f[: -len(".ptx")] + ".o", "not a valid value|not a CUDA module"),
        (("modules", 0, "arch"), None, "expected an integer"),
        (("modules", 0, "arch_suffix"), "z", "is not one of"),
        (("kernels", 0, "symbol"), lambda s: s.replace("_cuda_kernel_forward", "_cpu_forward"), "CUDA"),
        (("kernels", 0, "params"), [[0, 24], [20, 4]], "overlaps"),
        (("kernels", 0, "params"), [[8, 24]], "launch bounds"),
        (("kernels", 0, "params"), None, "expected a list"),
        (("ops", 0, "grid"), [1, 70000, 1], "limits"),
        (("ops", 0, "block"), [2048, 1, 1], "outside"),
        (("ops", 0, "block"), [1, 1], "grid and block"),
        (("ops", 0, "smem"), -1, "outside"),
        (("ops", 0, "params", "data"), lambda d: d + b"\0" * 8, "parameters take"),
        (("ops", 0, "params", "relocs", 0, 0), 4, "not a pointer field|overlaps|without a data pointer"),
        (("ops", 0, "kind"), int(rec.OpKind.LAUNCH), "cannot appear|missing"),
        (("ops", 1, "kind"), int(rec.OpKind.NATIVE_CALL), "cannot appear|missing"),
    ],
)
def test_reader_refuses_malformed_cuda_fields(ptx, path, value, message):
    doc, _ = _document(ptx)
    with pytest.raises(FormatError, match=message):
        _read(_edit(doc, path, value))


def test_cpu_file_may_not_hold_a_cuda_launch(ptx):
    """A CUDA document turned into a valid CPU one in every other field: only the op-kind check can fire."""
    doc, _ = _document(ptx)
    doc = _edit(doc, ("abi",), "bounds-by-pointer-v1")
    del doc["device"]
    for module in doc["modules"]:
        module["file"] = module["file"].rsplit(".", 1)[0] + ".o"
        del module["arch"], module["arch_suffix"]
    for kernel in doc["kernels"]:
        del kernel["params"]
        kernel["symbol"] = kernel["symbol"].replace("_cuda_kernel_forward", "_cpu_forward")
    with pytest.raises(FormatError, match=r"ops\[0\]\.kind: op kind 11 \(cuda_launch\) cannot appear in a graph "
                                          r"with ABI 'bounds-by-pointer-v1'"):
        _read(doc)


def test_cuda_abi_needs_a_device(ptx):
    doc, _ = _document(ptx)
    del doc["device"]
    with pytest.raises(FormatError, match="must say its device"):
        _read(doc)


def test_cubin_runs_on_its_major_version_with_an_equal_or_higher_minor(ptx):
    from apic.replay.cuda.loaded_graph import check_arch

    saved = _read(_document(ptx, module_arch=(80, "", "cubin"), arch=80)[0])
    for arch in (80, 86, 87, 89):
        check_arch(saved, arch)  # sm_80 code runs on every sm_8x with minor >= 0
    for arch in (75, 90, 100):
        with pytest.raises(IncompatibleGraphError,
                           match=rf"CUBIN built for sm_80.*this GPU is sm_{arch}.*major version"):
            check_arch(saved, arch)
    newer_minor = _read(_document(ptx, module_arch=(86, "", "cubin"), arch=86)[0])
    check_arch(newer_minor, 89)
    with pytest.raises(IncompatibleGraphError, match="sm_86.*sm_80"):
        check_arch(newer_minor, 80)  # a lower minor cannot run it
    arch_specific = _read(_document(ptx, module_arch=(90, "a", "cubin"), arch=90)[0])
    check_arch(arch_specific, 90)
    for arch in (91, 100):
        with pytest.raises(IncompatibleGraphError, match="sm_90a.*architecture-specific"):
            check_arch(arch_specific, arch)


def test_ptx_loads_on_its_architecture_or_newer(ptx):
    from apic.replay.cuda.loaded_graph import check_arch

    saved = _read(_document(ptx, module_arch=(ARCH, "", "ptx"))[0])
    for arch in (ARCH, 80, 86, 90, 120):
        check_arch(saved, arch)  # the driver JIT-compiles PTX for newer GPUs
    with pytest.raises(IncompatibleGraphError, match="PTX"):
        check_arch(saved, 70)


def test_save_and_load_files_without_a_gpu(ptx, tmp_path):
    """The files are written atomically like CPU ones; loading them needs cuda-python and a GPU."""
    from apic.replay.cuda import loaded_graph as cuda_replay

    recording, contents = _saxpy_recording()
    graph = FileGraph(recording, contents, ptx.encode("latin-1"), (ARCH, "", "ptx"))
    wp.capture_save(graph, str(tmp_path / "g"))
    files = os.listdir(tmp_path / "g_modules")
    assert len(files) == 1 and files[0].endswith(".ptx")
    reason = cuda_replay.unavailable_reason()
    if reason is None:
        pytest.skip("a CUDA device is present: tests/cuda/test_cuda_gpu.py loads the files")
    with pytest.raises((ImportError, cuda_replay.CudaReplayError, Exception)):
        wp.capture_load(str(tmp_path / "g"))
    with pytest.raises(ValueError, match="CUDA device"):
        wp.capture_load(str(tmp_path / "g"), device="cpu")
    assert CUDA.abis == ("cuda-params-v1",)


def test_save_to_bytes_gives_the_files_without_a_gpu(ptx, tmp_path):
    """``wp.capture_save_to_bytes`` of a CUDA graph: the same bytes ``capture_save`` writes, module file included."""
    recording, contents = _saxpy_recording()
    graph = FileGraph(recording, contents, ptx.encode("latin-1"), (ARCH, "", "ptx"))
    data, modules = wp.capture_save_to_bytes(graph)
    wp.capture_save(graph, str(tmp_path / "g"))
    assert (tmp_path / "g.wrp").read_bytes() == data
    folder = tmp_path / "g_modules"
    assert {name: (folder / name).read_bytes() for name in os.listdir(folder)} == modules
    assert len(modules) == 1 and next(iter(modules)).endswith(".ptx")


def test_fill_kernel_ptx_declares_its_entry():
    from apic.replay.cuda.lowering import FILL_PTX, FILL_SYMBOL

    entries = cp.ptx_entries(FILL_PTX.decode().rstrip("\0"))
    assert entries == {FILL_SYMBOL: [(8, 8)] * 4}
    assert FILL_PTX.endswith(b"\0")


# --- installation -------------------------------------------------------------------------------------------
def test_import_apic_does_not_import_cuda_python():
    code = ("import sys, apic; import apic.targets.cuda; "
            "assert not any(m == 'cuda' or m.startswith('cuda.') for m in sys.modules), "
            "sorted(m for m in sys.modules if m.startswith('cuda'))")
    subprocess.run([sys.executable, "-c", code], check=True,
                   env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})


def test_cuda_natives_are_restored_by_uninstall():
    from apic import installation

    core = _compat.runtime().core
    apic.uninstall()  # Warp as it is without apic
    before = {k: v for k, v in vars(core).items() if k.startswith("wp_")}
    apic.install()
    installation.ensure_cuda_native_sinks()
    assert core.wp_cuda_launch_kernel is not before["wp_cuda_launch_kernel"]
    assert core.wp_memcpy_d2d is not before["wp_memcpy_d2d"]
    assert core.wp_alloc_device is before["wp_alloc_device"]  # allocation stays untouched
    apic.uninstall()
    try:
        assert {k: v for k, v in vars(core).items() if k.startswith("wp_")} == before
    finally:
        apic.install()


def test_cuda_capture_without_a_gpu_leaves_nothing_running():
    from apic.record.cuda import recorder as cuda_recorder

    if wp.get_cuda_device_count():
        pytest.skip("a CUDA device is present")
    # whatever Warp raises for a device it cannot find (its type differs across warp-lang versions)
    with pytest.raises(Exception):  # noqa: B017
        wp.capture_begin(device="cuda:0", apic=True)
    assert cuda_recorder.active() is None


def test_integer_launch_arguments_are_found_in_the_param_blob():
    """The 64-bit integer slots a CUDA launch passes (where a handle id or raw pointer may hide)."""
    types = cuda_params.param_types(ck.scalars, False)
    layout = cp.param_layout(types)
    slots = record_cuda.word_slots(ck.scalars, types, layout)
    labels = [arg.label for arg in ck.scalars.adj.args]
    assert [label for _, label in slots] == ["i64", "u64"]
    assert [at for at, _ in slots] == [layout.offsets[1 + labels.index(n)] for n in ("i64", "u64")]


def test_a_cuda_graph_passing_a_handle_id_or_pointer_as_an_integer_is_not_saved(ptx, tmp_path):
    """Such a value would dangle after a load: the recorder notes it, and saving refuses, naming it."""
    from apic.errors import UnsupportedOperationError
    from apic.format import writer
    from apic.record.cuda.recorder import CudaRecorder

    points = wp.array(np.zeros((3, 3), dtype=np.float32), dtype=wp.vec3, device="cpu")
    mesh = wp.Mesh(points=points, indices=wp.array([0, 1, 2], dtype=wp.int32, device="cpu"))
    recorder = CudaRecorder(wp.get_device("cpu"), 0)
    recorder._ranges.note(0x10000, 0x10100, used=True)
    recorder._words.update({("k", "mesh_id", mesh.id): None, ("k", "ptr", 0x10080): None, ("k", "n", 7): None})
    reasons = recorder._dangling_words()
    assert len(reasons) == 2
    assert "'mesh_id' of a launch of 'k' holds the id of a wp.Mesh" in reasons[0]
    assert "'ptr'" in reasons[1] and "device address" in reasons[1]

    recording, contents = _saxpy_recording()
    recording = Recording(**{**recording.__dict__, "unsaveable": reasons})
    graph = FileGraph(recording, contents, ptx.encode("latin-1"), (ARCH, "", "ptx"))
    with pytest.raises(UnsupportedOperationError, match="mesh_id.*wp.Mesh.*dangle after a load"):
        writer.save(graph, str(tmp_path / "g"))
    assert not os.listdir(tmp_path)  # nothing written


class _GpuMesh(wp.Mesh):
    """A wp.Mesh as one on a GPU looks to apic's registry (no native object behind it)."""

    def __init__(self, ident: int) -> None:  # noqa: D107  (Warp's constructor would build a native mesh)
        self.id = ident
        self.device = type("Device", (), {"is_cpu": False, "is_cuda": True})()

    def __del__(self) -> None:
        pass


def test_the_id_of_a_handle_on_a_gpu_is_not_saved_either():
    """A CUDA Mesh's id is known (for the refusal at save) without becoming one a CPU capture would remap."""
    from apic.record import handles
    from apic.record.cuda.recorder import CudaRecorder

    mesh = _GpuMesh(0x7F00DEAD0000)
    handles.register(mesh)
    assert handles.lookup(mesh.id) is None  # CPU captures remap CPU objects only
    assert handles.lookup_any(mesh.id) is mesh
    recorder = CudaRecorder(wp.get_device("cpu"), 0)
    recorder._words[("handles", "mesh", mesh.id)] = None
    (reason,) = recorder._dangling_words()
    assert "'mesh' of a launch of 'handles' holds the id of a wp.Mesh" in reason


# --- what the GPU tests run, checked here -------------------------------------------------------------------------
GPU_ARCHS = (90,)  # the GPUs the GPU check runs on (H100, H200): the first thing it does is compile for them


@pytest.mark.parametrize("arch", GPU_ARCHS)
@pytest.mark.parametrize("use_ptx", [True, False], ids=["ptx", "cubin"])
def test_the_test_kernels_compile_for_the_gpus_of_the_check(tmp_path, arch, use_ptx):
    """NVRTC builds tests/cuda_kernels.py (every kernel the GPU tests launch) for sm_90 without a GPU."""
    reason = _nvrtc_reason()
    archs = getattr(_compat.runtime(), "nvrtc_supported_archs", None) or ()
    if reason or arch not in archs:
        pytest.skip(reason or f"this warp-lang's NVRTC cannot compile for sm_{arch}")
    wp.compile_aot_module(ck.saxpy.module, arch=arch, module_dir=str(tmp_path), use_ptx=use_ptx)
    (path,) = glob.glob(str(tmp_path / ("*.ptx" if use_ptx else "*.cubin")))
    with open(path, "rb") as f:
        image = f.read()
    kernels = [*ck.KERNELS, ck.handles, ck.countdown, ck.tick]
    if use_ptx:
        text = image.decode("latin-1")
        assert cp.ptx_target(text) == (arch, "")
        entries = cp.ptx_entries(text)
        assert all(_symbol(k, False) in entries and _symbol(k, True) in entries for k in kernels)
    else:
        from apic.targets.cuda import module_arch

        assert module_arch(path, image) == (arch, "", "cubin")
        assert all(_symbol(k, False).encode() + b"\0" in image for k in kernels)


def test_the_gpu_workload_replays_bit_for_bit_on_the_cpu():
    """tests/cuda_workload.py's step, captured and replayed on the CPU, matches eager runs for as many steps as the
    GPU tests run on one state: the workload itself is deterministic and every recorded kind is in it."""
    import cuda_workload as cw

    eager, replay = cw.make_state("cpu"), cw.make_state("cpu")
    cw.step(eager, "cpu")
    cw.step(replay, "cpu")
    with wp.ScopedCapture(device="cpu", apic=True) as cap:
        cw.step(replay, "cpu")
    fills = {len(op.value.data) for op in cap.graph.recording.ops if isinstance(op, rec.Memtile)}
    assert {1, 2, 4, 8, 12, 16} <= fills
    before = cw.snapshot(eager, "cpu")
    for run in range(6):
        wp.capture_launch(cap.graph)
        cw.step(eager, "cpu")
        cw.same(cw.snapshot(eager, "cpu"), cw.snapshot(replay, "cpu"), f"CPU replay {run}")
    after = cw.snapshot(eager, "cpu")
    changed = {name for name in after if not np.array_equal(after[name], before[name])}
    assert {"y", "z", "acc", "m3", "xg", "t"} <= changed  # the steps do work (m2, m4 flip sign: back after 6)
