"""Footprint verdicts kept between processes (:mod:`apic.replay.footprint_launch`), in Warp's kernel cache folder.

Evaluating a launch's footprint runs the kernel's AST once per task in Python: 2 s of lowering for newton's
Featherstone step at 256 worlds, 8 s at 1,024, paid by the first parallel replay of every process. A verdict
depends only on what the evaluation can see, so it is kept in ``<Warp's kernel cache>/apic-footprint/<key>``
and a later process that launches the same kernel on the same index data reads it instead. The key is the
SHA-256 of all of that:

* the evaluator itself (the source of its modules) and the warp-lang version (whose ``and``/``or`` differ);
* the kernel: its module's content hash, which Warp derives from the source of its kernels, functions and
  constants, and its symbol;
* the launch's dimensions, the statement budget, and its packed arguments with each array's address
  replaced by whether it is null (the evaluation never reads an address: where the arrays lie is checked
  live, on every launch, by ``graph_launch_refusal``);
* the contents of every integer or boolean array the kernel only reads (the index data; the evaluation
  reads no other memory).

A verdict is the refusal's words, or none and the arrays whose contents it rests on (the guards are made
from them in this process). Files are kept by :mod:`apic.replay.kept_files`: a damaged file, or one whose
contents are not a verdict, is evaluated again. The folder is trusted as Warp trusts it with the code it
loads. ``APIC_FOOTPRINT_CACHE=0`` evaluates in every process.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import json
import sys

import warp as wp

from apic.record.footprint import addresses_reduced
from apic.record.layout import extent
from apic.replay import kept_files

VARIABLE = "APIC_FOOTPRINT_CACHE"  # "0": neither read nor write the folder
_KIND = "apic-footprint"
# whose source decides a verdict: the claim, the evaluator, the name resolution it shares with the task rule
_EVALUATOR = ("apic.record.footprint", "apic.record.footprint_eval", "apic.record.footprint_body",
              "apic.record.footprint_exprs", "apic.record.footprint_shapes", "apic.record.footprint_values",
              "apic.record.splittable", "apic.replay.footprint_launch")


@functools.cache
def _evaluator_fingerprint() -> bytes | None:
    """SHA-256 of the evaluator's source, or None (a module without a readable source: nothing is kept)."""
    digest = hashlib.sha256()
    for name in _EVALUATOR:
        try:
            with open(sys.modules[name].__file__, "rb") as f:
                digest.update(f.read())
        except (KeyError, TypeError, OSError):
            return None
    return digest.digest()


def key(identity: bytes, dim: tuple, budget: int, data: bytes, array_offsets, arrays: dict) -> str | None:
    """The file name of the verdict of a launch of the kernel ``identity`` names (module hash and symbol) over
    ``dim`` with packed arguments ``data`` (its arrays' descriptors at ``array_offsets``; ``arrays``: label ->
    ``footprint_values.Array``), or None when nothing may be kept."""
    fingerprint = _evaluator_fingerprint()
    if fingerprint is None:
        return None
    digest = hashlib.sha256()
    for part in (fingerprint, wp.config.version.encode(), repr((tuple(dim), budget)).encode(), identity,
                 addresses_reduced(data, array_offsets)):
        digest.update(len(part).to_bytes(8, "little") + part)
    for label in sorted(arrays):
        array = arrays[label]
        if array.ptr and not array.may_write and array.dtype.kind in "iub":  # what the evaluation may read
            lo, hi = extent(array.ptr, array.dtype.itemsize, array.shape, array.strides)
            digest.update(len(label).to_bytes(8, "little") + label.encode() + (hi - lo).to_bytes(8, "little"))
            digest.update(ctypes.string_at(lo, hi - lo))
    return digest.hexdigest()


def load(name: str) -> tuple[str | None, tuple[str, ...]] | None:
    """``(why, labels of the arrays it rests on)`` kept as ``name``, or None (none kept, damaged, not a verdict)."""
    contents = kept_files.load(_KIND, VARIABLE, name)
    if contents is None:
        return None
    try:
        verdict = json.loads(contents.decode("utf-8"))
        why, labels = verdict["why"], verdict["concrete"]
    except (ValueError, TypeError, KeyError):
        return None
    if not (why is None or isinstance(why, str)) or not isinstance(labels, list):
        return None
    if not all(isinstance(label, str) for label in labels) or (why is not None and labels):
        return None
    return why, tuple(labels)


def store(name: str, why: str | None, labels) -> None:
    """Keep a verdict as ``name`` for later processes."""
    contents = json.dumps({"why": why, "concrete": sorted(labels)}).encode("utf-8")
    kept_files.store(_KIND, VARIABLE, name, contents)
