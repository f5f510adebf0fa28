"""This host, cheaply: apic's cache folder, the CPU's identity and installed package versions, all
without importing Numba or llvmlite (a first replay or load pays for neither)."""

from __future__ import annotations

import functools
import importlib.util
import os
import platform
import re
import stat
import tempfile
import time

from apic._probes import aarch64, x86_64


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


def distribution_version(package: str) -> str:
    """An installed package's version, read from its ``.dist-info`` folder name (``importlib.metadata``
    costs tens of milliseconds); else the size and time of its ``__init__.py``. Never imports it."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.origin:
        return "absent"
    site = os.path.dirname(os.path.dirname(spec.origin))
    prefix = package.lower() + "-"
    try:
        names = [entry.name for entry in os.scandir(site)
                 if entry.name.lower().startswith(prefix) and entry.name.endswith(".dist-info")]
    except OSError:
        names = []
    if len(names) == 1:
        return names[0][len(prefix):-len(".dist-info")]
    stat = os.stat(spec.origin)
    return f"{spec.origin}:{stat.st_size}:{stat.st_mtime_ns}"


@functools.lru_cache(maxsize=None)
def cpu_identity() -> str | None:
    """This CPU's vendor, model and instruction-set flags, as the CPU itself reports them, from the probe
    of its family (``apic._probes.x86_64``: CPUID; ``apic._probes.aarch64``: MIDR_EL1 and the capability
    words); None for a family without one (ask LLVM then)."""
    probe = _IDENTITY_PROBES.get(platform.machine().lower())
    return None if probe is None else probe()


def cpu_features() -> dict | None:
    """What this CPU's family probe says of it where LLVM's own answer is not to be trusted (LLVM reads
    ``/proc/cpuinfo`` on AArch64 Linux, the host's under an emulator): ``cpu`` (a core name or None),
    ``features`` and ``known`` (the features the probe decides), in LLVM's names; None elsewhere."""
    probe = _FEATURE_PROBES.get(platform.machine().lower())
    return None if probe is None else probe()


_IDENTITY_PROBES = {machine: family.cpu_identity for family in (x86_64, aarch64) for machine in family.MACHINES}
_FEATURE_PROBES = {machine: aarch64.cpu_features for machine in aarch64.MACHINES}
