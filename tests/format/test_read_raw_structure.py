"""One file, one graph: the reading of launches alike from their raw bytes (``apic.format.read_raw``) gives
the argument bytes the entry's structure gives (``args.data``), whatever the bytes around them.

The fast reading keeps a template of a launch read in full and reads a later entry whose bytes match it
but for the argument bytes without unpacking it. Each file below is written byte by byte: entries whose
``args.data`` has a non-shortest msgpack length header, or that carry an unknown key holding a copy of
the argument bytes, and a later entry that differs only inside that copy. Unpacked (as the full reader,
``inspect`` and any other msgpack reader see it), every launch has the argument bytes of its ``args.data``;
the fast reading must give the same, or refuse the file.
"""

from __future__ import annotations

import hashlib
import struct

import msgpack
import numpy as np
import pytest
import warp as wp

import apic
from apic.format import reader, schema, writer

pytestmark = [pytest.mark.warp_version]


@wp.kernel
def scaled_copy(src: wp.array(dtype=float), dst: wp.array(dtype=float), s: float):
    i = wp.tid()
    dst[i] = src[i] * 0.5 + s


LAUNCHES = 6


@pytest.fixture(scope="module")
def body(tmp_path_factory) -> dict:
    """The decoded body of a saved graph of LAUNCHES launches of one kernel, each with its own scalar."""
    wp.config.quiet = True
    src = wp.array(np.arange(8, dtype=np.float32), dtype=float, device="cpu")
    dst = wp.zeros(8, dtype=float, device="cpu")
    wp.launch(scaled_copy, dim=8, inputs=[src, dst, 0.0], device="cpu")  # compiled outside the capture
    with wp.ScopedCapture(device="cpu", apic=True) as capture:
        for i in range(LAUNCHES):
            wp.launch(scaled_copy, dim=8, inputs=[src, dst, 0.25 * (i + 1)], device="cpu")
    stem = str(tmp_path_factory.mktemp("raw") / "graph")
    apic.capture_save(capture.graph, stem, inputs={"src": src, "dst": dst})
    with open(stem + ".wrp", "rb") as f:
        return msgpack.unpackb(f.read()[schema.HEADER.size:], raw=False)


def _pack_map(items: list[tuple[str, bytes]]) -> bytes:
    """A msgpack map of ``items`` (key, the value's msgpack bytes as given)."""
    n = len(items)
    head = bytes([0x80 | n]) if n < 16 else b"\xde" + struct.pack(">H", n)
    return head + b"".join(msgpack.packb(key) + value for key, value in items)


def _bin16(data: bytes) -> bytes:
    """``data`` as msgpack bin with a 16-bit length header (not the shortest for under 256 bytes)."""
    return b"\xc5" + struct.pack(">H", len(data)) + data


def _entry(op: dict, long_header: bool, extra: bytes | None) -> bytes:
    """Launch map ``op`` packed by hand: ``args.data`` with a 16-bit header if ``long_header``, and an unknown
    key ``zz`` holding ``extra`` (as shortest bin) if given."""
    args = [(key, _bin16(value) if key == "data" and long_header else msgpack.packb(value, use_bin_type=True))
            for key, value in op["args"].items()]
    items = [(key, _pack_map(args) if key == "args" else msgpack.packb(value, use_bin_type=True))
             for key, value in op.items()]
    if extra is not None:
        items.append(("zz", msgpack.packb(extra, use_bin_type=True)))
    return _pack_map(items)


def _file(body: dict, entries: list[bytes], extra: bytes | None = None) -> bytes:
    """A whole ``.wrp`` of ``body`` whose ``ops`` array is ``entries`` (raw msgpack), header sealed; ``extra``:
    the raw msgpack value of an unknown top-level key ``zz``."""
    items = [] if extra is None else [("zz", extra)]
    for key, value in body.items():
        if key == "ops":
            count = len(entries)
            head = bytes([0x90 | count]) if count < 16 else b"\xdc" + struct.pack(">H", count)
            items.append((key, head + b"".join(entries)))
        else:
            items.append((key, msgpack.packb(value, use_bin_type=True)))
    data = _pack_map(items)
    header = schema.HEADER.pack(schema.MAGIC, writer.required_version(body), 0, len(data),
                                hashlib.sha256(data).digest())
    return header + data


def _structural(data: bytes) -> list[bytes]:
    """Each launch's argument bytes, in replay order, as msgpack's own unpacking of the file gives them."""
    doc = msgpack.unpackb(data[schema.HEADER.size:], raw=False)
    ops = [doc["ops"][i] for i in np.frombuffer(doc["sequence"], dtype="<u4").tolist()]
    return [op["args"]["data"] for op in ops if op["kind"] == schema.WireOp.LAUNCH]


def _read_args(data: bytes) -> list[bytes]:
    """Each launch's argument bytes, in replay order, as apic's reader gives them."""
    saved = reader.read(data)
    return [bytes(op.args.data) for op in saved.recording.ops if type(op).__name__ == "Launch"]


def _launches(body: dict) -> list[dict]:
    ops = [op for op in body["ops"] if op["kind"] == schema.WireOp.LAUNCH]
    assert len(ops) == LAUNCHES and len({op["args"]["data"] for op in ops}) == LAUNCHES
    return ops


def _check_one_reading(body: dict, entries: list[bytes]) -> None:
    data = _file(body, entries)
    try:
        got = _read_args(data)
    except apic.FormatError:
        return  # refused: one reading (none)
    assert got == _structural(data)


