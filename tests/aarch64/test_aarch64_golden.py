"""Between CPU families, the x86-64 half: a graph saved on AArch64 (``tests/data/golden/aarch64-v3-warp1.19.0``,
written under QEMU by ``scripts/aarch64_tier.sh golden``) loads here by compiling its saved source, and replays
equal to this machine's own eager run of the same program (``tier_kernels``), never to AArch64's bits; the same
graph saved without source is refused, naming the family its objects need and the save that moves. The
AArch64 half (an x86-64 file loaded there) runs in the tier."""

from __future__ import annotations

import os
import platform

import numpy as np
import pytest
import warp as wp

import apic
from apic.format import reader
from apic.targets import cpu
from persist_helpers import TESTS

import tier_kernels as tk

GOLDEN = os.path.join(TESTS, "data", "golden", "aarch64-v3-warp1.19.0")

pytestmark = [
    pytest.mark.skipif(cpu.cpu_family(platform.machine()) is None or cpu.cpu_family(platform.machine()).NAME
                       == "AArch64", reason="the file was saved on AArch64: this checks another family loading it"),
    # the saved source compiles only under the warp-lang that generated it (docs/FORMAT.md)
    pytest.mark.skipif(wp.config.version != "1.19.0", reason="the golden file's source is warp-lang 1.19.0's"),
    pytest.mark.interpreter,
]


def test_a_graph_saved_on_aarch64_with_source_replays_as_this_machines_eager_run():
    with open(os.path.join(GOLDEN, "graph.wrp"), "rb") as f:
        assert reader.read(f.read()).target["machine"] == "aarch64"
    graph = wp.capture_load(os.path.join(GOLDEN, "graph.wrp"))
    assert tk.same_bits(tk.replayed(graph), tk.eager()) == []
    again = wp.capture_load(os.path.join(GOLDEN, "graph.wrp"))
    assert tk.same_bits(tk.replayed(again, threads=2), tk.eager()) == []


def test_a_graph_saved_on_aarch64_without_source_is_refused_naming_its_family():
    with pytest.raises(apic.IncompatibleGraphError) as refused:
        wp.capture_load(os.path.join(GOLDEN, "objects.wrp"))
    message = str(refused.value)
    assert "compiled for AArch64 (aarch64)" in message and "source_fallback=True" in message, message
    assert cpu.cpu_family(platform.machine()).NAME in message


def test_the_golden_file_holds_aarch64_objects():
    """What makes the two tests above cross families: the module objects are AArch64 ELF (e_machine 183)."""
    folder = os.path.join(GOLDEN, "graph_modules")
    objects = [name for name in os.listdir(folder) if name.endswith(".o")]
    assert objects
    for name in objects:
        with open(os.path.join(folder, name), "rb") as f:
            head = f.read(20)
        assert head[:4] == b"\x7fELF" and int.from_bytes(head[18:20], "little") == 183, name
    saved = dict(np.load(os.path.join(GOLDEN, "expected.npz")))  # AArch64's eager run, kept for reference
    assert set(saved) == set(tk.OUTPUTS)


def test_the_tiers_golden_check_on_this_family():
    """The check the emulated tier runs on AArch64 for the x86-64 golden files (``tier.py golden``), run here on a
    file of this family: loaded, replayed and set as this machine's eager run of its program says."""
    import golden_across

    assert golden_across.check("v3-warp1.19.0") == "replayed"
    with pytest.raises(AssertionError, match="test_golden.py's to check"):  # not a case across families
        golden_across.check("v3-warp1.12.1")
