"""The AArch64 CPU family (NVIDIA Grace, Jetson Orin and Thor, cloud Graviton): its instruction-set levels
(``capture_save(cpu_target=...)``), the C++ macros that read back what a build enables, the CPUs a test may
pretend the host is, and the hint a refused load gives. :mod:`apic.targets.cpu` gathers every family's facts;
the probe that names an AArch64 CPU (``MIDR_EL1``, ``AT_HWCAP`` / ``AT_HWCAP2``) is :mod:`apic._probes.aarch64`.
"""

from __future__ import annotations

NAME = "AArch64"
MACHINES = ("aarch64", "arm64")  # platform.machine(), lowercased: Linux says aarch64, macOS arm64
PORTABLE_LEVEL = "armv8-a"  # every AArch64 CPU: Armv8.0-A has NEON and floating point in hardware
PORTABLE_HINT = "objects run on any AArch64 CPU (Armv8.0-A, NEON)"  # what saving at PORTABLE_LEVEL gives
# AAPCS64 passes a struct over 16 bytes as a pointer to a caller-owned copy (warp <= 1.12's launch bounds);
# Linux's futex system call number in the generic table AArch64 uses.
BIG_STRUCT_ON_STACK = False
FUTEX_SYSCALL = 98

# The Arm architecture versions Warp's compiler targets on the machines Warp runs on, as LLVM names them
# (``target("arch=<level>")``), each holding the ones before it: Orin's Cortex-A78AE is Armv8.2-A, Grace's
# Neoverse V2 Armv9.0-A, Thor's Neoverse V3AE Armv9.2-A. A level lists the features its architecture makes
# mandatory that the compiler can use in a user program and that Linux reports to one (an ``AT_HWCAP`` /
# ``AT_HWCAP2`` bit, decoded by apic._probes.aarch64), in LLVM's names, so that a load can check them; the
# system-level ones (RAS, PAN, virtualization) no user code runs are not listed, and could not be checked.
_ARMV8 = ("fp-armv8", "neon")
_ARMV8_2 = _ARMV8 + ("crc", "lse", "rdm", "ccpp")  # 8.1: CRC32, LSE atomics, RDMA; 8.2: DC CVAP
_ARMV9 = _ARMV8_2 + (
    "rcpc", "jsconv", "complxnum", "pauth",  # 8.3
    "dotprod", "rcpc-immo", "flagm", "lse2",  # 8.4 (and DIT, a PSTATE bit no compiled code sets)
    "altnzcv", "fptoint", "sb", "ccdp", "bti",  # 8.5 (and SSBS, another PSTATE bit)
    "sve", "sve2", "fullfp16",  # 9.0: SVE2, which implies SVE, which implies FP16
)
_ARMV9_2 = _ARMV9 + ("bf16", "i8mm")  # 8.6 / 9.1 (9.2's own additions are system-level)
CPU_LEVELS = {"armv8-a": frozenset(_ARMV8), "armv8.2-a": frozenset(_ARMV8_2), "armv9-a": frozenset(_ARMV9),
              "armv9.2-a": frozenset(_ARMV9_2)}

# The C++ macro clang (ACLE) defines for each feature it compiles for: how a probe reads back what a build
# enables (apic._probes.cpu.forced_features). A feature name x86-64 also uses ("aes") is left out: the
# gathered table (apic.targets.cpu.FEATURE_MACROS) gives a name one macro.
FEATURE_MACROS = {
    "neon": "__ARM_NEON", "fp-armv8": "__ARM_FP", "crc": "__ARM_FEATURE_CRC32", "lse": "__ARM_FEATURE_ATOMICS",
    "rdm": "__ARM_FEATURE_QRDMX", "fullfp16": "__ARM_FEATURE_FP16_SCALAR_ARITHMETIC",
    "dotprod": "__ARM_FEATURE_DOTPROD", "complxnum": "__ARM_FEATURE_COMPLEX", "jsconv": "__ARM_FEATURE_JCVT",
    "fptoint": "__ARM_FEATURE_FRINT", "bti": "__ARM_FEATURE_BTI", "pauth": "__ARM_FEATURE_PAUTH",
    "sve": "__ARM_FEATURE_SVE", "sve2": "__ARM_FEATURE_SVE2", "bf16": "__ARM_FEATURE_BF16",
    "i8mm": "__ARM_FEATURE_MATMUL_INT8", "sha2": "__ARM_FEATURE_SHA2",
    "sha3": "__ARM_FEATURE_SHA3", "sm4": "__ARM_FEATURE_SM4", "fp16fml": "__ARM_FEATURE_FP16_FML",
}

