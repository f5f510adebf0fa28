"""Launches that differ only in a scalar are read, checked and lowered once per kind of launch
(``apic.format.read_ops.read_ops``, ``launch_template``): what a later launch changes beyond its scalar
bytes is still refused, and a loaded graph replays bit for bit as eager Warp.

Each edit below is made to a launch after the first of its kind (same kernel, arrays and bounds), the one
the reader takes in one step when it matches.
"""

from __future__ import annotations

import copy
import hashlib
import os
import struct

import msgpack
import numpy as np
import pytest
import warp as wp

import apic
from apic.format import reader, schema, writer
from apic.record import ops as rec
from wrp_helpers import read_doc, unpack_body

pytestmark = [pytest.mark.warp_version, pytest.mark.interpreter]


@wp.kernel
def scaled_add(src: wp.array(dtype=float), dst: wp.array(dtype=float), s: float):
    i = wp.tid()
    dst[i] = dst[i] * 0.5 + src[i] + s


LAUNCHES = 12


def _arrays():
    return [wp.array(np.arange(8, dtype=np.float32) + b, dtype=float, device="cpu") for b in range(2)]


def _warm(arrays) -> None:  # compiles the kernel outside the capture (the saved contents start after it)
    wp.launch(scaled_add, dim=8, inputs=[arrays[0], arrays[1], 0.0], device="cpu")


def _issue(arrays) -> None:
    for i in range(LAUNCHES):
        wp.launch(scaled_add, dim=8, inputs=[arrays[0], arrays[1], 0.25 * i], device="cpu")


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """(stem, decoded body) of a saved graph of LAUNCHES launches, each with its own scalar."""
    wp.config.quiet = True
    arrays = _arrays()
    _warm(arrays)
    with wp.ScopedCapture(device="cpu", apic=True) as capture:
        _issue(arrays)
    stem = str(tmp_path_factory.mktemp("alike") / "graph")
    apic.capture_save(capture.graph, stem, inputs={"src": arrays[0], "dst": arrays[1]})
    with open(stem + ".wrp", "rb") as f:
        body = unpack_body(f.read())
    return stem, body


def _read(body):
    return read_doc(body)


def _last(body) -> dict:
    launches = [op for op in body["ops"] if op["kind"] == schema.WireOp.LAUNCH]
    assert len(launches) == LAUNCHES  # each its own scalar: each a distinct op of the file
    return launches[-1]


def test_a_loaded_graph_of_distinct_scalars_replays_bit_for_bit_as_eager(saved):
    stem, _ = saved
    graph = apic.capture_load(stem, device="cpu")
    ops = graph.recording.ops
    assert len({id(op) for op in ops}) == LAUNCHES and len({op.args.data for op in ops}) == LAUNCHES
    assert len({id(op.args.relocs) for op in ops}) == 1  # one kind of launch: read once, its relocations shared
    wp.capture_launch(graph)
    eager = _arrays()
    _warm(eager)
    _issue(eager)
    out = wp.zeros(8, dtype=float, device="cpu")
    graph.get_param("dst", out)
    assert out.numpy().view(np.uint32).tolist() == eager[1].numpy().view(np.uint32).tolist()


@pytest.mark.parametrize("field, value", [
    ("kernel", True),  # equal to 1 in Python, not an integer: refused where the first launch's 0 is read
    ("kernel", 0.0),
    ("dim", [8.0]),
    ("dim", [True] * 1),
])
def test_a_later_launch_with_a_number_of_another_type_is_refused(saved, field, value):
    _, body = saved
    edited = copy.deepcopy(body)
    _last(edited)[field] = value
    with pytest.raises(apic.FormatError, match=rf"ops\[\d+\]\.{field}"):
        _read(edited)


def test_a_later_launch_with_a_bool_for_an_indexed_flag_of_another_type_is_refused(saved):
    _, body = saved
    edited = copy.deepcopy(body)
    arrays = _last(edited)["args"]["arrays"]
    arrays[0][2] = 0  # False in the first launch: equal, but not a boolean
    with pytest.raises(apic.FormatError, match=r"arrays\[0\]\[2\]"):
        _read(edited)


def test_a_later_launch_whose_descriptor_reaches_past_its_region_is_refused(saved):
    _, body = saved
    edited = copy.deepcopy(body)
    args = _last(edited)["args"]
    data = bytearray(args["data"])
    data[16:20] = (1 << 20).to_bytes(4, "little")  # shape[0] of the first array: a million floats
    args["data"] = bytes(data)
    with pytest.raises(apic.FormatError, match=r"reaches bytes"):
        _read(edited)


def test_a_later_launch_with_other_bounds_is_refused(saved):
    _, body = saved
    edited = copy.deepcopy(body)
    bounds = _last(edited)["bounds"]
    data = bytearray(bounds["data"])
    data[0] = 9  # shape[0] of 9 threads for a dim of 8
    bounds["data"] = bytes(data)
    with pytest.raises(apic.FormatError, match=r"ops\[\d+\]\.bounds"):
        _read(edited)


def test_a_later_launch_missing_a_field_names_it(saved):
    _, body = saved
    edited = copy.deepcopy(body)
    del _last(edited)["bounds"]
    with pytest.raises(apic.FormatError, match=r"missing field\(s\) bounds"):
        _read(edited)


