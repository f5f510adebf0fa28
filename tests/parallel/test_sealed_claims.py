"""What a threaded replay of a loaded graph acts on comes from the module files, not from the ``.wrp``
(``apic.format.sealed_claims``; issue 33, classes 2 to 4).

Each file below is saved by apic with its source (``source_fallback=True``), then edited as an attacker
who can rewrite the ``.wrp`` (re-sealed: its checksums pass) and add files to the modules folder, but not
change the module object a load runs:

* a forged split claim on a kernel the proof refused (it writes across worlds), or a tile kernel's
  ``tiles`` flag cleared: the load is refused, naming the kernel;
* a manifest without the sealed claims (as written before them): the claims are dropped, the launches
  replay serially, as eager Warp;
* the ``.wrp`` naming an edited generated source while the object is untouched: a threaded replay must not
  compile it (its launches replay serially, as eager Warp); a source that is not UTF-8 is refused with
  apic's error where it would be compiled, never a bare ``UnicodeDecodeError``.

Every load and replay runs in a fresh process, with the Numba and the reference interpreter.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import textwrap

import msgpack
import numpy as np
import pytest
import warp as wp

import fork_server
import tile_kernels as tk
import world_kernels as wk
from apic.format import manifest as kernel_manifest
from apic.format import schema, sealed_claims
from apic.targets import cpu
from persist_helpers import child_env, rewrite_wrp, same_bits, wrp_body

pytestmark = [pytest.mark.warp_version, pytest.mark.interpreter]

TESTS = os.path.dirname(os.path.abspath(__file__))
N = 64

_CHILD = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    import warp as wp
    wp.config.quiet = True
    import apic

    job = json.loads(sys.argv[1])
    try:
        graph = wp.capture_load(job["path"])
    except apic.FormatError as error:
        print(json.dumps({"refused": str(error)}))
        sys.exit(0)
    graph.min_tasks_per_thread = 1
    for _ in range(job["iters"]):
        wp.capture_launch(graph, threads=2)
    for name in graph.params:
        p = graph.params[name]
        arr = wp.empty(shape=p["shape"], dtype=getattr(wp, p["dtype"]), device="cpu")
        graph.get_param(name, arr)
        np.save(job["out"] + name + ".npy", arr.numpy())
    print(json.dumps({"refused": None, "report": graph.parallel_report(2)}))
    """
)


@wp.kernel
def triple(src: wp.array(dtype=float), dst: wp.array(dtype=float)):
    i = wp.tid()
    dst[i] = src[i] * 3.0


def _triple_inputs():
    return [wp.array(np.arange(N, dtype=np.float32), dtype=float, device="cpu"), wp.zeros(N, dtype=float, device="cpu")]


def _save(kernel, dim, make, folder, launch=None):
    """Capture one launch of ``kernel`` over ``make()``'s arrays (``launch(inputs)``: another way to launch
    it), saved with its source to ``folder/g``; returns the eager arrays after ``iters`` launches (a
    function of ``iters``)."""
    launch = launch or (lambda inputs: wp.launch(kernel, dim=dim, inputs=inputs, device="cpu"))
    inputs = make()
    launch(make())  # compiled outside the capture
    with wp.ScopedCapture(device="cpu", apic=True) as capture:
        launch(inputs)
    outputs = {f"a{i}": a for i, a in enumerate(inputs) if isinstance(a, wp.array)}
    wp.capture_save(capture.graph, str(folder / "g"), outputs=outputs, source_fallback=True)

    def eager(iters: int) -> list:
        arrays = make()
        for _ in range(iters):
            launch(arrays)
        return [a.numpy() for a in arrays if isinstance(a, wp.array)]

    return eager


def _world_make(name: str):
    _, _, make, _ = wk.CASES[name]
    return lambda: make(np.random.default_rng(21))


def _load(folder, iters: int = 2, interpreter: str = "numba") -> dict:
    job = {"path": str(folder / "g"), "iters": iters, "out": str(folder / "out-")}
    env = child_env()
    if interpreter == "reference":
        env["APIC_REPLAY"] = "reference"
    done = fork_server.run([sys.executable, "-c", _CHILD, json.dumps(job)], env=env, capture_output=True, text=True,
                           timeout=600, cwd=TESTS)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _same_as_eager(folder, eager: list) -> None:
    for i, expected in enumerate(eager):
        assert same_bits(np.load(str(folder / f"out-a{i}.npy")), expected), i


def _module_file(folder, body: dict, field: dict, contents: bytes, suffix: str) -> None:
    """Put ``contents`` in the modules folder under its content-addressed name; ``field`` (a module entry or
    its ``source``) names it."""
    name = body["modules"][0]["name"]
    digest = hashlib.sha256(contents).hexdigest()
    field.update(file=cpu.module_file_name(name, digest, suffix), sha256=digest, size=len(contents))
    with open(folder / "g_modules" / field["file"], "wb") as f:
        f.write(contents)


