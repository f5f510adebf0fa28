"""The CPU features an object needs are sealed in its kernel manifest, not taken from the ``.wrp``.

``target.features`` in a ``.wrp`` was the file's word for what its objects use: edited (and the file
re-sealed) to list fewer features, a load on a CPU lacking the rest ran the object anyway. The manifest
each module's object carries (covered by the object's own SHA-256, which the ``.wrp`` names) now seals the
CPU and features the object was compiled for, and a load checks them: the object is refused on a CPU
that lacks one, or its saved source is compiled here instead (and replays as eagerly). The host is
emulated with ``host_cpus.pretend`` (this CPU's features less those the named one lacks).
"""

from __future__ import annotations

import os

import msgpack
import numpy as np
import pytest
import warp as wp

import apic
from apic import _compat
from apic.format import manifest
from host_cpus import HOST_CPUS, pretend
from persist_helpers import rewrite_wrp, same_bits, wrp_body

pytestmark = [pytest.mark.warp_version, pytest.mark.interpreter]

N = 64


@wp.kernel
def _axpy(x: wp.array(dtype=float), y: wp.array(dtype=float), a: float):
    i = wp.tid()
    y[i] = a * x[i] + wp.sqrt(wp.abs(x[i]))


def _lesser_host() -> str:
    """A CPU apic can emulate that lacks some feature this one has (known to its LLVM)."""
    native = _compat.native_target()
    have, known = set(native["features"]), set(native["known_features"])
    for name, features in sorted(HOST_CPUS.items()):
        if features <= known and (have & known) - features:  # a CPU of this family that lacks one
            return name
    pytest.skip("every CPU apic emulates has all of this CPU's features")


def _save(tmp_path, source_fallback: bool) -> tuple[str, np.ndarray]:
    x = wp.array(np.linspace(-2, 2, N, dtype=np.float32), dtype=float, device="cpu")
    y = wp.zeros(N, dtype=float, device="cpu")
    wp.launch(_axpy, dim=N, inputs=[x, y, 0.5], device="cpu")
    eager = y.numpy().copy()
    y.zero_()
    with wp.ScopedCapture(device="cpu", apic=True) as capture:
        wp.launch(_axpy, dim=N, inputs=[x, y, 0.5], device="cpu")
    path = str(tmp_path / "g")
    wp.capture_save(capture.graph, path, outputs={"y": y}, source_fallback=source_fallback)
    return path, eager


def _forge_no_features(path: str) -> None:
    """The .wrp edited to say its objects use no instruction-set feature, and re-sealed."""
    body = wrp_body(path)
    body["target"]["features"] = []
    rewrite_wrp(path, body)


def test_the_manifest_seals_the_objects_cpu(tmp_path):
    path, _ = _save(tmp_path, source_fallback=False)
    body = wrp_body(path)
    (module,) = body["modules"]
    with open(f"{path}_modules/{module['file']}", "rb") as f:
        _, carried = manifest.carried(f.read(), module["file"])
    sealed = msgpack.unpackb(carried)[manifest.CPU_FIELD]
    assert sealed == [body["target"]["cpu"], sorted(body["target"]["features"])]


def test_features_dropped_from_the_wrp_do_not_make_an_object_run_on_a_cpu_lacking_them(tmp_path, monkeypatch):
    host = _lesser_host()
    path, eager = _save(tmp_path, source_fallback=False)
    _forge_no_features(path)
    wp.capture_load(path)  # on this CPU, which has them all: loads
    pretend(host, monkeypatch)
    with pytest.raises(apic.IncompatibleGraphError, match=rf"compiled for a CPU .* this CPU \({host}\) lacks: .*"
                                                          r"sealed in its kernel manifest"):
        wp.capture_load(path)
    data = open(path + ".wrp", "rb").read()
    modules = {name: open(f"{path}_modules/{name}", "rb").read() for name in
               os.listdir(path + "_modules")}
    with pytest.raises(apic.IncompatibleGraphError, match="sealed in its kernel manifest"):
        wp.capture_load_from_bytes(data, modules)


def test_with_its_source_the_module_is_compiled_here_instead(tmp_path, monkeypatch):
    host = _lesser_host()
    path, eager = _save(tmp_path, source_fallback=True)
    _forge_no_features(path)
    pretend(host, monkeypatch)
    graph = wp.capture_load(path)
    assert graph.recording.modules  # compiled from the saved source, for this (emulated) CPU
    wp.capture_launch(graph)
    out = np.empty(N, dtype=np.float32)
    graph.get_param("y", out)
    assert same_bits(out, eager)
