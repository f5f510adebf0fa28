"""Every limit a reader enforces (``apic.format.schema``, ``MAX_*`` / ``MIN_*``) at the limit and one past it.

As msgpack-python tests its own limits: a file holding a field at the limit reads, and the same file with
the field one past it is refused with a ``FormatError`` naming the field. Files are real saved graphs
whose msgpack body is edited and re-encoded with a valid header. Where no valid file can hold a value at
the limit (a kind name longer than any kind), the file at the limit may be refused for another reason,
but not by the limit. A last test lists the integer literals left in the reader modules, so that a new
limit is named in ``schema`` rather than spelled where it is checked.
"""

from __future__ import annotations

import ast
import copy
import os
import re

import pytest
import warp as wp

import apic
import persist_kernels as pk
from wrp_helpers import read_doc, unpack_body
from apic.format import fields, schema, writer
from apic.record import ops as rec
from test_handles import _saved_doc

pytestmark = [pytest.mark.warp_version, pytest.mark.interpreter, pytest.mark.install]


def _body(path) -> dict:
    with open(path, "rb") as f:
        return unpack_body(f.read())


@pytest.fixture(scope="module")
def docs(tmp_path_factory) -> dict:
    """The documents the cases edit: a CPU graph saved with its sources, and one with a wp.Mesh."""
    folder = tmp_path_factory.mktemp("limits")
    sim = pk.Sim(0)
    wp.capture_save(pk.capture(sim), str(folder / "sim"), inputs=sim.inputs(), outputs=sim.outputs(),
                    source_fallback=True)
    return {"cpu": _body(folder / "sim.wrp"), "mesh": _saved_doc(folder, "mesh")}


def _launch(doc: dict) -> dict:
    return next(op for op in doc["ops"] if op["kind"] == schema.WireOp.LAUNCH)


def _launch_at(doc: dict) -> int:
    return next(i for i, op in enumerate(doc["ops"]) if op["kind"] == schema.WireOp.LAUNCH)


def _array_binding(doc: dict) -> dict:
    return next(b for b in doc["bindings"] if b["kind"] in schema.BINDING_KINDS)


def _one_element(binding: dict, stride: int) -> None:
    """A binding of one element whose stride is ``stride`` (one element reaches no further than its size)."""
    binding.update(shape=[1], strides=[stride], nbytes=binding["elem_size"])


def _scalar(doc: dict, np_dtype: str, elem_shape: list) -> None:
    """Add a named scalar parameter (format 3) of ``np_dtype`` components in ``elem_shape``."""
    itemsize = int(np_dtype[2:])
    nbytes = itemsize
    for n in elem_shape:
        nbytes *= n
    doc["format_version"] = schema.PARAMS_VERSION
    doc["bindings"].append({"name": "limit_param", "kind": schema.SCALAR_KIND, "dtype": "any", "nbytes": nbytes,
                            "np_dtype": np_dtype, "elem_shape": elem_shape, "value": bytes(nbytes)})


def _nested_ifs(doc: dict, n: int) -> None:
    """``n`` ifs (on the first int32 of region 0), each inside the one before, around the graph's first op."""
    import numpy as np

    first = np.frombuffer(doc["sequence"], dtype="<u4")[0]
    doc["ops"].append({"kind": schema.WireOp.BRANCH, "cond": [0, 0], "target": n + 1})
    doc["sequence"] = np.array([len(doc["ops"]) - 1] * n + [first], dtype="<u4").tobytes()


def _source(doc: dict) -> dict:
    return doc["modules"][0]["source"]


def _hash_grid(doc: dict, options: dict) -> None:
    doc["handles"].append({"kind": "HashGrid", "arrays": [], "options": options})


def _set(path: tuple):
    """An edit that puts the value at ``path`` (keys and indices below the body)."""

    def apply(doc, value):
        target = doc
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value

    return apply


def _text(path: tuple):
    return lambda doc, n: _set(path)(doc, "x" * n)


