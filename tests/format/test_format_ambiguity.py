"""What a file says is unambiguous, and what it asks for this warp-lang can do, or it is refused at load.

* a msgpack map with a repeated key (anywhere in the body) is refused: a reader keeping the first
  value and one keeping the last would see two different graphs;
* a kernel that needs cooperative CPU blocks (warp-lang 1.19+) is refused at load on a warp-lang
  without them, naming the field, instead of failing at replay.
"""

from __future__ import annotations

import shutil

import msgpack
import pytest
import warp as wp

import apic
from wrp_helpers import save_sim
from apic import _compat
from apic.format import reader, schema, writer

pytestmark = [pytest.mark.warp_version, pytest.mark.interpreter]


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    folder = tmp_path_factory.mktemp("ambiguity")
    return save_sim(folder)


def _body(path) -> bytes:
    return path.with_suffix(".wrp").read_bytes()[schema.HEADER.size:]


def _with_header(body: bytes, version: int = 1) -> bytes:
    import hashlib
    return schema.HEADER.pack(schema.MAGIC, version, 0, len(body), hashlib.sha256(body).digest()) + body


class _Pairs(list):
    """A map written as a list of pairs, so that a key can appear twice."""


def _pack(value, packer):
    if isinstance(value, _Pairs):
        out = packer.pack_map_header(len(value))
        for key, item in value:
            out += _pack(key, packer) + _pack(item, packer)
        return out
    if isinstance(value, dict):
        return _pack(_Pairs(value.items()), packer)
    if isinstance(value, list):
        out = packer.pack_array_header(len(value))
        for item in value:
            out += _pack(item, packer)
        return out
    return packer.pack(value)


def _encode(doc, version: int = 1) -> bytes:
    return _with_header(_pack(doc, msgpack.Packer(use_bin_type=True)), version)


def test_the_pair_encoder_writes_what_the_writer_writes(saved):
    doc = msgpack.unpackb(_body(saved), raw=False)
    assert reader.read(_encode(doc, doc["format_version"])).recording.ops


def test_a_repeated_top_level_key_is_refused(saved):
    doc = msgpack.unpackb(_body(saved), raw=False)
    pairs = _Pairs(doc.items())
    pairs.append(("sequence", b""))  # a last-wins reader would replay nothing
    with pytest.raises(apic.FormatError, match="'sequence' more than once"):
        reader.read(_encode(pairs, doc["format_version"]))


def test_a_repeated_key_deep_inside_is_refused(saved):
    doc = msgpack.unpackb(_body(saved), raw=False)
    region = next(i for i, r in enumerate(doc["regions"]) if not r["owned"])
    entry = doc["regions"][region]
    doc["regions"][region] = _Pairs([*entry.items(), ("nbytes", entry["nbytes"] + 64)])
    with pytest.raises(apic.FormatError, match="'nbytes' more than once"):
        reader.read(_encode(doc, doc["format_version"]))


def test_a_repeated_key_in_an_op_is_refused(saved):
    doc = msgpack.unpackb(_body(saved), raw=False)
    op = doc["ops"][0]
    doc["ops"][0] = _Pairs([("kind", op["kind"]), *op.items()])
    with pytest.raises(apic.FormatError, match="'kind' more than once"):
        reader.read(_encode(doc, doc["format_version"]))


def test_cpu_blocks_are_refused_at_load_where_warp_lacks_them(saved, tmp_path):
    doc = msgpack.unpackb(_body(saved), raw=False)
    doc["kernels"][0]["cpu_blocks"] = True
    target = tmp_path / "sim"
    target.with_suffix(".wrp").write_bytes(writer.encode(doc))
    shutil.copytree(saved.parent / "sim_modules", tmp_path / "sim_modules")  # a load refuses a symlinked folder
    if _compat.CPU_BLOCKS:
        graph = wp.capture_load(str(target))  # this warp-lang has them: it loads (and replays)
        wp.capture_launch(graph)
    else:
        with pytest.raises(apic.IncompatibleGraphError, match=r"cpu_blocks"):
            wp.capture_load(str(target))
