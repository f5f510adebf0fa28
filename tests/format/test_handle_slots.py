"""``handle_slots`` read at once and one by one (``apic.format.handles.read_slots``).

A file's slots are checked with NumPy when every entry is valid (a million mesh ids load several times
faster) and entry by entry otherwise, so that the error names the first bad entry. Each attack
below spoils only the last entry of a valid list: the fast check must refuse the list and the error must
name that entry, as the one-by-one reader always did. The valid file reads to the same slots either way
and replays as eager Warp does.
"""

from __future__ import annotations

import copy

import pytest
import warp as wp

import apic
from apic.format import handles
from test_format_limits import _saved_mesh_ids
from wrp_helpers import body_of, read_doc

pytestmark = [pytest.mark.warp_version, pytest.mark.interpreter]

COUNT = 6  # mesh ids in the array the kernel reads: six slots, in one region


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    path, graph, eager, live = _saved_mesh_ids(tmp_path_factory.mktemp("slots"), COUNT)
    return path, body_of(path), eager, live


def test_the_valid_slots_read_alike_at_once_and_one_by_one(saved):
    path, doc, eager, _ = saved
    assert len(doc["handle_slots"]) == COUNT
    at_once = read_doc(doc).handle_slots
    one_by_one = copy.deepcopy(doc)
    one_by_one["handle_slots"][0] = _ListKind(one_by_one["handle_slots"][0])  # not a plain list: the slow path
    assert read_doc(one_by_one).handle_slots == at_once
    assert [list(slot) for slot in at_once] == doc["handle_slots"]
    graph = wp.capture_load(path)
    wp.capture_launch(graph)
    assert graph.param_numpy("out").tobytes() == eager.tobytes()


class _ListKind(list):
    """A list that is not exactly ``list``: the reader accepts it, the NumPy check leaves it to the slow path."""


def _region_size(doc, region: int) -> int:
    return doc["regions"][region]["nbytes"]


ATTACKS = [  # (what, edit of the last entry [region, offset, handle], the error's words)
    ("a bool", lambda doc, e: e.__setitem__(2, True), r"handle_slots\[5\]\[2\]: expected an integer"),
    ("a float", lambda doc, e: e.__setitem__(1, 8.0), r"handle_slots\[5\]\[1\]: expected an integer"),
    ("two fields", lambda doc, e: e.pop(), r"handle_slots\[5\]: expected \[region, offset, handle\]"),
    ("a huge offset", lambda doc, e: e.__setitem__(1, 1 << 63), r"handle_slots\[5\]\[1\]: \d+ is outside"),
    ("no such region", lambda doc, e: e.__setitem__(0, len(doc["regions"])), r"handle_slots\[5\]\[0\]"),
    ("past the region", lambda doc, e: e.__setitem__(1, _region_size(doc, e[0]) - 4), r"handle_slots\[5\]: bytes"),
    ("a negative offset", lambda doc, e: e.__setitem__(1, -8), r"handle_slots\[5\]\[1\]: -8 is outside"),
    ("no such handle", lambda doc, e: e.__setitem__(2, len(doc["handles"])), r"handle_slots\[5\]\[2\]"),
    ("listed twice", lambda doc, e: e.__setitem__(1, doc["handle_slots"][0][1]), r"handle_slots\[5\]: listed twice"),
]


@pytest.mark.parametrize("what, edit, error", ATTACKS, ids=[a[0] for a in ATTACKS])
def test_a_bad_last_slot_is_named(saved, what, edit, error):
    _, doc, _, _ = saved
    bad = copy.deepcopy(doc)
    last = bad["handle_slots"][-1]
    assert last[0] == bad["handle_slots"][0][0], "the attacks assume one region holds every slot"
    edit(bad, last)
    with pytest.raises(apic.FormatError, match=error):
        read_doc(bad)


def test_slots_found_at_save_are_the_words_that_held_ids():
    ids = {111: 0, 222: 1}
    words = [7, 222, 111, 9, 222]
    contents = b"".join(w.to_bytes(8, "little") for w in words) + b"\x05\x06"  # a trailing partial word
    cleared, slots = handles.find_slots(contents, 3, ids)
    assert slots == [[3, 8, 1], [3, 16, 0], [3, 32, 1]]
    expected = b"".join(w.to_bytes(8, "little") for w in [7, 0, 0, 9, 0]) + b"\x05\x06"
    assert cleared == expected
    assert handles.find_slots(contents, 3, {5: 0}) == (contents, [])