# (limit, document, edit(doc, n): the document with the limited quantity n, what the refusal says past the
# limit, whether a file at the limit reads (False: no valid file can hold it; it must not be refused by the
# limit)). A MIN_* limit is checked at the limit and one below it.
CASES = [
    ("MAX_INT", "cpu", lambda d, n: d["regions"][0].update(array={"dtype": "float32", "shape": [1], "strides": [n]}),
     r"regions\[0\]\.array\.strides\[0\]: .* is outside", True),
    ("MAX_INT32", "cpu", lambda d, n: _one_element(_array_binding(d), n),
     r"bindings\[\d+\]\.strides\[0\]: .* is outside", True),
    ("MAX_UINT32", "cpu", lambda d, n: _launch(d).update(dim=[n]), r"ops\[\d+\]\.dim\[0\]: .* is outside", False),
    ("MAX_DIMS", "cpu", lambda d, n: _launch(d).update(dim=[1] * n), r"ops\[\d+\]\.dim: .* at most", False),
    ("MAX_REGION_BYTES", "cpu",
     lambda d, n: d["regions"].append({"nbytes": n, "owned": True, "contents": None}),
     r"regions\[\d+\]\.nbytes: .* is outside", True),
    ("MAX_ELEM_BYTES", "cpu", lambda d, n: _array_binding(d).update(elem_size=n),
     r"bindings\[\d+\]\.elem_size: .* is outside", False),
    ("MAX_ELEM_DIM", "cpu", lambda d, n: _array_binding(d).update(elem_shape=[n]),
     r"bindings\[\d+\]\.elem_shape\[0\]: .* is outside", False),
    ("MAX_ARGS_BYTES", "cpu", lambda d, n: d["kernels"][0].update(args_size=n),
     r"kernels\[0\]\.args_size: .* is outside", False),
    ("MAX_SCALAR_BYTES", "cpu", lambda d, n: _scalar(d, "<f8", [16, n // 128]) if n % 128 == 0
     else _scalar(d, "<i1", [n]), r"bindings\[\d+\]\.nbytes: .* is outside", True),
    ("MAX_SCALAR_ELEM_DIM", "cpu", lambda d, n: _scalar(d, "<f4", [n]),
     r"bindings\[\d+\]\.elem_shape\[0\]: .* is outside", True),
    ("MAX_SCALAR_RANK", "cpu", lambda d, n: _scalar(d, "<f4", [1] * n),
     r"bindings\[\d+\]\.elem_shape: .* at most", True),
    ("MAX_TAG", "cpu", lambda d, n: _array_binding(d).update(kind="x" * n), r"bindings\[\d+\]\.kind: .* at most",
     False),
    ("MAX_HANDLE_ARRAY_NAME", "mesh", lambda d, n: d["handles"][0]["arrays"][0].__setitem__(0, "x" * n),
     r"handles\[0\]\.arrays\[0\]\[0\]: .* at most", False),
    ("MAX_WORD", "cpu", _text(("writer", "warp")), r"writer\.warp: .* at most", True),
    ("MAX_LABEL", "cpu", _text(("target", "cpu")), r"target\.cpu: .* at most", True),
    ("MAX_NAME", "cpu", lambda d, n: _array_binding(d).update(name="x" * n), r"bindings\[\d+\]\.name: .* at most",
     True),
    ("MAX_FILE_STEM", "cpu", lambda d, n: _source(d).update(file="x" * n + ".cpp"),
     r"modules\[0\]\.source\.file: .* is not a valid source file name", True),
    ("MAX_FEATURES", "cpu", lambda d, n: d["target"].update(features=["sse2"] * n),
     r"target\.features: .* at most", True),
    ("MAX_HANDLES", "mesh", lambda d, n: d["handles"].extend([d["handles"][0]] * (n - len(d["handles"]))),
     r"handles: .* at most", True),
    ("MAX_HANDLE_ARRAYS", "mesh",
     lambda d, n: d["handles"][0].update(arrays=(d["handles"][0]["arrays"] * n)[:n]),
     r"handles\[0\]\.arrays: .* at most", False),
    ("MAX_HANDLE_OPTIONS", "mesh", lambda d, n: _hash_grid(d, {f"o{i}": 1 for i in range(n)}),
     r"handles\[\d+\]\.options: expected a map of at most", False),
    ("MAX_NATIVE_TYPES", "cpu", lambda d, n: d["modules"][0].update(native_types=["mesh_query_t"] * n),
     r"modules\[0\]\.native_types: .* at most", True),
    ("MAX_SPLIT_WRITES", "cpu", lambda d, n: d["kernels"][0].update(split_writes=list(range(0, 8 * n, 8))),
     r"kernels\[0\]\.split_writes: .* at most", False),
    ("MAX_OP_KIND", "cpu", lambda d, n: _launch(d).update(kind=n), r"ops\[\d+\]\.kind: .* is outside", False),
    ("MAX_SOURCE_FLAGS", "cpu",
     lambda d, n: _source(d)["options"].update(extra_flags=" ".join(["-march=native"] * n)),
     r"modules\[0\]\.source\.options\.extra_flags: more than", True),
    ("MAX_GRID_CELLS", "mesh", lambda d, n: _hash_grid(d, {"dim_x": n, "dim_y": 1, "dim_z": 1}),
     r"handles\[\d+\]\.options\.dim_x: .* invalid value", True),
    ("MAX_LEAF_SIZE", "mesh", lambda d, n: d["handles"][0]["options"].update(bvh_leaf_size=n),
     r"handles\[0\]\.options\.bvh_leaf_size: .* invalid value", True),
    ("MAX_CPU_NESTING", "cpu", lambda d, n: _nested_ifs(d, n), r"sequence: branch and jump bodies nest \d+ deep",
     True),
    ("MIN_POINTER_BITS", "cpu", _set(("target", "pointer_bits")), r"target\.pointer_bits: .* is outside", True),
    ("MAX_POINTER_BITS", "cpu", _set(("target", "pointer_bits")), r"target\.pointer_bits: .* is outside", True),
    ("MAX_SOURCE_BYTES", "cpu", lambda d, n: _source(d).update(size=n), r"modules\[0\]\.source\.size", True),
    ("MAX_OPTIMIZATION_LEVEL", "cpu", lambda d, n: _source(d)["options"].update(optimization_level=n),
     r"modules\[0\]\.source\.options\.optimization_level: expected an integer in", True),
    ("MAX_BLOCK_DIM", "cpu", lambda d, n: _source(d)["options"].update(block_dim=n),
     r"modules\[0\]\.source\.options\.block_dim: expected an integer in", True),
]

# Limits of CUDA files, on test_cuda_offline's document (a CUDA graph built without a GPU).
CUDA_CASES = [
    ("MIN_ARCH", lambda d, n: d["device"].update(arch=n), r"device\.arch: .* is outside"),
    ("MAX_ARCH", lambda d, n: d["device"].update(arch=n), r"device\.arch: .* is outside"),
    ("MAX_ARCH_SUFFIX", lambda d, n: d["modules"][0].update(arch_suffix="a" * n),
     r"modules\[0\]\.arch_suffix: .* at most"),
    ("MAX_KERNEL_PARAMS", lambda d, n: d["kernels"][0].update(params=[[8 * i, 8] for i in range(n)]),
     r"kernels\[0\]\.params: .* at most"),
    ("MAX_BLOCK_THREADS", lambda d, n: d["ops"][0].update(block=[n, 1, 1]), r"ops\[0\]\.block\[0\]: .* is outside"),
    ("MAX_GRID_YZ", lambda d, n: d["ops"][0].update(grid=[1, n, 1]), r"ops\[0\]: grid .* exceed CUDA's limits"),
    ("MAX_CONDITIONAL_DEPTH", lambda d, n: d.update(_conditional_wire("depth", n)),
     r"sequence: the conditional body at position \d+ is nested \d+ deep"),
    ("MAX_CONDITIONAL_BODY_OPS", lambda d, n: d.update(_conditional_wire("body", n)),
     r"sequence: the body at positions 1\.\.\d+ holds \d+ ops"),
]


def _conditional_wire(shape: str, n: int) -> dict:
    """The ``ops`` and ``sequence`` of a CUDA file whose conditional bodies nest ``n`` deep (``shape="depth"``), or
    whose one if-body holds ``n`` copies (``"body"``): written with the writer's own check of the limits lifted."""
    from unittest import mock

    import test_cuda_conditional_offline as cond

    if shape == "depth":
        ops = cond._nest(n)
    else:
        copy_op = cond._plain()[2][1]
        ops = [rec.Branch(cond.C, n + 1)] + [copy_op] * n
    with mock.patch.object(schema, "MAX_CONDITIONAL_DEPTH", 1 << 30), \
            mock.patch.object(schema, "MAX_CONDITIONAL_BODY_OPS", 1 << 30):
        doc, _ = cond._document("", ops)
    return {"ops": doc["ops"], "sequence": doc["sequence"]}
# Not reached through a .wrp alone: the manifest limits are checked at load (kernel manifests;
# MAX_MANIFEST_BYTES is tested on the trailer below, MAX_ID_WORDS on saved arrays of Mesh ids); MAX_TEXT is
# the default of fields.check_str, and a
# pattern bounds every field read with it more tightly (tested on its own below).
NOT_READ_HERE = {"MAX_ID_WORDS", "MAX_MANIFEST_BYTES", "MAX_TEXT"}


def _read(doc: dict):
    return read_doc(doc)


def _at(doc: dict, edit, n: int) -> dict:
    doc = copy.deepcopy(doc)
    edit(doc, n)
    return doc


def _check(doc: dict, limit: str, edit, refusal: str, reads: bool) -> None:
    value = getattr(schema, limit)
    past = value - 1 if limit.startswith("MIN_") else value + 1
    at_limit = _at(doc, edit, value)
    if reads:
        _read(at_limit)
    else:
        try:
            _read(at_limit)
        except apic.FormatError as error:
            assert not re.search(refusal, str(error)), f"refused at the limit: {error}"
    with pytest.raises(apic.FormatError, match=refusal):
        _read(_at(doc, edit, past))


@pytest.mark.parametrize("limit, document, edit, refusal, reads", CASES, ids=[c[0] for c in CASES])
def test_limit(docs, limit, document, edit, refusal, reads):
    _check(docs[document], limit, edit, refusal, reads)


@pytest.mark.parametrize("limit, edit, refusal", CUDA_CASES, ids=[c[0] for c in CUDA_CASES])
def test_cuda_limit(limit, edit, refusal):
    from test_cuda_offline import _document

    doc, _ = _document("")  # the reader never parses the module's PTX
    _check(doc, limit, edit, refusal, limit not in ("MAX_KERNEL_PARAMS", "MAX_ARCH_SUFFIX"))


def test_the_manifest_trailer_limit():
    """A module file's manifest trailer may claim at most MAX_MANIFEST_BYTES, even where the file holds more."""
    from apic.format import manifest

    body = b"\0" * (schema.MAX_MANIFEST_BYTES + 2)
    for size in (schema.MAX_MANIFEST_BYTES, schema.MAX_MANIFEST_BYTES + 1):
        contents = body + manifest._TRAILER.pack(size, manifest._TRAILER_MAGIC)
        if size == schema.MAX_MANIFEST_BYTES:
            bare, carried = manifest.carried(contents, "module file m.o")
            assert len(carried) == size and len(bare) == len(body) - size
        else:
            with pytest.raises(apic.FormatError, match="kernel manifest trailer"):
                manifest.carried(contents, "module file m.o")


def _saved_mesh_ids(folder, count: int):
    """A graph whose kernel reads Mesh ids from a uint64 array of ``count`` of them, saved and loaded;
    its path, the loaded graph, eager Warp's result and the live objects."""
    import numpy as np

    from test_manifest import _query_meshes

    points = wp.array(np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0], [1, 1, 0]], np.float32), dtype=wp.vec3)
    indices = wp.array(np.array([0, 1, 2, 1, 3, 2], np.int32), dtype=wp.int32)
    meshes = [wp.Mesh(points=points, indices=indices), wp.Mesh(points=points, indices=indices)]
    grid = wp.HashGrid(4, 4, 4)
    ids = wp.array(np.resize(np.array([m.id for m in meshes], np.uint64), count), dtype=wp.uint64)
    out, eager = wp.zeros(4, dtype=float), wp.zeros(4, dtype=float)
    with wp.ScopedCapture(device="cpu", apic=True) as cap:
        wp.launch(_query_meshes, dim=4, inputs=[ids, grid.id, points, out])
    wp.launch(_query_meshes, dim=4, inputs=[ids, grid.id, points, eager])
    path = str(folder / f"ids{count}")
    wp.capture_save(cap.graph, path, outputs={"out": out})
    return path, wp.capture_load(path), eager.numpy(), (meshes, grid, ids)


