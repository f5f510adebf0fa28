"""Every field of a .wrp body is checked before use: one reject case (and, at the limits, one accept
case) per check. Files are built by editing a real saved graph's msgpack body and re-encoding it
with a valid header, so only the validator stands between them and native code.
"""

from __future__ import annotations

import copy
import struct

import msgpack
import numpy as np
import pytest
import warp as wp
from hypothesis import given, settings
from hypothesis import strategies as st

import apic
import persist_kernels as pk
from wrp_helpers import read_doc
from apic.format import reader, schema

pytestmark = [pytest.mark.warp_version]


@pytest.fixture(scope="module")
def doc(tmp_path_factory) -> dict:
    folder = tmp_path_factory.mktemp("validation")
    sim = pk.Sim(0)
    wp.capture_save(pk.capture(sim), str(folder / "sim"), inputs=sim.inputs(), outputs=sim.outputs())
    body = (folder / "sim.wrp").read_bytes()[schema.HEADER.size :]
    return msgpack.unpackb(body, raw=False)


def op_index(doc: dict, kind: schema.WireOp, backward: bool | None = None) -> int:
    for i, op in enumerate(doc["ops"]):
        if op["kind"] == kind and (backward is None or (op.get("adj_args") is not None) == backward):
            return i
    raise LookupError(kind)


def owned_region(doc: dict) -> int:
    return next(i for i, r in enumerate(doc["regions"]) if r["owned"])


def saved_region(doc: dict) -> int:
    return next(i for i, r in enumerate(doc["regions"]) if not r["owned"])


def edit(doc: dict, path: tuple, value) -> dict:
    """A deep copy of ``doc`` with the item at ``path`` replaced (``value(old)`` if callable) or deleted."""
    doc = copy.deepcopy(doc)
    *parents, last = path
    target = doc
    for key in parents:
        target = target[key]
    if value is DELETE:
        del target[last]
    else:
        target[last] = value(target[last]) if callable(value) else value
    return doc


DELETE = object()


def read(doc: dict):
    return read_doc(doc)


def rejects(doc: dict, message: str):
    with pytest.raises(apic.FormatError, match=message):
        read(doc)


def test_unedited_document_reads(doc):
    saved = read(doc)
    assert len(saved.recording.ops) == len(doc["ops"])


