"""What apic asks of the operating system that Linux alone answers, one function per question, each with
the answer it falls back to where the Linux source is missing (macOS, a container without ``/proc``):

* :func:`c_function`: a C library function's address (the thread pool's ``syscall``, ``nanosleep``,
  ``sched_yield`` and ``memcmp``, the AArch64 probe's ``getauxval``, the profile's ``clock_gettime``),
  from the process's own symbols (``dlopen(NULL)``: glibc on Linux, libSystem on macOS), else from the
  library ``ctypes.util`` finds for ``c``; None where neither has it.
* :func:`wait_primitive`: how the parallel replay's idle workers sleep (``apic.replay.parallel.split_pool``):
  ``"futex"`` (Linux, the futex system call of the CPU family, ``apic.targets.<family>.FUTEX_SYSCALL``),
  else ``"portable"`` (spin, then ``nanosleep`` naps until the next launch: any POSIX C library); the
  ``APIC_WAIT`` environment variable chooses (docs/threads.md).
* :func:`fd_path`: the path that names an open file descriptor (Linux's ``/proc/self/fd/N``), for Warp's
  object loader and the atomic publish of a save; None where there is no such folder (a temporary
  file is used instead).
* :func:`monotonic_clock`: ``clock_gettime`` and the id of the monotonic clock (Linux 1, macOS 6).
* :func:`object_format` / :func:`object_format_of`: the object format this OS's Warp compiles modules
  to (ELF, Mach-O, COFF) and the one a module file is in (its magic number), for messages that say why
  an object does not load.

The other Linux-only sources already have their fallback where they are read: ``MIDR_EL1`` from sysfs
(``apic._probes.aarch64.read_midr``: None without the file), the CPUs a process may run on
(``apic.replay.parallel.thread_count.usable_cpus``: ``os.cpu_count()`` without ``sched_getaffinity``), the
physical memory (``apic.loading``: ``sysconf``), and the CUDA driver's name (``apic.targets.cuda``:
Linux's; there is no CUDA on macOS).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import platform
import sys

from apic.targets.cpu import FAMILY_NAMES, cpu_family

PROC = "/proc"  # Linux's process file system
WAIT_SETTING = "APIC_WAIT"  # the environment variable that chooses the pool's wait (docs/threads.md)
WAITS = ("futex", "portable")
# CLOCK_MONOTONIC's id in each system's <time.h>
_MONOTONIC = {"linux": 1, "darwin": 6, "freebsd": 4}
# each object format's magic numbers at the start of a file
_MAGIC = ((b"\x7fELF", "ELF"), (b"\xcf\xfa\xed\xfe", "Mach-O"), (b"\xfe\xed\xfa\xcf", "Mach-O"))
_COFF_MACHINES = (b"\x64\x86", b"\x64\xaa", b"\x4c\x01")  # IMAGE_FILE_MACHINE_AMD64, ARM64, I386


@functools.lru_cache(maxsize=None)
def _process_library():
    """The process's own symbols (``dlopen(NULL)``), else the C library ``ctypes.util`` finds; None where
    there is neither (Windows)."""
    try:
        return ctypes.CDLL(None)
    except (OSError, TypeError):  # Windows: no dlopen(NULL)
        pass
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name) if name else None
    except OSError:
        return None


def c_function(name: str, library: str | None = None) -> int | None:
    """The address of the C library function ``name``; None where there is none. ``library`` names a
    shared library to look in instead of the process's own symbols (None: the process's)."""
    if library is None:
        lib = _process_library()
    else:
        try:
            lib = ctypes.CDLL(library)
        except OSError:
            return None
    try:
        return ctypes.cast(getattr(lib, name), ctypes.c_void_p).value if lib is not None else None
    except AttributeError:
        return None


def wait_primitive(setting: str | None = None, system: str | None = None, machine: str | None = None,
                   library: str | None = None) -> str | None:
    """How the parallel replay's idle workers sleep here: ``"futex"``, ``"portable"``, or None where
    neither can (no C library with ``nanosleep``: the replay then runs serially).

    ``setting`` is the user's choice (default: the ``APIC_WAIT`` environment variable): ``"futex"``,
    ``"portable"``, or empty / ``"auto"`` for the futex where Linux has one for this CPU family, else
    ``"portable"``. ``system``, ``machine`` and ``library`` default to this process's ``sys.platform``,
    ``platform.machine()`` and C library (see :func:`c_function`). A setting that names no wait, or the futex
    where there is none, is a ``ValueError`` that says what can be chosen.
    """
    setting = os.environ.get(WAIT_SETTING, "") if setting is None else setting
    system = sys.platform if system is None else system
    machine = platform.machine() if machine is None else machine
    if setting not in ("", "auto", *WAITS):
        raise ValueError(f"{WAIT_SETTING}={setting!r} names no wait of the parallel replay; choose futex, portable "
                         "or auto")
    futex = (system.startswith("linux") and futex_syscall(machine) is not None
             and c_function("syscall", library) is not None)
    if setting == "futex" and not futex:
        raise ValueError(f"{WAIT_SETTING}=futex: this machine has no futex apic can call ({system} on {machine}; "
                         f"futexes are Linux's, on {' and '.join(FAMILY_NAMES)}); choose portable or auto")
    if futex and setting != "portable":
        return "futex"
    return "portable" if c_function("nanosleep", library) is not None else None


def futex_syscall(machine: str | None = None) -> int | None:
    """Linux's futex system call number on ``machine`` (default: this one); None for a CPU family apic does
    not know."""
    family = cpu_family(platform.machine() if machine is None else machine)
    return None if family is None else family.FUTEX_SYSCALL


def fd_path(fd: int, proc: str = PROC) -> str | None:
    """A path naming the open file descriptor ``fd`` (``<proc>/self/fd/<fd>``: open it to read the file from
    its start, or ``linkat`` it into a folder), where the process file system has that folder; None elsewhere
    (macOS's ``/dev/fd`` duplicates the descriptor, its offset included, and cannot be linked)."""
    folder = os.path.join(proc, "self", "fd")
    return os.path.join(folder, str(fd)) if os.path.isdir(folder) else None


def monotonic_clock(system: str | None = None, library: str | None = None) -> tuple[int, int] | None:
    """``(address of clock_gettime, CLOCK_MONOTONIC)`` on ``system`` (default: this one); None where the id of
    its monotonic clock is not known here, or the C library has no ``clock_gettime``."""
    clock = _MONOTONIC.get(sys.platform if system is None else system)
    address = c_function("clock_gettime", library)
    return None if clock is None or address is None else (address, clock)


def object_format(system: str | None = None) -> str:
    """The object format Warp compiles CPU modules to on ``system`` (default: this one): ``"ELF"`` (Linux and
    other Unix systems), ``"Mach-O"`` (macOS), ``"COFF"`` (Windows)."""
    system = sys.platform if system is None else system
    return "Mach-O" if system == "darwin" else "COFF" if system in ("win32", "cygwin") else "ELF"


def object_format_of(data) -> str | None:
    """The object format of a module file's bytes, from its magic number (``"ELF"``, ``"Mach-O"``, ``"COFF"``);
    None for bytes in none of them."""
    head = bytes(data[:4])
    for magic, name in _MAGIC:
        if head == magic:
            return name
    return "COFF" if head[:2] in _COFF_MACHINES else None
