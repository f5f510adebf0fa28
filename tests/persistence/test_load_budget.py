"""One memory budget covers everything a load allocates: regions, native handle memory (hash grid cells,
reserved points, BVH nodes, Volume buffers) and the replay program. A small hand-edited file (valid
checksum) that asks for gigabytes is refused before anything is allocated, naming the budget and how to
raise it."""

from __future__ import annotations

import struct

import pytest
import warp as wp

import apic
from apic import loading
from apic.format import writer
from apic.record import ops as rec
from test_handles import _modules, _saved_doc

pytestmark = [pytest.mark.warp_version]


def load(doc, folder):
    return wp.capture_load_from_bytes(writer.encode(doc), _modules(folder))


def test_default_budget_is_a_gigabyte():
    assert loading.max_graph_bytes == loading.DEFAULT_MAX_GRAPH_BYTES == 1 << 30


def test_unedited_grid_graph_loads(tmp_path):
    doc = _saved_doc(tmp_path, "hash_grid")
    assert load(doc, tmp_path / "hash_grid_modules").is_loaded


def test_hash_grid_cells_count_against_the_budget(tmp_path):
    doc = _saved_doc(tmp_path, "hash_grid")
    doc["handles"][0]["options"].update(dim_x=512, dim_y=512, dim_z=512)  # 2**27 cells: 1 GiB of cell tables
    data = writer.encode(doc)
    assert len(data) < 64 << 10
    with pytest.raises(apic.GraphMemoryError, match=r"native handles.*apic\.loading\.max_graph_bytes"):
        wp.capture_load_from_bytes(data, _modules(tmp_path / "hash_grid_modules"))


def test_a_reserve_at_replay_counts_against_the_budget(tmp_path):
    doc = _saved_doc(tmp_path, "hash_grid")
    doc["ops"].append({"kind": int(rec.OpKind.HANDLE_CALL), "fn": "hash_grid_reserve_host", "handle": 0,
                       "ints": [1, (1 << 31) - 1, 0], "radius": None, "points": None, "groups": None})
    doc["sequence"] += struct.pack("<I", len(doc["ops"]) - 1)
    with pytest.raises(apic.GraphMemoryError, match="native handles"):
        load(doc, tmp_path / "hash_grid_modules")


def test_owned_memory_counts_against_the_budget(tmp_path):
    doc = _saved_doc(tmp_path, "hash_grid")
    doc["regions"].append({"nbytes": 2 << 30, "owned": True, "contents": None})
    with pytest.raises(apic.GraphMemoryError, match=r"memory regions.*set apic\.loading\.max_graph_bytes"):
        load(doc, tmp_path / "hash_grid_modules")


def test_the_replay_program_counts_against_the_budget(tmp_path, monkeypatch):
    """A sequence is 4 bytes per op in the file but a 96-byte table row each at replay."""
    doc = _saved_doc(tmp_path, "hash_grid")
    first = struct.unpack_from("<I", doc["sequence"])[0]
    doc["sequence"] = struct.pack("<I", first) * 400_000  # a 1.6 MB sequence: about 40 MB of table
    monkeypatch.setattr(loading, "max_graph_bytes", 32 << 20)
    with pytest.raises(apic.GraphMemoryError, match="replay program"):
        load(doc, tmp_path / "hash_grid_modules")


def test_raising_the_budget_lets_the_same_graph_load(tmp_path, monkeypatch):
    doc = _saved_doc(tmp_path, "hash_grid")
    doc["handles"][0]["options"].update(dim_x=64, dim_y=64, dim_z=64)  # 2 MiB of cells
    monkeypatch.setattr(loading, "max_graph_bytes", 1 << 20)
    with pytest.raises(apic.GraphMemoryError):
        load(doc, tmp_path / "hash_grid_modules")
    monkeypatch.setattr(loading, "max_graph_bytes", 64 << 20)
    assert load(doc, tmp_path / "hash_grid_modules").is_loaded
