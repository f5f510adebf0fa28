"""Golden files: one saved graph per format version (and per warp-lang that wrote it), read by this apic.

``tests/data/golden/generate.py`` wrote each folder: ``graph.wrp`` + ``graph_modules/`` and the eager
results of ``REPLAYS`` steps. Every later apic must load each file and replay it to the same bits,
under every supported warp-lang, except where docs/FORMAT.md (compatibility) says it refuses: a module
whose kernels read native Warp structs (a mesh query) replays only under the warp-lang that compiled it.
``python -m apic inspect`` must predict the outcome ("loads here: yes" / "no: <reason>").
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import warp as wp

import apic
from apic.format import reader, schema

GOLDEN = os.path.join(os.path.dirname(__file__), "data", "golden")
FOLDERS = sorted(d for d in os.listdir(GOLDEN) if re.fullmatch(r"v\d+-warp[\d.]+", d))
REPLAYS = 3  # as generate.py


def _parts(folder: str) -> tuple[int, str]:
    version, warp = re.fullmatch(r"v(\d+)-warp([\d.]+)", folder).groups()
    return int(version), warp


def test_every_readable_format_version_has_golden_files():
    versions = {_parts(f)[0] for f in FOLDERS}
    assert versions == set(range(schema.MIN_READ_VERSION, schema.FORMAT_VERSION + 1))
    assert {_parts(f)[1] for f in FOLDERS} >= {"1.12.1", "1.19.0"}


@pytest.mark.parametrize("folder", FOLDERS)
def test_golden_file_replays_bit_for_bit(folder):
    version, warp_version = _parts(folder)
    path = os.path.join(GOLDEN, folder, "graph.wrp")
    with open(path, "rb") as f:
        saved = reader.read(f.read())
    assert saved.format_version == version and saved.writer["warp"] == warp_version
    # every golden file carries kernel manifests and module source, so each release keeps reading both
    assert all(m.manifest is not None and m.source is not None for m in saved.modules)
    native = [m for m in saved.modules if m.native_types]
    if native and warp_version != wp.config.version:
        with pytest.raises(apic.IncompatibleGraphError, match=r"native Warp Mesh struct"):
            wp.capture_load(path)
        return
    graph = wp.capture_load(path)
    for _ in range(REPLAYS):
        wp.capture_launch(graph)
    expected = np.load(os.path.join(GOLDEN, folder, "expected.npz"))
    assert set(expected.files) == {n for n, b in graph.bindings.items() if b.kind == "output"}
    for name in expected.files:
        got = graph.param_numpy(name)
        assert got.tobytes() == np.ascontiguousarray(expected[name]).tobytes(), f"{folder}: {name}"


@pytest.mark.parametrize("folder", [f for f in FOLDERS if os.path.exists(os.path.join(GOLDEN, f, "set.json"))])
def test_golden_scalar_parameters_set_after_load(folder):
    """Format 3: the named scalar parameters set to ``set.json``'s values give ``expected_set.npz`` (eager)."""
    graph = wp.capture_load(os.path.join(GOLDEN, folder, "graph.wrp"))
    with open(os.path.join(GOLDEN, folder, "set.json")) as f:
        settings = json.load(f)
    assert settings and set(settings) <= {n for n, p in graph.params.items() if p["kind"] == "scalar"}
    for name, value in settings.items():
        graph.set_param(name, value)
    for _ in range(REPLAYS):
        wp.capture_launch(graph)
    expected = np.load(os.path.join(GOLDEN, folder, "expected_set.npz"))
    for name in expected.files:
        assert graph.param_numpy(name).tobytes() == np.ascontiguousarray(expected[name]).tobytes(), f"{folder}: {name}"


def test_format_3_golden_files_exist_for_both_warp_versions():
    assert {f for f in FOLDERS if _parts(f)[0] == schema.PARAMS_VERSION} >= {"v3-warp1.12.1", "v3-warp1.19.0"}


@pytest.mark.parametrize("folder", FOLDERS)
def test_inspect_says_whether_it_loads_here(folder):
    _, warp_version = _parts(folder)
    path = os.path.join(GOLDEN, folder, "graph.wrp")
    result = subprocess.run([sys.executable, "-m", "apic", "inspect", path], capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stderr
    line = next(l for l in result.stdout.splitlines() if "loads here:" in l)
    with open(path, "rb") as f:
        native = any(m.native_types for m in reader.read(f.read()).modules)
    if native and warp_version != wp.config.version:
        assert "loads here: no: module 'golden_mesh'" in line and warp_version in line
    else:
        assert line.strip() == "loads here: yes"
