"""A smaller CPU than this one, as the host a load checks a file against: how the tests see what a load on a
Zen 3 or an Ivy Bridge sees, on a larger CPU. The library has no such hook: a test gives it here, by replacing
``apic._compat.host_target`` (:func:`pretend`, or the ``APIC_TESTS_HOST_CPU`` variable a test's child
process reads through :data:`PRELUDE`)."""

from __future__ import annotations

import os
import sys

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


def cli(args: list[str]) -> list[str]:
    """The command line of ``python -m apic ARGS`` in a child that pretends as :data:`PRELUDE` says."""
    code = PRELUDE + "from apic.cli import main\nsys.exit(main(sys.argv[1:]))\n"
    return [sys.executable, "-c", code, *args]
