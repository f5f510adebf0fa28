"""A saved CUDA graph exported to a C library (apic/c_library/cuda.py), run without a GPU: a C program built
against the library runs in a process with no Python, the library opens the project's stand-in CUDA driver
(``benchmarks/cuda_standin.py``, a C shared object recording every call, its arguments, and each launch's
kernel parameter bytes), and the recorded calls are compared with the ones the saved graph must make, worked out
from its recording (``cuda_expected``, as for the Python replay's rows): module images and kernel names at
open, region uploads, and per replay each launch's kernel handle, grid, block, shared memory, stream and
parameters relocated to the addresses the stand-in handed out, each copy and memset. Attacks: a missing driver
library, one without the driver's functions, a failing driver call at open and during a replay, a wrong
binding name, a wrong size, a loop that never ends (the cap). ``capture_if`` / ``capture_while``: conditions
read on the host, call for call as the Python replay's op-by-op mode. The GPU check (a real device, bit for
bit with the Python replay) is in ``test_export_cuda_gpu.py``.

Skips, saying why, where Warp cannot compile PTX without a GPU (no NVRTC) or no C compiler is found.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import types

import numpy as np
import pytest

import apic
from apic.c_library import cuda as cuda_export
from apic.c_library.relocatable import ExportError
from apic.record import ops as rec
from apic.record.bindings import Binding
from apic.replay.cuda import lowering as cuda_lowering
from benchmarks import cuda_standin
from benchmarks.cuda_standin import Call
from cuda_expected import expected_calls, same
from export_helpers import bare_env, build
from persist_helpers import run_cli
from test_cuda_offline import ARCH, FileGraph, _saxpy_recording, cubin, ptx  # noqa: F401  (fixtures)

pytestmark = [pytest.mark.warp_version, pytest.mark.install]

NAME = "saxpy_cuda"
CONTEXT = 0x100  # the stand-in's primary context
SMEM = 0x10000  # the saxpy launches' dynamic shared memory
# x: region 0 whole; y: every other float of region 1 from byte 4 (a strided view, copied through the host)
BINDINGS = {"x": Binding("x", "input", 0, 0, 32, "float32", (8,), (4,), 4, "<f4", ()),
            "y": Binding("y", "output", 1, 4, 12, "float32", (3,), (8,), 4, "<f4", ())}


@pytest.fixture(scope="module")
def export(ptx, tmp_path_factory):  # noqa: F811
    """The offline CUDA graph of the cuda tests (a launch, a copy, a memset, two fills, the launch again), saved
    with two bindings and exported; the runner built against it; the stand-in driver library."""
    if cuda_standin.compiler() is None:
        pytest.skip("no C compiler (cc, gcc or clang) to build the stand-in driver and the runner")
    folder = tmp_path_factory.mktemp("cuda_export")
    recording, contents = _saxpy_recording()
    launch = dataclasses.replace(recording.ops[0], smem=SMEM)  # more dynamic shared memory than the default
    recording = dataclasses.replace(recording, ops=(launch, *recording.ops[1:-1], launch))
    graph = FileGraph(recording, contents, ptx.encode("latin-1"), (ARCH, "", "ptx"))
    graph.bindings = dict(BINDINGS)
    apic.capture_save(graph, str(folder / "g"))
    written = apic.export(str(folder / "g.wrp"), folder / "out", name=NAME)
    runner = build("cuda_runner.c", folder / "out", NAME, folder / "runner", libraries=["-ldl"])
    driver = cuda_standin.build(cuda_standin.STANDIN_SOURCE, str(folder), "standin_cuda")
    return types.SimpleNamespace(folder=folder, written=written, runner=runner, driver=driver, ptx=ptx,
                                 recording=recording, contents=contents)


def _run(export, steps, driver=None, env=None) -> subprocess.CompletedProcess:
    """The runner with ``steps`` against ``driver`` (default: the stand-in); the kernels' parameter sizes told
    to the stand-in by name, as the test knows them from the recording."""
    sizes = ";".join(f"{k.symbol}={','.join(str(n) for _, n in k.params)}" for k in export.recording.kernels)
    environment = {**bare_env(), "APIC_STANDIN_KERNELS": f"{sizes};{cuda_lowering.FILL_SYMBOL}=8,8,8,8", **(env or {})}
    return subprocess.run([export.runner, driver or export.driver, *steps], cwd=export.folder, env=environment,
                          capture_output=True, text=True, timeout=120)


def _calls(export, steps, **kwargs) -> list[Call]:
    log = export.folder / "calls.bin"
    done = _run(export, [*steps, f"l:{log}"], **kwargs)
    assert done.returncode == 0, done.stderr
    return cuda_standin.read_dump(str(log))


def _opened(calls: list[Call]) -> tuple[list[int], int, dict]:
    """The region addresses, the fill constants' address and the function of each kernel name the open got."""
    allocs = [c.args[1] for c in calls if c.name == "cuMemAlloc"]
    handle = {c.params.decode(): c.args[1] for c in calls if c.name == "cuModuleGetFunction"}
    return allocs[:-1], allocs[-1], handle


