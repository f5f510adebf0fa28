"""Publishing a save atomically: ``<stem>.wrp`` and ``<stem>_modules/`` on disk, all or nothing.

``publish`` writes the bytes ``apic.format.writer`` made so that a save that fails at any point
leaves an earlier artifact at that path intact:

1. everything is gathered in memory first (nothing on disk changes if that fails);
2. every file is written and fsync'ed before any is published. On Linux each is an unnamed file
   (``O_TMPFILE``) until then, so a process killed while writing leaves nothing behind; elsewhere
   it is a temporary file with a fixed name, ``.<name>.apic-tmp``;
3. saves in one folder take turns from here on (``flock`` on the folder, where the system has it);
   on systems without unnamed files, step 2 happens under the lock too;
4. module binaries are content-addressed (``<module>.<sha256[:16]>.o``), so publishing the new ones
   in ``<stem>_modules/`` (made now, for a first save) never touches a file the old ``.wrp`` uses;
5. the new ``.wrp`` is renamed over the old one (or, for a first save, linked into place): this is
   the commit point. Replacing needs a named source, so on Linux the ``.wrp`` is linked at
   ``.<stem>.wrp.apic-tmp`` for the two system calls before the rename;
6. only then are the files apic wrote in ``<stem>_modules/`` that the new ``.wrp`` does not name
   removed (a module file whose contents match the hash in its name, or a temporary name of one;
   ``ownership``), with the ``.wrp``'s temporary name. The user's own files there are never removed.

An exception before the commit removes every file this save created. A killed process leaves the
old or the new artifact, complete. Killed between the first publication and the end of step 6 (a
few system calls that write no data), it also leaves module files the committed ``.wrp`` does not
name and at most the one temporary name (and a first save, ``<stem>_modules/``); a load ignores
them and the next save at that path removes them. docs/RELIABILITY.md (section 4) has the exact
guarantee and why POSIX allows no less.
"""

from __future__ import annotations

import errno
import os

from apic._probes import host_os
from apic.format import ownership

try:
    import fcntl  # the save lock: POSIX only
except ImportError:  # pragma: no cover - Windows
    fcntl = None

_TEMP_TAG = ".apic-tmp"


def _write_all(fd: int, data) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        if written <= 0:
            raise OSError(errno.EIO, "short write")
        view = view[written:]


def _temp_path(final: str) -> str:
    """The one temporary name a save ever gives ``final``'s new contents: ``.<name>.apic-tmp``, beside it.

    Fixed, not random: a killed save leaves at most this name per file, which the next save at that
    path (holding the same lock, so the name is stale) reuses or removes, and which a load never
    reads (module names may not start with a dot).
    """
    return os.path.join(os.path.dirname(final), "." + os.path.basename(final) + _TEMP_TAG)


def _unlink_quiet(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


class _Staged:
    """A complete, fsync'ed file for ``final``, not published yet: unnamed (``fd``, Linux) or ``named``
    ``_temp_path(final)``."""

    def __init__(self, final: str, fd: int | None) -> None:
        self.final, self.temp, self.fd, self.named = final, _temp_path(final), fd, False

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)  # an unnamed file that was never linked disappears here
            self.fd = None


def _open_unnamed(folder: str) -> int | None:
    """A new unnamed file in ``folder`` (Linux ``O_TMPFILE``), or None where the system cannot make one."""
    flag = getattr(os, "O_TMPFILE", 0)
    if not flag or host_os.fd_path(0) is None:  # naming it later goes through /proc/self/fd
        return None
    try:
        return os.open(folder, flag | os.O_RDWR, 0o644)
    except OSError:  # no O_TMPFILE on this file system; the named file then reports real problems (EACCES, ...)
        return None


def _open_temp(temp: str, created: list[str]) -> int:
    """Create ``temp`` afresh for writing; a file already there is a killed save's (the caller holds the lock)."""
    _unlink_quiet(temp)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(temp, flags, 0o644)
    created.append(temp)
    return fd