# (description, path builder, new value, expected message)
CASES = [
    ("body not a map", lambda d: (), None, None),
    ("missing ops", lambda d: ("ops",), DELETE, "missing field"),
    ("format name", lambda d: ("format",), "other", "expected 'apic.wrp'"),
    ("format_version mismatch", lambda d: ("format_version",), 2, "does not match the header"),
    ("writer version type", lambda d: ("writer", "warp"), 5, "expected a string"),
    ("unknown abi", lambda d: ("abi",), "stdcall", "unknown kernel ABI"),
    ("region nbytes negative", lambda d: ("regions", 0, "nbytes"), -1, "outside"),
    ("region nbytes too big", lambda d: ("regions", owned_region(d), "nbytes"), schema.MAX_REGION_BYTES + 1, "outside"),
    ("region owned not bool", lambda d: ("regions", 0, "owned"), 1, "expected a boolean"),
    ("short contents", lambda d: ("regions", saved_region(d), "contents"), lambda c: c[:-1],
     "bytes saved for a region"),
    ("owned with contents", lambda d: ("regions", owned_region(d), "contents"), b"\0", "no saved contents"),
    ("contents missing", lambda d: ("regions", saved_region(d), "contents"), None, "expected binary data"),
    ("module path escape", lambda d: ("modules", 0, "file"), "../evil.o", "not a valid value"),
    ("module absolute path", lambda d: ("modules", 0, "file"), "/tmp/evil.o", "not a valid value"),
    ("module hidden file", lambda d: ("modules", 0, "file"), ".evil.o", "not a valid"),
    ("module not .o", lambda d: ("modules", 0, "file"), "evil.so", "not a valid value"),
    ("module bad sha", lambda d: ("modules", 0, "sha256"), "00", "not a valid value"),
    ("kernel module index", lambda d: ("kernels", 0, "module"), 1, "outside"),
    ("kernel symbol", lambda d: ("kernels", 0, "symbol"), "f(); evil", "not a valid value"),
    ("unknown op kind", lambda d: ("ops", 0, "kind"), 99, "unknown op kind 99"),
    ("op field missing", lambda d: ("ops", op_index(d, schema.WireOp.MEMCPY), "nbytes"), DELETE, "missing field"),
    ("launch kernel index", lambda d: ("ops", op_index(d, schema.WireOp.LAUNCH), "kernel"), 99, "outside"),
    ("launch dims", lambda d: ("ops", op_index(d, schema.WireOp.LAUNCH), "dim"), [1, 1, 1, 1, 1], "at most 4"),
    ("bounds size", lambda d: ("ops", op_index(d, schema.WireOp.LAUNCH), "bounds", "data"), b"\0" * 8,
     "launch bounds of 8 bytes"),
    ("bounds with pointer", lambda d: ("ops", op_index(d, schema.WireOp.LAUNCH), "bounds", "relocs"), [[0, 0, 0]],
     "cannot hold pointers"),
    ("reloc past blob end", lambda d: ("ops", op_index(d, schema.WireOp.LAUNCH), "args", "relocs", 0, 0), 10**6,
     "outside"),
    ("reloc straddles end", lambda d: ("ops", op_index(d, schema.WireOp.LAUNCH), "args", "relocs", 0, 0),
     lambda at: at, None),  # placeholder replaced in test (needs blob length)
    ("reloc region", lambda d: ("ops", op_index(d, schema.WireOp.LAUNCH), "args", "relocs", 0, 1), 999, "outside"),
    ("reloc offset", lambda d: ("ops", op_index(d, schema.WireOp.LAUNCH), "args", "relocs", 0, 2), 10**9,
     "outside region"),
    ("reloc shape", lambda d: ("ops", op_index(d, schema.WireOp.LAUNCH), "args", "relocs", 0), [0, 0],
     "expected \\[at, region, offset\\]"),
    ("adjoint args missing", lambda d: ("ops", op_index(d, schema.WireOp.LAUNCH, True), "adj_args"), None,
     "adjoint arguments"),
    ("adjoint args extra", lambda d: ("ops", op_index(d, schema.WireOp.LAUNCH, False), "adj_args"),
     {"data": b"\0" * 8, "relocs": []}, "adjoint arguments"),
    ("memcpy too long", lambda d: ("ops", op_index(d, schema.WireOp.MEMCPY), "nbytes"), 10**6, "outside region"),
    ("memcpy ref shape", lambda d: ("ops", op_index(d, schema.WireOp.MEMCPY), "dst"), [0],
     "expected \\[region, offset\\]"),
    ("memcpy negative", lambda d: ("ops", op_index(d, schema.WireOp.MEMCPY), "nbytes"), -8, "outside"),
    ("memset value", lambda d: ("ops", op_index(d, schema.WireOp.MEMSET), "value"), 256, "outside \\[0, 255\\]"),
    ("memset too long", lambda d: ("ops", op_index(d, schema.WireOp.MEMSET), "nbytes"), 10**6, "outside region"),
    ("memtile count", lambda d: ("ops", op_index(d, schema.WireOp.MEMTILE), "count"), 10**6, "outside region"),
    ("memtile empty value", lambda d: ("ops", op_index(d, schema.WireOp.MEMTILE), "value", "data"), b"",
     "empty value repeated"),
    ("copy array type", lambda d: ("ops", op_index(d, schema.WireOp.ARRAY_COPY), "dst_type"), 2, "outside"),
    ("copy descriptor size", lambda d: ("ops", op_index(d, schema.WireOp.ARRAY_COPY), "src", "data"), lambda b: b[:40],
     "has 56 bytes"),
    ("copy ndim", lambda d: ("ops", op_index(d, schema.WireOp.ARRAY_COPY), "src", "data"),
     lambda b: b[:48] + struct.pack("<i", 7) + b[52:], "ndim 7"),
    ("copy shape", lambda d: ("ops", op_index(d, schema.WireOp.ARRAY_COPY), "src", "data"),
     lambda b: b[:16] + struct.pack("<i", 10**6) + b[20:], "reaches bytes"),
    ("copy stride", lambda d: ("ops", op_index(d, schema.WireOp.ARRAY_COPY), "src", "data"),
     lambda b: b[:32] + struct.pack("<i", -4) + b[36:], "reaches bytes"),
    ("copy raw pointer", lambda d: ("ops", op_index(d, schema.WireOp.ARRAY_COPY), "src", "data"),
     lambda b: b[:8] + b"\x01" * 8 + b[16:], "raw pointer at byte 8"),
    ("copy no data pointer", lambda d: ("ops", op_index(d, schema.WireOp.ARRAY_COPY), "src", "relocs"), [],
     "without a data pointer"),
    ("copy reloc not a pointer field", lambda d: ("ops", op_index(d, schema.WireOp.ARRAY_COPY), "src", "relocs"),
     lambda r: r + [[16, 0, 0]], "not a pointer field"),
    ("copy shapes differ", lambda d: ("ops", op_index(d, schema.WireOp.ARRAY_COPY), "src", "data"),
     lambda b: b[:16] + struct.pack("<i", 7) + b[20:], "copy between arrays of shapes"),
    ("fill value empty", lambda d: ("ops", op_index(d, schema.WireOp.ARRAY_FILL), "value", "data"), b"",
     "fill value of 0 bytes"),
    ("fill type", lambda d: ("ops", op_index(d, schema.WireOp.ARRAY_FILL), "array_type"), 3, "outside"),
    ("fill indexed mismatch", lambda d: ("ops", op_index(d, schema.WireOp.ARRAY_FILL), "array_type"), 1,
     "has 104 bytes"),
    ("alloc too big", lambda d: ("ops", op_index(d, schema.WireOp.ALLOC), "nbytes"), 10**6, "outside region"),
    ("int as bool", lambda d: ("ops", op_index(d, schema.WireOp.MEMCPY), "nbytes"), True, "expected an integer"),
    ("binding region", lambda d: ("bindings", 0, "region"), 999, "outside"),
    ("binding offset", lambda d: ("bindings", 0, "offset"), 4, "reaches bytes"),
    ("binding nbytes", lambda d: ("bindings", 0, "nbytes"), 8, "is not the size of shape"),
    ("binding kind", lambda d: ("bindings", 0, "kind"), "inout", "is not one of"),
    ("binding duplicate name", lambda d: ("bindings", 1, "name"), lambda n: "x", "used twice"),
    ("binding object dtype", lambda d: ("bindings", 0, "np_dtype"), "O", "is not a NumPy dtype"),
    ("binding garbage dtype", lambda d: ("bindings", 0, "np_dtype"), "not-a-dtype", "is not a NumPy dtype"),
    ("binding shape/strides", lambda d: ("bindings", 0, "strides"), [12, 4], "differ in length"),
]


