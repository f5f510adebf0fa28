"""A kernel manifest is unpacked once, with the reader's limits, wherever it is read.

The manifest carried by a module file was unpacked in three places (``manifest.parse``,
``sealed_claims.sealed`` and ``sealed_claims.sealed_footprints``) with msgpack's defaults less extension
types: a map could hold one key twice (Python keeps the last value; another reader the first), and the
body's other limits did not apply. All three now go through ``schema.unpack_manifest`` (the body's
options, ``unpack_options``). Hostile manifests are given to each reader directly, and one is carried by a
module file resealed into a saved graph, whose load must refuse it.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import struct

import msgpack
import pytest
import warp as wp

import apic
from apic.format import manifest, schema, sealed_claims, writer
from apic.targets import cpu
from wrp_helpers import save_sim, unpack_body

pytestmark = [pytest.mark.warp_version, pytest.mark.interpreter]


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    return str(save_sim(tmp_path_factory.mktemp("unpack")))


def _module(saved, folder):
    """The saved graph copied into ``folder``: (its document, the module entry with a manifest, its bytes)."""
    shutil.copytree(saved + "_modules", folder / "g_modules")
    with open(saved + ".wrp", "rb") as f:
        doc = unpack_body(f.read())
    for entry in doc["modules"]:
        data = (folder / "g_modules" / entry["file"]).read_bytes()
        if manifest.carried(data, entry["file"])[1]:
            return doc, entry, data
    raise AssertionError("the saved graph carries no manifest")


def _with_key_twice(honest: bytes, key: str, value) -> bytes:
    """``honest`` (a msgpack map) with one more entry ``key: value`` for a key it already holds."""
    doc = msgpack.unpackb(honest, raw=False)
    assert key in doc
    body = b"".join(msgpack.packb(k, use_bin_type=True) + msgpack.packb(v, use_bin_type=True) for k, v in doc.items())
    return b"\xdf" + struct.pack(">I", len(doc) + 1) + body + msgpack.packb(key) + msgpack.packb(value)


def _readers(expected: dict):
    return {
        "manifest.parse": lambda data: manifest.parse(data, "m.o", expected),
        "sealed_claims.sealed": lambda data: sealed_claims.sealed(data, "m.o"),
        "sealed_claims.sealed_footprints": lambda data: sealed_claims.sealed_footprints(data, "m.o"),
    }


def _hostile(honest: bytes) -> dict:
    return {
        # the kernels listed twice: the first (checked by one reader) could differ from the last (used by another)
        "a key twice": (_with_key_twice(honest, "kernels", []), "more than once"),
        "a map claiming 2^32-1 entries": (b"\xdf\xff\xff\xff\xff" + honest[1:], "cannot be read"),
        "an array claiming 2^32-1 items": (b"\x81\xa7kernels\xdd\xff\xff\xff\xff", "cannot be read"),
        "an extension type": (b"\x81\xa7kernels\xd4\x01\x00", "cannot be read"),
        "not a map": (msgpack.packb([1, 2]), "not a map"),
        "larger than a manifest may be": (b"\x00" * (schema.MAX_MANIFEST_BYTES + 1), "more than the"),
    }


def test_every_reader_of_a_manifest_has_the_same_limits(saved, tmp_path):
    _, entry, data = _module(saved, tmp_path)
    _, honest = manifest.carried(data, entry["file"])
    expected = {"module_sha256": msgpack.unpackb(honest)["module_sha256"]}
    for name, read in _readers(expected).items():
        read(honest)  # the honest one reads everywhere
        for case, (data, refusal) in _hostile(honest).items():
            with pytest.raises(apic.FormatError, match=refusal):
                read(data)
                pytest.fail(f"{name} read a manifest with {case}")


def test_a_module_carrying_a_manifest_with_a_key_twice_does_not_load(saved, tmp_path):
    doc, entry, data = _module(saved, tmp_path)
    bare, honest = manifest.carried(data, entry["file"])
    contents = manifest.carry(bare, _with_key_twice(honest, "kernels", []))
    digest = hashlib.sha256(contents).hexdigest()
    os.unlink(tmp_path / "g_modules" / entry["file"])
    entry.update(file=cpu.module_file_name(entry["name"], digest, cpu.MODULE_EXTENSION), sha256=digest,
                 size=len(contents))
    (tmp_path / "g_modules" / entry["file"]).write_bytes(contents)
    (tmp_path / "g.wrp").write_bytes(writer.encode(doc))
    with pytest.raises(apic.FormatError, match="the key 'kernels' more than once"):
        wp.capture_load(str(tmp_path / "g.wrp"))
