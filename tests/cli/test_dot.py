"""``wp.capture_debug_dot_print`` and ``python -m apic inspect --dot/--png``: a picture of an apic graph."""

from __future__ import annotations

import dataclasses
import gc
import re
import shutil
import subprocess
import sys

import pytest
import warp as wp

import fork_server
from apic import dot
from apic._compat import wp_context
from apic.demo import Chain
from viz_graphs import flow_program, flow_state

pytestmark = [pytest.mark.warp_version]

NODE_OR_EDGE = re.compile(r'^\s*(op\d+|legend)( -> op\d+)? \[')


@pytest.fixture(autouse=True)
def _collect_meshes():
    """Free this test's meshes now, not in a later test's capture (Warp's Mesh.__del__ is a native call)."""
    yield
    gc.collect()



def _flow_graph():
    state = flow_state()
    with wp.ScopedCapture(device="cpu", apic=True) as capture:
        flow_program(state)
    return capture.graph, state


def test_dot_of_control_flow_and_handles(tmp_path):
    graph, _ = _flow_graph()
    path = tmp_path / "flow.dot"
    wp.capture_debug_dot_print(graph, str(path))
    text = path.read_text()
    assert 'label="while int32 at' in text and 'label="else"' in text and 'label="x 3"' in text
    assert 'op11 -> op12' in text and 'op12 -> op13 [label="Mesh 0"]' in text  # lift, refit, query
    assert 'op3 -> op0 [style=dashed' in text  # the loop's way back
    assert "read+write" not in text and "reading and writing every array" in text
    # a body's branch and closing jump are drawn inside its cluster; its ops keep their order (invisible edges)
    for line in text.splitlines():
        if re.match(r"\s*op(0|3|4|6) \[", line):
            assert line.startswith("    op"), line  # nested one level: inside the while / if cluster
    assert "op0 -> op1 [style=invis]" in text and "op1 -> op2 [style=invis]" in text


def test_dot_demo_folds_the_substeps():
    chain = Chain(16, 4)
    with wp.ScopedCapture(device="cpu") as capture:
        chain.step()
    text = dot.graph_to_dot(capture.graph)
    assert text.count('label="x 4"') == 1
    assert text.count("launch spring_forces") == 1
    assert re.search(r'op1 -> op2 \[label="r\d+ vec3f\[16\]"\]', text)  # forces zeroed, then the springs


def test_hostile_names_cannot_inject_dot():
    graph, _ = _flow_graph()
    evil = 'k"]; injected -> op0 [label="x\\'
    kernels = tuple(dataclasses.replace(k, key=evil + "\n}") for k in graph.recording.kernels)
    recording = dataclasses.replace(graph.recording, kernels=kernels)
    text = dot.to_dot(recording, title='t"; evil=1; "')
    for line in text.splitlines()[4:-1]:
        assert NODE_OR_EDGE.match(line) or line.strip().startswith(("subgraph cluster_", "}")), line
    assert "injected" in text and "\ninjected" not in text.replace("  ", "")
    if shutil.which("dot"):
        result = subprocess.run(["dot", "-Tcanon"], input=text, capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, result.stderr
        assert not re.search(r"^\s*injected\b", result.stdout, re.M)  # no node or edge of that name
        assert not re.search(r"^\s*evil\b", result.stdout, re.M)


def test_escape():
    assert dot.escape('a"b\\c\nd\x01') == 'a\\"b\\\\c\\nd\\\\x01'


def _inspect_flow(tmp_path, *extra):
    graph, state = _flow_graph()
    wrp = str(tmp_path / "flow.wrp")
    wp.capture_save(graph, wrp, inputs={"x": state["x"], "flag": state["flag"]})
    dot_path = tmp_path / "flow.dot"
    result = fork_server.run([sys.executable, "-m", "apic", "inspect", wrp, "--dot", str(dot_path), *extra],
                             capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    assert "loads here: yes" in result.stdout
    text = dot_path.read_text()
    assert 'if int32 at flag+0 != 0' in text and '[label="x"]' in text  # bindings name their regions


def test_cli_inspect_dot(tmp_path):
    _inspect_flow(tmp_path)


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz is not installed (apt-get install graphviz)")
def test_cli_inspect_png(tmp_path):
    png_path = tmp_path / "flow.png"
    _inspect_flow(tmp_path, "--png", str(png_path))
    assert png_path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_png_without_graphviz_says_how_to_get_it(monkeypatch, tmp_path):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(FileNotFoundError, match="apt-get install graphviz"):
        dot.render_png("digraph {}", str(tmp_path / "x.png"))


def test_other_graphs_go_to_warps_own(tmp_path):
    """A graph that is not apic's reaches upstream's function unchanged (CUDA graphs keep Warp's DOT)."""
    original = wp.capture_debug_dot_print.__wrapped__
    assert original.__module__ == wp_context.__name__ and original.__name__ == "capture_debug_dot_print"

    class NotApic:
        graph = None

    path = str(tmp_path / "x.dot")
    try:
        original(NotApic(), path)
    except Exception as error:  # whatever upstream raises without a CUDA graph, ours raises too
        expected = type(error)
    else:  # pragma: no cover - upstream accepted it
        expected = None
    if expected is None:
        wp.capture_debug_dot_print(NotApic(), path)
    else:
        with pytest.raises(expected):
            wp.capture_debug_dot_print(NotApic(), path)
