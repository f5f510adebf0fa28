"""Which files in ``<stem>_modules/`` a save may remove: only those apic can show it wrote.

A save cleans its modules folder after the commit, and that folder may hold the user's own files (a
first save into an existing folder, say). A file is removed only when both hold:

* its name is one apic's naming scheme produces: a module file ``<safe name>.<16 hex>.o``, a kernel
  manifest ``<safe name>.<16 hex>.<16 hex>.kernels``, or the fixed temporary name of one,
  ``.<file>.apic-tmp``;
* its contents prove it is apic's: a module file or manifest is a regular file whose SHA-256 starts
  with the (last) 16 hex digits in its name (what ``module_file_name`` / ``manifest.file_name`` wrote). A temporary name is reserved by apic
  (a killed save can leave one half written, so no contents can prove it); a regular file there is
  treated as a killed save's.

Everything else, symlinks and folders included, is left alone. All of it works relative to one
descriptor of the folder opened with ``O_NOFOLLOW``, so a symlink swapped in for the folder between
a check and the use is never followed.
"""  # noqa: E501 (long docstring lines kept: rewrapping would change __doc__)

from __future__ import annotations

import hashlib
import os
import re
import stat

from apic.targets import files

_MODULE_FILE = re.compile(rf"{files.WRITTEN_STEM}\.({files.DIGEST})\.o")
# a kernel manifest (apic.format.manifest): <module file stem>.<its own sha16>.kernels
_MANIFEST_FILE = re.compile(rf"{files.WRITTEN_STEM}\.{files.DIGEST}\.({files.DIGEST})\.kernels")
_TEMP_OF_MODULE = re.compile(rf"\.({files.WRITTEN_STEM}\.{files.DIGEST}\.(?:o|{files.DIGEST}\.kernels))\.apic-tmp")
_NOFOLLOW_DIR = (os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0)
                 | getattr(os, "O_CLOEXEC", 0))


def open_folder(name: str, dir_fd: int | None = None) -> int:
    """A descriptor of the folder ``name`` (relative to ``dir_fd``), never through a symlink.

    Raises OSError (ELOOP or ENOTDIR) when ``name`` is a symlink or not a folder.
    """
    return os.open(name, _NOFOLLOW_DIR, dir_fd=dir_fd)


def _hash_prefix_matches(dir_fd: int, name: str, prefix: str) -> bool:
    """Whether ``name`` in ``dir_fd`` is a regular file whose SHA-256 starts with ``prefix``."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(name, flags, dir_fd=dir_fd)
    except OSError:
        return False
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return False
        digest = hashlib.sha256()
        while chunk := os.read(fd, 1 << 20):
            digest.update(chunk)
        return digest.hexdigest().startswith(prefix)
    except OSError:
        return False
    finally:
        os.close(fd)


def is_apic_file(dir_fd: int, name: str) -> bool:
    """Whether the entry ``name`` of the modules folder ``dir_fd`` is one apic wrote (see the module doc)."""
    try:
        info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return False
    if not stat.S_ISREG(info.st_mode):
        return False
    if _TEMP_OF_MODULE.fullmatch(name):
        return True
    match = _MODULE_FILE.fullmatch(name) or _MANIFEST_FILE.fullmatch(name)
    return bool(match) and _hash_prefix_matches(dir_fd, name, match.group(1))


def remove_stale(dir_fd: int, keep: set[str]) -> list[str]:
    """Remove apic's own files in the folder ``dir_fd`` that are not in ``keep``; returns their names."""
    removed = []
    try:
        with os.scandir(dir_fd) as entries:
            names = [entry.name for entry in entries if entry.name not in keep]
    except OSError:
        return removed
    for name in names:
        if not is_apic_file(dir_fd, name):
            continue
        try:
            os.unlink(name, dir_fd=dir_fd)
        except OSError:  # gone meanwhile, or not removable here: a later save tries again
            continue
        removed.append(name)
    return removed