def _stage(final: str, data, created: list[str], folder: str | None = None, named: bool = True) -> _Staged | None:
    """Write ``data`` to a new file for ``final`` and fsync it; not published yet (see ``_publish``).

    Where it can be, the file is unnamed (in ``folder``, by default ``final``'s; on the same file
    system), so a process killed meanwhile leaves nothing. Otherwise it is ``_temp_path(final)``,
    listed in ``created`` (the caller holds the lock), or, unless ``named``, not written: None.
    """
    staged = _Staged(final, _open_unnamed(folder or os.path.dirname(final)))
    if staged.fd is None:
        if not named:
            return None
        staged.fd, staged.named = _open_temp(staged.temp, created), True
    try:
        if hasattr(os, "fchmod"):
            os.fchmod(staged.fd, 0o644)
        _write_all(staged.fd, data)
        os.fsync(staged.fd)
    except BaseException:
        staged.close()
        raise
    if staged.named:
        staged.close()
    return staged


def _link(fd: int, path: str) -> None:
    """Give the unnamed file ``fd`` the name ``path`` (which must not exist).

    ``linkat(AT_FDCWD, "/proc/self/fd/N", dir, name, AT_SYMLINK_FOLLOW)``, as open(2) describes;
    passing ``dst_dir_fd`` makes Python call ``linkat`` rather than ``link`` (which would not follow).
    """
    folder = os.open(os.path.dirname(path), os.O_RDONLY)
    try:
        os.link(host_os.fd_path(fd), os.path.basename(path), dst_dir_fd=folder, follow_symlinks=True)
    finally:
        os.close(folder)


def _copy_to_temp(fd: int, temp: str, created: list[str]) -> None:
    """Where an unnamed file cannot be linked after all: copy it to ``temp``, fsync'ed."""
    out = _open_temp(temp, created)
    try:
        if hasattr(os, "fchmod"):
            os.fchmod(out, 0o644)
        offset = 0
        while chunk := os.pread(fd, 1 << 20, offset):
            _write_all(out, chunk)
            offset += len(chunk)
        os.fsync(out)
    finally:
        os.close(out)


def _publish(staged: _Staged, created: list[str]) -> None:
    """Put a staged file at its final name, atomically replacing any file there; ``created`` lists new names.

    An unnamed file goes straight to a free final name (``linkat``: no temporary name at all).
    Replacing a file is a rename, and a rename needs a named source: POSIX has no call that puts an
    unnamed file over an existing name. So the file is linked at its temporary name for the two
    system calls before the rename.
    """
    if not staged.named:
        try:
            if not os.path.lexists(staged.final):
                try:
                    _link(staged.fd, staged.final)
                except FileExistsError:
                    pass
                else:
                    created.append(staged.final)
                    return
            _unlink_quiet(staged.temp)  # a killed save's (the caller holds the lock)
            _link(staged.fd, staged.temp)
            created.append(staged.temp)
        except OSError as error:
            if error.errno not in (errno.EXDEV, errno.EPERM, errno.ENOENT, errno.EOPNOTSUPP, errno.EINVAL):
                raise
            _copy_to_temp(staged.fd, staged.temp, created)  # /proc cannot be linked from here
        staged.named = True
    os.replace(staged.temp, staged.final)
    created.remove(staged.temp)


def _fsync_dir(folder: str) -> None:
    if os.name != "posix":
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _same_contents(path: str, data: bytes) -> bool:
    try:
        if os.path.islink(path) or not os.path.isfile(path) or os.path.getsize(path) != len(data):
            return False
        with open(path, "rb") as f:
            return f.read() == data
    except OSError:
        return False


def _lock(folder: str) -> int | None:
    """Lock ``folder`` (``flock``, exclusive) for this process; returns the descriptor to close, or None.

    Saves in one folder take turns to publish, commit and collect garbage, so no save removes a
    module file another has published and is about to commit, and a temporary name found by a save
    is a killed save's. The lock goes with the process: a killed save holds none. Where the system
    has no ``flock`` (Windows), or the folder cannot be opened or locked (some network file
    systems), saves are not serialized.
    """
    if fcntl is None:
        return None
    try:
        fd = ownership.open_folder(folder)  # never through a symlink swapped in after the caller resolved it
    except OSError as error:
        if error.errno in (errno.ELOOP, errno.ENOTDIR):
            raise
        return None  # a folder this user may write but not read, say
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
    except OSError as error:
        if error.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.EINVAL, errno.EBADF):
            os.close(fd)
            raise
    except BaseException:
        os.close(fd)
        raise
    return fd


