"""``capture_save(..., source_fallback=True)`` on CUDA, without a GPU: the generated ``.cu`` and its
build options travel with the graph, and a load where the saved CUBIN / PTX cannot be used compiles
the source with this Warp's NVRTC for the (stand-in) GPU's architecture.

The saved graph is tests/cuda_kernels.py's module compiled ahead of time by Warp (CUBIN for sm_75, its
``.cu`` beside it, as in Warp's kernel cache) behind the recording tests/cuda/test_cuda_offline.py builds;
loads go through the real cuda-python bindings with tests/cuda/test_cuda_python_offline.py's stand-in
driver, which reports the GPU architecture and records what ``cuModuleLoadData`` is handed. "Cannot be
used" is real: an sm_75 CUBIN does not run on an sm_86 GPU, a file whose bytes changed fails its
SHA-256, and the stand-in driver rejects an image the way the driver does.
"""

from __future__ import annotations

import glob
import hashlib
import os
import shutil
import subprocess
import sys
import types

import pytest
import warp as wp

import cuda_kernels as ck
from apic import _compat
from apic.errors import CaptureError, FormatError, IncompatibleGraphError
from apic.format import cuda_source, reader, schema
from apic.record.cuda.recorder import CudaModule
from apic.record.recording import ModuleInfo, Recording
from apic.targets import cuda as cp
from test_cuda_offline import ARCH, FileGraph, _nvrtc_reason, _saxpy_recording
from test_cuda_python_offline import FakeDevice, cu  # noqa: F401  (cu is a fixture)
from persist_helpers import rewrite_wrp, wrp_body
from wrp_helpers import read_doc

pytestmark = [pytest.mark.warp_version]


@pytest.fixture(scope="module")
def aot(tmp_path_factory):
    """tests/cuda_kernels.py compiled by Warp for sm_75 (CUBIN) in a folder that also holds its ``.cu``."""
    reason = _nvrtc_reason()
    if reason:
        pytest.skip(reason)
    _saxpy_recording()  # its CPU launch first: warp 1.12 generates the module's code anew after one
    out = tmp_path_factory.mktemp("aot")
    wp.compile_aot_module(ck.saxpy.module, arch=ARCH, module_dir=str(out), use_ptx=False)
    (binary,) = glob.glob(str(out / "*.cubin"))
    (source,) = glob.glob(str(out / "*.cu"))
    return binary, source


def _warp_build(aot, arch: int, use_ptx: bool, tmp_path) -> bytes:
    """What Warp itself compiles tests/cuda_kernels.py's module to for ``sm_<arch>`` (the oracle), from the
    source that was saved."""
    out = tmp_path / f"warp_sm{arch}_{'ptx' if use_ptx else 'cubin'}"
    wp.compile_aot_module(ck.saxpy.module, arch=arch, module_dir=str(out), use_ptx=use_ptx)
    (path,) = glob.glob(str(out / ("*.ptx" if use_ptx else "*.cubin")))
    (source,) = glob.glob(str(out / "*.cu"))
    with open(source, "rb") as f, open(aot[1], "rb") as saved:
        assert f.read() == saved.read()  # the same generated code: the builds are comparable
    with open(path, "rb") as f:
        return f.read()


def _graph(binary: str) -> FileGraph:
    """A CUDA graph over the saxpy recording whose module is the Warp build at ``binary``."""
    recording, contents = _saxpy_recording()
    module = CudaModule(ck.saxpy.module, types.SimpleNamespace(binary_path=binary))  # Warp's ModuleExec: its path
    recording = Recording(**{**recording.__dict__, "modules": (ModuleInfo("cuda_kernels", module),)})
    with open(binary, "rb") as f:
        image = f.read()
    return FileGraph(recording, contents, image, cp.module_arch(binary, image))


def _save(aot, tmp_path, source_fallback=True, name="g") -> str:
    path = str(tmp_path / name)
    wp.capture_save(_graph(aot[0]), path, source_fallback=source_fallback)
    return path