def _forged_entries(body, long_header: bool, copy_key: bool) -> list[bytes]:
    """Issue 33's entries: every launch shows the first launch's ``args.data`` (with a 16-bit ``bin`` header where
    ``long_header``), and where ``copy_key`` an unknown key holds a copy of the launch's own argument bytes."""
    first = _launches(body)[0]
    entries = []
    for op in body["ops"]:
        if op["kind"] != schema.WireOp.LAUNCH:
            entries.append(msgpack.packb(op, use_bin_type=True))
            continue
        shown = {**op, "args": {**op["args"], "data": first["args"]["data"]}}
        entries.append(_entry(shown, long_header, op["args"]["data"] if copy_key else None))
    return entries


@pytest.mark.parametrize("long_header, copy_key", [(True, True), (True, False), (False, True)])
def test_a_launch_that_differs_only_outside_its_argument_bytes_reads_as_its_structure(body, long_header, copy_key):
    """The file of issue 33, class 1: the first launch with a 16-bit ``args.data`` header and an unknown key
    holding a copy of its argument bytes; each later launch that copy's bytes changed to its own scalar's,
    its real ``args.data`` left the first's. Fast path and structure must agree on every launch."""
    _check_one_reading(body, _forged_entries(body, long_header, copy_key))


def test_the_file_of_issue_33_loads_as_its_structure(body):
    """The forged file read as a whole: every launch's argument bytes are those of its ``args.data``,
    and the fast path read none of them from the unknown key."""
    got = _read_args(_file(body, _forged_entries(body, long_header=True, copy_key=True)))
    assert {bytes(g) for g in got} == {_launches(body)[0]["args"]["data"]}


def test_canonical_launches_are_still_read_alike(body):
    """Files as apic writes them keep the fast reading: the later launches are read alike the first."""
    data = writer.encode(body)
    saved = reader.read(data)
    assert len(saved.alike) == LAUNCHES - 1
    assert _read_args(data) == _structural(data)


def test_a_non_canonical_entry_is_read_in_full_not_alike(body):
    """Entries whose bytes are not their canonical msgpack (16-bit ``args.data`` headers) make no raw
    template: each is unpacked (and read alike from its structure), and agrees with it."""
    entries = [_entry(op, True, None) if op["kind"] == schema.WireOp.LAUNCH else msgpack.packb(op, use_bin_type=True)
               for op in body["ops"]]
    data = _file(body, entries)
    assert _read_args(data) == _structural(data)


def test_an_unknown_key_in_canonical_entries_keeps_one_reading(body):
    """Unknown keys (ignored by the reader) in canonical entries: each later launch's copy differs, so no
    later entry matches a template but in its argument bytes; where they match, they agree."""
    for same_copy in (True, False):
        entries = []
        for op in body["ops"]:
            if op["kind"] != schema.WireOp.LAUNCH:
                entries.append(msgpack.packb(op, use_bin_type=True))
                continue
            extra = _launches(body)[0]["args"]["data"] if same_copy else op["args"]["data"]
            entries.append(msgpack.packb({**op, "zz": extra}, use_bin_type=True))
        _check_one_reading(body, entries)


def _whole_body_unpacks(data: bytes) -> bool:
    try:
        msgpack.unpackb(data[schema.HEADER.size:], raw=False)
    except (ValueError, msgpack.UnpackException):  # StackError: nested deeper than msgpack's limit
        return False
    return True


@pytest.mark.parametrize("where", ["op entry", "top level"])
@pytest.mark.parametrize("depth", [1020, 1022, 1023, 1024])
def test_nesting_is_bounded_as_in_the_whole_body(body, where, depth):
    """An unknown key nested ``depth`` lists deep, in an op entry or at the top level. The reader unpacks the
    entries and top-level values one by one; msgpack bounds nesting from the top of what it unpacks, so an
    entry alone may go two levels deeper than in the body. The reader must accept exactly what msgpack's
    unpacking of the whole body accepts (before: 1022 and 1023 in an entry, 1024 at the top level, loaded)."""
    deep = b"\x91" * depth + b"\x00"
    entries = [msgpack.packb(op, use_bin_type=True) for op in body["ops"]]
    if where == "op entry":
        last = max(i for i, op in enumerate(body["ops"]) if op["kind"] == schema.WireOp.LAUNCH)
        op = body["ops"][last]
        entries[last] = _pack_map([(k, msgpack.packb(v, use_bin_type=True)) for k, v in op.items()] + [("zz", deep)])
        data = _file(body, entries)
    else:
        data = _file(body, entries, deep)
    if _whole_body_unpacks(data):
        assert _read_args(data) == _structural(data)
    else:
        with pytest.raises(apic.FormatError, match="not valid msgpack"):
            reader.read(data)


def test_the_fuzzers_raw_alike_inputs_have_one_reading(tmp_path):
    """The fuzzer's re-encodings of a seed's launches (tests/fuzz/trust_paths.py: longer headers, unknown
    keys with copies of argument bytes): apic's fast reading and a full unpacking agree on each (before the
    raw templates were bound to canonical entries, 15 of these 200 were read two ways)."""
    import random

    import fuzz_wrp
    from fuzz import trust_paths

    with open(trust_paths.save_alike(str(tmp_path)), "rb") as f:
        doc = fuzz_wrp.decode(f.read())
    rng = random.Random(1)
    problems = [trust_paths.one_reading(trust_paths.raw_alike(rng, doc, fuzz_wrp.seal)) for _ in range(200)]
    assert not any(problems), [p for p in problems if p][:3]
