"""CPU families: each family's facts are one module of ``apic/targets`` and its identity probe one module of
``apic/_probes``; ``apic.targets.cpu`` gathers the facts and ``apic._probes.host.cpu_identity`` picks the probe
by machine. A second family (AArch64) is a module in each place plus these checks."""

from __future__ import annotations

import platform

import pytest

from apic._probes import host
from apic.targets import cpu, x86_64

pytestmark = [pytest.mark.once]

FAMILIES = (x86_64,)


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.NAME)
def test_a_family_module_holds_every_fact_a_family_gives(family):
    assert family.MACHINES and all(m == m.lower() for m in family.MACHINES)
    assert family.PORTABLE_LEVEL in family.CPU_LEVELS and family.PORTABLE_HINT
    levels = sorted(family.CPU_LEVELS.values(), key=len)
    assert all(a < b for a, b in zip(levels, levels[1:])), "each level holds the ones before it"
    for machine in family.MACHINES:
        assert cpu.cpu_family(machine) is family and cpu.cpu_family(machine.upper()) is family
    for level in family.CPU_LEVELS:
        assert cpu.cpu_family(level=level) is family


def test_the_cpu_target_gathers_every_family():
    for family in FAMILIES:
        assert family.CPU_LEVELS.items() <= cpu.CPU_LEVELS.items()
        assert family.FEATURE_MACROS.items() <= cpu.FEATURE_MACROS.items()
    assert cpu.cpu_family("riscv64") is None and cpu.cpu_family(level="armv9-a") is None
    cpu.check_cpu_level(x86_64.PORTABLE_LEVEL)
    with pytest.raises(ValueError, match="not a CPU level apic compiles for"):
        cpu.check_cpu_level("armv9-a")


def test_the_identity_probe_is_the_machines_familys(monkeypatch):
    host.cpu_identity.cache_clear()
    try:
        monkeypatch.setattr(platform, "machine", lambda: "riscv64")
        assert host.cpu_identity() is None  # no probe of that family: LLVM is asked instead
        host.cpu_identity.cache_clear()
        monkeypatch.setattr(platform, "machine", lambda: "AMD64")
        calls = []
        monkeypatch.setitem(host._IDENTITY_PROBES, "amd64", lambda: calls.append(1) or "x86-64 cpuid probe")
        assert host.cpu_identity() == "x86-64 cpuid probe" and calls == [1]
    finally:
        host.cpu_identity.cache_clear()


@pytest.mark.skipif(platform.machine().lower() not in x86_64.MACHINES, reason="an x86-64 host runs CPUID")
def test_cpuid_names_this_x86_64_cpu():
    identity = host.cpu_identity()
    if identity is None:  # a W^X policy refused an executable page: LLVM is asked instead
        pytest.skip("no executable page here")
    words = identity.split()
    assert words[:2] == ["x86-64", "cpuid"] and len(words) == 2 + 4 + 3 + 3 + 4 + 2 + 2
    assert identity == host.cpu_identity()