def _entered(calls: list[Call]) -> list[Call]:
    """``calls`` between a replay's context entry and exit (no context is current on the runner's thread)."""
    return [Call("cuCtxGetCurrent", (0,)), Call("cuCtxPushCurrent", (CONTEXT,)), *calls,
            Call("cuCtxPopCurrent", (CONTEXT,))]


def _replayed(calls: list[Call]) -> list[Call]:
    start = next(k for k, c in enumerate(calls) if c.name == "cuCtxGetCurrent")
    return calls[start:]


def test_the_export_writes_a_library_and_a_header_that_needs_no_cuda_h(export):
    assert set(export.written) == {"library", "header", "cpp_header", "pkg_config", "cmake"}
    header = open(export.written["header"]).read()
    assert "#include <cuda" not in header and "APIC_CUDA_DRIVER" in header
    assert f"int {NAME}_replay({NAME}_instance* instance, void* stream, int64_t repeats);" in header
    symbols = subprocess.run(["nm", "-D", "--defined-only", export.written["library"]], capture_output=True,
                             text=True).stdout
    assert all(f"{NAME}_" in line for line in symbols.splitlines() if " T " in line)
    assert "libcuda" not in subprocess.run(["ldd", export.written["library"]], capture_output=True, text=True).stdout


def test_the_cli_exports_a_cuda_graph_and_says_where(export, tmp_path):
    done = run_cli(["export", str(export.folder / "g.wrp"), str(tmp_path / "out"), "--name", "cli_cuda"], tmp_path)
    assert done.returncode == 0, done.stderr
    listed = done.stdout.split()
    assert [os.path.basename(p) for p in listed] == ["libcli_cuda.so", "cli_cuda.h", "cli_cuda.hpp", "cli_cuda.pc",
                                                      "cli_cudaConfig.cmake"]
    assert all(os.path.isfile(p) for p in listed)


def test_a_cubin_is_loaded_as_saved(cubin, tmp_path):  # noqa: F811
    """A graph saved with a CUBIN: the library hands the driver the saved ELF, byte for byte, and replays it."""
    if cuda_standin.compiler() is None:
        pytest.skip("no C compiler (cc, gcc or clang) to build the stand-in driver and the runner")
    recording, contents = _saxpy_recording()
    apic.capture_save(FileGraph(recording, contents, cubin[1], (ARCH, "", "cubin")), str(tmp_path / "g"))
    apic.export(str(tmp_path / "g.wrp"), tmp_path / "out", name="cubin_graph")
    runner = build("cuda_runner.c", tmp_path / "out", "cubin_graph", tmp_path / "runner", libraries=["-ldl"])
    driver = cuda_standin.build(cuda_standin.STANDIN_SOURCE, str(tmp_path), "standin_cuda")
    local = types.SimpleNamespace(folder=tmp_path, runner=runner, driver=driver, recording=recording)
    calls = _calls(local, ["o:0", "r:1:0x99"])
    assert [c.params for c in calls if c.name == "cuModuleLoadData"][0] == cubin[1]
    regions, constants, handle = _opened(calls)
    same(_replayed(calls), _entered(expected_calls(recording, regions, handle, constants, 0x99)))


