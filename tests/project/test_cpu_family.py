"""CPU families: each family's facts are one module of ``apic/targets`` and its identity probe one module of
``apic/_probes``; ``apic.targets.cpu`` gathers the facts and ``apic._probes.host.cpu_identity`` picks the probe
by machine. x86-64 and AArch64 are a module in each place plus these checks, and nothing else in apic names a
family (its machines, levels or modules)."""

from __future__ import annotations

import ast
import os
import platform

import pytest

import apic
from apic._probes import aarch64 as aarch64_probe
from apic._probes import host
from apic.targets import aarch64, cpu, x86_64

pytestmark = [pytest.mark.once]

FAMILIES = (x86_64, aarch64)
# the modules that may name a family: the families' own, and the two that gather them
FAMILY_HOMES = {"targets/x86_64.py", "targets/aarch64.py", "targets/cpu.py", "_probes/x86_64.py",
                "_probes/aarch64.py", "_probes/host.py"}


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
    assert cpu.cpu_family("riscv64") is None and cpu.cpu_family(level="rv64gc") is None
    assert cpu.FAMILY_NAMES == tuple(f.NAME for f in FAMILIES)
    for family in FAMILIES:
        cpu.check_cpu_level(family.PORTABLE_LEVEL)
    with pytest.raises(ValueError, match="not a CPU level apic compiles for"):
        cpu.check_cpu_level("rv64gc")
    levels = [level for family in FAMILIES for level in family.CPU_LEVELS]
    assert len(levels) == len(set(levels)) == len(cpu.CPU_LEVELS), "a level names one family"


def _family_names() -> set:
    return {name.lower() for f in FAMILIES for name in (f.NAME, *f.MACHINES, *f.CPU_LEVELS)}


def _docstrings(tree) -> set:
    return {id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body
            and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}


def test_nothing_else_in_apic_names_a_family():
    """A machine name, a level, a family's name or its modules only in the families' homes: anywhere else a
    second spelling would leave the next family out (the futex number, the struct-passing ABI, a hint)."""
    root = os.path.dirname(apic.__file__)
    names, modules = _family_names(), {f.__name__ for f in FAMILIES} | {"apic._probes.x86_64", "apic._probes.aarch64"}
    found = []
    for folder, _, files in os.walk(root):
        for file in files:
            path = os.path.join(folder, file)
            where = os.path.relpath(path, root).replace(os.sep, "/")
            if not file.endswith(".py") or where in FAMILY_HOMES:
                continue
            with open(path, encoding="utf-8") as f:
                tree = ast.parse(f.read())
            skip = _docstrings(tree)
            for node in ast.walk(tree):
                if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip \
                        and node.value.strip().lower() in names:
                    found.append(f"{where}:{node.lineno}: {node.value!r}")
                elif isinstance(node, ast.ImportFrom) and node.module:
                    named = {f"{node.module}.{a.name}" for a in node.names} | {node.module}
                    found += [f"{where}:{node.lineno}: imports {m}" for m in sorted(named & modules)]
                elif isinstance(node, ast.Import):
                    found += [f"{where}:{node.lineno}: imports {a.name}" for a in node.names if a.name in modules]
    assert found == []


def test_the_scan_finds_a_family_named_elsewhere():
    tree = ast.parse('"""x86_64 in a docstring is prose."""\nNUMBERS = {"aarch64": 98}\n'
                     'from apic.targets import x86_64\n')
    skip, names = _docstrings(tree), _family_names()
    named = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and id(n) not in skip
             and str(n.value).lower() in names]
    imports = [a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names]
    assert named == ["aarch64"] and imports == ["x86_64"]


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
        host.cpu_identity.cache_clear()
        monkeypatch.setattr(platform, "machine", lambda: "aarch64")
        monkeypatch.setitem(host._IDENTITY_PROBES, "aarch64", lambda: calls.append(2) or "aarch64 midr probe")
        assert host.cpu_identity() == "aarch64 midr probe" and calls == [1, 2]
        assert host._IDENTITY_PROBES["arm64"] is aarch64_probe.cpu_identity
        assert host._FEATURE_PROBES["arm64"] is aarch64_probe.cpu_features
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
