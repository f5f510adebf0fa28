"""A module file stripped of its kernel manifest does not switch the manifest's checks off (issue 33, class 7).

The manifest travels behind a trailer at the end of each module object (and saved source). Cutting it off
leaves the bare object Warp compiled, honest code; a ``.wrp`` re-sealed to name the bare file would then
load as a file saved before manifests, with none of the manifest's checks (another kernel of the module
as the entry point, a handle of another kind). Such a file is refused; the caller may allow files without
manifests (``apic.loading.allow_files_without_manifests``), which then load unchecked as before.
"""

from __future__ import annotations

import hashlib
import os

import numpy as np
import pytest
import warp as wp

import apic
from apic.format import manifest
from apic.targets import cpu
from persist_helpers import rewrite_wrp, same_bits, wrp_body

pytestmark = [pytest.mark.warp_version]

N = 64


@wp.kernel
def _add(x: wp.array(dtype=float), y: wp.array(dtype=float)):
    i = wp.tid()
    y[i] = y[i] + x[i] * 2.0


def _save(tmp_path, source_fallback=False) -> str:
    x = wp.array(np.arange(N, dtype=np.float32), dtype=float, device="cpu")
    y = wp.zeros(N, dtype=float, device="cpu")
    with wp.ScopedCapture(device="cpu", apic=True) as capture:
        wp.launch(_add, dim=N, inputs=[x, y], device="cpu")
    path = str(tmp_path / "g")
    wp.capture_save(capture.graph, path, inputs={"x": x}, outputs={"y": y}, source_fallback=source_fallback)
    return path


def _strip(path: str, field: str = "object") -> None:
    """Cut the manifest off a module's object (or source) file and re-seal the ``.wrp`` to name the bare file."""
    body = wrp_body(path)
    module = body["modules"][0]
    entry, suffix = (module, cpu.MODULE_EXTENSION) if field == "object" else (module["source"], ".cpp")
    folder = path + "_modules"
    data = open(os.path.join(folder, entry["file"]), "rb").read()
    bare, carried = manifest.carried(data, entry["file"])
    assert carried is not None, "the saved file carries no manifest: nothing to strip"
    os.unlink(os.path.join(folder, entry["file"]))
    digest = hashlib.sha256(bare).hexdigest()
    entry.update(file=cpu.module_file_name(module["name"], digest, suffix), sha256=digest, size=len(bare))
    with open(os.path.join(folder, entry["file"]), "wb") as f:
        f.write(bare)
    rewrite_wrp(path, body)


def _modules(path: str) -> dict:
    folder = path + "_modules"
    return {name: open(os.path.join(folder, name), "rb").read() for name in os.listdir(folder)}


def test_an_object_stripped_of_its_manifest_is_refused(tmp_path):
    path = _save(tmp_path)
    _strip(path)
    with pytest.raises(apic.FormatError, match=r"module '.*' \(file '.*\.o' in .*\) carries no kernel manifest"):
        wp.capture_load(path)
    with pytest.raises(apic.FormatError, match="carries no kernel manifest"):
        wp.capture_load_from_bytes(open(path + ".wrp", "rb").read(), _modules(path))


def test_a_source_stripped_of_its_manifest_is_refused_where_the_load_compiles_it(tmp_path):
    """The object gone, the load compiles the saved source: its manifest is the one that must be there."""
    path = _save(tmp_path, source_fallback=True)
    _strip(path, "source")
    body = wrp_body(path)
    os.unlink(os.path.join(path + "_modules", body["modules"][0]["file"]))
    with pytest.raises(apic.FormatError, match=r"carries no kernel manifest"):
        wp.capture_load(path)


def test_a_stripped_file_loads_unchecked_only_when_the_caller_allows_it(tmp_path, monkeypatch):
    path = _save(tmp_path)
    _strip(path)
    monkeypatch.setattr("apic.loading.allow_files_without_manifests", True)
    graph = wp.capture_load(path)
    wp.capture_launch(graph)
    assert same_bits(graph.param_numpy("y"), np.arange(N, dtype=np.float32) * 2.0)
