"""A launch cannot run past what it was recorded with.

* the launch bounds must be exactly what Warp builds for the op's ``dim`` (the kernel runs as many
  threads as the bounds say);
* every argument blob is exactly the size of the kernel's argument struct recorded at capture
  (``kernels[i].args_size``, Warp's packed ctypes struct), and all launches of a kernel agree;
* files written before ``args_size`` existed still load (their launches are checked against each other).
"""

from __future__ import annotations

import copy
import struct

import pytest
import warp as wp

import apic
import persist_kernels as pk
from wrp_helpers import body_of, read_doc
from apic.format import schema, writer

pytestmark = [pytest.mark.warp_version, pytest.mark.interpreter]


@pytest.fixture(scope="module")
def doc(tmp_path_factory) -> dict:
    folder = tmp_path_factory.mktemp("launch")
    sim = pk.Sim(0)
    wp.capture_save(pk.capture(sim), str(folder / "sim"), inputs=sim.inputs(), outputs=sim.outputs())
    return body_of(folder / "sim.wrp")


def launches(doc):
    return [i for i, op in enumerate(doc["ops"]) if op["kind"] == schema.WireOp.LAUNCH]


def read(doc):
    return read_doc(doc)


def test_kernel_entries_record_the_argument_struct_size(doc):
    for i in launches(doc):
        op = doc["ops"][i]
        kernel = doc["kernels"][op["kernel"]]
        assert kernel["args_size"] == len(op["args"]["data"])
        if op.get("adj_args") is not None:
            assert kernel["adj_args_size"] == len(op["adj_args"]["data"])
    read(doc)


def test_a_larger_dim_than_the_bounds_is_refused(doc):
    edited = copy.deepcopy(doc)
    op = edited["ops"][launches(doc)[0]]
    op["dim"] = [d * 1000 for d in op["dim"]]
    with pytest.raises(apic.FormatError, match=r"ops\[\d+\]\.bounds"):
        read(edited)


def test_bounds_that_run_more_threads_are_refused(doc):
    edited = copy.deepcopy(doc)
    op = edited["ops"][launches(doc)[0]]
    data = bytearray(op["bounds"]["data"])
    at = 24 if len(data) == 32 and op["kernel"] is not None and _legacy(data, op["dim"]) else len(data) - 16
    struct.pack_into("<Q", data, at, struct.unpack_from("<Q", data, at)[0] * 1000)  # the thread count
    op["bounds"]["data"] = bytes(data)
    with pytest.raises(apic.FormatError, match=r"ops\[\d+\]\.bounds"):
        read(edited)


def _legacy(data, dim) -> bool:
    shape = struct.unpack_from("<4i", data, 0)
    return struct.unpack_from("<i", data, 16)[0] == len(dim) and list(shape[: len(dim)]) == list(dim)


def test_a_truncated_argument_struct_is_refused(doc):
    edited = copy.deepcopy(doc)
    op = edited["ops"][launches(doc)[0]]
    op["args"]["data"] = op["args"]["data"][:-8]  # the kernel would read 8 bytes past its blob
    with pytest.raises(apic.FormatError, match=r"args_size"):
        read(edited)


def test_a_grown_argument_struct_is_refused(doc):
    edited = copy.deepcopy(doc)
    op = edited["ops"][launches(doc)[0]]
    op["args"]["data"] = op["args"]["data"] + bytes(8)
    with pytest.raises(apic.FormatError, match=r"args_size"):
        read(edited)


def test_old_files_without_sizes_still_load_but_launches_must_agree(doc):
    old = copy.deepcopy(doc)
    for kernel in old["kernels"]:
        kernel.pop("args_size", None)
        kernel.pop("adj_args_size", None)
    read(old)  # written by the previous release: no sizes, still read
    twin = copy.deepcopy(old["ops"][launches(old)[0]])  # a second launch of the same kernel...
    twin["args"]["data"] = twin["args"]["data"] + bytes(8)  # ...with a larger argument struct
    old["ops"].append(twin)
    old["sequence"] += struct.pack("<I", len(old["ops"]) - 1)
    with pytest.raises(apic.FormatError, match="laid out differently"):
        read(old)


@wp.kernel
def grid_sum(a: wp.array2d(dtype=float), out: wp.array2d(dtype=float)):
    i, j = wp.tid()
    out[i, j] = a[i, j] * 2.0 + float(i)


_CHILD = """
import sys
import numpy as np
import warp as wp
wp.config.quiet = True
import apic
graph = wp.capture_load(sys.argv[1])
wp.capture_launch(graph)
out = wp.zeros((4, 1), dtype=float, device="cpu")
graph.get_param("out", out)
print("result", out.numpy().ravel().tolist())
"""


@pytest.mark.skipif(apic._compat.BOUNDS_BY_VALUE, reason="warp <= 1.12 has one launch bounds layout for every rank")
def test_bounds_of_another_rank_cannot_divide_by_zero(tmp_path):
    """A 2-d kernel handed 1-d bounds reads their padding as shape[1]: apic makes it 1, not 0 (SIGFPE)."""
    import subprocess
    import sys

    import numpy as np

    a = wp.array(np.arange(4, dtype=np.float32).reshape(4, 1), dtype=float, device="cpu")
    out = wp.zeros((4, 1), dtype=float, device="cpu")
    with wp.ScopedCapture(device="cpu", apic=True) as capture:
        wp.launch(grid_sum, dim=(4, 1), inputs=[a, out], device="cpu")
    path = tmp_path / "g"
    wp.capture_save(capture.graph, str(path), inputs={"a": a}, outputs={"out": out})
    doc = body_of(path.with_suffix(".wrp"))
    op = doc["ops"][launches(doc)[0]]
    assert len(op["bounds"]["data"]) == 24
    op["bounds"]["data"] = struct.pack("<IIQQ", 4, 0, 4, 1)  # launch_bounds_1d_t for dim (4, 1)
    read_doc(doc)  # what Warp builds for a 1-d kernel launched over (4, 1): accepted
    path.with_suffix(".wrp").write_bytes(writer.encode(doc))
    child = subprocess.run([sys.executable, "-c", _CHILD, str(path)], capture_output=True, text=True, timeout=120)
    assert child.returncode == 0, child.stderr[-2000:]
    assert "result [0.0, 3.0, 6.0, 9.0]" in child.stdout  # coordinates stay inside dim: (i, 0)
