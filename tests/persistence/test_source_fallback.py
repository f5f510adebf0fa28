"""``capture_save(..., source_fallback=True)`` on the CPU: the generated C++ and build options travel
with the graph, and a load where the saved object cannot be used compiles the source with this
machine's Warp. Checked bit for bit against eager, in this process and in a fresh one.

"Cannot be used" is made real, not mocked: the file is re-encoded as if saved on a CPU with an
instruction-set feature this one lacks (the loader refuses such objects), and the object file is
overwritten with bytes that are no object at all, so only a compile from source can replay it.
"""

from __future__ import annotations

import hashlib
import os

import msgpack
import numpy as np
import pytest
import warp as wp

import apic
from apic import _compat
from apic.format import schema
from persist_helpers import rewrite_wrp, run_child, same_bits, wrp_body

pytestmark = [pytest.mark.warp_version, pytest.mark.interpreter]

N = 32


@wp.kernel
def _wave(a: wp.array(dtype=float), b: wp.array(dtype=float), k: float):
    i = wp.tid()
    b[i] = wp.sin(a[i] * k) * 3.0 + wp.sqrt(b[i] * b[i] + 1.0)


def _arrays():
    a = wp.array(np.linspace(0.0, 2.0, N, dtype=np.float32), device="cpu")
    b = wp.array(np.linspace(1.0, -1.0, N, dtype=np.float32), device="cpu")
    return a, b


def _save(tmp_path, source_fallback=True, name="g"):
    a, b = _arrays()
    wp.launch(_wave, dim=N, inputs=[a, wp.zeros(N, dtype=float, device="cpu"), 1.0], device="cpu")
    with wp.ScopedCapture(device="cpu", apic=True) as capture:
        wp.launch(_wave, dim=N, inputs=[a, b, 1.7], device="cpu")
        wp.launch(_wave, dim=N, inputs=[b, a, 0.3], device="cpu")
    path = str(tmp_path / name)
    wp.capture_save(capture.graph, path, inputs={"a": a}, outputs={"b": b}, source_fallback=source_fallback)
    return path


def _eager(iters: int) -> tuple[np.ndarray, np.ndarray]:
    a, b = _arrays()
    for _ in range(iters):
        wp.launch(_wave, dim=N, inputs=[a, b, 1.7], device="cpu")
        wp.launch(_wave, dim=N, inputs=[b, a, 0.3], device="cpu")
    return a.numpy(), b.numpy()


def _foreign_cpu(path: str) -> None:
    """Re-encode the file as saved on a CPU with an instruction-set feature this one lacks."""
    host = _compat.host_target()
    lacking = [f for f in host["known_features"] if f not in host["features"]]
    if not lacking:
        pytest.skip("this CPU has every instruction-set feature LLVM knows")
    body = wrp_body(path)
    body["target"]["features"] = list(body["target"]["features"]) + [lacking[0]]
    rewrite_wrp(path, body)


