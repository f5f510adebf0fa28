"""The CPU level a file records is checked, not trusted (issue 33, class 5).

A graph saved with ``capture_save(..., cpu_target=LEVEL)`` records the level as ``target.cpu`` and the
level's features as ``target.features``; a load checks the features against the host, and threaded replay
builds range entries for the level. A ``.wrp`` edited (and re-sealed) to claim a higher level than its
features, x86-64-v4 with v3's, would pass the host check on a v3 CPU and then build AVX-512 code there.
Such a file is refused when it is read, before anything is compiled; a level the host lacks is refused at
load and never built for; a huge ``cpu_target`` is not echoed whole.
"""

from __future__ import annotations

import numpy as np
import pytest
import warp as wp

import apic
from apic import _compat
from apic._probes import cpu as probe_cpu
from host_cpus import pretend
from apic.replay.parallel import range_entry
from apic.targets.cpu import CPU_LEVELS
from persist_helpers import rewrite_wrp, wrp_body

pytestmark = [pytest.mark.warp_version]

N = 1 << 15


@wp.kernel
def _scale(x: wp.array(dtype=float), y: wp.array(dtype=float), k: float):
    i = wp.tid()
    y[i] = x[i] * k + wp.sqrt(wp.abs(x[i]))


def _save(tmp_path, level="x86-64-v3", source_fallback=True) -> str:
    x = wp.array(np.linspace(-1, 1, N, dtype=np.float32), dtype=float, device="cpu")
    y = wp.zeros(N, dtype=float, device="cpu")
    with wp.ScopedCapture(device="cpu", apic=True) as capture:
        wp.launch(_scale, dim=N, inputs=[x, y, 0.5], device="cpu")
    path = str(tmp_path / "g")
    wp.capture_save(capture.graph, path, inputs={"x": x}, outputs={"y": y}, cpu_target=level,
                    source_fallback=source_fallback)
    return path


def _forge(path: str, cpu: str, features=None) -> None:
    body = wrp_body(path)
    body["target"]["cpu"] = cpu
    if features is not None:
        body["target"]["features"] = features
    rewrite_wrp(path, body)


def _nothing_compiles(monkeypatch):
    """Any build of C++ from here on fails the test: a refusal must come before the compiler runs."""
    def refuse(*args, **kwargs):
        raise AssertionError("a module was compiled before the file was refused")
    monkeypatch.setattr(probe_cpu, "_build_cpu", refuse)


def test_a_level_above_the_recorded_features_is_refused_before_anything_compiles(tmp_path, monkeypatch):
    path = _save(tmp_path)  # v3 objects, v3 features (and Warp's forced ones)
    assert not any(f.startswith("avx512") for f in wrp_body(path)["target"]["features"])
    _forge(path, "x86-64-v4")
    _nothing_compiles(monkeypatch)
    with pytest.raises(apic.FormatError, match=r"target\.cpu: objects built for x86-64-v4 use avx512bw, "
                                               r"avx512cd, avx512dq, avx512f, avx512vl, which target\.features"):
        wp.capture_load(path)
    with pytest.raises(apic.FormatError, match=r"target\.cpu"):
        wp.capture_load_from_bytes(open(path + ".wrp", "rb").read(), {})


def test_a_level_with_its_features_still_loads_and_a_name_that_is_no_level_is_not_checked(tmp_path):
    path = _save(tmp_path, "x86-64-v2")
    graph = wp.capture_load(path)
    assert {m.module_exec.apic_cpu_level for m in graph.recording.modules} == {"x86-64-v2"}
    # the host's own CPU name with its features (a save without cpu_target) is not a level: no level check
    _forge(path, "znver3")
    graph = wp.capture_load(path)
    assert {m.module_exec.apic_cpu_level for m in graph.recording.modules} == {None}


def test_a_level_this_host_lacks_is_refused_at_load(tmp_path, monkeypatch):
    if not CPU_LEVELS["x86-64-v4"] <= set(_compat.native_target()["features"]):
        pytest.skip("this CPU has no AVX-512: a v4 file cannot be saved here")
    path = _save(tmp_path, "x86-64-v4", source_fallback=False)
    pretend("x86-64-v3", monkeypatch)
    with pytest.raises(apic.IncompatibleGraphError, match=r"lacks: avx512"):
        wp.capture_load(path)


def test_no_range_object_is_built_for_a_level_this_host_lacks(tmp_path, monkeypatch):
    """Threaded replay's own guard: a module whose level the host lacks gets no range entry (serial)."""
    graph = wp.capture_load(_save(tmp_path, "x86-64-v2"))
    module = graph.recording.modules[0]
    module.module_exec.apic_cpu_level = "x86-64-v4"  # what a forged level would have reached before the fix
    pretend("x86-64-v3", monkeypatch)
    symbol = graph.recording.kernels[0].symbol[: -len("_cpu_forward")]
    with pytest.raises(LookupError, match=r"built for x86-64-v4, and this CPU lacks avx512"):
        range_entry.range_entry(module.name, module.module_exec, symbol)


@pytest.mark.parametrize("level", ["x" * 100_000, ["x86-64-v2"] * 100_000])
def test_a_huge_cpu_target_is_not_echoed_whole(tmp_path, level):
    with pytest.raises(ValueError, match="is not a CPU level apic compiles for") as caught:
        _save(tmp_path, level)
    assert len(str(caught.value)) < 300, len(str(caught.value))
