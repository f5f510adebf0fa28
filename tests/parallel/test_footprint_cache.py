"""Footprint verdicts kept between processes (``apic.replay.parallel.footprint_cache``): a second process that launches
the same kernel on the same index data reads the first one's verdict instead of evaluating, splits (or
refuses) as it did and replays bit for bit as eager; other index data, a damaged file, a file whose
contents are not a verdict of this launch, and ``APIC_FOOTPRINT_CACHE=0`` all evaluate again. Each process
is a real child with its own Warp kernel cache folder, replaying a real launch against eager.
"""

from __future__ import annotations

import json
import os
import sys
import textwrap

import numpy as np
import pytest

import fork_server
import footprint_kernels as fk
from apic._probes import cache_store
from apic.record.parallel.footprint_values import Array
from apic.replay.parallel import footprint_cache
from persist_helpers import child_env, keep_kernel_modules, kept_in, seed_kernel_cache

pytestmark = [pytest.mark.warp_version]


_CHILD = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    import warp as wp
    wp.config.kernel_cache_dir = sys.argv[1]
    wp.config.quiet = True
    import footprint_kernels as fk
    from apic.record.parallel import footprint_eval

    evaluated = []
    original = footprint_eval.Evaluation.run
    def counted(self):
        evaluated.append(1)
        return original(self)
    footprint_eval.Evaluation.run = counted
    eager, replayed, graph = fk.run(sys.argv[2], 2, "numba", seed=int(sys.argv[3]))
    (entry,) = graph.parallel_report(2)
    guards = [split.guards.table[:, 2].tolist() for split in graph.program.splits if split.guards is not None]
    same = all(np.array_equal(a.view(np.uint8), b.view(np.uint8)) for a, b in zip(eager, replayed))
    print(json.dumps({"chunks": entry["chunks"], "why": entry["why"], "evaluated": len(evaluated), "guards": guards,
                      "same": same}))
    """
)


def _child(cache, case: str = "children", seed: int = 5, **env) -> dict:
    tests = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    environment = child_env()
    environment["PYTHONPATH"] = tests + os.pathsep + environment["PYTHONPATH"]
    done = fork_server.run([sys.executable, "-c", _CHILD, str(cache), case, str(seed)],
                           env={**environment, **env}, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    keep_kernel_modules(cache)
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture
def cache(tmp_path):
    """A kernel cache folder of the test's own, holding the Warp modules earlier children compiled (never a
    verdict: what the children find there is the test's doing)."""
    return seed_kernel_cache(tmp_path / "kernels")


@pytest.mark.parametrize("case", ["children", "children_shared"])
def test_a_later_process_reads_the_verdict_an_earlier_one_made(cache, case):
    first = _child(cache, case)
    assert first["evaluated"] == 1 and first["same"], first
    assert (first["chunks"] > 1) == (fk.CASES[case][4] == "split"), first
    (kept,) = kept_in(cache, "apic-footprint")
    assert not os.path.basename(kept).startswith(".")  # renamed into place, no temporary left
    second = _child(cache, case)
    assert second == {**first, "evaluated": 0}  # the same plan, reasons and guards, bit for bit as eager


@pytest.mark.parametrize(("case", "seed"), [("children_shared", 5), ("children", 6)])
def test_other_index_data_is_evaluated_again(cache, case, seed):
    """Another kernel's index data (two segments sharing a child), or other segments: a verdict of its own."""
    first = _child(cache)
    other = _child(cache, case, seed)
    assert other["evaluated"] == 1 and other["same"], other
    assert (other["chunks"] > 1) == (fk.CASES[case][4] == "split") and first["chunks"] > 1
    assert len(kept_in(cache, "apic-footprint")) == 2


def _signed(contents: bytes) -> bytes:
    """A kept file as the cache store writes it: its magic and checksum right."""
    return cache_store.kept_bytes("apic-footprint", contents)


@pytest.mark.parametrize("damage", ["flipped", "an array it lacks"])
def test_a_damaged_or_foreign_file_is_evaluated_again(cache, damage):
    first = _child(cache, "children_shared")  # refused: a forged "split" must not be what decides
    (path,) = kept_in(cache, "apic-footprint")
    data = open(path, "rb").read()
    damaged = {"flipped": data[:5] + bytes([data[5] ^ 1]) + data[6:],
               "an array it lacks": _signed(b'{"why": null, "concrete": ["nowhere"]}')}[damage]
    with open(path, "wb") as f:
        f.write(damaged)
    assert _child(cache, "children_shared") == first  # evaluated again, as the first process did
    assert open(path, "rb").read() == data  # and written again, whole