def _load(cu, monkeypatch, path, device=None, **fake):  # noqa: F811  (cu: the fixture's driver module)
    device = device or FakeDevice(cu, **fake)
    monkeypatch.setattr(_compat, "cuda_driver", lambda: device)
    return device, wp.capture_load(path, device="cuda:0")


def _module_loads(device) -> list[bytes]:
    """The images handed to ``cuModuleLoadData``, the fill kernel's left out."""
    return [bytes(args[0]) for args in device.named("cuModuleLoadData") if b"apic_fill" not in bytes(args[0])]


def _elf_archs(cubin: bytes) -> set[int]:
    """Where an ELF CUBIN's ``e_flags`` may say its ``sm_XY``: the low byte (up to CUDA 12), bits 8-15 (CUDA 13)."""
    assert cubin[:4] == b"\x7fELF"
    flags = int.from_bytes(cubin[48:52], "little")
    return {flags & 0xFF, (flags >> 8) & 0xFF}


# --- save -----------------------------------------------------------------------------------------------
def test_save_keeps_each_modules_cuda_source_and_options(aot, tmp_path):
    path = _save(aot, tmp_path)
    entry = wrp_body(path)["modules"][0]
    source = entry["source"]
    assert source["file"].endswith(".cu") and source["file"] in os.listdir(path + "_modules")
    with open(os.path.join(path + "_modules", source["file"]), "rb") as f:
        data = f.read()
    with open(aot[1], "rb") as f:
        assert data == f.read()  # the .cu Warp generated beside the binary
    assert (len(data), hashlib.sha256(data).hexdigest()) == (source["size"], source["sha256"])
    expected = _compat.cuda_build_options(ck.saxpy.module)
    assert source["options"] == {k: expected[k] for k in ("mode", "optimization_level", "verify_fp", "fast_math",
                                                          "fuse_fp", "lineinfo")}
    # the file reads back and validates; the format version is unchanged (an optional field)
    with open(path + ".wrp", "rb") as f:
        saved = reader.read(f.read())
    assert saved.modules[0].source.file == source["file"] and saved.modules[0].source.options == source["options"]
    assert (saved.modules[0].arch, saved.modules[0].file.endswith(".cubin")) == (ARCH, True)
    plain = _save(aot, tmp_path, source_fallback=False, name="plain")
    assert "source" not in wrp_body(plain)["modules"][0]
    assert not [n for n in os.listdir(plain + "_modules") if n.endswith(".cu")]
    assert wrp_body(plain)["format_version"] == wrp_body(path)["format_version"] == schema.BASE_VERSION


def _copy_build(aot, tmp_path, edit=None) -> str:
    """The ahead-of-time build copied elsewhere, its ``.cu`` passed through ``edit``; the binary's path."""
    folder = tmp_path / "build"
    folder.mkdir()
    binary = shutil.copy(aot[0], folder)
    with open(aot[1], "rb") as f:
        data = f.read()
    if edit is not None:
        with open(folder / os.path.basename(aot[1]), "wb") as f:
            f.write(edit(data))
    return binary


@pytest.mark.parametrize(
    "edit, message",
    [
        (None, r"its generated source is not in the kernel cache next to its binary"),
        (lambda d: b"#define WP_LTO_LINK_INPUTS 1\n" + d, "links LTO-IR or fatbin inputs"),
        (lambda d: b'#include "not_a_warp_header.h"\n' + d, "includes 'not_a_warp_header.h'"),
    ],
    ids=["missing", "link-inputs", "foreign-include"],
)
def test_save_refuses_a_source_that_cannot_rebuild_the_binary(aot, tmp_path, edit, message):
    binary = _copy_build(aot, tmp_path, edit)
    with pytest.raises(CaptureError, match=rf"of a CUDA graph: .*Warp module 'cuda_kernels': .*{message}"):
        wp.capture_save(_graph(binary), str(tmp_path / "g"), source_fallback=True)
    assert not os.path.exists(tmp_path / "g.wrp")
    wp.capture_save(_graph(binary), str(tmp_path / "g"))  # without source_fallback the binary is enough


