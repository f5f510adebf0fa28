"""This host, cheaply: the CPU's identity and installed package versions, all
without importing Numba or llvmlite (a first replay or load pays for neither)."""

from __future__ import annotations

import functools
import importlib.util
import os
import platform

from apic._probes import aarch64, x86_64


def distribution_version(package: str) -> str:
    """An installed package's version, read from its ``.dist-info`` folder name (``importlib.metadata``
    costs tens of milliseconds); else the size and time of its ``__init__.py``. Never imports it."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.origin:
        return "absent"
    site = os.path.dirname(os.path.dirname(spec.origin))
    prefix = package.lower() + "-"
    try:
        names = [entry.name for entry in os.scandir(site)
                 if entry.name.lower().startswith(prefix) and entry.name.endswith(".dist-info")]
    except OSError:
        names = []
    if len(names) == 1:
        return names[0][len(prefix):-len(".dist-info")]
    stat = os.stat(spec.origin)
    return f"{spec.origin}:{stat.st_size}:{stat.st_mtime_ns}"


@functools.lru_cache(maxsize=None)
def cpu_identity() -> str | None:
    """This CPU's vendor, model and instruction-set flags, as the CPU itself reports them, from the probe
    of its family (``apic._probes.x86_64``: CPUID; ``apic._probes.aarch64``: MIDR_EL1 and the capability
    words); None for a family without one (ask LLVM then)."""
    probe = _IDENTITY_PROBES.get(platform.machine().lower())
    return None if probe is None else probe()


def cpu_features() -> dict | None:
    """What this CPU's family probe says of it where LLVM's own answer is not to be trusted (LLVM reads
    ``/proc/cpuinfo`` on AArch64 Linux, the host's under an emulator): ``cpu`` (a core name or None),
    ``features`` and ``known`` (the features the probe decides), in LLVM's names; None elsewhere."""
    probe = _FEATURE_PROBES.get(platform.machine().lower())
    return None if probe is None else probe()


_IDENTITY_PROBES = {machine: family.cpu_identity for family in (x86_64, aarch64) for machine in family.MACHINES}
_FEATURE_PROBES = {machine: aarch64.cpu_features for machine in aarch64.MACHINES}
