"""The x86-64 CPU family: its instruction-set levels (``capture_save(cpu_target=...)``), the C++ macros
that read back what a build enables, the CPUs a test may pretend the host is, and the hint a refused load
gives. :mod:`apic.targets.cpu` gathers every family's facts (``FAMILIES``); the CPUID probe that names an
x86-64 CPU is :mod:`apic._probes.x86_64`.
"""

from __future__ import annotations

NAME = "x86-64"
MACHINES = ("x86_64", "amd64")  # platform.machine(), lowercased, of this family
PORTABLE_LEVEL = "x86-64-v2"  # the level to save at for objects that load on any CPU of the family Warp supports
PORTABLE_HINT = "objects run on any x86-64 CPU with AVX and F16C"  # what saving at PORTABLE_LEVEL gives
# The ABI and system facts other modules need of the family: the System V ABI passes a struct over 16 bytes
# by value on the stack (warp <= 1.12's 32-byte launch bounds; Win64 passes a pointer to a copy instead);
# Linux's futex system call number (the threaded replay's wait, apic.replay.parallel.split_pool).
BIG_STRUCT_ON_STACK = True
FUTEX_SYSCALL = 202

# The x86-64 psABI micro-architecture levels in LLVM's feature names, each holding the ones before it. A
# module compiled for a level may use these features (and those Warp's compiler always turns on, found by
# probing: ``apic._probes.cpu.forced_features``), so it loads on any CPU that has them.
_X86_64_V1 = ("64bit", "cmov", "cx8", "fxsr", "mmx", "sse", "sse2")  # and x87, which LLVM does not list
_X86_64_V2 = _X86_64_V1 + ("crc32", "cx16", "popcnt", "sahf", "sse3", "sse4.1", "sse4.2", "ssse3")
_X86_64_V3 = _X86_64_V2 + ("avx", "avx2", "bmi", "bmi2", "f16c", "fma", "lzcnt", "movbe", "xsave")
_X86_64_V4 = _X86_64_V3 + ("avx512bw", "avx512cd", "avx512dq", "avx512f", "avx512vl")
CPU_LEVELS = {"x86-64-v2": frozenset(_X86_64_V2), "x86-64-v3": frozenset(_X86_64_V3),
              "x86-64-v4": frozenset(_X86_64_V4)}

# The C++ macro clang defines for each feature it compiles for: how a probe reads back what a build enables.
FEATURE_MACROS = {
    "sse3": "__SSE3__", "ssse3": "__SSSE3__", "sse4.1": "__SSE4_1__", "sse4.2": "__SSE4_2__", "popcnt": "__POPCNT__",
    "crc32": "__CRC32__", "sahf": "__LAHF_SAHF__", "cx16": "__GCC_HAVE_SYNC_COMPARE_AND_SWAP_16",
    "avx": "__AVX__", "avx2": "__AVX2__", "bmi": "__BMI__", "bmi2": "__BMI2__", "f16c": "__F16C__", "fma": "__FMA__",
    "lzcnt": "__LZCNT__", "movbe": "__MOVBE__", "xsave": "__XSAVE__", "avx512f": "__AVX512F__",
    "avx512bw": "__AVX512BW__", "avx512cd": "__AVX512CD__", "avx512dq": "__AVX512DQ__", "avx512vl": "__AVX512VL__",
    "aes": "__AES__", "pclmul": "__PCLMUL__", "gfni": "__GFNI__", "vaes": "__VAES__", "vpclmulqdq": "__VPCLMULQDQ__",
    "sha": "__SHA__", "adx": "__ADX__", "sse4a": "__SSE4A__", "fma4": "__FMA4__", "xop": "__XOP__",
}
