"""Loading refuses, saying why, what cannot run safely: tampered or missing module binaries, another
OS or CPU, missing instruction-set features, native struct layouts of another warp-lang version.
"""

from __future__ import annotations

import copy
import shutil

import pytest
import warp as wp

import apic
from wrp_helpers import body_of, save_sim
from apic import _compat
from apic.format import writer

pytestmark = [pytest.mark.warp_version, pytest.mark.interpreter]


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    stem = save_sim(tmp_path_factory.mktemp("compat"))
    return stem


def body(saved) -> dict:
    return body_of(saved.parent / "sim.wrp")


def rewrite(saved, tmp_path, doc: dict, name: str = "edited"):
    """Write ``doc`` as ``<tmp>/<name>.wrp`` next to a copy of the original modules folder."""
    shutil.copytree(str(saved) + "_modules", tmp_path / f"{name}_modules")
    (tmp_path / f"{name}.wrp").write_bytes(writer.encode(doc))
    return tmp_path / name


def test_tampered_module_is_refused(saved, tmp_path):
    path = rewrite(saved, tmp_path, body(saved))
    module = next((tmp_path / "edited_modules").iterdir())
    data = bytearray(module.read_bytes())
    data[len(data) // 2] ^= 0xFF
    module.write_bytes(bytes(data))
    with pytest.raises(apic.FormatError, match="does not match the SHA-256"):
        wp.capture_load(str(path))


def test_missing_module_is_refused(saved, tmp_path):
    path = rewrite(saved, tmp_path, body(saved))
    for module in (tmp_path / "edited_modules").iterdir():
        module.unlink()
    with pytest.raises(apic.FormatError, match="is missing from"):
        wp.capture_load(str(path))
    with pytest.raises(apic.FormatError, match="is missing from the provided modules"):
        wp.capture_load_from_bytes((saved.parent / "sim.wrp").read_bytes(), {})


def test_module_of_another_save_is_refused(saved, tmp_path):
    data = (saved.parent / "sim.wrp").read_bytes()
    name = body(saved)["modules"][0]["file"]
    with pytest.raises(apic.FormatError, match="does not match the SHA-256"):
        wp.capture_load_from_bytes(data, {name: b"\x7fELF" + bytes(100)})


def test_unused_modules_are_ignored(saved):
    data = (saved.parent / "sim.wrp").read_bytes()
    modules = {p.name: p.read_bytes() for p in (saved.parent / "sim_modules").iterdir()}
    modules["unrelated.o"] = b"junk"
    assert wp.capture_load_from_bytes(data, modules).is_loaded


def test_missing_symbol_is_refused(saved, tmp_path):
    doc = body(saved)
    doc["kernels"][0]["symbol"] = "no_such_kernel_cpu_forward"
    # the kernel manifest beside the module lists the symbols the graph launches (older files: the object file)
    with pytest.raises(apic.FormatError, match="no_such_kernel_cpu_forward is not"):
        wp.capture_load(str(rewrite(saved, tmp_path, doc)))


@pytest.mark.parametrize("key, value, message", [
    ("machine", "aarch64", r"compiled for AArch64 \(aarch64\).*source_fallback=True"),
    ("machine", "riscv64", r"compiled for another CPU family \(riscv64\)"),
    ("system", "win32", "different operating system"),
    ("byteorder", "big", "different byte order"),
])
def test_other_platform_is_refused(saved, tmp_path, key, value, message):
    doc = body(saved)
    doc["target"][key] = value
    with pytest.raises(apic.IncompatibleGraphError, match=message):
        wp.capture_load(str(rewrite(saved, tmp_path, doc)))


def test_missing_cpu_feature_is_refused(saved, tmp_path):
    host = _compat.host_target()
    absent = sorted(set(host["known_features"]) - set(host["features"]))
    if not absent:
        pytest.skip("this CPU has every feature its LLVM knows")
    doc = body(saved)
    doc["target"]["features"] = doc["target"]["features"] + [absent[0]]
    doc["target"]["cpu"] = "future-cpu"
    with pytest.raises(apic.IncompatibleGraphError, match=rf"future-cpu.*lacks: {absent[0]}.*illegal instruction"):
        wp.capture_load(str(rewrite(saved, tmp_path, doc)))


def test_unknown_cpu_features_are_not_held_against_the_host(saved, tmp_path):
    """A feature name this host's LLVM does not know (a newer LLVM's) is not treated as missing."""
    doc = body(saved)
    doc["target"]["features"] = doc["target"]["features"] + ["some-future-extension"]
    assert wp.capture_load(str(rewrite(saved, tmp_path, doc))).is_loaded


def test_native_structs_across_versions_are_refused(saved, tmp_path):
    doc = body(saved)
    doc["modules"][0]["native_types"] = ["Mesh"]
    doc["writer"]["warp"] = "1.0.0"
    with pytest.raises(apic.IncompatibleGraphError, match=r"reads? native Warp Mesh structs.*1\.0\.0.*Load it with"):
        wp.capture_load(str(rewrite(saved, tmp_path, doc, "other_warp")))
    same = copy.deepcopy(doc)
    same["writer"]["warp"] = wp.config.version  # same warp-lang: the layout is the same
    assert wp.capture_load(str(rewrite(saved, tmp_path, same, "same_warp"))).is_loaded
