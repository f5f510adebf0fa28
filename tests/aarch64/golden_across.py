"""The golden files of one CPU family loaded on this machine (the emulated AArch64 tier loads the x86-64 ones:
``tier.py golden FOLDER...``; ``test_aarch64_golden.py`` runs the same check on x86-64 for a folder of its own
family, so the code is tested without the emulator).

A folder written under this warp-lang loads (its saved objects, or its source compiled here when they are
another family's or need features this CPU lacks) and replays ``generate.REPLAYS`` steps equal to this
machine's eager run of the program that wrote it (``tests/data/golden/generate.py``), never to the saving
machine's bits (``expected.npz``); a format-3 folder also after ``set_param`` with ``set.json``'s values. A
folder of another family written under another warp-lang is refused: its objects cannot run here and its
source is promised only under the warp-lang that generated it.
"""

from __future__ import annotations

import json
import os
import platform
import re
import sys

import numpy as np
import warp as wp

import apic
from apic.format import reader, schema
from apic.targets import cpu

GOLDEN = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "golden")
FOLDER = re.compile(r"v(\d+)-warp([\d.]+)(?:-(x86-64-v\d))?")  # the folders generate.py writes


def _generate():
    sys.path.insert(0, GOLDEN)
    import generate  # the golden programs (imported, not run: its main() writes folders)

    return generate


def check(folder: str) -> str:
    """Load ``folder`` here as the promise says; "refused" or "replayed" (an ``AssertionError`` naming what differs
    when it does neither as it must)."""
    match = FOLDER.fullmatch(folder)
    assert match, f"{folder} is not a golden folder generate.py writes"
    version, written_by = int(match.group(1)), match.group(2)
    path = os.path.join(GOLDEN, folder, "graph.wrp")
    with open(path, "rb") as f:
        saved = reader.read(f.read())
    other_family = cpu.cpu_family(saved.target["machine"]) is not cpu.cpu_family(platform.machine())
    if written_by != wp.config.version:
        assert other_family, f"{folder}: another warp-lang's file of this family is test_golden.py's to check"
        try:
            wp.capture_load(path)
        except apic.IncompatibleGraphError as refused:
            assert written_by in str(refused) and wp.config.version in str(refused), f"{folder}: {refused}"
            return "refused"
        raise AssertionError(f"{folder}: loaded here, though neither its objects nor its source can be")
    generate = _generate()
    params = version == schema.PARAMS_VERSION
    graph = wp.capture_load(path)
    if other_family:  # its objects cannot run here: every module was compiled from its source
        assert {info.module_exec.apic_cpu_level for info in graph.recording.modules} == {None}, folder
    _replays_as_eager(folder, graph, generate, version, generate.SAVED if params else None)
    if params:  # a fresh load, its parameters set: from the saved state again
        with open(os.path.join(GOLDEN, folder, "set.json")) as f:
            values = json.load(f)
        graph = wp.capture_load(path)
        for name, value in values.items():
            graph.set_param(name, value)
        _replays_as_eager(folder, graph, generate, version, values)
    return "replayed"


def _replays_as_eager(folder: str, graph, generate, version: int, values: dict | None) -> None:
    make, step, _, outputs = generate.PROGRAMS[version]
    for _ in range(generate.REPLAYS):
        wp.capture_launch(graph)
    eager = generate._eager(make, step, values)  # this machine's eager run, the parameters holding values
    for name in outputs:
        got, want = graph.param_numpy(name), eager[name].numpy()
        assert got.tobytes() == np.ascontiguousarray(want).tobytes(), \
            f"{folder}: {name} differs from this machine's eager run (parameters {values})"