@pytest.mark.parametrize("contents", [b"", b"\x01", b"\xff{", b"[]", b'{"why": 3, "concrete": []}',
                                      b'{"why": null, "concrete": "start"}', b'{"why": null, "concrete": [1]}',
                                      b'{"why": "x", "concrete": ["start"]}', b'{"concrete": []}'])
def test_a_file_that_is_not_a_verdict_reads_as_none(tmp_path, monkeypatch, contents):
    import warp as wp

    monkeypatch.setattr(wp.config, "kernel_cache_dir", str(tmp_path))
    os.makedirs(tmp_path / "apic-footprint")
    for name, kept in (("unsigned", contents), ("signed", _signed(contents))):
        with open(cache_store.kept_path("apic-footprint", footprint_cache.VARIABLE, name, "json"), "wb") as f:
            f.write(kept)
        assert footprint_cache.load(name) is None, (name, contents)
    footprint_cache.store("good", None, ["start", "end"])
    assert footprint_cache.load("good") == (None, ("end", "start"))


def test_switched_off_keeps_nothing(cache):
    off = {footprint_cache.VARIABLE: "0"}
    first = _child(cache, **off)
    assert first["evaluated"] == 1 and first["chunks"] > 1 and first["same"]
    assert kept_in(cache, "apic-footprint") == []
    assert _child(cache, **off) == first


def _key(data: bytes, index: np.ndarray, identity: bytes = b"module/symbol", dim=(4,)) -> str:
    # the written array and the float one are never read (their addresses here hold nothing)
    arrays = {"index": Array("index", index.ctypes.data, index.shape, index.strides, index.dtype, False),
              "out": Array("out", 0x1000, (4,), (4,), np.dtype(np.float32), True),
              "x": Array("x", 0x2000, (4,), (4,), np.dtype(np.float32), False)}
    return footprint_cache.key(identity, dim, 100, data, [0, 16, 32], arrays)


def test_the_key_follows_what_the_verdict_depends_on_and_not_addresses():
    index = np.arange(4, dtype=np.int32)
    data = bytearray(64)
    data[0:8] = data[16:24] = data[32:40] = (0x1000).to_bytes(8, "little")
    base = _key(bytes(data), index)
    moved = bytearray(data)
    moved[0:8] = (0x7000).to_bytes(8, "little")  # another address, still not null
    assert _key(bytes(moved), index) == base
    null = bytearray(data)
    null[0:16] = bytes(16)
    assert _key(bytes(null), index) != base
    scalar = bytearray(data)
    scalar[60] = 1  # a scalar argument past the descriptors
    assert _key(bytes(scalar), index) != base
    assert _key(bytes(data), np.array([0, 1, 3, 2], dtype=np.int32)) != base  # index contents
    assert _key(bytes(data), index, identity=b"module/other") != base
    assert _key(bytes(data), index, dim=(2, 2)) != base


def test_the_key_covers_every_module_the_verdict_depends_on_and_apics_version(monkeypatch):
    """The evaluator's files are found by name (a module added beside them counts without an edit here), the
    world proofs among them; apic's version is in the key too."""
    files = footprint_cache.evaluator_files()
    for module in ("record/parallel/footprint.py", "record/parallel/footprint_eval.py",
                   "record/parallel/world_proof.py", "record/parallel/world_split.py", "record/parallel/splittable.py",
                   "replay/parallel/footprint_launch.py", "replay/parallel/footprint_cache.py"):
        assert module in files
    index = np.arange(4, dtype=np.int32)
    base = _key(bytes(64), index)
    from apic import _version

    monkeypatch.setattr(_version, "__version__", _version.__version__ + ".post1")
    footprint_cache._evaluator_fingerprint.cache_clear()
    try:
        assert _key(bytes(64), index) != base
    finally:
        monkeypatch.undo()
        footprint_cache._evaluator_fingerprint.cache_clear()
    assert _key(bytes(64), index) == base