def _read_module_file(folder, field: dict) -> bytes:
    with open(folder / "g_modules" / field["file"], "rb") as f:
        return f.read()


# --- class 4: split claims ---------------------------------------------------------------------------------
def _forge_world(kernel: dict, offsets: list[int]) -> None:
    kernel.pop("split_writes", None)
    kernel["split_world"] = {"writes": [offsets[-1]], "rows": offsets, "tiles": False}


def _forge_task(kernel: dict, offsets: list[int]) -> None:
    kernel.pop("split_world", None)
    kernel["split_writes"] = [offsets[-1]]


@pytest.mark.parametrize("forge", [_forge_world, _forge_task], ids=["split_world", "split_writes"])
@pytest.mark.parametrize("case", ["reads_previous_world", "modulo_world"])
def test_a_forged_split_claim_on_a_kernel_writing_across_worlds_is_refused(tmp_path, case, forge):
    kernel, dim, _, expected = wk.CASES[case]
    assert expected == "kernel"  # the proof refuses it: its worlds depend on each other
    _save(kernel, dim, _world_make(case), tmp_path)
    body = wrp_body(str(tmp_path / "g"))
    (entry,) = body["kernels"]
    assert "split_world" not in entry and "split_writes" not in entry
    launch = next(op for op in body["ops"] if op.get("kind") == schema.WireOp.LAUNCH and "args" in op)
    forge(entry, [slot[0] for slot in launch["args"]["arrays"]])
    rewrite_wrp(str(tmp_path / "g"), body)
    result = _load(tmp_path)
    assert result["refused"] and "sealed in its module's kernel manifest" in result["refused"], result
    assert "kernels[0]" in result["refused"]


def test_a_cleared_claim_of_a_splittable_kernel_is_refused(tmp_path):
    """Any claim but the sealed one is refused, a weaker one too: the file is not what apic wrote."""
    _save(triple, N, _triple_inputs, tmp_path)
    body = wrp_body(str(tmp_path / "g"))
    assert body["kernels"][0].pop("split_writes") is not None
    rewrite_wrp(str(tmp_path / "g"), body)
    assert "sealed in its module's kernel manifest" in _load(tmp_path)["refused"]


@pytest.mark.parametrize("interpreter", ["numba", "reference"])
def test_a_manifest_without_sealed_claims_replays_serially_as_eager(tmp_path, interpreter):
    """A module file whose manifest has no ``split`` map (written before the claims were sealed): the
    ``.wrp``'s claims are dropped; its launches replay serially, bit for bit as eager Warp."""
    eager = _save(triple, N, _triple_inputs, tmp_path)
    body = wrp_body(str(tmp_path / "g"))
    module = body["modules"][0]
    bare, manifest = kernel_manifest.carried(_read_module_file(tmp_path, module), "object")
    doc = msgpack.unpackb(manifest, raw=False)
    assert doc.pop(sealed_claims.FIELD) == {body["kernels"][0]["symbol"]: [[56], None, False]}
    _module_file(tmp_path, body, module, kernel_manifest.carry(bare, msgpack.packb(doc, use_bin_type=True)),
                 cpu.MODULE_EXTENSION)
    rewrite_wrp(str(tmp_path / "g"), body)
    result = _load(tmp_path, 2, interpreter)
    assert result["refused"] is None, result
    (entry,) = result["report"]
    assert entry["chunks"] == 0 and entry["why"] == sealed_claims.UNSEALED, result
    _same_as_eager(tmp_path, eager(2))


@pytest.mark.parametrize("interpreter", ["numba", "reference"])
def test_a_sealed_claim_still_splits_as_eager(tmp_path, interpreter):
    eager = _save(triple, N, _triple_inputs, tmp_path)
    result = _load(tmp_path, 2, interpreter)
    (entry,) = result["report"]
    assert entry["chunks"] > 1 and not entry["why"], result
    _same_as_eager(tmp_path, eager(2))


# --- class 2: the source compiled for a threaded replay ------------------------------------------------------
def _edit_source(tmp_path, edit) -> dict:
    """The ``.wrp`` re-sealed to name module 0's source edited by ``edit(bare source) -> bytes`` (its manifest
    trailer kept as saved); the object file untouched. Returns the body."""
    body = wrp_body(str(tmp_path / "g"))
    source = body["modules"][0]["source"]
    bare, manifest = kernel_manifest.carried(_read_module_file(tmp_path, source), "source")
    _module_file(tmp_path, body, source, kernel_manifest.carry(edit(bare), manifest), ".cpp")
    rewrite_wrp(str(tmp_path / "g"), body)
    return body