def test_a_graph_without_kernels_exports_and_replays_its_copies(tmp_path):
    """No module, no kernel, no fill kernel: copies and memsets only (and an empty region)."""
    if cuda_standin.compiler() is None:
        pytest.skip("no C compiler (cc, gcc or clang) to build the stand-in driver and the runner")
    from apic.record.recording import Recording
    from apic.record.regions import Region

    regions = (Region(0, 16, False), Region(1, 16, True), Region(2, 0, True))
    ops = (rec.Memcpy(rec.Ref(1, 0), rec.Ref(0, 0), 16), rec.Memset(rec.Ref(1, 8), 7, 8),
           rec.Memtile(rec.Ref(1, 0), rec.Blob(b"\x01\x02"), 4))
    recording = Recording("cuda-params-v1", regions, (), (), ops)
    contents = [bytes(range(16)), None, None]
    apic.capture_save(FileGraph(recording, contents, b"", (ARCH, "", "ptx")), str(tmp_path / "g"))
    apic.export(str(tmp_path / "g.wrp"), tmp_path / "out", name="copies")
    runner = build("cuda_runner.c", tmp_path / "out", "copies", tmp_path / "runner", libraries=["-ldl"])
    driver = cuda_standin.build(cuda_standin.STANDIN_SOURCE, str(tmp_path), "standin_cuda")
    local = types.SimpleNamespace(folder=tmp_path, runner=runner, driver=driver, recording=recording)
    calls = _calls(local, ["o:0", "r:2:0x5"])
    assert not [c for c in calls if c.name in ("cuModuleLoadData", "cuModuleGetFunction")]
    allocs = [c.args for c in calls if c.name == "cuMemAlloc"]
    assert [size for size, _ in allocs] == [16, 16, 1]  # an empty region still gets an address, as in Python
    addresses = [address for _, address in allocs]
    once = expected_calls(recording, addresses, {}, 0, 0x5)
    assert [c.name for c in once] == ["cuMemcpyDtoDAsync", "cuMemsetD8Async", "cuMemsetD16Async"]
    assert once[2].args == (addresses[1], 0x0201, 4, 0x5)  # the 2-byte fill: a 16-bit memset of 4 values
    same(_replayed(calls), _entered(once * 2))


@pytest.mark.parametrize("arch", [75, 90])
def test_kernel_attributes_are_set_as_the_python_load_sets_them(export, arch):
    calls = _calls(export, ["o:0"], env={"APIC_STANDIN_ARCH": str(arch)})
    functions = [c.args[1] for c in calls if c.name == "cuModuleGetFunction"]
    allowed = [c.args for c in calls if c.name == "cuFuncSetAttribute"]
    dynamic = [(functions[0], 8, SMEM)]  # CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: the saxpy launches' need
    clusters = [(fn, 14, 1) for fn in functions]  # CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED
    assert allowed == (dynamic + clusters if arch >= 90 else dynamic)  # in the order of the kernels


def _flat_calls(recording, conds: dict, cap: int, regions, handle, constants, stream) -> tuple[list[Call], bool]:
    """The calls of one replay of ``recording`` with branches, its conditions fixed at ``conds`` ((region, offset)
    -> int32; kernels do not run on the stand-in), each read as the Python replay reads it (the stream
    synchronized, 4 bytes copied); and whether the loop cap (backward jumps in the replay) stopped it."""
    ops, k, jumps, calls = recording.ops, 0, 0, []
    while k < len(ops):
        op = ops[k]
        if isinstance(op, rec.Branch):
            address = regions[op.cond.region] + op.cond.offset
            calls += [Call("cuStreamSynchronize", (stream,)), Call("cuMemcpyDtoH", (address, 4))]
            k = k + 1 if conds[(op.cond.region, op.cond.offset)] else op.target
        elif isinstance(op, rec.Jump):
            jumps += op.target <= k
            if jumps > cap:
                return calls, True
            k = op.target
        else:
            calls += expected_calls(dataclasses.replace(recording, ops=(op,)), regions, handle, constants, stream)
            k += 1
    return calls, False


