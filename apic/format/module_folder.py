"""Reading ``<stem>_modules/`` safely at load: no symlinks, only regular files of the recorded size.

The folder is opened once, without following a symlink (its parent path is resolved first, so a
user's path through symlinked folders still works), and every module file is opened relative to that
descriptor with ``O_NOFOLLOW | O_NONBLOCK``: a symlink is refused, a FIFO or device node is refused
without ever blocking on it, and the file must be a regular file of exactly the size the ``.wrp``
records, read with that bound. Anything else raises ``FormatError`` naming the file.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat

from apic.errors import FormatError

_DIR_FLAGS = (os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0)
              | getattr(os, "O_CLOEXEC", 0))
_FILE_FLAGS = (os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
               | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0))


class ModuleFolder:
    """``fetch(name)`` for the loader: the bytes of module file ``name``, None if it is absent."""

    def __init__(self, modules_dir: str, sizes: dict[str, int]) -> None:
        parent = os.path.realpath(os.path.dirname(os.path.abspath(modules_dir)))
        self.path = os.path.join(parent, os.path.basename(modules_dir))
        self.sizes = sizes
        self._fd: int | None = None
        self._missing = False

    @classmethod
    def of(cls, modules_dir: str, saved) -> "ModuleFolder":
        """The folder of a read graph: its module files and, saved with ``source_fallback=True``, their
        generated sources, each readable only at the size the ``.wrp`` records."""
        sizes = {module.file: module.size for module in saved.modules}
        sizes.update({m.source.file: m.source.size for m in saved.modules if m.source is not None})
        sizes.update({m.manifest.file: m.manifest.size for m in saved.modules if m.manifest is not None})
        return cls(modules_dir, sizes)

    def names(self) -> list[str]:
        """The names of the folder's entries (empty if there is no folder)."""
        folder = self._folder()
        if folder is None:
            return []
        with os.scandir(folder) as entries:
            return [entry.name for entry in entries]

    def _folder(self) -> int | None:
        if self._fd is None and not self._missing:
            try:
                self._fd = os.open(self.path, _DIR_FLAGS)
            except FileNotFoundError:
                self._missing = True
            except OSError as error:
                if error.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise FormatError(f"the modules folder {self.path} is a symlink or not a folder; "
                                      "apic reads module files only from a real folder") from None
                raise
        return self._fd

    def fetch(self, name: str):
        """The contents of ``name`` (exactly its recorded size), None if absent; FormatError if unsafe."""
        size = self.sizes.get(name)
        # reader.read has checked the name (no separators, no leading dot); check again on the resolved path
        if size is None or os.path.dirname(os.path.join(self.path, name)) != self.path or name in (".", ".."):
            return None
        folder = self._folder()
        if folder is None:
            return None
        where = f"module file '{name}' in {self.path}"
        try:
            fd = os.open(name, _FILE_FLAGS, dir_fd=folder)
        except FileNotFoundError:
            return None
        except OSError as error:
            if error.errno == errno.ELOOP:
                raise FormatError(f"{where} is a symlink; apic does not follow links in the modules folder") from None
            raise FormatError(f"{where} cannot be opened: {error.strerror}") from None
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise FormatError(f"{where} is not a regular file (a folder, FIFO or device node is refused)")
            if info.st_size != size:
                raise FormatError(f"{where} holds {info.st_size} bytes; the graph file records {size}")
            chunks, left = [], size + 1  # one byte more than recorded shows a file that grew meanwhile
            while left > 0:
                chunk = os.read(fd, min(left, 1 << 24))
                if not chunk:
                    break
                chunks.append(chunk)
                left -= len(chunk)
            data = b"".join(chunks)
            if len(data) != size:
                raise FormatError(f"{where} changed size while being read ({len(data)} bytes, recorded {size})")
            return data
        finally:
            os.close(fd)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


# A file the user names (a .wrp, a .npy): links followed (the user chose the path), never blocking on open.
_USER_FILE_FLAGS = (os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
                    | getattr(os, "O_BINARY", 0))


def open_regular(path: str):
    """``path`` opened for binary reading if it is a regular file; ``OSError`` otherwise (``IsADirectoryError``
    for a folder). A FIFO or device node (``/dev/zero``) is refused without blocking on it or reading it, so a
    file named by the user can neither hang a read nor feed it endless bytes."""
    fd = os.open(path, _USER_FILE_FLAGS)
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(errno.EISDIR, "Is a directory", path)
        if not stat.S_ISREG(mode):
            raise OSError(errno.EINVAL, "Not a regular file (a FIFO, socket or device node)", path)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_regular(path: str) -> bytes:
    """The bytes of the regular file ``path`` (``open_regular``), read up to the size it had when opened."""
    with open_regular(path) as f:
        return f.read(os.fstat(f.fileno()).st_size)


def fetch_verified(fetch, kind: str, file: str, module_name: str, size: int, sha256: str, origin: str) -> bytes:
    """The bytes of ``file`` from ``fetch``, checked against the size and SHA-256 the graph file records.

    ``kind`` names the file in errors (``"module file"``, ``"kernel manifest"``); ``origin`` names where the
    files come from (a folder, or the bytes given to ``capture_load_from_bytes``).
    """
    data = fetch(file)
    if data is None:
        raise FormatError(f"{kind} '{file}' (Warp module '{module_name}') is missing from {origin}")
    data = bytes(data)
    if len(data) != size or hashlib.sha256(data).hexdigest() != sha256:
        raise FormatError(f"{kind} '{file}' in {origin} does not match the SHA-256 recorded in the graph file "
                          "(it was modified, or belongs to another save)")
    return data


def verified_images(saved, fetch, origin: str) -> dict[str, bytes]:
    """The module binaries ``saved`` needs, from ``fetch``, each checked against its size and SHA-256."""
    images: dict[str, bytes] = {}
    for module in saved.modules:
        if module.file in images:
            continue
        images[module.file] = fetch_verified(fetch, "module file", module.file, module.name, module.size,
                                             module.sha256, origin)
    return images
