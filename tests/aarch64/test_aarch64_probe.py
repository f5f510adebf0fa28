"""The AArch64 family on any host: its facts (levels, macros, test CPUs) and its probe's decoding of the
capability words and the main ID register, checked here against Linux's and Arm's numbering. The probe
running on AArch64 itself is checked by the emulated tier (scripts/aarch64_tier.sh, tests/aarch64/tier.py)."""

from __future__ import annotations

import os
import platform

import pytest

import host_cpus

from apic._probes import aarch64 as probe
from apic._probes import cpu as cpu_probe
from apic._probes import host
from apic.targets import aarch64, cpu

pytestmark = [pytest.mark.once]

# Linux's arch/arm64/include/uapi/asm/hwcap.h, the bits the levels rest on
HWCAP_FP, HWCAP_ASIMD, HWCAP_AES, HWCAP_PMULL = 1 << 0, 1 << 1, 1 << 3, 1 << 4
HWCAP_CRC32, HWCAP_ATOMICS = 1 << 7, 1 << 8
HWCAP_ASIMDRDM, HWCAP_DCPOP, HWCAP_SVE, HWCAP2_SVE2 = 1 << 12, 1 << 16, 1 << 22, 1 << 1
# what QEMU 7.2's `max` CPU (Debian bookworm's qemu-user) reports, read under it by the tier
QEMU_MAX = (0xECFFFFFB, 0x7F877FFF)


def test_capability_bits_decode_to_llvm_names():
    assert probe.decode_hwcaps(0, 0) == frozenset()
    assert probe.decode_hwcaps(HWCAP_FP | HWCAP_ASIMD, 0) == aarch64.CPU_LEVELS["armv8-a"]
    assert "aes" not in probe.decode_hwcaps(HWCAP_AES, 0)  # LLVM's "aes" is both halves Linux reports
    assert "aes" in probe.decode_hwcaps(HWCAP_AES | HWCAP_PMULL, 0)
    v82 = HWCAP_FP | HWCAP_ASIMD | HWCAP_CRC32 | HWCAP_ATOMICS | HWCAP_ASIMDRDM | HWCAP_DCPOP
    assert probe.decode_hwcaps(v82, 0) == aarch64.CPU_LEVELS["armv8.2-a"]
    assert {"sve", "sve2"} <= probe.decode_hwcaps(HWCAP_SVE, HWCAP2_SVE2)
    assert "sve2" not in probe.decode_hwcaps(HWCAP2_SVE2, 0)  # the second word's bits are its own
    assert probe.decode_hwcaps(~0 & (1 << 64) - 1, ~0 & (1 << 64) - 1) == probe.KNOWN_FEATURES


def test_every_level_is_decided_by_the_probe():
    """A load compares a level's features with the host's: each must be one the probe can report, or every
    AArch64 host would lack it."""
    for level, features in aarch64.CPU_LEVELS.items():
        assert features <= probe.KNOWN_FEATURES, (level, features - probe.KNOWN_FEATURES)
    for name in ("cortex-a78ae", "neoverse-v2", "neoverse-v3ae"):  # the real cores a test can pretend to be
        assert host_cpus.HOST_CPUS[name] <= probe.KNOWN_FEATURES, name


def test_the_emulators_cpu_holds_the_levels_it_reports():
    features = probe.decode_hwcaps(*QEMU_MAX)
    held = [level for level, needs in aarch64.CPU_LEVELS.items() if needs <= features]
    # QEMU 7.2 reports neither LSE2 (USCAT) nor DIT/SSBS: Armv9.0-A's LSE2 is missing, so it holds up to 8.2
    assert held == ["armv8-a", "armv8.2-a"] and {"sve2", "bf16", "i8mm"} <= features


def test_the_main_id_register_names_the_cores_warp_runs_on(tmp_path):
    assert probe.core_name(0x410FD4F0) == "neoverse-v2"  # Grace
    assert probe.core_name(0x410FD421) == "cortex-a78ae"  # Jetson Orin
    assert probe.core_name(0x410FD830) == "neoverse-v3ae"  # Jetson Thor
    assert probe.core_name(0x610F0220) is None and probe.core_name(None) is None
    midr = tmp_path / "midr_el1"
    midr.write_text("0x00000000410fd4f0\n")
    assert probe.read_midr(str(midr)) == 0x410FD4F0
    for text in ("", "410fd4f0", "0xzz", "\xff"):
        midr.write_text(text, encoding="latin-1")
        assert probe.read_midr(str(midr)) is None, text
    assert probe.read_midr(str(tmp_path / "absent")) is None and probe.read_midr(str(tmp_path)) is None


@pytest.mark.skipif(not platform.system() == "Linux", reason="getauxval is Linux's")
def test_the_capability_words_are_read_here():
    words = probe.hwcaps()
    assert words is not None and all(isinstance(w, int) and w >= 0 for w in words)
    identity = probe.cpu_identity().split()
    assert identity[:2] == ["aarch64", "midr"] and identity[3::2] == ["hwcap", "hwcap2"]
    assert int(identity[4], 16) == words[0] and int(identity[6], 16) == words[1]


def test_on_aarch64_the_probe_decides_the_features_llvm_reports(monkeypatch):
    """LLVM reads /proc/cpuinfo, the host's under an emulator: the probe's answer replaces it for every
    feature the probe decides, and names the core where LLVM could not."""
    monkeypatch.setattr(platform, "machine", lambda: "aarch64")
    monkeypatch.setattr(probe, "hwcaps", lambda: (HWCAP_FP | HWCAP_ASIMD | HWCAP_SVE, 0))
    monkeypatch.setattr(probe, "read_midr", lambda path=probe.MIDR_PATH: 0x410FD4F0)
    said = host.cpu_features()
    assert said == {"cpu": "neoverse-v2", "features": {"fp-armv8", "neon", "sve"}, "known": probe.KNOWN_FEATURES}
    target = cpu_probe._llvm_target()
    assert target["cpu"] == "neoverse-v2" and target["machine"] == "aarch64"
    assert {"fp-armv8", "neon", "sve"} <= set(target["features"]) and "lse" not in target["features"]
    assert probe.KNOWN_FEATURES <= set(target["known_features"])
    monkeypatch.setattr(platform, "machine", lambda: "riscv64")
    assert host.cpu_features() is None


def test_the_family_gives_the_facts_other_modules_read():
    assert cpu.cpu_family("aarch64") is aarch64 and cpu.cpu_family("ARM64") is aarch64
    assert aarch64.FUTEX_SYSCALL == 98 and aarch64.BIG_STRUCT_ON_STACK is False
    assert set(aarch64.CPU_LEVELS["armv8.2-a"]) >= {"neon", "fp-armv8", "crc", "lse", "rdm"}
    assert aarch64.FEATURE_MACROS["neon"] == "__ARM_NEON" and os.path.basename(probe.MIDR_PATH) == "midr_el1"