def test_the_handle_id_array_limit(tmp_path):
    """An array argument of MAX_ID_WORDS handle ids is recorded as one (its manifest entry makes a replay
    check every id, the last one too); one of MAX_ID_WORDS + 1 is refused at save (fail closed)."""
    from apic.replay.cpu import table as tbl

    path, graph, eager, live = _saved_mesh_ids(tmp_path, schema.MAX_ID_WORDS)
    assert int((graph.program.table[:, 0] == tbl.OP_CHECK_IDS).sum()) == 1
    wp.capture_launch(graph)
    assert graph.param_numpy("out").tobytes() == eager.tobytes()
    with open(path + ".wrp", "rb") as f:
        doc = unpack_body(f.read())
    offsets = [offset for _, offset, _ in doc["handle_slots"]]
    last = offsets.index(max(offsets))  # the array's last id
    doc["handle_slots"][last][2] = next(i for i, h in enumerate(doc["handles"]) if h["kind"] == "HashGrid")
    with open(path + ".wrp", "wb") as f:
        f.write(writer.encode(doc))
    with pytest.raises(apic.ReplayIndexError, match="handle id"):
        wp.capture_launch(wp.capture_load(path))
    del doc, offsets  # a million slots: not kept through the second graph

    # one more id than a replay checks: refused at save (it would replay with its ids unchecked)
    with pytest.raises(apic.CaptureError, match=r"an array of 1,048,577 native handle ids.*up to 1,048,576"):
        _saved_mesh_ids(tmp_path, schema.MAX_ID_WORDS + 1)
    assert not os.path.exists(tmp_path / f"ids{schema.MAX_ID_WORDS + 1}.wrp")


