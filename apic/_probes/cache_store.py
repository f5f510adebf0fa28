"""The one store of every file apic keeps between processes, and its one pruning rule.

Two places, one rule. In apic's own cache folder (:func:`cache_folder`): the native serial interpreter's
object (``serial-interpreter-*.o``, ``apic.replay.cpu.native_interpreter``) and the host's CPU target
(``host-target-*.json``, ``apic._probes.cpu``). In Warp's kernel cache folder, one sub-folder per kind, what
the parallel replay keeps (:func:`kept_path`, :func:`load_kept`, :func:`keep`): range objects
(``apic-range``, ``apic.replay.parallel.range_cache``), footprint verdicts (``apic-footprint``,
``apic.replay.parallel.footprint_cache``), and objects compiled from a loaded graph's saved source with the
compiler's refusals of such source (``apic-source``, ``apic-source-refused``, ``apic.format.source_cache``), each
switched off by its own environment variable set to ``"0"``.

Every file is named ``<kind>-<32 hex digits>.<ext>`` and starts with its kind's magic bytes; a kept file
ends with the SHA-256 of what precedes it, so that a truncated or damaged one (a process killed while
writing, a full disk) reads as absent, never as contents. Files are written to a hidden temporary and
renamed into place; a folder that cannot be written keeps nothing, silently. Each store prunes its kind
(:func:`prune_cache`): a file unused for ``CACHE_UNUSED_DAYS`` goes, and so does one unused for a day
beyond the ``CACHE_KEEP_RECENT`` most recently used; temporaries over an hour old go too.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
import tempfile
import time

import warp as wp


def cache_folder() -> str:
    """apic's own cache folder: ``$XDG_CACHE_HOME/apic``, by default ``~/.cache/apic``."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "apic")


# A file apic keeps in its cache: its kind, 32 hex digits of its key's digest, its extension. While it
# is written it is a hidden temporary beside it, ``.<name>.<random>.partial``.
_CACHE_NAME = re.compile(r"(?P<kind>[a-z]+(?:-[a-z]+)*)-[0-9a-f]{32}(?P<ext>\.[a-z]+)")
_DAY = 24 * 3600
#: Cache pruning: a file of a kind unused for ``CACHE_UNUSED_DAYS`` is removed when a new one of its kind
#: is stored, and so is one unused for a day beyond the ``CACHE_KEEP_RECENT`` most recently used.
CACHE_UNUSED_DAYS = 30
CACHE_KEEP_RECENT = 8
# A file's modification time is its last use; a read refreshes it at most this often (one write an hour).
_USE_RESOLUTION_S = 3600
# A temporary older than this belongs to a writer that died (a write takes milliseconds).
_ABANDONED_S = 3600


