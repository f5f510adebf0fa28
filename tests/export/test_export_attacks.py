"""The export attacked: a file the loader refuses is refused by export with the loader's error; graphs that need
Warp's native runtime are refused naming why; no C compiler is a clear error; and a careless C caller (wrong ABI
version, unknown names, wrong sizes, NULLs, a runaway loop) gets error statuses and messages, never a crash."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import warp as wp

import apic
import debug_kernels
import param_kernels as PK
from apic.c_library.library import ExportError, export
from apic.c_library.toolchain import ToolchainError
from export_helpers import build, run, saved_demo
from persist_helpers import run_cli

pytestmark = [pytest.mark.warp_version, pytest.mark.interpreter, pytest.mark.install]


@pytest.fixture(scope="module")
def demo_file(tmp_path_factory):
    folder = tmp_path_factory.mktemp("attacked")
    saved_demo(folder / "demo.wrp")
    return folder / "demo.wrp"


def _refusal(call):
    with pytest.raises(Exception) as caught:
        call()
    return type(caught.value), str(caught.value)


@pytest.mark.parametrize("damage", ["foreign", "truncated", "flipped"])
def test_a_file_the_loader_refuses_is_refused_with_its_error(demo_file, tmp_path, damage):
    shutil.copytree(str(demo_file)[: -len(".wrp")] + "_modules", tmp_path / "bad_modules")
    data = demo_file.read_bytes()
    bad = {"foreign": b"\x7fELF" + bytes(range(256)) * 4, "truncated": data[: len(data) // 2],
           "flipped": data[:-40] + bytes(b ^ 0xFF for b in data[-40:])}[damage]
    (tmp_path / "bad.wrp").write_bytes(bad)
    loader = _refusal(lambda: apic.capture_load(tmp_path / "bad.wrp"))
    exporter = _refusal(lambda: export(tmp_path / "bad.wrp", tmp_path / "out"))
    assert exporter == loader
    assert not (tmp_path / "out").exists()
    done = run_cli(["export", str(tmp_path / "bad.wrp"), str(tmp_path / "out")], tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert loader[1].splitlines()[0] in done.stderr


def test_a_module_object_changed_is_refused(demo_file, tmp_path):
    shutil.copy(demo_file, tmp_path / "g.wrp")
    shutil.copytree(str(demo_file)[: -len(".wrp")] + "_modules", tmp_path / "g_modules")
    obj = next(p for p in (tmp_path / "g_modules").iterdir() if p.suffix == ".o")
    data = bytearray(obj.read_bytes())
    data[len(data) // 2] ^= 0x01
    obj.write_bytes(bytes(data))
    assert _refusal(lambda: export(tmp_path / "g.wrp", tmp_path / "out")) == \
        _refusal(lambda: apic.capture_load(tmp_path / "g.wrp"))


def test_a_graph_with_a_native_handle_is_refused_naming_it(tmp_path):
    points = wp.array(np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0], [1, 1, 0]], np.float32), dtype=wp.vec3)
    indices = wp.array(np.array([0, 1, 2, 1, 3, 2], np.int32), dtype=wp.int32)
    mesh = wp.Mesh(points=points, indices=indices)
    with wp.ScopedCapture(device="cpu", apic=True) as cap:
        mesh.refit()
    apic.capture_save(cap.graph, tmp_path / "m")
    with pytest.raises(ExportError, match="Mesh"):
        export(tmp_path / "m.wrp", tmp_path / "out")


def test_a_graph_calling_warp_natives_is_refused_naming_them(tmp_path):
    """A sparse (BSR) build calls a native of Warp's the exported runtime does not port (its sorts and scans
    it does: test_export_natives.py)."""
    import warp.sparse as sparse

    rows, cols = wp.array(np.array([0, 1, 1], np.int32)), wp.array(np.array([0, 0, 1], np.int32))
    values = wp.array(np.ones(3, np.float32))
    matrix = sparse.bsr_zeros(2, 2, wp.float32, device="cpu")
    with wp.ScopedCapture(device="cpu", apic=True) as cap:
        sparse.bsr_set_from_triplets(matrix, rows, cols, values)
    apic.capture_save(cap.graph, tmp_path / "s", outputs={"values": values})
    with pytest.raises(ExportError, match="bsr_matrix_from_triplets_host"):
        export(tmp_path / "s.wrp", tmp_path / "out")


def test_no_c_compiler_names_what_to_install(demo_file, tmp_path, monkeypatch):
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    with pytest.raises(ToolchainError, match="install a C compiler"):
        export(demo_file, tmp_path / "out")
    monkeypatch.delenv("CC")
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing on it
    with pytest.raises(ToolchainError, match="found none .*install a C compiler"):
        export(demo_file, tmp_path / "out")


@pytest.mark.parametrize("name", ["bad name", "1abc", "", "x" * 65, "a-b"])
def test_a_name_that_is_no_c_identifier_is_refused(demo_file, tmp_path, name):
    with pytest.raises(ExportError, match="C identifier"):
        export(demo_file, tmp_path / "out", name=name)


def test_careless_c_caller_gets_errors_not_crashes(tmp_path):
    """attack.c against a graph with arrays and a named scalar: wrong ABI, unknown names, wrong sizes, NULLs."""
    p, state = PK.param("float32"), PK.make_state("float32")
    with wp.ScopedCapture(device="cpu", apic=True) as capture:
        PK.step("float32", state, p)
    apic.capture_save(capture.graph, tmp_path / "g", inputs={"x": state["x"], "steps": state["steps"]})
    export(tmp_path / "g.wrp", tmp_path / "out", name="careless")
    done = run(build("attack.c", tmp_path / "out", "careless", tmp_path / "attack"), [], tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 failures" in done.stdout and "ok pointer to a scalar" in done.stdout


def test_runaway_loop_stops_at_the_cap_with_an_error(tmp_path):
    p, state = PK.param("float32"), PK.make_state("float32")
    with wp.ScopedCapture(device="cpu", apic=True) as capture:
        PK.step("float32", state, p)
    apic.capture_save(capture.graph, tmp_path / "g", inputs={"steps": state["steps"]})
    export(tmp_path / "g.wrp", tmp_path / "out", name="capped")
    runner = build("runner.c", tmp_path / "out", "capped", tmp_path / "runner")
    (tmp_path / "steps.in").write_bytes(np.array([50], np.int32).tobytes())
    done = run(runner, [f"w:steps={tmp_path / 'steps.in'}", "c:10", "r:1"], tmp_path)
    assert done.returncode == 1 and "status 7" in done.stderr and "more than 10 iterations" in done.stderr
    assert run(runner, [f"w:steps={tmp_path / 'steps.in'}", "c:50", "r:1"], tmp_path).returncode == 0


def test_the_cli_writes_the_library_and_says_where(demo_file, tmp_path):
    done = run_cli(["export", str(demo_file), str(tmp_path / "out"), "--name", "cli_demo"], tmp_path)
    assert done.returncode == 0, done.stderr
    listed = done.stdout.split()
    assert [os.path.basename(p) for p in listed] == ["libcli_demo.so", "cli_demo.h", "cli_demo.hpp", "cli_demo.pc",
                                                      "cli_demoConfig.cmake"]
    assert all(os.path.isfile(p) for p in listed)


def test_the_cpp_raii_header_compiles_and_throws_on_errors(demo_file, tmp_path):
    cxx = shutil.which("c++") or shutil.which("g++")
    if cxx is None:
        pytest.skip("no C++ compiler on this machine")
    export(demo_file, tmp_path / "out", name="cli_demo")
    source = tmp_path / "raii.cpp"
    source.write_text('#include "cli_demo.hpp"\n#include <vector>\nint main() {\n'
                      '  apic_export::cli_demo g;\n  auto info = g.find("x");\n  std::vector<char> x(info.nbytes);\n'
                      '  g.replay(3);\n  g.read("x", x.data(), x.size());\n'
                      '  try { g.replay(-1); return 1; } catch (const std::runtime_error&) {}\n  return 0;\n}\n')
    built = subprocess.run([cxx, "-std=c++14", f"-I{tmp_path / 'out'}", "-o", str(tmp_path / "raii"), str(source),
                            f"-L{tmp_path / 'out'}", "-lcli_demo", f"-Wl,-rpath,{tmp_path / 'out'}"],
                           capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr
    assert subprocess.run([str(tmp_path / "raii")], timeout=60).returncode == 0


def test_export_of_a_live_graph(tmp_path):
    """A live graph is saved first, then exported as its file would be."""
    p, state = PK.param("float32"), PK.make_state("float32")
    with wp.ScopedCapture(device="cpu", apic=True) as capture:
        PK.step("float32", state, p)
    written = export(capture.graph, tmp_path / "out", name="live")
    assert os.path.isfile(written["library"]) and sys.platform.startswith("linux")


@wp.kernel
def _gather(a: wp.indexedarray(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = a[i] * 2.0


def test_an_index_written_out_of_range_from_c_stops_the_replay(tmp_path):
    """A loaded graph checks an indexed array's index buffer before the kernel reads through it; so does the
    export: a bad index written from C is an error status, and honest ones replay as Python does."""
    data = wp.array(np.arange(8, dtype=np.float32), dtype=float)
    idx = wp.array(np.array([7, 0, 3], np.int32), dtype=wp.int32)
    out = wp.zeros(3, dtype=float)
    with wp.ScopedCapture(device="cpu", apic=True) as cap:
        wp.launch(_gather, dim=3, inputs=[wp.indexedarray(data, [idx]), out])
    apic.capture_save(cap.graph, tmp_path / "i", inputs={"idx": idx}, outputs={"out": out})
    export(tmp_path / "i.wrp", tmp_path / "out", name="gather")
    runner = build("runner.c", tmp_path / "out", "gather", tmp_path / "runner")
    (tmp_path / "good.in").write_bytes(np.array([1, 6, 2], np.int32).tobytes())
    (tmp_path / "bad.in").write_bytes(np.array([1, 1 << 28, 2], np.int32).tobytes())
    (tmp_path / "d").mkdir()
    done = run(runner, [f"w:idx={tmp_path / 'good.in'}", "r:1", f"d:{tmp_path / 'd'}"], tmp_path)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "d" / "out.bin").read_bytes() == np.array([2.0, 12.0, 4.0], np.float32).tobytes()
    done = run(runner, [f"w:idx={tmp_path / 'bad.in'}", "r:1"], tmp_path)
    assert done.returncode == 1 and "status 6" in done.stderr and "index outside its array" in done.stderr
    graph = apic.capture_load(tmp_path / "i.wrp")
    graph.set_param("idx", np.array([1, 1 << 28, 2], np.int32))
    with pytest.raises(apic.ReplayIndexError):
        wp.capture_launch(graph)


@wp.kernel
def _lanes(x: wp.array(dtype=float), y: wp.array(dtype=float)):
    i = wp.tid()
    s = wp.tile_sum(wp.tile(x[i] + 0.0))
    y[i] = wp.tile_extract(s, 0)


@pytest.mark.skipif(not hasattr(wp.config, "enable_cpu_blocks"), reason="this warp-lang has no CPU block kernels")
def test_a_cpu_block_kernel_is_refused_naming_it(tmp_path, monkeypatch):
    monkeypatch.setattr(wp.config, "enable_cpu_blocks", True)
    x, y = wp.ones(8, dtype=float, device="cpu"), wp.zeros(8, dtype=float, device="cpu")
    with wp.ScopedCapture(device="cpu", apic=True) as capture:
        wp.launch(_lanes, dim=8, inputs=[x, y], block_dim=4, device="cpu")
    apic.capture_save(capture.graph, tmp_path / "b", outputs={"y": y})
    with pytest.raises(ExportError, match="_lanes.* CPU blocks"):
        export(tmp_path / "b.wrp", tmp_path / "out")


def test_a_failed_kernel_assertion_is_an_error_not_an_abort(tmp_path):
    """Warp aborts the process on a failed assertion of a debug-mode kernel; the exported replay returns
    APIC_ERROR_REPLAY with the assertion's text, and the instance replays again once the input is fixed."""
    x = wp.array(np.arange(4, dtype=np.float32), dtype=float, device="cpu")
    y = wp.zeros(4, dtype=float, device="cpu")
    with wp.ScopedCapture(device="cpu", apic=True) as capture:
        wp.launch(debug_kernels.checked_double, dim=4, inputs=[x, y], device="cpu")
    apic.capture_save(capture.graph, tmp_path / "a", inputs={"x": x}, outputs={"y": y})
    export(tmp_path / "a.wrp", tmp_path / "out", name="asserting")
    runner = build("runner.c", tmp_path / "out", "asserting", tmp_path / "runner")
    (tmp_path / "bad.in").write_bytes(np.array([1, 2, 9, 3], np.float32).tobytes())
    (tmp_path / "good.in").write_bytes(np.array([1, 2, 4, 3], np.float32).tobytes())
    (tmp_path / "d").mkdir()
    done = run(runner, [f"w:x={tmp_path / 'bad.in'}", "x:1", "x:1", f"w:x={tmp_path / 'good.in'}", "r:1",
                        f"d:{tmp_path / 'd'}"], tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("status 6: replay: a kernel's assertion failed") == 2 and "x[i] < 5.0" in done.stdout
    assert (tmp_path / "d" / "y.bin").read_bytes() == np.array([2, 4, 8, 6], np.float32).tobytes()
