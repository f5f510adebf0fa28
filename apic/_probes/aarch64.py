"""The AArch64 family's CPU probe, without LLVM: the CPU's main ID register (``MIDR_EL1``, which Linux shows
in sysfs) names the core, and the hardware capabilities the kernel hands every process (``AT_HWCAP`` and
``AT_HWCAP2``, read with ``getauxval`` through ctypes) say which instructions it may run.
:func:`apic._probes.host.cpu_identity` and :func:`apic._probes.host.cpu_features` call it on an AArch64
machine; the family's facts are :mod:`apic.targets.aarch64`'s.

The capabilities, not LLVM's answer: LLVM reads ``/proc/cpuinfo``, which under an emulator (QEMU user mode)
describes the host, while the instructions the process may run are the emulated CPU's, which the kernel
(or the emulator) puts in the auxiliary vector.
"""

from __future__ import annotations

import ctypes
import sys

from apic._probes import host_os
from apic.targets.aarch64 import MACHINES  # noqa: F401  (the machines this probe runs on, for host.py)

MIDR_PATH = "/sys/devices/system/cpu/cpu0/regs/identification/midr_el1"
AT_HWCAP = 16  # <elf.h>: the auxiliary vector's entries
AT_HWCAP2 = 26

# LLVM's feature name -> the bits of (AT_HWCAP, AT_HWCAP2) that must all be set for it
# (Linux's arch/arm64/include/uapi/asm/hwcap.h). A feature Linux reports in two halves (AES and PMULL are
# LLVM's one "aes") needs both.
_HWCAP = {
    "fp-armv8": (0,), "neon": (1,), "aes": (3, 4), "sha2": (5, 6), "crc": (7,), "lse": (8,), "fullfp16": (9, 10),
    "rdm": (12,), "jsconv": (13,), "complxnum": (14,), "rcpc": (15,), "ccpp": (16,), "sha3": (17, 21),
    "sm4": (18, 19), "dotprod": (20,), "sve": (22,), "fp16fml": (23,), "dit": (24,), "lse2": (25,),
    "rcpc-immo": (26,), "flagm": (27,), "ssbs": (28,), "sb": (29,), "pauth": (30, 31),
}
_HWCAP2 = {
    "ccdp": (0,), "sve2": (1,), "sve2-aes": (2, 3), "sve2-bitperm": (4,), "sve2-sha3": (5,), "sve2-sm4": (6,),
    "altnzcv": (7,), "fptoint": (8,), "f32mm": (10,), "f64mm": (11,), "i8mm": (13,), "bf16": (14,),
    "rand": (16,), "bti": (17,), "mte": (18,), "ecv": (19,), "sme": (23,), "wfxt": (31,),
}
#: every feature name this probe can decide: one it does not report, this CPU lacks
KNOWN_FEATURES = frozenset(_HWCAP) | frozenset(_HWCAP2)

# (implementer, part number) of MIDR_EL1 -> LLVM's CPU name, for the cores Warp's users deploy on
_CORES = {
    (0x41, 0xD03): "cortex-a53", (0x41, 0xD05): "cortex-a55", (0x41, 0xD08): "cortex-a72",
    (0x41, 0xD0B): "cortex-a76", (0x41, 0xD0C): "neoverse-n1", (0x41, 0xD0E): "cortex-a76ae",
    (0x41, 0xD40): "neoverse-v1", (0x41, 0xD41): "cortex-a78", (0x41, 0xD42): "cortex-a78ae",
    (0x41, 0xD49): "neoverse-n2", (0x41, 0xD4F): "neoverse-v2", (0x41, 0xD83): "neoverse-v3ae",
    (0x41, 0xD84): "neoverse-v3", (0x4E, 0x004): "carmel",
}


def decode_hwcaps(hwcap: int, hwcap2: int) -> frozenset:
    """The features, in LLVM's names, that the capability words ``hwcap`` and ``hwcap2`` report."""
    return frozenset(name for table, word in ((_HWCAP, hwcap), (_HWCAP2, hwcap2))
                     for name, bits in table.items() if all(word >> bit & 1 for bit in bits))


def core_name(midr: int | None) -> str | None:
    """LLVM's name of the core ``midr`` (``MIDR_EL1``) identifies; None for one apic does not name."""
    return None if midr is None else _CORES.get((midr >> 24 & 0xFF, midr >> 4 & 0xFFF))


def read_midr(path: str = MIDR_PATH) -> int | None:
    """``MIDR_EL1`` of the first core, as Linux shows it; None where the file is absent (an emulator on
    another family's host, an older kernel) or does not hold one hexadecimal number."""
    try:
        with open(path, "rb") as f:
            text = f.read(64).decode("ascii").strip()
        return int(text, 16) if text.lower().startswith("0x") else None
    except (OSError, ValueError, UnicodeDecodeError):
        return None


def hwcaps() -> tuple[int, int] | None:
    """``(AT_HWCAP, AT_HWCAP2)`` of this process, from the C library's ``getauxval``; None where there is
    none (macOS, a C library without it)."""
    address = host_os.c_function("getauxval") if sys.platform.startswith("linux") else None
    if address is None:
        return None
    getauxval = ctypes.CFUNCTYPE(ctypes.c_ulong, ctypes.c_ulong)(address)
    return int(getauxval(AT_HWCAP)), int(getauxval(AT_HWCAP2))


def cpu_identity() -> str | None:
    """This CPU's main ID register and capability words, as one string (the key apic keeps its LLVM answer
    under); None where the capabilities cannot be read (ask LLVM then)."""
    words = hwcaps()
    if words is None:
        return None
    midr = read_midr()
    return f"aarch64 midr {'-' if midr is None else f'{midr:08x}'} hwcap {words[0]:016x} hwcap2 {words[1]:016x}"


def cpu_features() -> dict | None:
    """What the probe says of this CPU for LLVM's host description: ``cpu`` (LLVM's core name, or None),
    ``features`` (the features it has) and ``known`` (every feature the probe decides); None where it
    cannot read the capabilities."""
    words = hwcaps()
    if words is None:
        return None
    return {"cpu": core_name(read_midr()), "features": decode_hwcaps(*words), "known": KNOWN_FEATURES}