@pytest.mark.parametrize("name, path, value, message", CASES, ids=[c[0] for c in CASES])
def test_rejects(doc, name, path, value, message):
    if name == "body not a map":
        with pytest.raises(apic.FormatError, match="expected a map"):
            read_doc([1, 2, 3])  # type: ignore[arg-type]
        return
    if name == "reloc straddles end":
        i = op_index(doc, schema.WireOp.LAUNCH)
        length = len(doc["ops"][i]["args"]["data"])
        rejects(edit(doc, ("ops", i, "args", "relocs", 0, 0), length - 4), "outside")
        return
    rejects(edit(doc, path(doc), value), message)


def test_integer_map_keys_are_refused(doc):
    body = msgpack.packb({1: 2}, use_bin_type=True)
    import hashlib

    data = schema.HEADER.pack(schema.MAGIC, schema.FORMAT_VERSION, 0, len(body), hashlib.sha256(body).digest()) + body
    with pytest.raises(apic.FormatError, match="not valid msgpack"):
        reader.read(data)


# --- accept cases at the limits -------------------------------------------------------------------
def test_rejects_kernel_array_past_region_end(doc):
    i = op_index(doc, schema.WireOp.LAUNCH)
    region = doc["ops"][i]["args"]["relocs"][0][1]
    end = doc["regions"][region]["nbytes"]
    # the descriptor's shape says how far the kernel reads: from the very end, that is past it
    rejects(edit(doc, ("ops", i, "args", "relocs", 0, 2), end), "reaches bytes")
    rejects(edit(doc, ("ops", i, "args", "relocs", 0, 2), end + 1), "outside region")


def test_rejects_kernel_array_descriptor_grown(doc):
    i = op_index(doc, schema.WireOp.LAUNCH)
    at = doc["ops"][i]["args"]["arrays"][0][0]
    data = bytearray(doc["ops"][i]["args"]["data"])
    data[at + 16 : at + 20] = (1 << 30).to_bytes(4, "little")  # shape[0]
    rejects(edit(doc, ("ops", i, "args", "data"), bytes(data)), "reaches bytes")