def test_the_default_string_limit():
    assert fields.check_str("x" * schema.MAX_TEXT, "w") == "x" * schema.MAX_TEXT
    with pytest.raises(apic.FormatError, match="at most"):
        fields.check_str("x" * (schema.MAX_TEXT + 1), "w")


def test_every_limit_has_a_case():
    named = {name for name in vars(schema) if re.fullmatch(r"(MAX|MIN)_[A-Z0-9_]+", name)} - {"MIN_READ_VERSION"}
    cased = {c[0] for c in CASES} | {c[0] for c in CUDA_CASES} | NOT_READ_HERE
    assert named - cased == set(), "a limit without an accept/reject case"
    assert cased - named == set(), "a case of a limit schema no longer names"


# Integer literals above 8 still in the reader modules, and why each is not a limit: layout offsets and
# sizes of what is read, and the value ranges of enumerations. A new limit belongs in schema.
READERS = ("reader.py", "read_ops.py", "read_bounds.py", "read_raw.py", "read_tables.py", "read_context.py",
           "fields.py", "handles.py", "bound_handles.py", "manifest.py", "manifest_check.py", "source.py",
           "cuda_source.py")
KNOWN_LITERALS = {
    "read_ops.py": [255],  # a memset value is a byte
    "read_bounds.py": sorted([64,  # no launch of 2^64 threads or more
                              12, 12, 16, 24, 24, 32]),  # launch bounds layouts: sizes and padding offsets
    "read_raw.py": [64],  # entries read one by one before the rest are unpacked at once (not a limit)
    "handles.py": [32, 40],  # a NanoVDB buffer: its size field's offset, its header's size
    "source.py": [64],  # an unknown flag is shown cut to 64 characters
    "cuda_source.py": [90, 100, 160],  # sm_90a / sm_100f; a written file's stem length (digest digits: targets.files)
}


def _literals(path: str) -> list[int]:
    with open(path) as f:
        tree = ast.parse(f.read())
    return sorted(node.value for node in ast.walk(tree)
                  if isinstance(node, ast.Constant) and type(node.value) is int and abs(node.value) > 8)


def test_the_literals_left_in_the_readers():
    folder = os.path.dirname(schema.__file__)
    found = {name: _literals(os.path.join(folder, name)) for name in READERS}
    assert {name: values for name, values in found.items() if values} == KNOWN_LITERALS
