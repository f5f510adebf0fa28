"""The operating-system seams (``apic._probes.host_os`` and the probes that read Linux's files), each asked with
its Linux source missing: what a macOS (or a container without ``/proc``) process gets, checked on Linux. The
portable wait itself replays in ``tests/parallel/test_pool_wait.py``."""

from __future__ import annotations

import ctypes
import os
import sys
import time

import pytest

from apic._probes import aarch64, host_os
from apic.c_library import toolchain

pytestmark = [pytest.mark.once]

LINUX = sys.platform.startswith("linux")
MISSING_LIBRARY = "libapic-no-such-library.so.0"


def test_c_function_found_and_missing():
    memcmp = host_os.c_function("memcmp")
    assert memcmp, "the process's C library has memcmp"
    call = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t)(memcmp)
    assert call(b"abc", b"abd", 2) == 0 and call(b"abc", b"abd", 3) < 0  # it is memcmp
    assert host_os.c_function("apic_no_such_function") is None
    assert host_os.c_function("memcmp", library=MISSING_LIBRARY) is None


@pytest.mark.skipif(not LINUX or host_os.futex_syscall() is None, reason="a Linux host of a known CPU family")
def test_wait_on_linux_is_the_futex_unless_chosen():
    assert host_os.wait_primitive("") == host_os.wait_primitive("auto") == host_os.wait_primitive("futex") == "futex"
    assert host_os.wait_primitive("portable") == "portable"


@pytest.mark.parametrize(("system", "machine"), [("darwin", "arm64"), ("darwin", "x86_64"), ("linux", "riscv64"),
                                                 ("freebsd14", "amd64")])
def test_wait_without_a_futex_is_portable(system, machine):
    assert host_os.wait_primitive("", system=system, machine=machine) == "portable"
    assert host_os.wait_primitive("portable", system=system, machine=machine) == "portable"
    with pytest.raises(ValueError, match="APIC_WAIT=futex: this machine has no futex"):
        host_os.wait_primitive("futex", system=system, machine=machine)


def test_wait_without_a_c_library_is_none():
    """No C library (as on Windows): no wait at all, so the replay runs serially."""
    assert host_os.wait_primitive("", system="linux", library=MISSING_LIBRARY) is None
    assert host_os.wait_primitive("", system="darwin", library=MISSING_LIBRARY) is None
    with pytest.raises(ValueError, match="no futex"):
        host_os.wait_primitive("futex", system="linux", library=MISSING_LIBRARY)


@pytest.mark.parametrize("setting", ["sleepy", "FUTEX", " portable", "0"])
def test_wait_setting_misspelt(setting):
    with pytest.raises(ValueError, match=r"APIC_WAIT=.* names no wait .*futex, portable or auto"):
        host_os.wait_primitive(setting)


def test_futex_numbers_are_the_families():
    assert host_os.futex_syscall("x86_64") == 202 and host_os.futex_syscall("aarch64") == 98
    assert host_os.futex_syscall("arm64") == 98  # macOS's name for the family (which has no futex)
    assert host_os.futex_syscall("riscv64") is None


def test_fd_path_without_proc(tmp_path):
    assert host_os.fd_path(3, proc=str(tmp_path / "no-proc")) is None
    (tmp_path / "proc" / "self" / "fd").mkdir(parents=True)
    assert host_os.fd_path(3, proc=str(tmp_path / "proc")) == str(tmp_path / "proc" / "self" / "fd" / "3")


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="a host with /proc")
def test_fd_path_reads_the_file_from_its_start(tmp_path):
    path = tmp_path / "data"
    path.write_bytes(b"module bytes")
    fd = os.open(path, os.O_RDONLY)
    try:
        os.read(fd, 6)  # the descriptor's offset moves; a reopen through its path starts again
        with open(host_os.fd_path(fd), "rb") as f:
            assert f.read() == b"module bytes"
    finally:
        os.close(fd)


def test_monotonic_clock():
    assert host_os.monotonic_clock("plan9") is None
    assert host_os.monotonic_clock("linux", library=MISSING_LIBRARY) is None
    assert host_os.monotonic_clock("darwin")[1] == 6 and host_os.monotonic_clock("linux")[1] == 1
    found = host_os.monotonic_clock()
    if found is None:
        pytest.skip(f"no monotonic clock id known for {sys.platform}")
    address, clock = found
    timespec = (ctypes.c_int64 * 2)()
    gettime = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.c_void_p)(address)
    assert gettime(clock, ctypes.addressof(timespec)) == 0
    ours = timespec[0] * 10**9 + timespec[1]
    assert abs(ours - time.monotonic_ns()) < 10**9  # the same clock Python's monotonic reads here


def test_object_formats():
    assert [host_os.object_format(s) for s in ("linux", "darwin", "win32", "freebsd14")] == \
        ["ELF", "Mach-O", "COFF", "ELF"]
    assert host_os.object_format_of(b"\x7fELF\x02\x01\x01") == "ELF"
    assert host_os.object_format_of(bytearray(b"\xcf\xfa\xed\xfe\x0c\x00\x00\x01")) == "Mach-O"  # arm64 MH_MAGIC_64
    assert host_os.object_format_of(memoryview(b"\x64\x86\x03\x00")) == "COFF"
    assert host_os.object_format_of(b"") is None and host_os.object_format_of(b"garbage") is None
    if LINUX:
        with open(sys.executable, "rb") as f:
            assert host_os.object_format_of(f.read(4)) == host_os.object_format() == "ELF"


def test_export_refuses_a_system_without_elf():
    toolchain.check_system("linux")
    for system, found in (("darwin", "Mach-O"), ("win32", "COFF")):
        with pytest.raises(toolchain.ToolchainError, match=f"this system \\({system}\\) compiles {found} objects"):
            toolchain.check_system(system)


def test_midr_without_sysfs(tmp_path):
    assert aarch64.read_midr(str(tmp_path / "midr_el1")) is None
    (tmp_path / "midr_el1").write_text("0x00000000410fd4f0\n")
    assert aarch64.core_name(aarch64.read_midr(str(tmp_path / "midr_el1"))) == "neoverse-v2"