@pytest.fixture(scope="module")
def conditional(ptx, tmp_path_factory):  # noqa: F811
    """The nested capture_if / capture_while ops of the cuda conditional tests, exported; their two conditions
    (int32s at bytes 60 and 56 of the graph-owned region 2) bound as ``conds``."""
    if cuda_standin.compiler() is None:
        pytest.skip("no C compiler (cc, gcc or clang) to build the stand-in driver and the runner")
    from test_cuda_conditional_offline import _nested_ops

    folder = tmp_path_factory.mktemp("cuda_conditional")
    recording, contents = _saxpy_recording()
    recording = dataclasses.replace(recording, ops=_nested_ops())
    graph = FileGraph(recording, contents, ptx.encode("latin-1"), (ARCH, "", "ptx"))
    graph.bindings = {"conds": Binding("conds", "input", 2, 0, 64, "int32", (16,), (4,), 4, "<i4", ())}
    apic.capture_save(graph, str(folder / "g"))
    apic.export(str(folder / "g.wrp"), folder / "out", name="branches")
    runner = build("cuda_runner.c", folder / "out", "branches", folder / "runner", libraries=["-ldl"])
    driver = cuda_standin.build(cuda_standin.STANDIN_SOURCE, str(folder), "standin_cuda")
    return types.SimpleNamespace(folder=folder, runner=runner, driver=driver, recording=recording)


@pytest.mark.parametrize("c, c2", [(0, 0), (1, 0), (0, 1)])
def test_conditions_are_read_on_the_host_as_the_python_replay_reads_them(conditional, c, c2):
    conds = np.zeros(16, np.int32)
    conds[15], conds[14] = c, c2
    (conditional.folder / "conds.bin").write_bytes(conds.tobytes())
    done = _run(conditional, ["o:0", "w:conds=conds.bin", "m:7", "x:1:0x42", "r:0:0", f"l:{conditional.folder}/c.log"]
                if c else ["o:0", "w:conds=conds.bin", "r:2:0x42", f"l:{conditional.folder}/c.log"])
    assert done.returncode == 0, done.stderr + done.stdout
    calls = cuda_standin.read_dump(str(conditional.folder / "c.log"))
    regions, constants, handle = _opened(calls)
    once, capped = _flat_calls(conditional.recording, {(2, 60): c, (2, 56): c2}, 7, regions, handle, constants, 0x42)
    assert capped == bool(c)  # while (C) never ends where C stays set: the cap stops it
    if c:
        assert "status 7: replay: the loops ran more than 7 iterations in replay 0" in done.stdout
    same(_replayed(calls), _entered(once if c else once * 2))
    assert {"cuStreamSynchronize", "cuLaunchKernel" if c else "cuMemsetD32Async"} <= {x.name for x in once}


