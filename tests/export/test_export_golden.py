"""The golden files (tests/data/golden: one saved graph per format version and warp-lang that wrote it)
exported on this warp-lang and replayed from C give the eager results saved beside them, bit for bit, with
their named scalar parameters set from C too (format 3); a file that does not load here is refused by export
with the loader's error, and one with a native handle is refused naming it."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import warp as wp

import apic
from apic.c_library.library import ExportError, export
from export_helpers import build, dumped, run
from persist_helpers import TESTS

pytestmark = [pytest.mark.warp_version, pytest.mark.interpreter, pytest.mark.install]

GOLDEN = os.path.join(TESTS, "data", "golden")
# the portable folders: objects for the x86-64-v2 level, which load on any x86-64 CPU that runs Warp
FOLDERS = sorted(d for d in os.listdir(GOLDEN) if d.endswith("-x86-64-v2"))
REPLAYS = 3  # as generate.py


@pytest.mark.parametrize("folder", FOLDERS)
def test_golden_file_exported_replays_its_eager_results(folder, tmp_path):
    path = os.path.join(GOLDEN, folder, "graph.wrp")
    try:
        graph = apic.capture_load(path)
    except apic.IncompatibleGraphError as refused:
        with pytest.raises(type(refused)) as caught:
            export(path, tmp_path / "out", name="golden")
        # the same words (a failed build names its source by file name, not by its temporary folder)
        assert str(caught.value) == str(refused)
        return
    if graph.recording.handles:
        with pytest.raises(ExportError, match="native handles"):
            export(path, tmp_path / "out", name="golden")
        return
    export(path, tmp_path / "out", name="golden")
    runner = build("runner.c", tmp_path / "out", "golden", tmp_path / "runner")
    (tmp_path / "d").mkdir()
    done = run(runner, ["m", f"r:{REPLAYS}", f"d:{tmp_path / 'd'}"], tmp_path)
    assert done.returncode == 0, done.stderr
    expected = np.load(os.path.join(GOLDEN, folder, "expected.npz"))
    got = dumped(tmp_path / "d", expected.files)
    for name in expected.files:
        assert got[name] == np.ascontiguousarray(expected[name]).tobytes(), f"{folder}: {name}"

    settings_file = os.path.join(GOLDEN, folder, "set.json")
    if not os.path.exists(settings_file):
        return
    with open(settings_file) as f:
        settings = json.load(f)
    steps = []
    for name, value in settings.items():
        dtype = getattr(wp, graph.params[name]["dtype"])
        (tmp_path / f"{name}.in").write_bytes(apic.param("check", dtype, value).packed)
        steps.append(f"w:{name}={tmp_path / f'{name}.in'}")
    (tmp_path / "s").mkdir()
    done = run(runner, [*steps, f"r:{REPLAYS}", f"d:{tmp_path / 's'}"], tmp_path)
    assert done.returncode == 0, done.stderr
    expected = np.load(os.path.join(GOLDEN, folder, "expected_set.npz"))
    got = dumped(tmp_path / "s", expected.files)
    for name in expected.files:
        assert got[name] == np.ascontiguousarray(expected[name]).tobytes(), f"{folder}: {name} after set"