def read_cache_file(path: str, limit: int) -> bytes | None:
    """The first ``limit + 1`` bytes of the regular file ``path`` (a longer file is too long, for the
    caller to refuse), marked as used; None where it is absent, unreadable or not a regular file (a
    folder, a FIFO or device a plain ``open`` would block on or read forever)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    try:
        status = os.fstat(fd)
        if not stat.S_ISREG(status.st_mode):
            return None
        with os.fdopen(os.dup(fd), "rb") as f:
            data = f.read(limit + 1)
        if time.time() - status.st_mtime > _USE_RESOLUTION_S:
            try:
                os.utime(fd if os.utime in os.supports_fd else path)
            except OSError:
                pass  # a read-only cache: the file ages, and is rebuilt once pruned
        return data
    except OSError:
        return None
    finally:
        os.close(fd)


def store_in_cache(path: str, data: bytes, magic: bytes) -> None:
    """Write ``data`` (which starts with ``magic``) to ``path`` atomically (a reader sees the old file or
    the new one), then prune the cache of its kind (``prune_cache``); quietly nothing where the cache
    folder is not writable (what it would hold then lives in this process only)."""
    folder, name = os.path.split(path)
    try:
        os.makedirs(folder, exist_ok=True)
        fd, temporary = tempfile.mkstemp(prefix=f".{name}.", suffix=".partial", dir=folder)
    except OSError:
        return
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(temporary, path)
    except OSError:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        return
    prune_cache(path, magic)


def prune_cache(path: str, magic: bytes, now: float | None = None) -> list[str]:
    """Remove the files of ``path``'s kind in its folder that have gone unused (``CACHE_UNUSED_DAYS``,
    ``CACHE_KEEP_RECENT``), and their writers' abandoned temporaries; return the names removed.

    Only apic's own files go: a regular file (not a link) named as apic names that kind, whose first
    bytes are ``magic``; never ``path`` itself. Races with other processes are harmless (a file another
    one removed first is skipped; one pruned just after a read was already read). Never raises.
    """
    folder, name = os.path.split(path)
    kind = _CACHE_NAME.fullmatch(name)
    if kind is None:
        return []
    own = re.compile(re.escape(kind["kind"]) + r"-[0-9a-f]{32}" + re.escape(kind["ext"]))
    now = time.time() if now is None else now
    files, partials = [], []
    try:
        with os.scandir(folder) as entries:
            for entry in entries:
                if entry.name != name and own.fullmatch(entry.name):
                    files.append(entry.name)
                elif entry.name.startswith(".") and entry.name.endswith(".partial") and own.fullmatch(
                        entry.name[1:].rsplit(".", 2)[0]):
                    partials.append(entry.name)
    except OSError:
        return []
    used = sorted(((when, n) for n in files if (when := _last_use(folder, n, magic, whole=True)) is not None),
                  reverse=True)
    stale = [n for rank, (when, n) in enumerate(used)
             if now - when > CACHE_UNUSED_DAYS * _DAY or (rank >= CACHE_KEEP_RECENT and now - when > _DAY)]
    for n in partials:
        when = _last_use(folder, n, magic, whole=False)
        if when is not None and now - when > _ABANDONED_S:
            stale.append(n)
    removed = []
    for n in stale:
        try:
            os.unlink(os.path.join(folder, n))
            removed.append(n)
        except OSError:
            pass  # another process removed it first, or the folder is read-only
    return removed


def _last_use(folder: str, name: str, magic: bytes, whole: bool) -> float | None:
    """The modification time of apic's file ``name``: a regular file starting with ``magic`` (or, not
    ``whole``, with a part of it: a temporary may hold fewer bytes); None for anything else."""
    try:
        fd = os.open(os.path.join(folder, name), os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0)
                     | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None  # a link (O_NOFOLLOW), unreadable, or gone
    try:
        status = os.fstat(fd)
        head = os.read(fd, len(magic)) if stat.S_ISREG(status.st_mode) else None
    except OSError:
        head = None
    finally:
        os.close(fd)
    if head is None or not (head == magic if whole else magic.startswith(head)):
        return None
    return status.st_mtime


# --- files kept in Warp's kernel cache folder, one sub-folder per kind -------------------------------------
KEPT_LIMIT = 1 << 30  # the largest kept file read (a range object is megabytes)
_DIGEST = hashlib.sha256().digest_size


def _kept_magic(kind: str) -> bytes:
    return b"apic " + kind.encode() + b"\n"


def kept_path(kind: str, variable: str, name: str, ext: str) -> str | None:
    """Where ``name`` of ``kind`` is kept: ``<Warp's kernel cache>/<kind>/<kind>-<digest of name>.<ext>``; None
    when ``variable`` is ``"0"`` or Warp has no cache folder."""
    if os.environ.get(variable) == "0":
        return None
    cache = getattr(wp.config, "kernel_cache_dir", None)
    if not cache:
        return None
    return os.path.join(cache, kind, f"{kind}-{hashlib.sha256(name.encode()).hexdigest()[:32]}.{ext}")


def compiled_key(source: bytes, options: dict, level: str | None, host: dict) -> str:
    """The name an object compiled from ``source`` with ``options`` for CPU ``level`` (None: the host's) is kept
    under: the SHA-256 of everything the object depends on, the warp-lang version and the ``host`` target
    (``apic._compat.host_target()``) included. Warp builds for the host (``-march=native``): a cache folder
    shared by other machines must not hand one of them code for another CPU."""
    facts = (sorted(options.items()), level, wp.config.version, host.get("cpu"), sorted(host.get("features", ())))
    return hashlib.sha256(source + repr(facts).encode()).hexdigest()


def kept_bytes(kind: str, contents: bytes) -> bytes:
    """The bytes a kept file of ``kind`` holding ``contents`` is made of: magic, contents, their SHA-256."""
    data = _kept_magic(kind) + contents
    return data + hashlib.sha256(data).digest()


def load_kept(kind: str, variable: str, name: str, ext: str) -> bytes | None:
    """The contents kept as ``name`` of ``kind``, or None (none kept, a damaged file, no cache folder)."""
    path = kept_path(kind, variable, name, ext)
    data = None if path is None else read_cache_file(path, KEPT_LIMIT)
    magic = _kept_magic(kind)
    if data is None or len(data) > KEPT_LIMIT or len(data) < len(magic) + _DIGEST or not data.startswith(magic):
        return None
    if hashlib.sha256(data[:-_DIGEST]).digest() != data[-_DIGEST:]:
        return None
    return data[len(magic):-_DIGEST]


def keep(kind: str, variable: str, name: str, ext: str, contents: bytes) -> None:
    """Keep ``contents`` as ``name`` of ``kind`` for later processes, and prune the kind; a folder that cannot
    be written keeps nothing."""
    path = kept_path(kind, variable, name, ext)
    if path is not None:
        store_in_cache(path, kept_bytes(kind, contents), _kept_magic(kind))
