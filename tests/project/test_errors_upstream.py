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
from apic import loading
from persist_helpers import REPO

pytestmark = [pytest.mark.warp_version, pytest.mark.interpreter]



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
    saved_limit = loading.max_graph_bytes
    loading.max_graph_bytes = 8
    try:
        with pytest.raises(RuntimeError, match="bytes") as raised:
            wp.capture_load(path)
        assert isinstance(raised.value, (apic.GraphMemoryError, MemoryError))
    finally:
        loading.max_graph_bytes = saved_limit


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


# --- upstream's wording, as its own tests match it (warp/tests/test_apic.py, test_apic_mesh.py) ----------
def test_array_sum_without_out_names_the_explicit_out_array():
    """Upstream's test_array_reduction_capture_errors: ``array_sum\\(\\).*explicit out``, and apic's reason."""
    values = wp.array(np.array([1.0, 2.0, 3.0], dtype=np.float32), device="cpu")
    out = wp.zeros(1, dtype=float, device="cpu")
    for call, name in ((lambda: wp.utils.array_sum(values), "array_sum"),
                       (lambda: wp.utils.array_inner(values, values), "array_inner")):
        with pytest.raises(NotImplementedError, match=rf"{name}\(\).*explicit out") as raised:
            with wp.ScopedCapture(device="cpu", apic=True):
                out.zero_()
                call()
        assert "host return value would be read before the captured work has run" in str(raised.value)
    assert wp.utils.array_sum(values) == 6.0  # outside a capture it returns the sum, as eager Warp does


def test_array_sum_of_a_reversed_view_names_the_negative_strides():
    """Upstream's test_array_reduction_capture_errors: ``array_sum\\(\\).*negative strides``."""
    values = wp.array(np.array([1.0, 2.0, 3.0], dtype=np.float32), device="cpu")
    reversed_values = wp.array(ptr=values.ptr + 2 * values.strides[0], dtype=values.dtype, shape=values.shape,
                               strides=(-values.strides[0],), capacity=values.capacity, device="cpu")
    reversed_values._ref = values
    out = wp.zeros(1, dtype=float, device="cpu")
    with pytest.raises(NotImplementedError, match=r"array_sum\(\).*negative strides"):
        with wp.ScopedCapture(device="cpu", apic=True):
            wp.utils.array_sum(reversed_values, out=out, axis=0)
    with pytest.raises(NotImplementedError, match=r"array_inner\(\).*negative strides"):
        with wp.ScopedCapture(device="cpu", apic=True):
            wp.utils.array_inner(reversed_values, reversed_values, out=out, axis=0)


def test_array_sum_with_a_negative_count_is_a_runtime_error():
    """Upstream's test_array_reduction_capture_errors: ``array_sum\\(\\).*negative count``, a RuntimeError."""
    values = wp.array(np.array([1.0, 2.0, 3.0], dtype=np.float32), device="cpu")
    out = wp.zeros(1, dtype=float, device="cpu")
    with pytest.raises(RuntimeError, match=r"array_sum\(\).*negative count") as raised:
        with wp.ScopedCapture(device="cpu", apic=True):
            wp.utils.array_sum(values, out=out, value_count=-1)
    assert isinstance(raised.value, apic.CaptureError)
    with pytest.raises(RuntimeError, match=r"array_inner\(\).*negative count"):
        with wp.ScopedCapture(device="cpu", apic=True):
            wp.utils.array_inner(values, values, out=out, count=-1)


def test_nnz_sync_after_a_recorded_topology_update():
    """Upstream's test_bsr_nnz_sync_after_recorded_topology_rejected: ``topology update``, and apic's reason."""
    rows = wp.array(np.array([1, 0, 1], dtype=np.int32), dtype=wp.int32, device="cpu")
    columns = wp.array(np.array([2, 1, 2], dtype=np.int32), dtype=wp.int32, device="cpu")
    values = wp.array(np.array([1.0, 2.0, 3.0], dtype=np.float32), dtype=wp.float32, device="cpu")
    matrix = wps.bsr_zeros(2, 3, block_type=wp.float32, device="cpu")
    with pytest.raises(NotImplementedError, match="topology update") as raised:
        with wp.ScopedCapture(device="cpu", apic=True):
            wps.bsr_set_from_triplets(matrix, rows, columns, values)
            matrix.nnz_sync()
    assert "runs only at replay" in str(raised.value) and "after wp.capture_launch()" in str(raised.value)
    assert not matrix.offsets.numpy().any()  # nothing ran: the capture only recorded the update


def test_status_sync_during_a_capture():
    """Upstream's test_bsr_status_sync_during_cpu_apic_capture_rejected: ``CPU APIC graph capture``."""
    if not hasattr(wps.BsrMatrix, "status_sync"):
        pytest.skip("this warp-lang's BsrMatrix has no status_sync() (sparse status arrived in 1.13)")
    matrix = wps.bsr_zeros(2, 3, wp.float32, device="cpu", row_capacity=2)
    assert matrix.status_sync() == wps.BSR_STATUS_SUCCESS
    with pytest.raises(NotImplementedError, match="CPU APIC graph capture") as raised:
        with wp.ScopedCapture(device="cpu", apic=True):
            matrix.status_sync()
    assert "sets it only at replay" in str(raised.value)


def _unit_cube_mesh():
    points = np.array([[-0.5, -0.5, -0.5], [0.5, -0.5, -0.5], [0.5, 0.5, -0.5], [-0.5, 0.5, -0.5],
                       [-0.5, -0.5, 0.5], [0.5, -0.5, 0.5], [0.5, 0.5, 0.5], [-0.5, 0.5, 0.5]], dtype=np.float32)
    indices = np.array([0, 1, 2, 0, 2, 3, 4, 6, 5, 4, 7, 6, 0, 3, 7, 0, 7, 4,
                        1, 5, 6, 1, 6, 2, 0, 4, 5, 0, 5, 1, 3, 2, 6, 3, 6, 7], dtype=np.int32)
    return wp.Mesh(points=wp.array(points, dtype=wp.vec3, device="cpu"),
                   indices=wp.array(indices, dtype=wp.int32, device="cpu"))


def test_save_of_an_invalid_or_expired_mesh_id(tmp_path):
    """Upstream's test_save_rejects_invalid_mesh_handles: ``invalid or expired mesh ID``, before any launch."""
    if not hasattr(wp, "handle"):
        pytest.skip("this warp-lang has no wp.handle type (arrived in 1.13): a uint64 id is a plain integer")
    import gc

    from handle_kernels import MeshHandleOutput, overwrite_mesh_handle_struct

    mesh = _unit_cube_mesh()
    stale_id = mesh.id
    del mesh
    gc.collect()
    handles = wp.zeros(1, dtype=MeshHandleOutput, device="cpu")
    distances = wp.zeros(1, dtype=float, device="cpu")
    for name, candidate in (("unknown", 1), ("deleted", stale_id)):
        with wp.ScopedCapture(device="cpu", apic=True) as capture:
            wp.launch(overwrite_mesh_handle_struct, dim=1, inputs=[candidate, handles, distances], device="cpu")
        with pytest.raises(RuntimeError, match="invalid or expired mesh ID") as raised:
            wp.capture_save(capture.graph, str(tmp_path / name))
        assert f"{candidate:#x}" in str(raised.value) and "overwrite_mesh_handle_struct" in str(raised.value)
        assert "no live wp.Mesh" in str(raised.value)
        assert not (tmp_path / f"{name}.wrp").exists()
