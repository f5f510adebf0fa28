"""Exception classes as upstream Warp 1.19's own APIC tests expect them (warp/tests/test_apic*.py).

Code written for upstream catches ``NotImplementedError`` for an operation a CPU capture cannot
record and ``RuntimeError`` for a failed load (a missing file: "Failed to load APIC graph from
<path>.wrp"); apic's own classes are subclasses of those, so both ``except`` forms work.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import warp as wp
import warp.sparse as wps

import apic
from apic.replay import loader

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@wp.kernel
def scale(a: wp.array(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = a[i] * 2.0


def test_missing_file_in_a_fresh_process_before_init(tmp_path):
    """Upstream's test_capture_load_initializes_warp, word for word, plus apic's own classes."""
    script = textwrap.dedent(
        """
        import warp as wp
        import apic

        try:
            wp.capture_load("missing_graph", device="cpu")
        except RuntimeError as e:
            print("RuntimeError:", e)
            print("classes:", isinstance(e, apic.GraphLoadError), isinstance(e, FileNotFoundError),
                  isinstance(e, apic.ApicError))
        """
    )
    env = dict(os.environ, PYTHONPATH=REPO)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path, env=env,
                            check=False, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "RuntimeError: Failed to load APIC graph from missing_graph.wrp" in result.stdout
    assert "classes: True True True" in result.stdout


def test_missing_file_keeps_the_path_and_errno(tmp_path):
    with pytest.raises(apic.GraphLoadError) as raised:
        wp.capture_load(str(tmp_path / "absent"))
    assert raised.value.filename == str(tmp_path / "absent.wrp")
    assert raised.value.errno == 2
    assert str(raised.value).startswith(f"Failed to load APIC graph from {tmp_path / 'absent.wrp'}")


def test_unreadable_path_is_a_runtime_error(tmp_path):
    (tmp_path / "folder.wrp").mkdir()  # a folder where the file should be: IsADirectoryError
    with pytest.raises(RuntimeError, match="Failed to load APIC graph from") as raised:
        wp.capture_load(str(tmp_path / "folder"))
    assert isinstance(raised.value, OSError) and not isinstance(raised.value, FileNotFoundError)


def _refusals():
    """Operations a CPU capture refuses, each with words its message must contain."""
    values = wp.array(np.arange(8, dtype=np.float32), device="cpu")
    rows = wp.array(np.array([1, 0, 1], dtype=np.int32), device="cpu")
    cols = wp.array(np.array([2, 1, 2], dtype=np.int32), device="cpu")
    vals = wp.array(np.array([1.0, 2.0, 3.0], dtype=np.float32), device="cpu")
    matrix = wps.bsr_zeros(2, 3, block_type=wp.float32, device="cpu")
    points = wp.array(np.eye(3, dtype=np.float32), dtype=wp.vec3, device="cpu")
    tris = wp.array(np.array([0, 1, 2], dtype=np.int32), device="cpu")

    def nnz_after_topology():
        wps.bsr_set_from_triplets(matrix, rows, cols, vals)
        matrix.nnz_sync()

    return [
        ("array_sum", lambda: wp.utils.array_sum(values)),
        ("array_inner", lambda: wp.utils.array_inner(values, values)),
        ("nnz_sync", nnz_after_topology),
        ("Mesh", lambda: wp.Mesh(points=points, indices=tris)),
    ]


@pytest.mark.parametrize("index", range(4))
def test_unrecordable_operations_raise_not_implemented_error(index):
    words, operation = _refusals()[index]
    out = wp.zeros(1, dtype=float, device="cpu")
    with pytest.raises(NotImplementedError, match=words) as raised:
        with wp.ScopedCapture(device="cpu", apic=True):
            out.zero_()
            operation()
    assert isinstance(raised.value, apic.UnsupportedOperationError)
    assert words in raised.value.operation  # the operation is named, not just the message


def test_nested_capture_is_a_runtime_error():
    with wp.ScopedCapture(device="cpu"):
        with pytest.raises(RuntimeError) as raised:
            wp.capture_begin(device="cpu")
    assert isinstance(raised.value, apic.CaptureError)


def _saved(tmp_path):
    a = wp.array(np.arange(4, dtype=np.float32), device="cpu")
    out = wp.zeros(4, dtype=float, device="cpu")
    wp.launch(scale, dim=4, inputs=[a, out], device="cpu")
    with wp.ScopedCapture(device="cpu", apic=True) as capture:
        wp.launch(scale, dim=4, inputs=[a, out], device="cpu")
    path = str(tmp_path / "g")
    wp.capture_save(capture.graph, path, inputs={"a": a}, outputs={"out": out})
    folder = path + "_modules"
    modules = {name: (tmp_path / "g_modules" / name).read_bytes() for name in os.listdir(folder)}
    return path, (tmp_path / "g.wrp").read_bytes(), modules


def test_failed_loads_are_runtime_errors(tmp_path):
    path, data, modules = _saved(tmp_path)
    name = next(n for n in modules if n.endswith(".o"))  # the module binary, not its kernel manifest
    # a module that does not match its checksum (upstream: "SHA-256 check"), naming the file
    with pytest.raises(RuntimeError, match=f"{name}.*SHA-256") as raised:
        wp.capture_load_from_bytes(data, {name: b"intentionally invalid module"})
    assert isinstance(raised.value, apic.FormatError)
    # a module that was not provided, naming the file (upstream: "module <file> was not provided")
    with pytest.raises(RuntimeError, match=name):
        wp.capture_load_from_bytes(data, {})
    # a corrupt file
    with pytest.raises(RuntimeError, match="corrupt|truncated"):
        wp.capture_load_from_bytes(data[:-3], modules)
    # more memory than a loaded graph may use
    saved_limit = loader.max_graph_bytes
    loader.max_graph_bytes = 8
    try:
        with pytest.raises(RuntimeError, match="bytes") as raised:
            wp.capture_load(path)
        assert isinstance(raised.value, (apic.GraphMemoryError, MemoryError))
    finally:
        loader.max_graph_bytes = saved_limit


def test_binding_errors_are_runtime_errors(tmp_path):
    path, _, _ = _saved(tmp_path)
    graph = wp.capture_load(path)
    with pytest.raises(RuntimeError, match="nope"):
        graph.set_param("nope", wp.zeros(4, dtype=float, device="cpu"))
    with pytest.raises(RuntimeError):
        graph.set_param("a", wp.zeros(5, dtype=float, device="cpu"))
    assert graph.get_param_ptr("nonexistent") is None


def test_param_methods_of_a_live_graph_are_runtime_errors():
    a = wp.zeros(4, dtype=float, device="cpu")
    with wp.ScopedCapture(device="cpu") as capture:
        a.fill_(1.0)
    with pytest.raises(RuntimeError, match="loaded APIC"):
        capture.graph.get_param_ptr("a")