def test_rejects_kernel_args_without_array_table(doc):
    i = op_index(doc, schema.WireOp.LAUNCH)
    without = edit(doc, ("ops", i, "args", "arrays"), [])
    rejects(without, "not a pointer field of a listed array")


def test_accepts_memcpy_to_region_end(doc):
    i = op_index(doc, schema.WireOp.MEMCPY)
    region, offset = doc["ops"][i]["dst"]
    room = min(doc["regions"][region]["nbytes"] - offset, doc["regions"][doc["ops"][i]["src"][0]]["nbytes"])
    read(edit(doc, ("ops", i, "nbytes"), room))
    rejects(edit(doc, ("ops", i, "nbytes"), room + 1), "outside region")


def test_rejects_reloc_outside_descriptors(doc):
    i = op_index(doc, schema.WireOp.LAUNCH)
    length = len(doc["ops"][i]["args"]["data"])
    relocs = doc["ops"][i]["args"]["relocs"]
    last = [[length - 8, relocs[0][1], relocs[0][2]]]
    rejects(edit(doc, ("ops", i, "args", "relocs"), relocs + last), "not a pointer field of a listed array")
    rejects(edit(doc, ("ops", i, "args", "relocs"), relocs + [[length - 7, relocs[0][1], 0]]), "outside")
    rejects(edit(doc, ("ops", i, "args", "relocs"), relocs + [[relocs[0][0] + 4, relocs[0][1], 0]]), "overlaps")


def test_unknown_keys_are_ignored(doc):
    """Readers ignore keys they do not know (a later version may add optional ones)."""
    read(edit(doc, ("future_field",), {"anything": [1, 2]}))
    read(edit(doc, ("ops", 0, "future_field"), 1))


def test_validation_errors_name_the_field(doc):
    i = op_index(doc, schema.WireOp.MEMCPY)
    with pytest.raises(apic.FormatError, match=rf"ops\[{i}\]\.nbytes"):
        read(edit(doc, ("ops", i, "nbytes"), "many"))


# --- random edits ---------------------------------------------------------------------------------
def _paths(value, prefix=()):
    yield prefix
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _paths(item, prefix + (key,))
    elif isinstance(value, list):
        for i, item in enumerate(value[:6]):
            yield from _paths(item, prefix + (i,))


_VALUES = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**63), 2**64 - 1), st.text(max_size=8), st.binary(max_size=64),
    st.lists(st.integers(-5, 1 << 40), max_size=5),
    st.dictionaries(st.text(max_size=4), st.integers(-(2**63), 2**63 - 1), max_size=2),
)


@settings(max_examples=300, deadline=None)
@given(draw=st.data())
def test_random_edits_are_refused_cleanly(doc, draw):
    """Any value anywhere either still validates or raises FormatError: never another exception."""
    paths = [p for p in _paths(doc) if p]
    path = draw.draw(st.sampled_from(paths))
    value = draw.draw(_VALUES)
    try:
        read(edit(doc, path, value))
    except apic.FormatError:
        pass


def test_rejects_a_launch_dim_of_2_to_the_64_threads_or_more(doc):
    """Found by the random edits: such a dim made the bounds check raise struct.error, not FormatError."""
    i = op_index(doc, schema.WireOp.LAUNCH)
    rejects(edit(doc, ("ops", i, "dim"), [(1 << 32) - 1] * 3), "dim")


def test_sequence_indexes_ops(doc):
    n = len(doc["ops"])
    read(edit(doc, ("sequence",), np.array([n - 1, 0], dtype="<u4").tobytes()))
    rejects(edit(doc, ("sequence",), np.array([n], dtype="<u4").tobytes()), "outside the")
    rejects(edit(doc, ("sequence",), b"\0\0\0"), "whole number")
    rejects(edit(doc, ("sequence",), DELETE), "missing field")



