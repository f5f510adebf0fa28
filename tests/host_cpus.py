"""A smaller CPU than this one, as the host a load checks a file against: how the tests see what a load on a
Zen 3 or an Ivy Bridge sees, on a larger CPU. The library has no such hook: a test gives it here, by replacing
``apic._compat.host_target`` (:func:`pretend`, or the ``APIC_TESTS_HOST_CPU`` variable a test's child
process reads through :data:`PRELUDE`)."""

from __future__ import annotations

import os

from apic.targets import aarch64
from apic.targets.x86_64 import CPU_LEVELS

# CPUs a test can pretend the host is: a level, or a real CPU whose features a test wants, as LLVM names
# them. AMD Zen 3 (znver3) has AVX2 but no AVX-512 and no GFNI; Intel Ivy Bridge has AVX and F16C (all that
# Warp's compiler needs) but no AVX2 or FMA.
HOST_CPUS = {
    **CPU_LEVELS,
    "ivybridge": CPU_LEVELS["x86-64-v2"] | {"aes", "avx", "f16c", "fsgsbase", "pclmul", "rdrnd", "xsave", "xsaveopt"},
    "znver3": CPU_LEVELS["x86-64-v3"] | {
        "adx", "aes", "clflushopt", "clwb", "clzero", "fsgsbase", "invpcid", "mwaitx", "pclmul", "pku", "prfchw",
        "rdpid", "rdpru", "rdrnd", "rdseed", "sha", "shstk", "sse4a", "vaes", "vpclmulqdq", "wbnoinvd", "xsavec",
        "xsaveopt", "xsaves"},
}
# AArch64: its levels, and real CPUs by their LLVM names with the features Linux reports on them. Orin's
# Cortex-A78AE is Armv8.2-A with the 8.3/8.4 features Arm added to it (no SVE); Grace's Neoverse V2 is Armv9.0-A
# with 8.6's BF16 and Int8 matrix multiply.
ARM_LEVELS = aarch64.CPU_LEVELS
HOST_CPUS.update({
    **ARM_LEVELS,
    "cortex-a78ae": ARM_LEVELS["armv8.2-a"] | {"aes", "sha2", "fullfp16", "dotprod", "rcpc", "ssbs"},
    "neoverse-v2": ARM_LEVELS["armv9-a"] | {"aes", "sha2", "sha3", "sm4", "fp16fml", "bf16", "i8mm"},
    "neoverse-v3ae": ARM_LEVELS["armv9.2-a"] | {"aes", "sha2", "sha3", "sm4", "fp16fml"},
})
VARIABLE = "APIC_TESTS_HOST_CPU"  # the CPU a test's child process pretends to be (PRELUDE reads it)
TESTS = os.path.dirname(os.path.abspath(__file__))

# Python a child process runs first: where VARIABLE is set, it pretends to be that CPU.
PRELUDE = (f"import os, sys\nif os.environ.get({VARIABLE!r}):\n    sys.path.insert(0, {TESTS!r})\n"
           f"    import host_cpus\n    host_cpus.pretend(os.environ[{VARIABLE!r}])\n")


def pretend(name: str, monkeypatch=None) -> None:
    """Make ``apic._compat.host_target`` report the CPU ``name`` of :data:`HOST_CPUS` (its features that this
    CPU has too), through ``monkeypatch`` when given (undone after the test)."""
    from apic import _compat

    if name not in HOST_CPUS:
        raise ValueError(f"{name!r} names no CPU a test can pretend to be; use one of {', '.join(sorted(HOST_CPUS))}")
    native_target = _compat.native_target

    def host_target() -> dict:
        native = native_target()
        return {**native, "cpu": name, "features": [f for f in native["features"] if f in HOST_CPUS[name]]}

    if monkeypatch is None:
        _compat.host_target = host_target
    else:
        monkeypatch.setattr(_compat, "host_target", host_target)
