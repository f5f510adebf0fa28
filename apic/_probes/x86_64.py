"""The x86-64 family's CPU probe: the CPU's own CPUID, run from a page of machine code (no compiler, no
LLVM). :func:`apic._probes.host.cpu_identity` calls it on an x86-64 machine; the family's facts are
:mod:`apic.targets.x86_64`'s.
"""

from __future__ import annotations

import ctypes
import mmap
import sys

from apic.targets.x86_64 import MACHINES  # noqa: F401  (the machines this probe runs on, for host.py)

# x86-64 System V: cpuid_into(leaf=edi, subleaf=esi, out=rdx) stores eax, ebx, ecx, edx at out[0..3]
_CPUID_SYSV = bytes([
    0x53,                    # push rbx (callee-saved; cpuid writes it)
    0x49, 0x89, 0xD0,        # mov r8, rdx
    0x89, 0xF8,              # mov eax, edi
    0x89, 0xF1,              # mov ecx, esi
    0x0F, 0xA2,              # cpuid
    0x41, 0x89, 0x00,        # mov [r8], eax
    0x41, 0x89, 0x58, 0x04,  # mov [r8 + 4], ebx
    0x41, 0x89, 0x48, 0x08,  # mov [r8 + 8], ecx
    0x41, 0x89, 0x50, 0x0C,  # mov [r8 + 12], edx
    0x5B,                    # pop rbx
    0xC3,                    # ret
])
# (leaf, subleaf, registers kept): vendor and highest leaf; family, model and feature flags (not ebx:
# it holds the core's APIC id); the extended features; the extended-leaf flags; the XSAVE state sizes
_CPUID_LEAVES = ((0, 0, (0, 1, 2, 3)), (1, 0, (0, 2, 3)), (7, 0, (1, 2, 3)), (7, 1, (0, 1, 2, 3)),
                 (0xD, 0, (0, 3)), (0x80000001, 0, (2, 3)))


def cpu_identity() -> str | None:
    """This CPU's vendor, model and instruction-set flags, as its own CPUID instruction reports them
    (x86-64 Linux and macOS); None elsewhere, or where no executable memory can be had (ask LLVM then).

    CPUID, not ``/proc/cpuinfo``: under an emulator (QEMU user mode) the file describes the host, while
    the instructions the process may run are the emulated CPU's, which CPUID reports.
    """
    if sys.platform not in ("linux", "darwin"):
        return None
    try:
        page = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    except (OSError, ValueError, AttributeError):
        return None  # W^X policies (SELinux, hardened kernels) refuse such a page
    try:
        page.write(_CPUID_SYSV)
        code = ctypes.c_char.from_buffer(page)
        cpuid = ctypes.CFUNCTYPE(None, ctypes.c_uint32, ctypes.c_uint32, ctypes.c_void_p)(ctypes.addressof(code))
        registers = (ctypes.c_uint32 * 4)()
        words = []
        for leaf, subleaf, kept in _CPUID_LEAVES:
            cpuid(leaf, subleaf, ctypes.addressof(registers))
            words.extend(f"{registers[k]:08x}" for k in kept)
        del code, cpuid  # no export of the page may outlive it
    finally:
        page.close()
    return "x86-64 cpuid " + " ".join(words)
