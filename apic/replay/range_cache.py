"""Range objects kept between processes (:mod:`apic.replay.range_entry`), in Warp's kernel cache folder.

A module's range object is its generated source with the range entries appended, compiled by Warp's CPU
compiler: as long as Warp's own build of the module (14 s for newton's Featherstone kernels here), paid by
the first parallel replay of every process. Kept in ``<Warp's kernel cache>/apic-range/<key>.o``, a later
process loads it instead. The key is the SHA-256 of everything the object depends on: the source compiled
(the range entries included), the build options and CPU level, the warp-lang version, and this host's
CPU and its features (Warp builds for the host, ``-march=native``: a cache folder shared by other machines
must not hand one of them code for another CPU).

Each file is the object followed by its own SHA-256: a truncated or damaged file (a process killed while
writing, a full disk) fails that check and is built again, never loaded. Files are written to a temporary
name and renamed into place. A folder that cannot be written, or ``APIC_RANGE_CACHE=0``, leaves every
build in memory, once per process, as before.
"""

from __future__ import annotations

import hashlib
import os
import tempfile

import warp as wp

from apic import _compat

VARIABLE = "APIC_RANGE_CACHE"  # "0": neither read nor write the folder
_DIGEST = hashlib.sha256().digest_size


def key(source: bytes, options: dict, level: str | None) -> str:
    """The file name (without ``.o``) of the range object compiled from ``source`` with ``options``."""
    host = _compat.host_target()
    facts = (sorted(options.items()), level, wp.config.version, host.get("cpu"), sorted(host.get("features", ())))
    return hashlib.sha256(source + repr(facts).encode()).hexdigest()


def _folder() -> str | None:
    if os.environ.get(VARIABLE) == "0":
        return None
    cache = getattr(wp.config, "kernel_cache_dir", None)
    return os.path.join(cache, "apic-range") if cache else None


def load(name: str) -> bytes | None:
    """The object kept under ``name``, or None (none kept, a damaged file, no cache folder)."""
    folder = _folder()
    if folder is None:
        return None
    try:
        with open(os.path.join(folder, name + ".o"), "rb") as f:
            data = f.read()
    except OSError:
        return None
    image, digest = data[:-_DIGEST], data[-_DIGEST:]
    if len(data) <= _DIGEST or hashlib.sha256(image).digest() != digest:
        return None
    return image


def store(name: str, image: bytes) -> None:
    """Keep ``image`` under ``name`` for later processes; a folder that cannot be written keeps nothing."""
    folder = _folder()
    if folder is None:
        return
    try:
        os.makedirs(folder, exist_ok=True)
        handle, temporary = tempfile.mkstemp(prefix=f".{name}.", dir=folder)
        try:
            with os.fdopen(handle, "wb") as f:
                f.write(image + hashlib.sha256(image).digest())
            os.replace(temporary, os.path.join(folder, name + ".o"))
        except BaseException:
            os.unlink(temporary)
            raise
    except OSError:  # a read-only or full cache folder: the object stays this process's
        pass
