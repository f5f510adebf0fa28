"""The hardened loader: a short run of the fuzzer (tests/fuzz_wrp.py), its corpus of inputs that
found bugs, and one regression test per bug found by review.

Every input must end in an ``apic.ApicError`` or a correct load, in a child process (a crash or a
hang fails the test instead of killing pytest), with nothing printed by native code; the CLI's
``inspect`` must exit 0, or 2 with an ``error:`` line. docs/RELIABILITY.md has the long runs.
"""

from __future__ import annotations

import json
import os
import random

import msgpack
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import apic
import fuzz_wrp
from fuzz import fs_odd
from apic.cli import inspect_wrp
from apic.format import reader, schema
from apic.record import ops as rec
from apic.record.recording import KernelInfo
from apic.replay import lowering
from persist_helpers import TESTS

pytestmark = [pytest.mark.warp_version, pytest.mark.interpreter]

CORPUS = os.path.join(TESTS, "data", "fuzz_corpus")


@pytest.fixture(scope="module")
def seeds(tmp_path_factory):
    return fuzz_wrp.make_seeds(str(tmp_path_factory.mktemp("fuzz_seeds")))


# --- the fuzzer, briefly ----------------------------------------------------------------------------
def test_fuzz_smoke(seeds, tmp_path):
    stats = fuzz_wrp.fuzz(str(tmp_path), inputs=1200, seed=2026, seeds=seeds, cli_first=2)
    print(stats.summary())
    assert not stats.findings, stats.summary()
    assert stats.outcomes.get("loaded", 0) > 100 and stats.outcomes.get("refused", 0) > 500, stats.outcomes
    assert stats.deep > 300, "too few inputs got past the header and msgpack to the validator"
    assert stats.replayed > 20 and stats.cli_runs >= 2
    assert len(stats.by_strategy) == len(fuzz_wrp.Mutator.BYTE_STRATEGIES + fuzz_wrp.Mutator.SEALED_STRATEGIES
                                         + fuzz_wrp.Mutator.TREE_STRATEGIES)


def test_fuzz_odd_modules_folder(seeds, tmp_path):
    """Only odd ``<stem>_modules/`` entries (symlinks, FIFOs, directories, wrong sizes, a symlinked folder),
    every seed: each load ends in a clean refusal or a correct load, never a hang, crash or stray exception."""
    stats = fuzz_wrp.fuzz(str(tmp_path), inputs=60, seed=11, seeds=seeds, fs_every=1, timeout=20.0)
    print(stats.summary())
    assert not stats.findings, stats.summary()
    assert set(stats.by_strategy) == set(fs_odd.STRATEGIES), stats.by_strategy
    assert stats.outcomes.get("refused", 0) >= 30, stats.outcomes


def test_corpus(seeds, tmp_path):
    """Each input that once found a bug now loads or is refused cleanly, as its entry expects."""
    entries = fuzz_wrp.corpus_inputs(CORPUS, seeds)
    assert len(entries) >= 8
    results = fuzz_wrp.check_inputs(str(tmp_path), seeds, entries)
    still_open = []  # entries marked "open": a known bug not fixed yet; the test xfails while one still breaks
    for name, _, _, recipe in entries:
        for answer in results[name]:
            outcome = answer["outcome"]
            if recipe.get("open") and outcome not in ("loaded", "refused"):
                still_open.append(f"{name}: {outcome}: {recipe['open']}")
                continue
            assert outcome in ("loaded", "refused"), f"{name}: {answer}"
            expect = recipe.get("expect", "clean")
            assert expect == "clean" or outcome == expect, f"{name}: expected {expect}, got {answer}"
            if recipe.get("match"):
                assert recipe["match"] in answer["error"], f"{name}: {answer['error']}"
            if recipe.get("quiet") or expect == "refused":
                assert not answer["stderr_bytes"], f"{name}: native code printed something"
            if outcome == "loaded":
                assert answer.get("inspect_rc") == 0
    if still_open:  # every other entry was checked above; this reports the known bugs, it does not pass them
        pytest.xfail("known bugs, not fixed yet: " + "; ".join(still_open))


def test_corpus_entries_document_their_finding():
    for name in os.listdir(CORPUS):
        if name.endswith(".json"):
            with open(os.path.join(CORPUS, name)) as f:
                recipe = json.load(f)
            assert recipe["seed"] in fuzz_wrp.SEEDS and (recipe["edits"] or recipe.get("fs"))
            assert recipe["finding"] and recipe["found"]


_mutators = {}


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32 - 1), name=st.sampled_from(fuzz_wrp.SEEDS))
def test_validator_and_inspect_in_process(seeds, tmp_path, seed, name):
    """Hypothesis drives the fuzzer's mutations through the pure-Python validator and ``inspect``
    (nothing native runs, so in-process is safe; a failure shrinks to a small seed)."""
    mutator = _mutators.get("m") or _mutators.setdefault("m", fuzz_wrp.Mutator(random.Random(), seeds))
    mutator.rng.seed(seed)
    strategy, data, _ = mutator.mutate(name)
    path = tmp_path / "in.wrp"
    path.write_bytes(data)
    try:
        reader.read(data)
    except apic.FormatError:
        return
    inspect_wrp.to_json(inspect_wrp.describe(str(path)))  # strict JSON (no NaN): raises otherwise