def _five(bare: bytes) -> bytes:
    assert b" = 3.0;" in bare
    return bare.replace(b" = 3.0;", b" = 5.0;")  # valid C++, another kernel: dst = src * 5


@pytest.mark.parametrize("interpreter", ["numba", "reference"])
def test_an_edited_source_named_by_the_wrp_is_not_compiled_for_threads(tmp_path, interpreter):
    eager = _save(triple, N, _triple_inputs, tmp_path)
    _edit_source(tmp_path, _five)
    result = _load(tmp_path, 2, interpreter)
    assert result["refused"] is None, result
    (entry,) = result["report"]
    assert entry["chunks"] == 0 and "source" in entry["why"], result  # no bound source: serial
    _same_as_eager(tmp_path, eager(2))


def test_a_source_that_is_not_utf8_is_not_compiled_for_threads(tmp_path):
    """The ``.wrp`` names a source with a byte that is not UTF-8 (the object untouched): not the bound
    source, so nothing decodes it; the replay is serial and as eager."""
    eager = _save(triple, N, _triple_inputs, tmp_path)
    _edit_source(tmp_path, lambda bare: bare + b"\n// \xff\xfe\n")
    result = _load(tmp_path, 2)
    assert result["refused"] is None, result
    assert result["report"][0]["chunks"] == 0, result
    _same_as_eager(tmp_path, eager(2))


def test_a_source_compiled_at_load_that_is_not_utf8_is_refused(tmp_path):
    """The object missing, the source is the code a load compiles: one that is not UTF-8 (its own manifest
    naming it) is refused with apic's FormatError before anything compiles it."""
    _save(triple, N, _triple_inputs, tmp_path)
    body = wrp_body(str(tmp_path / "g"))
    os.remove(tmp_path / "g_modules" / body["modules"][0]["file"])
    source = body["modules"][0]["source"]
    bare, manifest = kernel_manifest.carried(_read_module_file(tmp_path, source), "source")
    bare += b"\n// \xff\xfe\n"
    doc = msgpack.unpackb(manifest, raw=False)
    doc["source_sha256"] = hashlib.sha256(bare).hexdigest()
    body = _edit_source(tmp_path, lambda _: bare)
    source = body["modules"][0]["source"]
    _module_file(tmp_path, body, source, kernel_manifest.carry(bare, msgpack.packb(doc, use_bin_type=True)), ".cpp")
    rewrite_wrp(str(tmp_path / "g"), body)
    result = _load(tmp_path)
    assert result["refused"] and "is not UTF-8 text" in result["refused"], result


# --- class 3: per-thread tile memory ---------------------------------------------------------------------------
def _save_tiles(folder):
    kernel, make, _ = tk.CASES["cholesky_rows"]
    return _save(kernel, None, lambda: make(np.random.default_rng(21), tk.WORLDS), folder,
                 lambda inputs: wp.launch_tiled(kernel, dim=(tk.WORLDS,), inputs=inputs, block_dim=1, device=tk.CPU))


def _respelled(bare: bytes) -> bytes:
    """The same C++ with its tile calls spelled another way (``wp:: tile_load`` for ``wp::tile_load``)."""
    assert b"wp::tile_" in bare
    return bare.replace(b"wp::tile_", b"wp:: tile_").replace(b"wp::adj_tile_", b"wp:: adj_tile_")


def test_a_tile_kernels_cleared_tiles_flag_with_a_respelled_source_is_refused(tmp_path):
    """The file of issue 33, class 3: the tiles flag cleared and the source respelled so that no text
    search finds its tile calls. Two threads sharing one tile arena would crash the process."""
    _save_tiles(tmp_path)
    body = _edit_source(tmp_path, _respelled)
    body["kernels"][0]["split_world"]["tiles"] = False
    rewrite_wrp(str(tmp_path / "g"), body)
    result = _load(tmp_path)
    assert result["refused"] and "sealed in its module's kernel manifest" in result["refused"], result


@pytest.mark.parametrize("interpreter", ["numba", "reference"])
def test_a_tile_kernels_respelled_source_is_not_compiled_for_threads(tmp_path, interpreter):
    """The flag left as sealed, the source respelled: not the bound source, so not compiled; serial, as eager."""
    eager = _save_tiles(tmp_path)
    _edit_source(tmp_path, _respelled)
    result = _load(tmp_path, 2, interpreter)
    assert result["refused"] is None, result
    assert result["report"][0]["chunks"] == 0 and "source" in result["report"][0]["why"], result
    _same_as_eager(tmp_path, eager(2))
