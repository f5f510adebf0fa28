"""Attack the picture: mutated saved graphs that the reader accepts must give a DOT document Graphviz
parses, with no node or edge but apic's own (every string from the file escaped), and never an
exception other than the reader's ``FormatError``."""

from __future__ import annotations

import gc
import re
import shutil
import subprocess

import numpy as np
import pytest
import warp as wp

import apic
from apic import dot
from apic.format import reader
from fuzz_wrp import decode, encode
from viz_graphs import flow_program, flow_state

pytestmark = [pytest.mark.warp_version]

HOSTILE = ['"', "\\", '"]; x -> y; "', "}\n}\ndigraph z {", "\x00\x1b[31m", "<b>html</b>", "a\\\"b", "é\u202e"]
LINE = re.compile(r'^\s*(op\d+|legend)( -> op\d+)? \['
                  r'|^\s*(subgraph cluster_\d+ \{|\}|digraph apic \{|label=|node |edge )')


@pytest.fixture(autouse=True)
def _collect_meshes():
    """Free this test's meshes now, not in a later test's capture (Warp's Mesh.__del__ is a native call)."""
    yield
    gc.collect()


def _mutations(doc, rng):
    """Copies of ``doc`` with hostile strings in names and random integers in op fields."""
    for _ in range(150):
        body = decode(encode(doc))
        for _ in range(rng.integers(1, 4)):
            what = rng.integers(0, 4)
            if what == 0 and body["kernels"]:
                k = body["kernels"][rng.integers(len(body["kernels"]))]
                k["key"] = str(rng.choice(HOSTILE)) + k["key"]
            elif what == 1 and body["bindings"]:
                b = body["bindings"][rng.integers(len(body["bindings"]))]
                b["name"] = str(rng.choice(HOSTILE))
            elif what == 2:
                op = body["ops"][rng.integers(len(body["ops"]))]
                ints = [key for key, value in op.items() if isinstance(value, int) and key != "kind"]
                if ints:
                    op[str(rng.choice(ints))] = int(rng.integers(-2, len(body["sequence"]) // 4 + 3))
            else:  # two positions of the op sequence (uint32 indices into ops) swapped
                seq = np.frombuffer(body["sequence"], dtype="<u4").copy()
                i, j = rng.integers(len(seq), size=2)
                seq[[i, j]] = seq[[j, i]]
                body["sequence"] = seq.tobytes()
        yield encode(body)


def test_mutated_files_give_safe_dot(tmp_path):
    state = flow_state()
    with wp.ScopedCapture(device="cpu", apic=True) as capture:
        flow_program(state)
    path = tmp_path / "flow.wrp"
    wp.capture_save(capture.graph, str(path), inputs={"x": state["x"], "flag": state["flag"]})
    doc = decode(path.read_bytes())
    rng = np.random.default_rng(7)
    accepted = 0
    for blob in _mutations(doc, rng):
        try:
            saved = reader.read(blob)
        except apic.FormatError:
            continue
        accepted += 1
        text = dot.to_dot(saved.recording, saved.bindings)
        for line in text.splitlines():
            assert LINE.match(line), line
        if shutil.which("dot") and accepted % 10 == 0:
            result = subprocess.run(["dot", "-Tcanon"], input=text, capture_output=True, text=True, timeout=60)
            assert result.returncode == 0, result.stderr
            names = set(re.findall(r"^\s*(\w+)\s*\[", result.stdout, re.M))
            assert names <= {"graph", "node", "edge", "legend"} | {n for n in names if re.fullmatch(r"op\d+", n)}
    assert accepted >= 50  # the attack reached the picture, not only the reader