@pytest.mark.parametrize(
    "where, option, message",
    [("module", "strip_hash", "strip_hash=True"), ("config", "llvm_cuda", "LLVM CUDA backend")],
)
def test_save_refuses_options_the_source_cannot_carry(aot, tmp_path, monkeypatch, where, option, message):
    if where == "module":
        monkeypatch.setitem(ck.saxpy.module.options, option, True)
    elif not hasattr(wp.config, option):
        pytest.skip(f"warp-lang {wp.config.version} has no wp.config.{option}")
    else:
        monkeypatch.setattr(wp.config, option, True)
    with pytest.raises(CaptureError, match=rf"of a CUDA graph: .*Warp module 'cuda_kernels': .*{message}"):
        wp.capture_save(_graph(aot[0]), str(tmp_path / "g"), source_fallback=True)


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("file", "module.0123456789abcdef.cpp", "not a valid source file name"),
        ("options", {"mode": "release"}, "optimization_level"),
        ("options", lambda o: {**o, "optimization_level": 4}, r"optimization_level: expected an integer in \[0, 3\]"),
        ("options", lambda o: {**o, "lineinfo": 1}, "lineinfo: expected a boolean"),
        ("sha256", "XYZ", "expected 64 lowercase hex digits"),
    ],
)
def test_reader_refuses_a_malformed_cuda_source(aot, tmp_path, field, value, message):
    path = _save(aot, tmp_path)
    body = wrp_body(path)
    source = body["modules"][0]["source"]
    source[field] = value(source[field]) if callable(value) else value
    with pytest.raises(FormatError, match=rf"modules\[0\]\.source.*{message}"):
        read_doc(body)


# --- load -----------------------------------------------------------------------------------------------
def test_a_gpu_the_cubin_cannot_run_on_gets_the_source_compiled_for_it(aot, cu, tmp_path, monkeypatch):  # noqa: F811
    path = _save(aot, tmp_path)
    device, graph = _load(cu, monkeypatch, path, arch=86)  # an sm_75 CUBIN does not run on sm_86
    (image,) = _module_loads(device)
    assert image == _warp_build(aot, 86, False, tmp_path)  # what Warp compiles for sm_86 from the same module
    assert 86 in _elf_archs(image) and ARCH not in _elf_archs(image)
    module = graph.saved.modules[0]
    assert (module.arch, module.arch_suffix, module.file.endswith(".sm86.cubin")) == (86, "", True)
    graph.launch()
    graph.launch(mode="launch")
    assert len(device.named("cuGraphLaunch")) == 1 and device.named("cuLaunchKernel")
    # saved again, the graph keeps its source and records the module it now runs
    wp.capture_save(graph, str(tmp_path / "again"), source_fallback=True)
    with open(str(tmp_path / "again") + ".wrp", "rb") as f:
        again = reader.read(f.read())
    assert (again.modules[0].arch, again.modules[0].source.sha256) == (
        86, wrp_body(path)["modules"][0]["source"]["sha256"])
    with open(os.path.join(str(tmp_path / "again") + "_modules", again.modules[0].file), "rb") as f:
        assert f.read() == image


def test_ptx_where_nvrtc_cannot_build_a_cubin_for_the_gpu(aot, cu, tmp_path, monkeypatch):  # noqa: F811
    """A GPU newer than every architecture this NVRTC knows gets PTX for the newest one (the driver JITs it)."""
    archs = _compat.nvrtc_archs()
    path = _save(aot, tmp_path)
    device, graph = _load(cu, monkeypatch, path, arch=max(archs) + 10)
    (image,) = _module_loads(device)
    assert cp.ptx_target(image.rstrip(b"\0").decode("latin-1")) == (max(archs), "")
    assert image.rstrip(b"\0") == _warp_build(aot, max(archs), True, tmp_path).rstrip(b"\0")
    assert graph.saved.modules[0].file.endswith(f".sm{max(archs)}.ptx")


def test_cuda_output_ptx_is_honoured(aot, cu, tmp_path, monkeypatch):  # noqa: F811
    monkeypatch.setattr(wp.config, "cuda_output", "ptx")
    device, graph = _load(cu, monkeypatch, _save(aot, tmp_path), arch=86)
    (image,) = _module_loads(device)
    assert cp.ptx_target(image.rstrip(b"\0").decode("latin-1")) == (86, "")


