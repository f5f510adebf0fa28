"""Objects compiled from a loaded graph's saved source, kept between processes, in Warp's kernel cache folder.

A graph whose saved objects cannot run here (built for a CPU with features this one lacks, saved without them,
or a packaged binary that fails its checks) loads by compiling each module's saved source with this Warp:
seconds a module, in every process that loads it. Kept in ``<Warp's kernel cache>/apic-source/``, a later load of
the same source on this host takes the object instead, as Warp takes a module it built before. The key
(:func:`apic._probes.cache_store.compiled_key`, as the parallel replay's range objects') is the SHA-256 of the
source, its build options, the warp-lang version, and this host's CPU and its features.

A compile that the compiler refuses with an error in the source itself (``module.cpp:LINE:COLUMN: error:``, or a
``fatal error:`` for a header it does not find, as the source of another warp-lang gets from this one's headers)
is kept too, under ``apic-source-refused/``, as its message: a later load of the same source on this host is
refused with the same words at once, instead of after seconds of compiling to the same end. Its key adds the
names, sizes and times of Warp's native headers, so that a reinstalled or mended Warp tries again. Any other
failure (a full disk, too many open files, a killed compiler) is never kept, so it is tried again at the next load.

Files are kept by :mod:`apic._probes.cache_store` (a damaged one is compiled again, never loaded; a folder that
cannot be written keeps nothing; unused ones are pruned). ``APIC_SOURCE_CACHE=0`` compiles at every load.
"""

from __future__ import annotations

import functools
import os
import re

import warp as wp

from apic import _compat
from apic._probes import cache_store

VARIABLE = "APIC_SOURCE_CACHE"  # "0": neither read nor write the folder
_KIND = "apic-source"
_REFUSED_KIND = "apic-source-refused"
# the compiler's own diagnostic of an error at a place in the module's source: the source cannot compile here.
# Of the fatal ones only a missing header: "cannot open file 'x.h': Too many open files" is the machine's
_SOURCE_ERROR = re.compile(r"\bmodule\.cpp:\d+:\d+: (?:error: |fatal error: '[^']*' file not found)")


def is_source_error(message: str) -> bool:
    """Whether a failed compile's ``message`` is the compiler's refusal of the source itself, which a later
    compile of the same source with the same headers would repeat (kept), rather than a failure of the machine."""
    return _SOURCE_ERROR.search(message) is not None


def key(source: bytes, options: dict) -> str:
    """The name the object compiled from the saved ``source`` with ``options`` on this host is kept under."""
    return cache_store.compiled_key(source, options, None, _compat.host_target())


# where Warp's CPU compiler takes the headers a module's source includes (warp._src.build: <warp_home>/native)
_WARP_HEADERS = os.path.join(os.path.dirname(os.path.realpath(wp.__file__)), "native")


@functools.lru_cache(maxsize=None)
def _headers(folder: str = _WARP_HEADERS) -> str:
    """The files in ``folder`` (the headers a module's source includes), by name, size and modification time."""
    try:
        with os.scandir(folder) as entries:
            return repr(sorted((e.name, e.stat().st_size, e.stat().st_mtime_ns) for e in entries if e.is_file()))
    except OSError:
        return "unreadable"


def compiled(source: bytes, options: dict) -> bytes:
    """``source`` (a module's checked saved source) compiled for this host with ``options``: the object an
    earlier load kept, or compiled here and kept. A compiler error propagates (``RuntimeError``); one in the
    source itself is kept, and raised again by a later call without compiling."""
    _compat.runtime()  # Warp's kernel cache folder is set when Warp initialises
    name = key(source, options)
    image = cache_store.load_kept(_KIND, VARIABLE, name, "o")
    if image is not None:
        return image
    refused_name = f"{name} {_headers()}"
    refusal = cache_store.load_kept(_REFUSED_KIND, VARIABLE, refused_name, "txt")
    if refusal is not None:
        raise RuntimeError(refusal.decode("utf-8", "replace"))  # the words of the compile it keeps
    try:
        image = _compat.compile_cpu_source(source, options)
    except RuntimeError as error:
        if is_source_error(str(error)):
            cache_store.keep(_REFUSED_KIND, VARIABLE, refused_name, "txt", str(error).encode("utf-8"))
        raise
    cache_store.keep(_KIND, VARIABLE, name, "o", image)
    return image