def publish(wrp_path: str, modules_dir: str, data: bytes, images: dict[str, bytes]) -> None:
    """Write ``data`` to ``wrp_path`` and exactly ``images`` into ``modules_dir``, atomically (see above)."""
    os.makedirs(os.path.dirname(wrp_path), exist_ok=True)
    # resolved once: the lock and the cleanup then open the folders with O_NOFOLLOW
    out_dir = os.path.realpath(os.path.dirname(wrp_path))
    wrp_path = os.path.join(out_dir, os.path.basename(wrp_path))
    modules_dir = os.path.join(out_dir, os.path.basename(modules_dir))
    if os.path.isdir(wrp_path):
        raise IsADirectoryError(errno.EISDIR, "cannot save a graph over a directory", wrp_path)
    if os.path.islink(modules_dir) or (os.path.lexists(modules_dir) and not os.path.isdir(modules_dir)):
        raise FileExistsError(errno.EEXIST, "the modules folder path exists and is not a folder", modules_dir)

    created: list[str] = []  # names this save created, removed on failure (and the folder, if made)
    staged: dict[str, _Staged | None] = {}
    lock, made_dir = None, False
    try:
        try:
            # Unnamed files are written before taking the lock: nothing can see them. (Modules are
            # made in the .wrp's folder when there is no modules folder yet: it is made only later.)
            early = modules_dir if os.path.isdir(modules_dir) else out_dir
            for name, image in images.items():
                final = os.path.join(modules_dir, name)
                if not _same_contents(final, image):
                    staged[final] = _stage(final, image, created, early, named=False)
            staged[wrp_path] = _stage(wrp_path, data, created, out_dir, named=False)
            lock = _lock(out_dir)
            if not os.path.isdir(modules_dir):
                os.mkdir(modules_dir)
                made_dir = True
            # under the lock, look again (another save may have changed the folder meanwhile), and
            # write what could not be written unnamed: every file is written before any is published
            modules = []
            for name, image in images.items():
                final = os.path.join(modules_dir, name)
                if _same_contents(final, image):
                    if staged.get(final) is not None:
                        staged.pop(final).close()
                    continue
                if staged.get(final) is None:
                    staged[final] = _stage(final, image, created)
                modules.append(staged[final])
            if staged[wrp_path] is None:
                staged[wrp_path] = _stage(wrp_path, data, created)
            if made_dir:
                _fsync_dir(out_dir)  # the new folder's name is on disk before a .wrp can refer to it
            # everything is written and synced: publish the modules, then commit the .wrp
            for file in modules:
                _publish(file, created)
            _fsync_dir(modules_dir)
            _publish(staged[wrp_path], created)  # the commit point
        except BaseException:
            for path in reversed(created):
                try:
                    os.unlink(path)
                except OSError:
                    pass
            if made_dir:
                try:
                    os.rmdir(modules_dir)
                except OSError:
                    pass
            raise
        finally:
            for file in staged.values():
                if file is not None:
                    file.close()
        try:
            _fsync_dir(out_dir)
        except OSError:
            pass
        _collect_garbage(wrp_path, modules_dir, set(images), lock)
    finally:
        if lock is not None:
            os.close(lock)


def _collect_garbage(wrp_path: str, modules_dir: str, keep: set[str], out_fd: int | None) -> None:
    """After a commit: remove the ``.wrp``'s temporary name and, in ``<stem>_modules/``, every file
    apic wrote (an earlier graph's, a killed save's) that the committed ``.wrp`` does not use
    (``keep``). A file apic cannot show it wrote is never removed (``ownership``). Works relative to
    ``out_fd`` (the locked folder) where there is one, never through a symlink."""
    def name(path: str) -> str:  # relative to the locked folder where there is one
        return path if out_fd is None else os.path.basename(path)

    try:
        os.unlink(name(_temp_path(wrp_path)), dir_fd=out_fd)
    except OSError:
        pass
    try:
        folder = ownership.open_folder(name(modules_dir), dir_fd=out_fd)
    except OSError:
        return  # gone, or a symlink swapped in: nothing is removed
    try:
        ownership.remove_stale(folder, keep)
    finally:
        os.close(folder)
