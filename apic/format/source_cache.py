"""Objects compiled from a loaded graph's saved source, kept between processes, in Warp's kernel cache folder.

A graph whose saved objects cannot run here (built for a CPU with features this one lacks, saved without them,
or a packaged binary that fails its checks) loads by compiling each module's saved source with this Warp:
seconds a module, in every process that loads it. Kept in ``<Warp's kernel cache>/apic-source/``, a later load of
the same source on this host takes the object instead, as Warp takes a module it built before. The key
(:func:`apic._probes.cache_store.compiled_key`, as the parallel replay's range objects') is the SHA-256 of the
source, its build options, the warp-lang version, and this host's CPU and its features.

Files are kept by :mod:`apic._probes.cache_store` (a damaged one is compiled again, never loaded; a folder that
cannot be written keeps nothing; unused ones are pruned). ``APIC_SOURCE_CACHE=0`` compiles at every load.
"""

from __future__ import annotations

from apic import _compat
from apic._probes import cache_store

VARIABLE = "APIC_SOURCE_CACHE"  # "0": neither read nor write the folder
_KIND = "apic-source"


def key(source: bytes, options: dict) -> str:
    """The name the object compiled from the saved ``source`` with ``options`` on this host is kept under."""
    return cache_store.compiled_key(source, options, None, _compat.host_target())


def compiled(source: bytes, options: dict) -> bytes:
    """``source`` (a module's checked saved source) compiled for this host with ``options``: the object an
    earlier load kept, or compiled here and kept. A compiler error propagates, and nothing is kept."""
    _compat.runtime()  # Warp's kernel cache folder is set when Warp initialises
    name = key(source, options)
    image = cache_store.load_kept(_KIND, VARIABLE, name, "o")
    if image is None:
        image = _compat.compile_cpu_source(source, options)
        cache_store.keep(_KIND, VARIABLE, name, "o", image)
    return image