def test_rejects_overlapping_kernel_array_descriptors(doc):
    """Listed twice, or one inside another: refused (a descriptor that contained another once passed)."""
    i = next(i for i, op in enumerate(doc["ops"]) if op["kind"] == int(schema.WireOp.LAUNCH)
             and len(op["args"]["arrays"]) >= 2)
    arrays = doc["ops"][i]["args"]["arrays"]
    at = arrays[0][0]
    for moved in (at, at + 8):  # the second descriptor onto the first, or starting inside it
        changed = [arrays[0], [moved, *arrays[1][1:]], *arrays[2:]]
        rejects(edit(doc, ("ops", i, "args", "arrays"), changed), "overlaps another")


def test_a_descriptor_checked_once_does_not_vouch_for_a_changed_one(doc):
    """The reader checks each distinct descriptor once per file: a grown copy in a later op is still refused."""
    launches = [i for i, op in enumerate(doc["ops"]) if op["kind"] == int(schema.WireOp.LAUNCH)]
    first = launches[0]
    grown = copy.deepcopy(doc["ops"][first])
    at = grown["args"]["arrays"][0][0]
    data = bytearray(grown["args"]["data"])
    data[at + 16 : at + 20] = (1 << 30).to_bytes(4, "little")  # shape[0]
    grown["args"]["data"] = bytes(data)
    doc = edit(doc, ("ops",), doc["ops"] + [grown])
    rejects(doc, "reaches bytes")


def test_a_launch_sharing_a_checked_structure_keeps_its_own_bytes(doc):
    """Launches differing only in scalar bytes are checked once per structure; each reads as its own bytes."""
    first = op_index(doc, schema.WireOp.LAUNCH)
    claimed = set()
    for at, _, indexed in doc["ops"][first]["args"]["arrays"]:
        claimed.update(range(at, at + (schema.INDEXEDARRAY_T_SIZE if indexed else schema.ARRAY_T_SIZE)))
    scalar = next(b for b in range(len(doc["ops"][first]["args"]["data"])) if b not in claimed)
    changed = copy.deepcopy(doc["ops"][first])
    data = bytearray(changed["args"]["data"])
    data[scalar] ^= 0x5A
    changed["args"]["data"] = bytes(data)
    extended = edit(doc, ("ops",), doc["ops"] + [changed])
    extended["sequence"] = bytes(extended["sequence"]) + struct.pack("<I", len(extended["ops"]) - 1)
    ops = read(extended).recording.ops
    assert ops[-1].args.data == bytes(data)
    original = doc["ops"][first]["args"]["data"]
    assert any(op is not ops[-1] and getattr(op, "args", None) is not None and op.args.data == original for op in ops)


def test_launch_bounds_checked_once_do_not_vouch_for_another_dim(doc):
    """Bounds are checked once per (bytes, dim): the same bounds with another dim are still refused."""
    first = op_index(doc, schema.WireOp.LAUNCH)
    other = copy.deepcopy(doc["ops"][first])
    other["dim"] = [d + 1 for d in other["dim"]]
    rejects(edit(doc, ("ops",), doc["ops"] + [other]), "bounds")


def test_an_op_kind_checked_once_does_not_vouch_for_a_later_op(doc):
    """An op kind's checks run once per kind: a later op of a checked kind still needs its every field,
    an integer kind and an integer kernel index."""
    first = op_index(doc, schema.WireOp.LAUNCH)
    appended = lambda op: edit(doc, ("ops",), doc["ops"] + [op])  # noqa: E731
    later = len(doc["ops"])
    rejects(appended(edit(doc, ("ops", first, "dim"), DELETE)["ops"][first]),
            rf"ops\[{later}\]: missing field\(s\) dim")
    rejects(appended(edit(doc, ("ops", first, "kind"), True)["ops"][first]), rf"ops\[{later}\]\.kind")
    rejects(appended(edit(doc, ("ops", first, "kernel"), True)["ops"][first]), rf"ops\[{later}\]\.kernel")
    rejects(appended(edit(doc, ("ops", first, "kernel"), len(doc["kernels"]))["ops"][first]),
            rf"ops\[{later}\]\.kernel")


def test_launch_bounds_checked_once_do_not_vouch_for_relocated_ones(doc):
    """Bounds bytes checked for one launch do not pass another launch's same bytes with a relocation."""
    first = op_index(doc, schema.WireOp.LAUNCH)
    other = copy.deepcopy(doc["ops"][first])
    other["bounds"]["relocs"] = [[0, owned_region(doc), 0]]
    rejects(edit(doc, ("ops",), doc["ops"] + [other]), "cannot hold pointers")
