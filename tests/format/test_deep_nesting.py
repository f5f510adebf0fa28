"""Deeply nested bodies in a CPU file: bounded when read, and drawn without recursion.

The reader bounded the nesting of conditional bodies for CUDA files only: a CPU file with thousands of
nested ``if`` s loaded and replayed, then its picture (``inspect --dot``, ``capture_debug_dot_print``) died
in ``RecursionError``. A CPU file now nests at most ``schema.MAX_CPU_NESTING`` deep (a ``FormatError``
past it); a file at the limit loads, replays as its eager run and is drawn; and the picture is drawn by a
loop, so even a recording nested far deeper than Python's recursion limit (never read from a file) draws.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import numpy as np
import pytest
import warp as wp

import apic
from apic import dot
from apic.errors import FormatError, UnsupportedOperationError
from apic.format import schema, writer
from apic.record.control_flow import nesting_depth
from persist_helpers import same_bits
from wrp_helpers import body_of, read_doc

pytestmark = [pytest.mark.warp_version, pytest.mark.interpreter]


@wp.kernel
def _set_flag(flag: wp.array(dtype=wp.int32)):
    flag[0] = 1


@wp.kernel
def _add_one(x: wp.array(dtype=float)):
    i = wp.tid()
    x[i] = x[i] + 1.0


def _saved_if(tmp_path):
    """A CPU graph ``set flag; if flag: x += 1`` saved as ``tmp_path/g``; returns (stem, its document)."""
    flag, x = wp.zeros(1, dtype=wp.int32, device="cpu"), wp.zeros(4, dtype=float, device="cpu")
    wp.launch(_set_flag, dim=1, inputs=[flag], device="cpu")  # compiled before the capture
    wp.launch(_add_one, dim=4, inputs=[x], device="cpu")
    x.zero_()
    with wp.ScopedCapture(device="cpu", apic=True) as cap:
        wp.launch(_set_flag, dim=1, inputs=[flag], device="cpu")
        wp.capture_if(flag, on_true=lambda: wp.launch(_add_one, dim=4, inputs=[x], device="cpu"))
    stem = str(tmp_path / "g")
    wp.capture_save(cap.graph, stem, outputs={"x": x})
    return stem, body_of(stem)


def _nest(doc: dict, depth: int) -> dict:
    """``doc`` with its one ``if`` repeated ``depth`` times, each inside the one before (all to the end)."""
    assert doc["sequence"] == np.array([0, 1, 2], dtype="<u4").tobytes() and doc["ops"][1]["target"] == 3
    doc = dict(doc, ops=[dict(op) for op in doc["ops"]])
    doc["ops"][1]["target"] = depth + 2
    doc["sequence"] = np.array([0] + [1] * depth + [2], dtype="<u4").tobytes()
    return doc


def test_a_cpu_file_nested_past_the_limit_is_refused(tmp_path):
    _, doc = _saved_if(tmp_path)
    assert nesting_depth(read_doc(_nest(doc, schema.MAX_CPU_NESTING)).recording.ops) == schema.MAX_CPU_NESTING
    for depth in (schema.MAX_CPU_NESTING + 1, 5000):
        with pytest.raises(FormatError, match=f"nest {depth} deep, deeper than the {schema.MAX_CPU_NESTING}"):
            read_doc(_nest(doc, depth))


def test_a_file_at_the_limit_loads_replays_and_is_drawn(tmp_path):
    stem, doc = _saved_if(tmp_path)
    with open(stem + ".wrp", "wb") as f:
        f.write(writer.encode(_nest(doc, schema.MAX_CPU_NESTING)))
    graph = wp.capture_load(stem, device="cpu")
    for _ in range(2):
        wp.capture_launch(graph)
    out = np.empty(4, dtype=np.float32)
    graph.get_param("x", out)
    eager = wp.zeros(4, dtype=float, device="cpu")  # the oracle: every if holds (the flag is set), one add each pass
    for _ in range(2):
        wp.launch(_add_one, dim=4, inputs=[eager], device="cpu")
    assert same_bits(out, eager.numpy())
    path = tmp_path / "g.dot"
    wp.capture_debug_dot_print(graph, str(path))
    assert path.read_text().count("subgraph cluster_") == schema.MAX_CPU_NESTING
    cli_dot = tmp_path / "cli.dot"
    result = subprocess.run([sys.executable, "-m", "apic", "inspect", stem + ".wrp", "--dot", str(cli_dot)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert cli_dot.read_text() == path.read_text().replace('label="apic graph"', 'label="g.wrp"')


def test_the_picture_is_drawn_without_recursion(tmp_path):
    stem, doc = _saved_if(tmp_path)
    recording = read_doc(doc).recording
    branch, add = recording.ops[1], recording.ops[2]
    depth = 2 * sys.getrecursionlimit()
    deep = dataclasses.replace(branch, target=depth + 2)
    ops = (recording.ops[0], *([deep] * depth), add)
    text = dot.to_dot(dataclasses.replace(recording, ops=ops))
    assert text.count("subgraph cluster_") == depth and text.count("}") == depth + 1
    # the innermost op is drawn inside every cluster
    assert f'\n{"  " * 64}op{depth + 1} [label="#{depth + 1} launch' in text  # (indented 64 levels at most)
    assert f'{"  " * 65}' not in text


def test_a_save_nested_past_the_limit_is_refused(tmp_path):
    stem, doc = _saved_if(tmp_path)
    graph = wp.capture_load(stem, device="cpu")
    branch, add = graph.recording.ops[1], graph.recording.ops[2]
    depth = schema.MAX_CPU_NESTING + 1
    ops = (graph.recording.ops[0], *([dataclasses.replace(branch, target=depth + 2)] * depth), add)
    graph.recording = dataclasses.replace(graph.recording, ops=ops)
    with pytest.raises(UnsupportedOperationError, match=f"nest {depth} deep; a reader takes at most"):
        apic.capture_save_to_bytes(graph)
