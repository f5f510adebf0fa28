"""Files apic keeps between processes in Warp's kernel cache folder (range objects, footprint verdicts), one
sub-folder per kind, each switched off by its own environment variable set to ``"0"``.

Each file is its contents followed by their SHA-256: a truncated or damaged file (a process killed while
writing, a full disk) fails that check and reads as absent, never as contents. Files are written to a
temporary name and renamed into place. A folder that cannot be written keeps nothing, silently: what would
have been kept is made again by the next process.
"""

from __future__ import annotations

import hashlib
import os
import tempfile

import warp as wp

_DIGEST = hashlib.sha256().digest_size


def folder(kind: str, variable: str) -> str | None:
    """``<Warp's kernel cache>/<kind>``, or None when ``variable`` is ``"0"`` or Warp has no cache folder."""
    if os.environ.get(variable) == "0":
        return None
    cache = getattr(wp.config, "kernel_cache_dir", None)
    return os.path.join(cache, kind) if cache else None


def load(kind: str, variable: str, name: str) -> bytes | None:
    """The contents kept as ``name`` of ``kind``, or None (none kept, a damaged file, no cache folder)."""
    where = folder(kind, variable)
    if where is None:
        return None
    try:
        with open(os.path.join(where, name), "rb") as f:
            data = f.read()
    except OSError:
        return None
    contents, digest = data[:-_DIGEST], data[-_DIGEST:]
    if len(data) <= _DIGEST or hashlib.sha256(contents).digest() != digest:
        return None
    return contents


def store(kind: str, variable: str, name: str, contents: bytes) -> None:
    """Keep ``contents`` as ``name`` of ``kind`` for later processes; a folder that cannot be written keeps nothing."""
    where = folder(kind, variable)
    if where is None:
        return
    try:
        os.makedirs(where, exist_ok=True)
        handle, temporary = tempfile.mkstemp(prefix=f".{name}.", dir=where)
        try:
            with os.fdopen(handle, "wb") as f:
                f.write(contents + hashlib.sha256(contents).digest())
            os.replace(temporary, os.path.join(where, name))
        except BaseException:
            os.unlink(temporary)
            raise
    except OSError:  # a read-only or full cache folder: the contents stay this process's
        pass
