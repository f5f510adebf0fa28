"""Range objects kept between processes (:mod:`apic.replay.parallel.range_entry`), in Warp's kernel cache folder.

A module's range object is its generated source with the range entries appended, compiled by Warp's CPU
compiler: as long as Warp's own build of the module (14 s for newton's Featherstone kernels here), paid by
the first parallel replay of every process. Kept in ``<Warp's kernel cache>/apic-range/``, a later
process loads it instead. The key is the SHA-256 of everything the object depends on: the source compiled
(the range entries included), the build options and CPU level, the warp-lang version, and this host's
CPU and its features (Warp builds for the host, ``-march=native``: a cache folder shared by other machines
must not hand one of them code for another CPU).

Files are kept by :mod:`apic._probes.cache_store` (a damaged one is built again, never loaded; a folder that
cannot be written keeps nothing; unused ones are pruned). ``APIC_RANGE_CACHE=0`` leaves every build in
memory, once per process, as before.
"""

from __future__ import annotations

from apic import _compat
from apic._probes import cache_store

VARIABLE = "APIC_RANGE_CACHE"  # "0": neither read nor write the folder
_KIND = "apic-range"


def key(source: bytes, options: dict, level: str | None) -> str:
    """The name the range object compiled from ``source`` with ``options`` is kept under."""
    return cache_store.compiled_key(source, options, level, _compat.host_target())


def load(name: str) -> bytes | None:
    """The object kept under ``name``, or None (none kept, a damaged file, no cache folder)."""
    return cache_store.load_kept(_KIND, VARIABLE, name, "o")


def store(name: str, image: bytes) -> None:
    """Keep ``image`` under ``name`` for later processes; a folder that cannot be written keeps nothing."""
    cache_store.keep(_KIND, VARIABLE, name, "o", image)