def test_a_later_launch_with_a_shorter_argument_struct_is_refused(saved):
    _, body = saved
    edited = copy.deepcopy(body)
    args = _last(edited)["args"]
    args["data"] = args["data"][:-8]
    with pytest.raises(apic.FormatError, match=r"args_size|\d+ bytes"):
        _read(edited)


def test_split_verdicts_are_judged_when_first_asked_and_equal_to_judging_at_once(saved):
    stem, _ = saved
    graph = apic.capture_load(stem, device="cpu")
    program = graph.program
    assert callable(program.verdicts)  # a serial load judged nothing
    wp.capture_launch(graph)
    assert callable(program.verdicts)  # nor did a serial replay
    splits, refusals = program.splits, program.refusals
    assert not callable(program.verdicts)
    assert program.verdicts == (splits, refusals)
    assert splits or refusals  # the kernel writes its dst by thread id: each launch is judged
    assert sum(len(split.rows) for split in splits) + len(refusals) == LAUNCHES


def _load_edited(stem: str, body) -> None:
    """Load ``body`` with the modules saved beside ``stem`` (and their kernel manifests)."""
    folder = stem + "_modules"
    modules = {}
    for name in os.listdir(folder):
        with open(os.path.join(folder, name), "rb") as f:
            modules[name] = f.read()
    apic.capture_load_from_bytes(writer.encode(body), modules, device="cpu")


def _with_ndim(data: bytes, at: int, shape: tuple, strides: tuple) -> bytes:
    """``data`` with the array descriptor at byte ``at`` given another shape, strides and ndim."""
    edited = bytearray(data)
    struct.pack_into("<4i4i", edited, at + 16, *shape, *(0,) * (4 - len(shape)), *strides, *(0,) * (4 - len(strides)))
    struct.pack_into("<h", edited, at + 48, len(shape))
    return bytes(edited)


def test_a_later_launch_whose_array_has_another_ndim_than_the_manifest_is_refused(saved):
    """The arguments read alike one read in full share its kernel manifest check (``manifest_check.check``); a
    launch whose descriptor differs (here a 2-d view of the same bytes, inside its region, so the reader
    accepts it) is not alike, and its own check refuses it."""
    stem, body = saved
    _load_edited(stem, copy.deepcopy(body))  # as saved: loads
    edited = copy.deepcopy(body)
    args = _last(edited)["args"]
    at = args["arrays"][0][0]
    args["data"] = _with_ndim(args["data"], at, (8, 1), (4, 4))
    read_doc(edited)  # the reader alone accepts it
    with pytest.raises(apic.FormatError, match=r"has 2 dimensions; the kernel takes 1"):
        _load_edited(stem, edited)


def test_the_launches_read_alike_are_known_to_the_manifest_check(saved):
    """Every launch after the first is read alike the first (``SavedGraph.alike``), the only one read in full."""
    _, body = saved
    graph = _read(body)
    launches = [op for op in graph.recording.ops if isinstance(op, rec.Launch)]
    firsts = {id(first) for _, first in graph.alike.values()}
    assert len(graph.alike) == LAUNCHES - 1 and firsts == {id(launches[0])}
    assert all(graph.alike[id(op)][0] is op for op in launches[1:])


class _Pairs(list):
    """A map written as a list of pairs, so that a key can appear twice."""


def _pack(value, packer) -> bytes:
    if isinstance(value, _Pairs):
        return packer.pack_map_header(len(value)) + b"".join(_pack(k, packer) + _pack(v, packer) for k, v in value)
    if isinstance(value, dict):
        return _pack(_Pairs(value.items()), packer)
    if isinstance(value, list):
        return packer.pack_array_header(len(value)) + b"".join(_pack(item, packer) for item in value)
    return packer.pack(value)


def _encode_pairs(body) -> bytes:
    packed = _pack(body, msgpack.Packer(use_bin_type=True))
    return schema.HEADER.pack(schema.MAGIC, body["format_version"], 0, len(packed),
                              hashlib.sha256(packed).digest()) + packed


def test_a_later_launch_repeating_a_key_of_its_arguments_is_refused(saved):
    """A later launch's entry is read without unpacking only where its bytes are those of one read before
    but for its argument bytes; one whose arguments map repeats ``data`` (a reader keeping the first would
    see other arguments) is unpacked, and refused."""
    _, body = saved
    assert reader.read(_encode_pairs(copy.deepcopy(body))).recording.ops  # the pair encoder writes what the writer does
    edited = copy.deepcopy(body)
    args = _last(edited)["args"]
    _last(edited)["args"] = _Pairs([("data", bytes(len(args["data"]))), *args.items()])
    with pytest.raises(apic.FormatError, match="'data' more than once"):
        reader.read(_encode_pairs(edited))


def test_entries_read_from_their_bytes_are_those_read_unpacked(saved, monkeypatch):
    """``read_raw.read_raw_ops`` (a later launch whose bytes are a checked one's but for its argument bytes)
    reads the ops ``read_ops`` reads from the unpacked body."""
    _, body = saved
    data = writer.encode(body)
    raw = reader.read(data)
    monkeypatch.setattr(reader, "_split", lambda body, options: None)  # the whole body unpacked
    unpacked = reader.read(data)
    assert raw.recording.ops == unpacked.recording.ops and len(raw.alike) == len(unpacked.alike) == LAUNCHES - 1
    assert [op.args.params for op in raw.recording.ops] == [op.args.params for op in unpacked.recording.ops]