def test_without_source_the_load_is_refused_as_before(aot, cu, tmp_path, monkeypatch):  # noqa: F811
    path = _save(aot, tmp_path, source_fallback=False)
    device = FakeDevice(cu, arch=86)
    with pytest.raises(IncompatibleGraphError, match=r"CUBIN built for sm_75, and this GPU is sm_86"):
        _load(cu, monkeypatch, path, device=device)
    assert not device.named("cuModuleLoadData")


def test_a_gpu_that_runs_the_saved_cubin_uses_it(aot, cu, tmp_path, monkeypatch):  # noqa: F811
    path = _save(aot, tmp_path)
    device, graph = _load(cu, monkeypatch, path, arch=ARCH)
    with open(aot[0], "rb") as f:
        assert _module_loads(device) == [f.read()]
    assert graph.saved.modules[0].file == wrp_body(path)["modules"][0]["file"]


def _source_path(path: str) -> str:
    return os.path.join(path + "_modules", wrp_body(path)["modules"][0]["source"]["file"])


def _flip_a_byte(file: str) -> None:
    with open(file, "r+b") as f:
        data = bytearray(f.read())
        data[len(data) // 2] ^= 0x20
        f.seek(0)
        f.write(data)


@pytest.mark.parametrize("how", ["bytes", "size", "recorded-hash"])
def test_a_source_that_does_not_match_its_hash_or_size_is_refused(aot, cu, tmp_path, monkeypatch, how):  # noqa: F811
    path = _save(aot, tmp_path)
    if how == "bytes":
        _flip_a_byte(_source_path(path))
    elif how == "size":
        with open(_source_path(path), "ab") as f:
            f.write(b"\n")
    else:
        body = wrp_body(path)
        body["modules"][0]["source"]["sha256"] = "0" * 64
        rewrite_wrp(path, body)
    device = FakeDevice(cu, arch=86)
    with pytest.raises(FormatError, match=r"does not match the SHA-256|holds \d+ bytes; the graph file records"):
        _load(cu, monkeypatch, path, device=device)
    assert not device.named("cuModuleLoadData")


@pytest.mark.parametrize("how", ["missing", "corrupt"])
def test_a_missing_or_corrupt_object_is_compiled_from_source(aot, cu, tmp_path, monkeypatch, how):  # noqa: F811
    path = _save(aot, tmp_path)
    plain = _save(aot, tmp_path, source_fallback=False, name="plain")
    for saved in (path, plain):
        binary = os.path.join(saved + "_modules", wrp_body(saved)["modules"][0]["file"])
        os.remove(binary) if how == "missing" else _flip_a_byte(binary)
    with pytest.raises(FormatError, match="is missing from" if how == "missing" else "does not match the SHA-256"):
        _load(cu, monkeypatch, plain, arch=ARCH)
    device, graph = _load(cu, monkeypatch, path, arch=ARCH)
    (image,) = _module_loads(device)
    assert image == _warp_build(aot, ARCH, False, tmp_path)
    assert graph.saved.modules[0].file.endswith(f".sm{ARCH}.cubin")


class RejectingDevice(FakeDevice):
    """The stand-in driver, rejecting the first module image it is given as the driver does a bad one."""

    def _call(self, name, real, args):
        if name == "cuModuleLoadData" and not any(n == name for n, _ in self.calls):
            self.calls.append((name, args))
            return (self.cu.CUresult.CUDA_ERROR_INVALID_IMAGE, None)
        return super()._call(name, real, args)


def test_a_module_the_driver_rejects_is_compiled_from_source(aot, cu, tmp_path, monkeypatch):  # noqa: F811
    device, graph = _load(cu, monkeypatch, _save(aot, tmp_path), device=RejectingDevice(cu))
    rejected, loaded = _module_loads(device)
    with open(aot[0], "rb") as f:
        assert rejected == f.read()
    assert loaded == _warp_build(aot, ARCH, False, tmp_path)
    assert graph.saved.modules[0].file.endswith(f".sm{ARCH}.cubin")
    with pytest.raises(IncompatibleGraphError, match="cannot load CUDA module .*CUDA_ERROR_INVALID_IMAGE"):
        _load(cu, monkeypatch, _save(aot, tmp_path, source_fallback=False, name="plain"), device=RejectingDevice(cu))


def test_compile_target_follows_warps_choice():
    archs = _compat.nvrtc_archs()
    if not archs:
        pytest.skip(f"warp-lang {wp.config.version} has no NVRTC")
    low = min(archs)
    assert cuda_source.compile_target(low, "") == (low, "", "cubin")
    assert cuda_source.compile_target(max(archs) + 10, "")[1:] == ("", "ptx")
    assert cuda_source.compile_target(90, "a") == ((90, "a", "cubin") if 90 in archs else (90, "", "ptx"))
    assert cuda_source.compile_target(86, "a") == (86, "", "cubin")  # "a" needs sm_90+
    with pytest.raises(IncompatibleGraphError, match="cannot compile CUDA code for sm_10"):
        cuda_source.compile_target(10, "")


_CHILD = """
import os, sys, tempfile
import warp as wp
wp.config.kernel_cache_dir = tempfile.mkdtemp()  # none of the parent's builds: only the saved files
if hasattr(wp, "LOG_WARNING"):
    wp.config.log_level = wp.LOG_WARNING
wp.config.quiet = True
path, out, mode, tests = sys.argv[1:5]
sys.path.insert(0, tests)
import apic
from apic import _compat
from test_cuda_python_offline import FakeDevice
device = FakeDevice(_compat.cuda_driver(), arch=86)
_compat.cuda_driver = lambda: device
if mode == "file":
    graph = wp.capture_load(path, device="cuda:0")
else:
    folder = path + "_modules"
    modules = {name: open(os.path.join(folder, name), "rb").read() for name in os.listdir(folder)}
    graph = wp.capture_load_from_bytes(open(path + ".wrp", "rb").read(), modules, device="cuda:0")
graph.launch()
(image,) = [bytes(a[0]) for a in device.named("cuModuleLoadData") if b"apic_fill" not in bytes(a[0])]
with open(out, "wb") as f:
    f.write(image)
"""


@pytest.mark.parametrize("mode", ["file", "bytes"])
def test_a_fresh_process_compiles_the_saved_source(aot, cu, tmp_path, mode):  # noqa: F811
    path = _save(aot, tmp_path)
    out = tmp_path / "image.cubin"
    tests = os.path.dirname(os.path.abspath(__file__))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    subprocess.run([sys.executable, "-c", _CHILD, path, str(out), mode, tests], check=True, env=env)
    assert out.read_bytes() == _warp_build(aot, 86, False, tmp_path)


def test_a_source_that_does_not_compile_is_reported_with_why_it_was_needed(
        aot, cu, tmp_path, monkeypatch):  # noqa: F811
    path = _save(aot, tmp_path)
    broken = b"this is not CUDA code;\n"
    with open(_source_path(path), "wb") as f:
        f.write(broken)
    body = wrp_body(path)
    body["modules"][0]["source"].update(sha256=hashlib.sha256(broken).hexdigest(), size=len(broken))
    rewrite_wrp(path, body)
    with pytest.raises(IncompatibleGraphError, match=r"CUBIN built for sm_75, and this GPU is sm_86.*compiling the "
                                                     r"saved source of module 'cuda_kernels' for sm_86 .* failed"):
        _load(cu, monkeypatch, path, arch=86)


def test_a_loaded_graph_without_source_is_not_saved_with_it(aot, cu, tmp_path, monkeypatch):  # noqa: F811
    _, graph = _load(cu, monkeypatch, _save(aot, tmp_path, source_fallback=False), arch=ARCH)
    with pytest.raises(CaptureError, match="Warp module 'cuda_kernels': this loaded graph has no saved source"):
        wp.capture_save(graph, str(tmp_path / "again"), source_fallback=True)
