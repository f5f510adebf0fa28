"""Footprint verdicts kept between processes (:mod:`apic.replay.parallel.footprint_launch`), in Warp's kernel
cache folder.

Evaluating a launch's footprint runs the kernel's AST once per task in Python: 2 s of lowering for newton's
Featherstone step at 256 worlds, 8 s at 1,024, paid by the first parallel replay of every process. A verdict
depends only on what the evaluation can see, so it is kept in ``<Warp's kernel cache>/apic-footprint/``
and a later process that launches the same kernel on the same index data reads it instead. The key is the
SHA-256 of all of that:

* the evaluator itself (the source of every module it may use: ``record/parallel/footprint*.py``, the world
  proofs ``record/parallel/world_*.py``, ``record/parallel/splittable.py``, ``replay/parallel/footprint*.py``,
  found by their file names so that a module added there counts too), apic's version, and the warp-lang
  version (whose ``and``/``or`` differ);
* the kernel: its module's content hash, which Warp derives from the source of its kernels, functions and
  constants, and its symbol;
* the launch's dimensions, the statement budget, and its packed arguments with each array's address
  replaced by whether it is null (the evaluation never reads an address: where the arrays lie is checked
  live, on every launch, by ``graph_launch_refusal``);
* the contents of every integer or boolean array the kernel only reads (the index data; the evaluation
  reads no other memory).

A verdict is the refusal's words, or none and the arrays whose contents it rests on (the guards are made
from them in this process). Files are kept by :mod:`apic._probes.cache_store`: a damaged file, or one whose
contents are not a verdict, is evaluated again. The folder is trusted as Warp trusts it with the code it
loads. ``APIC_FOOTPRINT_CACHE=0`` evaluates in every process.
"""

from __future__ import annotations

import ctypes
import functools
import glob
import hashlib
import json
import os

import warp as wp

from apic.record.parallel.footprint import addresses_reduced
from apic.record.layout import extent
from apic import _version
from apic._probes import cache_store

VARIABLE = "APIC_FOOTPRINT_CACHE"  # "0": neither read nor write the folder
_KIND = "apic-footprint"
# whose source decides a verdict (relative to the package; globs): the claim, the evaluator, the world proofs, the
# name resolution it shares with the task rule, and the replay's use of them (this module included)
_EVALUATOR = ("record/parallel/footprint*.py", "record/parallel/world_*.py", "record/parallel/splittable.py",
              "replay/parallel/footprint*.py")
_PACKAGE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # apic/


def evaluator_files() -> list[str]:
    """The module files whose source a verdict depends on, by path relative to the package, sorted."""
    found = set()
    for pattern in _EVALUATOR:
        found.update(os.path.relpath(p, _PACKAGE).replace(os.sep, "/")
                     for p in glob.glob(os.path.join(_PACKAGE, *pattern.split("/"))))
    return sorted(found)


@functools.cache
def _evaluator_fingerprint() -> bytes | None:
    """SHA-256 of the evaluator's files (names and source) and apic's version, or None (a file that cannot be
    read: nothing is kept)."""
    digest = hashlib.sha256(_version.__version__.encode() + b"\0")
    for name in evaluator_files():
        try:
            with open(os.path.join(_PACKAGE, name), "rb") as f:
                source = f.read()
        except OSError:
            return None
        digest.update(name.encode() + b"\0" + len(source).to_bytes(8, "little") + source)
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
    contents = cache_store.load_kept(_KIND, VARIABLE, name, "json")
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
    cache_store.keep(_KIND, VARIABLE, name, "json", contents)
