"""``capture_save(..., cpu_target=LEVEL)``: objects compiled for an x86-64 level, not for this host.

Checked against real parts: the objects are disassembled (``objdump``) and must hold no instruction of
a wider level; a graph saved for a level loads, as saved, in a fresh process that sees a smaller CPU
(a smaller host CPU given by the tests, ``tests/host_cpus.py``: an AMD Zen 3, an Intel Ivy Bridge) and replays
bit for bit as eager did; a CPU without the level's features refuses it, naming them. Also: the compiler
flags a file may carry (an allow-list, rebuilt token by token), and what a careless caller passes.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import numpy as np
import pytest
import warp as wp

import apic
from apic import _compat
import host_cpus
from apic.format import source as source_format
from persist_helpers import rewrite_wrp, run_child, same_bits, wrp_body

pytestmark = [pytest.mark.warp_version, pytest.mark.interpreter]

N = 1 << 16  # enough tasks for a replay with threads=2 to split a launch


@wp.kernel
def _step(a: wp.array(dtype=wp.vec3), b: wp.array(dtype=wp.vec3), h: wp.array(dtype=wp.float16),
          out: wp.array(dtype=float), k: float):
    i = wp.tid()
    # builtins whose code a wider level would vectorise or fuse, and half conversions (F16C)
    out[i] = wp.dot(a[i], b[i]) * k + wp.length(wp.cross(a[i], b[i])) + float(h[i])
    h[i] = wp.float16(out[i] * 0.5)


def _state():
    rng = np.random.default_rng(7)
    return {"a": wp.array(rng.standard_normal((N, 3)).astype(np.float32), dtype=wp.vec3, device="cpu"),
            "b": wp.array(rng.standard_normal((N, 3)).astype(np.float32), dtype=wp.vec3, device="cpu"),
            "h": wp.array(rng.standard_normal(N).astype(np.float16), dtype=wp.float16, device="cpu"),
            "out": wp.zeros(N, dtype=float, device="cpu")}


def _launch(s):
    wp.launch(_step, dim=N, inputs=[s["a"], s["b"], s["h"], s["out"], 0.75], device="cpu")


def _eager(steps: int) -> dict:
    s = _state()
    for _ in range(steps):
        _launch(s)
    return {"out": s["out"].numpy(), "h": s["h"].numpy()}


def _save(tmp_path, level, name="g", source_fallback=False) -> str:
    s = _state()
    with wp.ScopedCapture(device="cpu", apic=True) as capture:
        _launch(s)
    path = str(tmp_path / name)
    wp.capture_save(capture.graph, path, outputs={"out": s["out"], "h": s["h"]}, cpu_target=level,
                    source_fallback=source_fallback)
    return path


def _objects(path: str) -> list[str]:
    folder = path + "_modules"
    return [os.path.join(folder, f) for f in sorted(os.listdir(folder)) if f.endswith(".o")]


# registers and encodings each level adds: no object built for a smaller level may name them
_WIDER = {
    "x86-64-v2": re.compile(r"%ymm|%zmm|%k[0-7]\b|%[xy]mm(1[6-9]|2[0-9]|3[01])\b|\bvfmadd|\bvfmsub|\bvfnmadd"),
    "x86-64-v3": re.compile(r"%zmm|%k[0-7]\b|%[xy]mm(1[6-9]|2[0-9]|3[01])\b"),
}


@pytest.mark.skipif(shutil.which("objdump") is None, reason="objdump (binutils) is not installed")
@pytest.mark.parametrize("level", sorted(_WIDER))
def test_objects_hold_no_instruction_of_a_wider_level(tmp_path, level):
    path = _save(tmp_path, level)
    native = subprocess.run(["objdump", "-d", "--no-show-raw-insn", *_objects(_save(tmp_path, None, "native"))],
                            capture_output=True, text=True, check=True).stdout
    code = subprocess.run(["objdump", "-d", "--no-show-raw-insn", *_objects(path)], capture_output=True, text=True,
                          check=True).stdout
    assert "_cpu_forward" in code
    assert not _WIDER[level].search(code), _WIDER[level].search(code).group(0)
    assert wrp_body(path)["target"]["cpu"] == level
    # the check can fail: on a host with AVX2 and FMA, Warp's own -march=native object uses them
    if {"avx2", "fma"} <= set(_compat.native_target()["features"]):
        assert _WIDER["x86-64-v2"].search(native), (
            "this host's object names no wider register: the check proves nothing")


@pytest.mark.parametrize("level, host, loads", [
    ("x86-64-v2", "ivybridge", True), ("x86-64-v3", "znver3", True), ("x86-64-v3", "ivybridge", False),
    (None, "znver3", None),
])
def test_a_level_file_loads_as_saved_on_a_smaller_cpu_in_a_fresh_process(tmp_path, monkeypatch, level, host, loads):
    native = set(_compat.native_target()["features"])
    if not set(_compat.level_features(level or "x86-64-v3")) <= native:
        pytest.skip("this CPU lacks the level's features: its objects cannot run here")
    path = _save(tmp_path, level)
    expected = _eager(2)
    if loads is None:  # objects for this host: a CPU without all of its features refuses them
        loads = set(wrp_body(path)["target"]["features"]) <= host_cpus.HOST_CPUS[host]
    monkeypatch.setenv(host_cpus.VARIABLE, host)  # the child process pretends (host_cpus.PRELUDE)
    out, h = tmp_path / "out.npy", tmp_path / "h.npy"
    job = {"mode": "file", "path": path, "iters": 2, "get": {"out": str(out), "h": str(h)}}
    if not loads:
        with pytest.raises(AssertionError, match=r"IncompatibleGraphError.*lacks: .*(avx2|avx512)"):
            run_child(job, tmp_path)
        return
    run_child(job, tmp_path)
    assert same_bits(np.load(out), expected["out"]) and same_bits(np.load(h), expected["h"])


def test_a_loaded_level_graph_replays_split_over_threads_bit_for_bit(tmp_path):
    """Range entries (parallel replay) of a loaded level object are built for the same level."""
    path = _save(tmp_path, "x86-64-v2", source_fallback=True)
    graph = wp.capture_load(path)
    assert {info.module_exec.apic_cpu_level for info in graph.recording.modules} == {"x86-64-v2"}
    if not any(entry["chunks"] > 1 for entry in graph.parallel_report(2)):
        pytest.skip("no launch of the graph splits here")
    expected = _eager(2)
    for _ in range(2):
        wp.capture_launch(graph, threads=2)
    assert same_bits(graph.param_numpy("out"), expected["out"]) and same_bits(graph.param_numpy("h"), expected["h"])


def test_a_loaded_graph_saves_again_for_a_level_only_with_its_source(tmp_path):
    expected = _eager(1)
    kept = wp.capture_load(_save(tmp_path, None, "kept", source_fallback=True))
    again = str(tmp_path / "again")
    wp.capture_save(kept, again, cpu_target="x86-64-v2")
    assert wrp_body(again)["target"]["cpu"] == "x86-64-v2"
    loaded = wp.capture_load(again)
    wp.capture_launch(loaded)
    assert same_bits(loaded.param_numpy("out"), expected["out"])

    plain = wp.capture_load(_save(tmp_path, None, "plain"))
    with pytest.raises(apic.CaptureError, match=r"cpu_target='x86-64-v3'.*saved without source_fallback=True"):
        wp.capture_save(plain, str(tmp_path / "nope"), cpu_target="x86-64-v3")
    assert not os.path.exists(tmp_path / "nope.wrp")


@pytest.mark.parametrize("level", ["x86-64-v5", "native", "X86-64-V2", "", 3, ["x86-64-v2"]])
def test_an_unknown_cpu_target_is_refused_before_anything_is_written(tmp_path, level):
    with pytest.raises(ValueError, match="is not a CPU level apic compiles for"):
        _save(tmp_path, level)
    assert not os.listdir(tmp_path)


@pytest.mark.parametrize("flags, kept", [
    ("", ""),
    ("-march=native", "-march=native"),
    (" -march=native\t-mllvm=-inline-threshold=9000  -mllvm=-slp-recursion-max-depth=4 ",
     "-march=native -mllvm=-inline-threshold=9000 -mllvm=-slp-recursion-max-depth=4"),
])
def test_compiler_flags_from_a_file_are_rebuilt_from_an_allow_list(flags, kept):
    assert source_format.checked_flags(flags) == kept


@pytest.mark.parametrize("flags", [
    "-Xclang -load -Xclang libx.so", "-fplugin=x.so", "-march=native -mllvm=-load=x.so", "-march=znver4",
    "-mllvm=-inline-threshold=9000;", "-mllvm=-inline-threshold=1234567", "-O3", "-march=native " * 17,
])
def test_compiler_flags_outside_the_allow_list_refuse_the_file(tmp_path, flags):
    path = _save(tmp_path, None, source_fallback=True)
    body = wrp_body(path)
    body["modules"][0]["source"]["options"]["extra_flags"] = flags
    rewrite_wrp(path, body)
    with pytest.raises(apic.FormatError, match=r"extra_flags: .*not a compiler flag apic carries"):
        wp.capture_load(path)


@pytest.mark.skipif(not hasattr(wp.config, "cpu_compiler_flags"), reason="this warp-lang takes no CPU compiler flags")
def test_a_module_built_with_flags_a_file_cannot_carry_is_refused_at_save(tmp_path, monkeypatch):
    monkeypatch.setattr(wp.config, "cpu_compiler_flags", wp.config.cpu_compiler_flags + " -ffp-contract=off")

    @wp.kernel
    def odd_flags(x: wp.array(dtype=float)):
        x[wp.tid()] = x[wp.tid()] * 2.0

    x = wp.ones(4, dtype=float, device="cpu")
    with wp.ScopedCapture(device="cpu", apic=True) as capture:
        wp.launch(odd_flags, dim=4, inputs=[x], device="cpu")
    with pytest.raises(apic.CaptureError, match=r"'-ffp-contract=off' is not a compiler flag"):
        wp.capture_save(capture.graph, str(tmp_path / "g"), source_fallback=True)


def test_a_test_pretends_a_smaller_cpu_and_the_library_has_no_hook_for_it(monkeypatch):
    monkeypatch.setenv("APIC_TEST_HOST_CPU", "znver3")  # the library's old test hook: read no more
    assert _compat.host_target() == _compat.native_target()
    host_cpus.pretend("znver3", monkeypatch)
    seen = _compat.host_target()
    assert seen["cpu"] == "znver3" and not any(f.startswith("avx512") or f == "gfni" for f in seen["features"])
    assert set(seen["features"]) <= set(_compat.native_target()["features"])
    with pytest.raises(ValueError, match="names no CPU a test can pretend to be"):
        host_cpus.pretend("pentium4000", monkeypatch)