def test_the_cpp_raii_header_compiles_and_throws_on_errors(export, tmp_path):
    """The C++ wrapper; two instances at once, each with its own device memory."""
    cxx = shutil.which("c++") or shutil.which("g++")
    if cxx is None:
        pytest.skip("no C++ compiler on this machine")
    out = os.path.dirname(export.written["library"])
    source = tmp_path / "raii.cpp"
    source.write_text(f'#include "{NAME}.hpp"\n#include <vector>\nint main() {{\n'
                      f'  apic_export::{NAME} g(0), h(0);  // two instances: each its own memory\n'
                      '  auto info = g.find("x");\n  std::vector<char> x(info.nbytes, 7), y(info.nbytes);\n'
                      '  g.write("x", x.data(), x.size());\n  g.replay((void*)0x77, 2);\n'
                      '  h.read("x", y.data(), y.size());\n  if (y == x || y[0] != 0) return 2;  // the saved 0.0f\n'
                      '  g.read("x", y.data(), y.size());\n  if (y != x) return 3;\n'
                      '  if (g.device_pointer("x") == h.device_pointer("x")) return 4;\n'
                      '  try { g.replay(nullptr, -1); return 1; } catch (const std::runtime_error&) {}\n'
                      f'  try {{ apic_export::{NAME} k(1); return 1; }} catch (const std::runtime_error&) {{}}\n'
                      '  return 0;\n}\n')
    built = subprocess.run([cxx, "-std=c++14", f"-I{out}", "-o", str(tmp_path / "raii"), str(source), f"-L{out}",
                            f"-l{NAME}", f"-Wl,-rpath,{out}"], capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr
    done = subprocess.run([str(tmp_path / "raii")], env={**bare_env(), "APIC_CUDA_DRIVER": export.driver},
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def test_a_kernel_whose_parameters_differ_from_the_file_is_refused_at_open(export):
    """Where the driver reports a kernel's parameters (cuFuncGetParamInfo), open compares them with the file's."""
    kernel = export.recording.kernels[0]
    pairs = [f"{offset}:{size}" for offset, size in kernel.params]

    def opened(layout):
        return _run(export, ["o:0", "c"], env={"APIC_STANDIN_KERNELS": f"{kernel.symbol}={','.join(layout)}"})

    assert opened(pairs).returncode == 0
    offset, size = kernel.params[1]
    done = opened([pairs[0], f"{offset + 8}:{size}", *pairs[2:]])
    assert done.returncode == 2
    assert (f"parameter 1 is [offset {offset + 8}, {size} bytes] in its module, [offset {offset}, {size} bytes] in "
            "the graph file") in done.stderr
    done = opened(pairs[:-1])
    assert f"has {len(pairs) - 1} parameters in its module, the graph file says {len(pairs)}" in done.stderr
    done = opened([*pairs, f"{offset + 4096}:8"])
    assert f"has more parameters in its module than the graph file's {len(pairs)}" in done.stderr


def test_open_loads_the_saved_modules_and_fills_the_regions_from_the_saved_state(export):
    calls = _calls(export, ["o:0", "c"])
    names = [c.name for c in calls]
    assert names[:4] == ["cuInit", "cuDeviceGet", "cuDevicePrimaryCtxRetain", "cuCtxPushCurrent"]
    images = [c.params for c in calls if c.name == "cuModuleLoadData"]
    assert images == [export.ptx.encode("latin-1").rstrip(b"\0") + b"\0", cuda_lowering.FILL_PTX]
    modules = [c.args[0] for c in calls if c.name == "cuModuleLoadData"]
    got = [(c.args[0], c.params.decode()) for c in calls if c.name == "cuModuleGetFunction"]
    assert got == [(modules[0], export.recording.kernels[0].symbol), (modules[1], cuda_lowering.FILL_SYMBOL)]
    regions, constants, _ = _opened(calls)
    sizes = [c.args[0] for c in calls if c.name == "cuMemAlloc"]
    assert sizes == [r.nbytes for r in export.recording.regions] + [16]  # the 6-byte fill value, 16-byte padded
    uploads = [(c.args[0], c.params) for c in calls if c.name == "cuMemcpyHtoD"]
    assert uploads == [(regions[0], export.contents[0]), (regions[1], export.contents[1]),
                       (constants, b"\x01\x02\x03\x04\x05\x06" + bytes(10))]
    assert [c.args for c in calls if c.name == "cuMemsetD8"] == [(regions[2], 0, 64)]  # graph-owned: zeroed
    assert names.index("cuCtxSynchronize") > max(k for k, n in enumerate(names) if n == "cuMemcpyHtoD")
    # close: everything back to the driver, in the context, then the context released
    freed = [c.args[0] for c in calls if c.name == "cuMemFree"]
    assert sorted(freed) == sorted([*regions, constants])
    assert sorted(c.args[0] for c in calls if c.name == "cuModuleUnload") == sorted(modules)
    assert names[-2:] == ["cuCtxPopCurrent", "cuDevicePrimaryCtxRelease"]
    assert names.count("cuCtxPushCurrent") == names.count("cuCtxPopCurrent") == 2


@pytest.mark.parametrize("stream", [0x1234, 0], ids=["caller-stream", "null-stream"])
def test_each_replay_issues_the_ops_as_the_python_replay_does(export, stream):
    """Every call of two replays, each kernel parameter's bytes relocated to the stand-in's addresses."""
    calls = _calls(export, ["o:0", f"r:2:{stream}", f"r:1:{stream}", "r:0:0"])
    regions, constants, handle = _opened(calls)
    once = expected_calls(export.recording, regions, handle, constants, stream)
    assert [c.name for c in once].count("cuLaunchKernel") == 3  # two of saxpy, one of the fill kernel
    same(_replayed(calls), _entered(once * 2) + _entered(once))
    launched = [c.args[9] for c in calls if c.name == "cuLaunchKernel"]
    assert launched[:3] == launched[3:6] == launched[6:]  # the kernelParams arrays are built once, at open


def test_bindings_are_read_and_written_through_device_memory(export):
    out = export.folder / "dump"
    out.mkdir(exist_ok=True)
    new = np.arange(100, 108, dtype=np.float32).tobytes()
    (export.folder / "x.bin").write_bytes(new)
    (export.folder / "y.bin").write_bytes(np.float32([7, 8, 9]).tobytes())
    done = _run(export, ["o:0", f"d:{out}", "p:x", "p:y"])
    assert done.returncode != 0 and "not C-contiguous" in done.stderr  # y is strided: no one pointer
    assert (out / "x.bin").read_bytes() == export.contents[0]  # the saved state
    assert (out / "y.bin").read_bytes() == np.frombuffer(export.contents[1], np.float32)[1::2][:3].tobytes()
    calls = _calls(export, ["o:0", "w:x=x.bin", "w:y=y.bin", f"d:{out}", "p:x"])
    assert (out / "x.bin").read_bytes() == new
    assert (out / "y.bin").read_bytes() == np.float32([7, 8, 9]).tobytes()
    regions, _, _ = _opened(calls)
    y = np.frombuffer(export.contents[1], np.float32).copy()
    y[1::2][:3] = [7, 8, 9]
    uploads = [(c.args[0], c.params) for c in calls if c.name == "cuMemcpyHtoD"][3:]
    assert uploads == [(regions[0], new), (regions[1] + 4, y.tobytes()[4:24])]  # the strided view's span
    done = _run(export, ["o:0", "p:x"])
    assert done.stdout.split()[2] != "0"


def test_a_missing_driver_library_is_an_error_at_open_not_an_abort(export, tmp_path):
    done = _run(export, ["o:0"], driver=str(tmp_path / "libcuda_missing.so"))
    assert done.returncode == 2, done.stderr
    assert "status 9: open: cannot open the CUDA driver library" in done.stderr and "libcuda_missing.so" in done.stderr
    done = _run(export, ["o:0"], driver="-", env={"APIC_CUDA_DRIVER": str(tmp_path / "nothing.so")})
    assert done.returncode == 2 and "nothing.so" in done.stderr  # the environment variable names it
    done = _run(export, ["o:0", "c"], driver="-", env={"APIC_CUDA_DRIVER": export.driver})
    assert done.returncode == 0, done.stderr
    done = _run(export, ["o:0"], driver="libc.so.6")
    assert done.returncode == 2 and "has no cuInit" in done.stderr


def test_a_driver_call_that_fails_at_open_is_reported_and_everything_is_freed(export):
    calls = _calls(export, ["o:0", "c"])
    at = [c.name for c in calls].index("cuModuleLoadData") + 1  # the fill kernel's module
    done = _run(export, [f"f:{at}:218", "o:0"])
    assert done.returncode == 2
    assert "open: cuModuleLoadData of module 'apic_fill.ptx' (PTX for sm_50) failed: CUDA_ERROR_INVALID_PTX (218)" \
        in done.stderr
    done = _run(export, ["f:1:101", "o:0"])
    assert done.returncode == 2 and "no CUDA device 0: cuDeviceGet failed: CUDA_ERROR_INVALID_DEVICE" in done.stderr
    done = _run(export, ["o:1"])  # the stand-in has one device
    assert done.returncode == 2 and "no CUDA device 1" in done.stderr
    log = export.folder / "failed.bin"
    done = _run(export, [f"f:{at}:218", "O:0", f"l:{log}"])
    assert done.returncode == 0, done.stderr
    failed = cuda_standin.read_dump(str(log))
    names = [c.name for c in failed]
    assert names[-5:] == ["cuCtxPushCurrent", "cuCtxSynchronize", "cuModuleUnload", "cuCtxPopCurrent",
                          "cuDevicePrimaryCtxRelease"]  # the module loaded before the failure unloaded
    assert [c.args[0] for c in failed if c.name == "cuModuleUnload"] == [failed[at - 1].args[0]]
    assert "cuMemAlloc" not in names
    second = [k for k, c in enumerate(calls) if c.name == "cuMemAlloc"][1]
    done = _run(export, [f"f:{second}:2", "O:0", f"l:{log}"])
    assert "open: cuMemAlloc of the graph's memory failed: CUDA_ERROR_OUT_OF_MEMORY (2)" in done.stdout
    failed = cuda_standin.read_dump(str(log))
    first = next(c.args[1] for c in failed if c.name == "cuMemAlloc")
    assert [c.args[0] for c in failed if c.name == "cuMemFree"] == [first]  # what was allocated, freed
    assert len([c for c in failed if c.name == "cuModuleUnload"]) == 2


def test_a_file_the_loader_refuses_is_refused_by_the_export(export, tmp_path):
    """Export reads a CUDA file with capture_load's reader and module checks (their errors), with no device."""
    import shutil

    shutil.copytree(export.folder / "g_modules", tmp_path / "g_modules")
    shutil.copy(export.folder / "g.wrp", tmp_path / "g.wrp")
    (module,) = (tmp_path / "g_modules").iterdir()
    module.write_bytes(module.read_bytes().replace(b".entry", b".entrx", 1))
    with pytest.raises(apic.FormatError, match="checksum|sha256|does not match"):
        apic.export(str(tmp_path / "g.wrp"), tmp_path / "out", name=NAME)
    with pytest.raises(apic.GraphLoadError, match="Failed to load APIC graph from"):
        apic.export(str(tmp_path / "none.wrp"), tmp_path / "out", name=NAME)
    assert not (tmp_path / "out").exists()


def test_a_driver_call_that_fails_in_a_replay_stops_it_and_says_which(export):
    calls = _calls(export, ["o:0", "r:1:0x77"])
    names = [c.name for c in calls]
    at = names.index("cuMemsetD32Async")
    log = export.folder / "stopped.bin"
    done = _run(export, [f"f:{at}:700", "o:0", "x:1:0x77", "r:1:0x77", f"l:{log}"])
    assert done.returncode == 0, done.stderr
    op = [type(op).__name__ for op in export.recording.ops].index("Memtile")
    assert f"status 9: replay: cuMemsetD32Async failed: CUDA_ERROR_ILLEGAL_ADDRESS (700) at op {op - 0} of " \
           "replay 0" in done.stdout
    stopped = cuda_standin.read_dump(str(log))
    regions, constants, handle = _opened(stopped)
    once = _entered(expected_calls(export.recording, regions, handle, constants, 0x77))
    failed_at = [c.name for c in once].index("cuMemsetD32Async")
    same(_replayed(stopped), once[: failed_at + 1] + [once[-1]] + once)  # the context popped; the next one whole


def test_careless_calls_return_a_status(export):
    done = _run(export, ["o:0", "e:nope", "x:-1:0"])
    assert done.returncode == 0, done.stderr
    assert "find: status 2: find: the graph has no binding named 'nope'" in done.stdout
    assert "replay: status 1: replay: -1 repeats" in done.stdout
    (export.folder / "short.bin").write_bytes(b"\0" * 4)
    done = _run(export, ["o:0", "w:x=short.bin"])
    assert done.returncode == 1 and "status 3: write('x'): 4 bytes given; the binding holds 32" in done.stderr


def test_ops_the_runtime_lacks_and_missing_modules_are_refused_naming_why():
    ops = (rec.NativeCall("f", ()),)
    saved = types.SimpleNamespace(recording=types.SimpleNamespace(ops=ops, kernels=()), modules=())
    assert cuda_export.refusals(saved, {}) == ["its ops include NativeCall, which the exported CUDA runtime does "
                                               "not run"]
    module = types.SimpleNamespace(file="m.ptx")
    saved = types.SimpleNamespace(recording=types.SimpleNamespace(ops=(), kernels=()), modules=(module,))
    assert "m.ptx are missing" in cuda_export.refusals(saved, {})[0]
    with pytest.raises(ExportError, match="takes an apic graph"):
        apic.export(object(), "unused")
