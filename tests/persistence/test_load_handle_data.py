"""No native builder sees data it can crash on.

Found by experiment (each case in its own process, 64 items, every constructor): warp-lang 1.19.0's cuBQL
builder segfaults on a Mesh whose points are all NaN and on a Bvh with lower > upper bounds; sah, median
and lbvh, every refit and HashGrid.build did not crash on NaN, infinite or swapped inputs; 1.12.1 has no
cuBQL and crashed on none. So a load checks what a handle is rebuilt from (finite points and bounds,
lower <= upper, whole in-range triangles) and refuses a cuBQL rebuild at replay, whose bounds kernels
may have written after the load. Each refusal is a FormatError naming the handle and the field.
"""

from __future__ import annotations

import numpy as np
import pytest
import warp as wp

import apic
from apic.format import writer
from apic.record import ops as rec
from wrp_helpers import read_doc
from test_handles import _modules, _saved_doc

pytestmark = [pytest.mark.warp_version]


def region_values(doc, tmp_path, case: str, name: str, dtype=np.float32):
    """The (writable copy of the) saved values of handle 0's array ``name``, and a setter."""
    saved = read_doc(doc)
    array = dict(saved.recording.handles[0].arrays)[name]
    region = doc["regions"][array.start.region]
    count = 3 * array.length if array.dtype.startswith("vec3") else array.length
    contents = bytearray(region["contents"])
    values = np.frombuffer(contents, dtype=dtype, count=count, offset=array.start.offset).reshape(-1, 3)
    values = values.copy()

    def store(new):
        contents[array.start.offset : array.start.offset + new.nbytes] = new.astype(dtype).tobytes()
        region["contents"] = bytes(contents)

    return values, store


def load(doc, folder):
    return wp.capture_load_from_bytes(writer.encode(doc), _modules(folder))


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_mesh_points_must_be_finite(tmp_path, bad):
    doc = _saved_doc(tmp_path, "mesh")
    points, store = region_values(doc, tmp_path, "mesh", "points")
    points[3, 1] = bad
    store(points)
    with pytest.raises(apic.FormatError, match=r"handles\[0\]\.arrays\.points.*finite"):
        load(doc, tmp_path / "mesh_modules")


def test_bvh_bounds_must_be_finite(tmp_path):
    doc = _saved_doc(tmp_path, "bvh")
    uppers, store = region_values(doc, tmp_path, "bvh", "uppers")
    uppers[:] = np.nan
    store(uppers)
    with pytest.raises(apic.FormatError, match=r"handles\[0\]\.arrays\.uppers.*finite"):
        load(doc, tmp_path / "bvh_modules")


@pytest.mark.parametrize("constructor", ["sah", "median", "lbvh", "cubql"])
def test_bvh_lower_bounds_must_not_exceed_upper_bounds(tmp_path, constructor):
    """With cubql on 1.19 this input segfaults eager Warp; apic refuses it before the build."""
    doc = _saved_doc(tmp_path, "bvh")
    doc["handles"][0]["options"]["constructor"] = constructor
    lowers, store_lowers = region_values(doc, tmp_path, "bvh", "lowers")
    uppers, store_uppers = region_values(doc, tmp_path, "bvh", "uppers")
    store_lowers(uppers)
    store_uppers(lowers)
    with pytest.raises(apic.FormatError, match=r"handles\[0\]\.arrays\.lowers.*must not exceed"):
        load(doc, tmp_path / "bvh_modules")


def test_mesh_indices_must_be_in_range(tmp_path):
    doc = _saved_doc(tmp_path, "mesh")
    saved = read_doc(doc)
    indices = dict(saved.recording.handles[0].arrays)["indices"]
    region = doc["regions"][indices.start.region]
    contents = bytearray(region["contents"])
    contents[indices.start.offset : indices.start.offset + 4] = (-1).to_bytes(4, "little", signed=True)
    region["contents"] = bytes(contents)
    with pytest.raises(apic.FormatError, match=r"handles\[0\]\.arrays\.indices"):
        load(doc, tmp_path / "mesh_modules")


def test_a_cubql_rebuild_at_replay_is_refused(tmp_path):
    doc = _saved_doc(tmp_path, "bvh")
    calls = [op for op in doc["ops"] if op["kind"] == int(rec.OpKind.HANDLE_CALL)]
    assert calls
    op = calls[0]
    op.update(fn="bvh_rebuild_host", ints=[3])
    with pytest.raises(apic.FormatError, match=r"ints\[0\].*cubql"):
        read_doc(doc)
    op.update(ints=[0])  # sah: accepted
    read_doc(doc)


def test_unedited_handles_load(tmp_path):
    for case in ("mesh", "bvh"):
        doc = _saved_doc(tmp_path, case)
        assert load(doc, tmp_path / f"{case}_modules").is_loaded


@pytest.mark.parametrize("kind, name, match", [("bvh", 0, "at least one item"), ("mesh", 1, "at least one triangle")])
def test_empty_bvh_and_mesh_are_refused(tmp_path, kind, name, match):
    """Found by the fuzzer (msgpack-number, 1.19.0): a Mesh whose indices array has length 0 loaded and
    crashed the query kernel; eager Warp builds an empty Mesh or Bvh too, then crashes querying a mesh
    or refitting a Bvh (both warp-lang versions)."""
    doc = _saved_doc(tmp_path, kind)
    doc["handles"][0]["arrays"][name][4] = 0  # lowers / indices: zero items
    if kind == "bvh":
        doc["handles"][0]["arrays"][1][4] = 0  # uppers too: one entry each per item
    with pytest.raises(apic.FormatError, match=match):
        load(doc, tmp_path / f"{kind}_modules")