def _break_objects(path: str) -> None:
    """Overwrite each object with junk of the same size: only its SHA-256 tells (the size check passes)."""
    folder = path + "_modules"
    for name in os.listdir(folder):
        if name.endswith(".o"):
            size = os.path.getsize(os.path.join(folder, name))
            with open(os.path.join(folder, name), "wb") as f:
                f.write((b"intentionally not an object file " * (size // 33 + 1))[:size])


def _replay(graph, iters: int) -> np.ndarray:
    for _ in range(iters):
        wp.capture_launch(graph)
    out = wp.zeros(N, dtype=float, device="cpu")
    graph.get_param("b", out)
    return out.numpy()


def test_save_keeps_source_and_build_options(tmp_path):
    path = _save(tmp_path)
    body = wrp_body(path)
    entry = body["modules"][0]
    source = entry["source"]
    assert source["file"].endswith(".cpp") and source["file"] in os.listdir(path + "_modules")
    with open(os.path.join(path + "_modules", source["file"]), "rb") as f:
        data = f.read()
    assert len(data) == source["size"] and b"_wave" in data
    assert source["options"]["mode"] in ("release", "debug")
    assert {"fast_math", "fuse_fp", "verify_fp", "optimization_level", "block_dim"} <= set(source["options"])
    # an optional field: the format version stays what it was without it
    assert body["format_version"] == schema.BASE_VERSION
    plain = wrp_body(_save(tmp_path, source_fallback=False, name="plain"))
    assert "source" not in plain["modules"][0] and plain["format_version"] == body["format_version"]


def test_foreign_cpu_without_source_is_refused(tmp_path):
    path = _save(tmp_path, source_fallback=False)
    _foreign_cpu(path)
    with pytest.raises(apic.IncompatibleGraphError, match="instruction-set features"):
        wp.capture_load(path)


def test_foreign_cpu_compiles_the_source_in_a_fresh_process(tmp_path):
    path = _save(tmp_path)
    _foreign_cpu(path)
    _break_objects(path)  # only a compile from source can replay it now
    run_child({"path": path, "mode": "file", "iters": 3, "get": {"b": str(tmp_path / "b.npy")}}, tmp_path)
    assert same_bits(np.load(tmp_path / "b.npy"), _eager(3)[1])


def test_foreign_cpu_compiles_the_source_from_bytes(tmp_path):
    path = _save(tmp_path)
    _foreign_cpu(path)
    folder = path + "_modules"
    modules = {name: open(os.path.join(folder, name), "rb").read() for name in os.listdir(folder)}
    with open(path + ".wrp", "rb") as f:
        graph = wp.capture_load_from_bytes(f.read(), modules)
    assert same_bits(_replay(graph, 2), _eager(2)[1])


def test_corrupt_object_falls_back_to_source(tmp_path):
    path = _save(tmp_path)
    _break_objects(path)
    graph = wp.capture_load(path)
    assert same_bits(_replay(graph, 4), _eager(4)[1])


def _object_warp_rejects(path: str) -> None:
    """Replace each object with bytes that pass the file's checks (size, SHA-256; the kernel manifest it
    carries names it, as a save of it would) but are no object."""
    from apic.format import manifest

    body = wrp_body(path)
    for module in body["modules"]:
        file = os.path.join(path + "_modules", module["file"])
        with open(file, "rb") as f:
            carried = msgpack.unpackb(manifest.carried(f.read(), file)[1], raw=False)
        junk = b"\x7fELF" + b"\0" * 60 + b"checked, but not an object Warp's loader accepts"
        carried["module_sha256"] = hashlib.sha256(junk).hexdigest()
        data = manifest.carry(junk, msgpack.packb(carried, use_bin_type=True))
        with open(file, "wb") as f:
            f.write(data)
        module.update(sha256=hashlib.sha256(data).hexdigest(), size=len(data))
    rewrite_wrp(path, body)


def test_object_rejected_by_warps_loader_falls_back_to_source(tmp_path):
    path = _save(tmp_path)
    _object_warp_rejects(path)
    graph = wp.capture_load(path)
    assert same_bits(_replay(graph, 3), _eager(3)[1])


def test_object_rejected_without_source_is_a_runtime_error(tmp_path):
    path = _save(tmp_path, source_fallback=False)
    _object_warp_rejects(path)
    with pytest.raises(RuntimeError, match="could not load the CPU module object"):
        wp.capture_load(path)


def test_corrupt_object_without_source_is_refused(tmp_path):
    path = _save(tmp_path, source_fallback=False)
    _break_objects(path)
    with pytest.raises(apic.FormatError, match="SHA-256"):
        wp.capture_load(path)


def test_missing_object_and_missing_source_name_both(tmp_path):
    path = _save(tmp_path)
    folder = path + "_modules"
    for name in os.listdir(folder):
        os.remove(os.path.join(folder, name))
    with pytest.raises(RuntimeError, match=r"packaged binary.*missing.*generated source.*was not found"):
        wp.capture_load(path)


def test_changed_source_is_refused(tmp_path):
    path = _save(tmp_path)
    _foreign_cpu(path)
    folder = path + "_modules"
    source = next(n for n in os.listdir(folder) if n.endswith(".cpp"))
    with open(os.path.join(folder, source), "r+b") as f:  # same size: only the SHA-256 tells
        f.seek(-12, os.SEEK_END)
        f.write(b"\n// changed\n")
    with pytest.raises(apic.FormatError, match="generated source.*SHA-256"):
        wp.capture_load(path)


def test_source_that_does_not_compile_says_so(tmp_path):
    path = _save(tmp_path)
    _foreign_cpu(path)
    folder = path + "_modules"
    body = wrp_body(path)
    bad = b"this is not C++ {"
    name = body["modules"][0]["source"]["file"]
    with open(os.path.join(folder, name), "wb") as f:
        f.write(bad)
    body["modules"][0]["source"].update(sha256=hashlib.sha256(bad).hexdigest(), size=len(bad))
    rewrite_wrp(path, body)
    with pytest.raises(apic.IncompatibleGraphError, match="compiling the saved source of module"):
        wp.capture_load(path)


def test_other_os_is_not_fixed_by_a_rebuild(tmp_path):
    path = _save(tmp_path)
    body = wrp_body(path)
    body["target"]["system"] = "Plan9"
    rewrite_wrp(path, body)
    with pytest.raises(apic.IncompatibleGraphError, match="operating system"):
        wp.capture_load(path)


@pytest.mark.parametrize("field, value, words", [
    ("file", "../escape.cpp", "not a valid source file name"),
    ("file", "module.o", "not a valid source file name"),
    ("sha256", "XYZ", "sha256"),
    ("size", -1, "size"),
    ("options", [], "options: expected a map"),
    ("mode", "fastest", "options.mode"),
    ("fast_math", 1, "options.fast_math"),
    ("optimization_level", 9, "options.optimization_level"),
    ("extra_flags", "-O2; rm -rf /", "options.extra_flags"),
    ("extra_flags", "-Xclang -load -Xclang /tmp/x.so", "options.extra_flags"),
])
def test_invalid_source_fields_are_refused(tmp_path, field, value, words):
    path = _save(tmp_path)
    body = wrp_body(path)
    source = body["modules"][0]["source"]
    if field in source:
        source[field] = value
    else:
        source["options"][field] = value
    rewrite_wrp(path, body)
    with pytest.raises(apic.FormatError, match=f"modules\\[0\\]\\.source.*{words}"):
        wp.capture_load(path)


def test_loaded_graph_saves_again_with_its_source(tmp_path):
    path = _save(tmp_path)
    loaded = wp.capture_load(path)
    again = str(tmp_path / "again")
    wp.capture_save(loaded, again, source_fallback=True)
    _foreign_cpu(again)
    _break_objects(again)
    assert same_bits(_replay(wp.capture_load(again), 2), _eager(2)[1])

    plain = wp.capture_load(_save(tmp_path, source_fallback=False, name="plain"))
    with pytest.raises(apic.CaptureError, match="saved without source_fallback=True"):
        wp.capture_save(plain, str(tmp_path / "nope"), source_fallback=True)
