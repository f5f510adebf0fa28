"""Edited files that pass validation must load and replay without crashing.

For a graph of memory operations only (memcpy, memset, memtile, strided copy and fill, alloc), every
byte native code touches is described by fields the reader validates, so a file that passes
``reader.read`` must be safe to replay. Random edits of those fields (and of the array descriptors'
bytes) are written out; a fresh process loads and replays every one that validates. A crash there
(a segfault) fails the test.
"""

from __future__ import annotations

import copy
import subprocess
import sys
import textwrap

import msgpack
import numpy as np
import pytest
import warp as wp

import apic
from apic.format import reader, schema, writer
from persist_helpers import child_env

pytestmark = [pytest.mark.warp_version, pytest.mark.interpreter]

REPLAY_ALL = textwrap.dedent(
    """
    import glob, sys
    import warp as wp
    wp.config.quiet = True
    import apic
    loaded = 0
    for name in sorted(glob.glob(sys.argv[1] + "/*.wrp")):
        with open(name, "rb") as f:
            data = f.read()
        try:
            graph = wp.capture_load_from_bytes(data)
        except apic.ApicError:
            continue
        graph.launch(2)
        loaded += 1
    print("replayed", loaded)
    """
)


def memory_only_graph():
    a = wp.array(np.arange(48, dtype=np.float32).reshape(8, 6), device="cpu")
    b = wp.zeros((8, 6), dtype=float, device="cpu")
    col = wp.zeros(8, dtype=float, device="cpu")
    big = wp.zeros(64, dtype=float, device="cpu")
    with wp.ScopedCapture(device="cpu", apic=True) as cap:
        wp.copy(b, a)
        wp.copy(col, a[:, 1])
        a[:, 0].fill_(2.0)
        big.fill_(1.5)
        scratch = wp.zeros(16, dtype=float, device="cpu")
        wp.copy(scratch, big, count=16)
        b.zero_()
    return cap.graph, {"a": a, "b": b, "col": col, "big": big}


def _mutations(doc: dict, rng: np.random.Generator, count: int):
    ops = doc["ops"]
    for _ in range(count):
        edited = copy.deepcopy(doc)
        op = edited["ops"][int(rng.integers(len(ops)))]
        field = str(rng.choice(sorted(k for k in op if k != "kind")))
        value = op[field]
        if isinstance(value, dict):  # a blob: change descriptor bytes, or a relocation
            if value["relocs"] and rng.random() < 0.4:
                reloc = value["relocs"][int(rng.integers(len(value["relocs"])))]
                reloc[int(rng.integers(3))] = int(rng.choice([0, 1, 4, 8, 63, 64, 65, 191, 192, 193, 256, 10**6]))
            elif value["data"]:
                data = bytearray(value["data"])
                at = int(rng.integers(min(len(data), 56)))
                data[at] = int(rng.integers(256))
                value["data"] = bytes(data)
        elif isinstance(value, list):  # a ref
            value[int(rng.integers(2))] = int(rng.choice([0, 1, 3, 4, 8, 100, 191, 192, 255, 256, 10**5]))
        elif isinstance(value, int):
            op[field] = int(rng.choice([0, 1, 2, 4, 7, 8, 15, 16, 63, 64, 65, 191, 192, 193, 255, 256, 10**6]))
        yield edited


def test_validated_edits_replay_without_crashing(tmp_path):
    graph, _ = memory_only_graph()
    wp.capture_save(graph, str(tmp_path / "mem"))
    body = (tmp_path / "mem.wrp").read_bytes()[schema.HEADER.size :]
    doc = msgpack.unpackb(body, raw=False)
    assert not doc["kernels"]
    kinds = {op["kind"] for op in doc["ops"]}
    assert {schema.WireOp.MEMCPY, schema.WireOp.MEMSET, schema.WireOp.MEMTILE, schema.WireOp.ARRAY_COPY,
            schema.WireOp.ARRAY_FILL, schema.WireOp.ALLOC} <= kinds

    out = tmp_path / "edited"
    out.mkdir()
    valid = refused = 0
    for i, edited in enumerate(_mutations(doc, np.random.default_rng(2026), 400)):
        data = writer.encode(edited)
        try:
            reader.read(data)
        except apic.FormatError:
            refused += 1
            continue
        valid += 1
        (out / f"{i:04d}.wrp").write_bytes(data)
    assert refused > 50 and valid > 50, (refused, valid)  # both sides of the checks are exercised

    done = subprocess.run([sys.executable, "-c", REPLAY_ALL, str(out)], env=child_env(), capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, f"replaying validated files crashed ({done.returncode}):\n{done.stderr[-2000:]}"
    assert f"replayed {valid}" in done.stdout, done.stdout