# --- bugs found by review ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def sim_doc(seeds):
    with open(seeds["sim"], "rb") as f:
        return fuzz_wrp.decode(f.read())


def _launch(doc, min_args: int = 0) -> int:
    return next(i for i, op in enumerate(doc["ops"])
                if op["kind"] == schema.WireOp.LAUNCH and len(op["args"]["data"]) >= min_args)


def test_overlapping_kernel_array_descriptors_are_refused(sim_doc):
    """The overlap check compared only the ends of each descriptor: an indexed descriptor wrapping a
    smaller one passed, and the two views of the same bytes were validated separately."""
    doc = fuzz_wrp.from_json(fuzz_wrp.to_json(sim_doc))  # a deep copy
    i = _launch(doc, 104)
    size = len(doc["ops"][i]["args"]["data"])
    doc["ops"][i]["args"] = {"data": bytes(size), "relocs": [], "arrays": [[8, 4, False], [0, 4, True]]}
    with pytest.raises(apic.FormatError, match="overlaps another"):
        reader.read(fuzz_wrp.encode(doc))


@pytest.mark.parametrize("symbol", ["memcpy", "printf", "memset", "abort", "_cpu_forward", "x_cpu_backward"])
def test_kernel_symbols_must_be_kernel_entry_points(sim_doc, symbol):
    """Warp's JIT resolves C library functions in every module: 'memcpy' as a kernel symbol loaded,
    and replay would have called memcpy(bounds, args) with a blob from the file."""
    doc = fuzz_wrp.from_json(fuzz_wrp.to_json(sim_doc))
    k = next(i for i, kernel in enumerate(doc["kernels"]) if not kernel["adjoint"])
    doc["kernels"][k]["symbol"] = symbol
    with pytest.raises(apic.FormatError, match=r"kernels\[\d+\]\.symbol: .* is not the entry point"):
        reader.read(fuzz_wrp.encode(doc))


def test_unknown_writer_and_target_keys_are_dropped(sim_doc):
    doc = fuzz_wrp.from_json(fuzz_wrp.to_json(sim_doc))
    doc["writer"]["blob"] = b"\0" * 8
    doc["writer"][b"bytes-key"] = 1
    doc["target"]["extra"] = {"x": b"y"}
    saved = reader.read(fuzz_wrp.encode(doc))
    assert set(saved.writer) <= {"apic", "warp", "numpy"}
    assert set(saved.target) == {"system", "machine", "cpu", "features", "byteorder", "pointer_bits"}
    doc["writer"]["numpy"] = 2
    with pytest.raises(apic.FormatError, match=r"writer\.numpy"):
        reader.read(fuzz_wrp.encode(doc))


@pytest.mark.parametrize("hostile", [b"\xd6\xff\x00\x00\x00\x01", b"\xc7\x03\x05abc", b"\xdd\xff\xff\xff\xff\xc0",
                                     b"\xc6\xff\xff\xff\xff\x00", b"\x91" * 5000 + b"\xc0"])
def test_msgpack_extensions_and_lying_lengths_are_refused(sim_doc, hostile):
    body = bytearray(msgpack.packb(dict(sim_doc, extra=None), use_bin_type=True))
    assert body.endswith(b"\xa5extra\xc0")
    data = fuzz_wrp.seal(bytes(body[:-1]) + hostile)
    with pytest.raises(apic.FormatError, match="not valid msgpack"):
        reader.read(data)


def test_op_kind_without_a_wire_form_is_refused(sim_doc, monkeypatch):
    """A kind apic records but has no wire fields for raised KeyError (found by the fuzzer while
    another change was landing): every ``OpKind`` without ``schema.OP_FIELDS`` is refused."""
    doc = fuzz_wrp.from_json(fuzz_wrp.to_json(sim_doc))
    reader.read(fuzz_wrp.encode(doc))
    monkeypatch.delitem(schema.OP_FIELDS, schema.WireOp.ALLOC)
    with pytest.raises(apic.FormatError, match=r"op kind 7 \(alloc\) cannot appear in a graph file"):
        reader.read(fuzz_wrp.encode(doc))


def test_by_value_bounds_with_high_bits_lower():
    """warp <= 1.12 passes the 32-byte bounds by value, as four int64 call arguments: a qword of
    2**63 or more from the file raised OverflowError in lowering (an exception that is not apic's)."""
    bounds = rec.Blob(b"\xff" * 32, ())
    args = rec.Blob(bytes(8), ())
    launch = rec.Launch(0, (1,), bounds, args, None)
    kernel = KernelInfo(module=0, key="k", symbol="k_cpu_forward", adjoint=False)
    recording = reader.Recording(abi="bounds-by-value-v1", regions=(), modules=(), kernels=(kernel,), ops=(launch,))
    table = lowering.lower(recording, [], [0x1000]).table  # lowered, never run
    assert (table == -1).any()
    assert np.asarray(table).dtype == np.int64
