"""The op-kind table (``apic.record.ops.OP_SPECS``) and the handler tables of every layer that treats ops one
kind at a time: each has an entry, or an explicit refusal, for every kind, and an op of a type no table knows
is refused with an error naming it."""

from __future__ import annotations

import dataclasses
import types

import pytest

import apic  # noqa: F401  (installs apic, as every user of these modules has)
from apic import dot
from apic.cli import inspect_wrp
from apic.errors import FormatError, UnsupportedOperationError
from apic.format import read_ops, reader, schema, write_ops, writer
from apic.record import effects
from apic.record import ops as rec
from apic.c_library import cuda as cuda_export
from apic.replay.cuda import lowering as cuda_lowering
from apic.replay import guards, lowering_rows
from apic.targets import target as targets

pytestmark = [pytest.mark.once]

# (layer, its table keyed by op type)
TABLES = [
    ("write", write_ops.WRITE),
    ("read", read_ops.READ),
    ("lower for CPU replay", lowering_rows.LOWER),
    ("lower for CUDA replay", cuda_lowering._STEP),
    ("describe (inspect)", inspect_wrp._DESCRIBE),
    ("effects", effects.EFFECTS),
    ("export a CUDA graph", cuda_export.STEPS),
]


def test_the_specs_cover_every_op_kind_once():
    assert {spec.kind for spec in rec.OP_SPECS} == set(rec.OpKind)
    assert len({spec.type for spec in rec.OP_SPECS}) == len(rec.OP_SPECS) == len(rec.OpKind)
    for spec in rec.OP_SPECS:
        assert spec.type.kind is spec.kind and spec.name == spec.kind.name.lower()
        assert spec.kind in schema.OP_FIELDS, f"{spec.name} has no wire fields"
        assert spec.targets and set(spec.targets) <= {t.name for t in targets.TARGETS}
        assert dataclasses.is_dataclass(spec.type)
    assert set(rec.Op.__args__) == {spec.type for spec in rec.OP_SPECS}


@pytest.mark.parametrize("layer, table", TABLES, ids=[name for name, _ in TABLES])
def test_every_table_has_an_entry_or_a_refusal_for_every_kind(layer, table):
    assert set(table) == {spec.type for spec in rec.OP_SPECS}, layer
    assert all(callable(entry) or isinstance(entry, effects.OpEffects) for entry in table.values())


def test_every_kind_says_its_effects():
    """A kind without an effects entry fails here: guards, profile, DOT, budget and lowering read it."""
    assert set(effects.EFFECTS) == {spec.type for spec in rec.OP_SPECS}
    for op_type, found in effects.EFFECTS.items():
        assert isinstance(found, effects.OpEffects), op_type
        assert all(callable(f) for f in (found.reads, found.writes, found.index_buffers, found.label)), op_type
        assert found.rows in (0, 1) and found.control in (None, effects.BRANCH, effects.JUMP), op_type
        # a kind that moves control says where to: its dataclass has the target
        assert (found.control is not None) == ("target" in {f.name for f in dataclasses.fields(op_type)}), op_type


def _one_of_each() -> list:
    """An op of every kind, each touching its own regions."""
    blob = rec.Blob(bytes(8), (rec.Reloc(0, rec.Ref(3, 0)),))
    return [
        rec.Launch(0, (4,), rec.Blob(bytes(32)), blob), rec.Memcpy(rec.Ref(1, 0), rec.Ref(2, 0), 8),
        rec.Memset(rec.Ref(1, 0), 0, 8), rec.Memtile(rec.Ref(1, 0), rec.Blob(bytes(4)), 2),
        rec.ArrayCopy(blob, rec.Blob(bytes(56), (rec.Reloc(0, rec.Ref(2, 0)),)), 0, 0, 4),
        rec.ArrayFill(blob, 0, rec.Blob(bytes(4))), rec.Alloc(rec.Ref(5, 0), 8), rec.Branch(rec.Ref(6, 0), 9),
        rec.Jump(0), rec.NativeCall("array_scan_int_host", (rec.Ref(1, 0), rec.Ref(2, 0), 4, 1)),
        rec.CudaLaunch(0, (1,), blob, (1, 1, 1), (1, 1, 1), 0), rec.HandleCall("mesh_refit_host", rec.HandleRef(0)),
    ]


def test_the_effects_of_each_kind():
    ops = _one_of_each()
    assert {type(op) for op in ops} == {spec.type for spec in rec.OP_SPECS}
    writes = {type(op).__name__: effects.effects_of(op).writes(op) for op in ops}
    assert writes == {"Launch": {3}, "Memcpy": {1}, "Memset": {1}, "Memtile": {1}, "ArrayCopy": {3}, "ArrayFill": {3},
                      "Alloc": {5}, "Branch": set(), "Jump": set(), "NativeCall": {1, 2}, "CudaLaunch": {3},
                      "HandleCall": {("h", 0)}}
    reads = {type(op).__name__: effects.effects_of(op).reads(op, ()) for op in ops}
    assert reads["Memcpy"] == {2} and reads["ArrayCopy"] == {2} and reads["Branch"] == {6} and reads["Memset"] == set()
    assert [effects.effects_of(op).rows for op in ops].count(0) == 1  # the allocation: nothing runs
    assert [effects.control_of(op) for op in ops].count(None) == len(ops) - 2


def test_a_kind_without_effects_is_refused_naming_the_layer():
    with pytest.raises(TypeError, match="the index checks of a loaded graph: no handler for an op of type Teleport"):
        guards.guards(Teleport(), [])
    with pytest.raises(TypeError, match="drawing a graph: no handler for an op of type Teleport"):
        dot.effects(Teleport())


def test_inspect_and_dot_show_every_kind():
    """A kind with no line or label of its own is shown by its fields (inspect) or its effects' label (DOT)."""
    assert set(inspect_wrp._LINES) <= {spec.name for spec in rec.OP_SPECS}
    kernels = [types.SimpleNamespace(key="step", adjoint=False)]
    for op in _one_of_each():
        name = rec.SPEC_OF_TYPE[type(op)].name
        entry = {**inspect_wrp._op(op, kernels), "count": 1, "first": 0}
        assert entry["kind"] == name
        line = inspect_wrp._LINES.get(name, inspect_wrp._fields_line)(entry)
        assert line and "\n" not in line, name
        assert dot._op_label(op, kernels, lambda region: f"r{region}"), name
    assert inspect_wrp._fields_line({**inspect_wrp._fields(rec.Jump(3), kernels), "kind": "jump"}) == "jump target=3"
    assert dot._op_label(rec.Jump(3), kernels, str) == "jump"


def test_the_lowerings_refuse_exactly_the_kinds_their_target_cannot_hold():
    for spec in rec.OP_SPECS:
        assert isinstance(lowering_rows.LOWER[spec.type], rec.Refused) == ("cpu" not in spec.targets), spec.name
        assert isinstance(cuda_lowering._STEP[spec.type], rec.Refused) == ("cuda" not in spec.targets), spec.name


def test_a_refusal_names_the_kind():
    op = rec.CudaLaunch(0, (1,), rec.Blob(b""), (1, 1, 1), (1, 1, 1), 0)
    with pytest.raises(TypeError, match="cannot lower op CudaLaunch"):
        lowering_rows.lower_op(op, "bounds-by-pointer-v1", None, None, [], None)
    with pytest.raises(TypeError, match="cannot replay a NativeCall op on CUDA"):
        cuda_lowering._STEP[rec.NativeCall](rec.NativeCall("f", ()), None)
    with pytest.raises(TypeError, match="a Jump op outside the conditional tree"):  # lowered as conditional nodes
        cuda_lowering._STEP[rec.Jump](rec.Jump(0), None)


@dataclasses.dataclass(frozen=True)
class Teleport:
    """An op type no table knows."""

    kind = 99


@pytest.mark.parametrize("layer, table", TABLES, ids=[name for name, _ in TABLES])
def test_an_unknown_op_type_is_refused_naming_it(layer, table):
    with pytest.raises(TypeError, match=r"no handler for an op of type Teleport \(not an op kind of"):
        rec.handler(table, Teleport(), layer)


def test_the_layers_refuse_an_unknown_op_type_naming_it():
    with pytest.raises(TypeError, match="saving a graph: no handler for an op of type Teleport"):
        write_ops.op_wire(Teleport(), {}, "cpu")
    with pytest.raises(TypeError, match="lowering a graph for CPU replay: no handler for an op of type Teleport"):
        lowering_rows.lower_op(Teleport(), "bounds-by-pointer-v1", None, None, [], None)
    with pytest.raises(TypeError, match="drawing a graph: no handler for an op of type Teleport"):
        dot.effects(Teleport())
    with pytest.raises(TypeError, match="inspect: no handler for an op of type Teleport"):
        inspect_wrp._op(Teleport(), [])


def test_the_writer_refuses_a_kind_the_target_cannot_hold():
    with pytest.raises(UnsupportedOperationError, match="saving a NativeCall op in a CUDA graph"):
        write_ops.op_wire(rec.NativeCall("f", ()), {}, "cuda")
    with pytest.raises(UnsupportedOperationError, match="saving a CudaLaunch op in a CPU graph"):
        write_ops.op_wire(rec.CudaLaunch(0, (1,), rec.Blob(b""), (1, 1, 1), (1, 1, 1), 0), {}, "cpu")


def _file_with_op(op: dict) -> bytes:
    """A CPU graph file with one region and one op map."""
    doc = {"format": schema.FORMAT_NAME, "format_version": 1, "writer": {"apic": "0", "warp": "0"},
           "target": {"system": "", "machine": "", "cpu": "", "features": [], "byteorder": "little",
                      "pointer_bits": 64},
           "abi": "bounds-by-pointer-v1", "regions": [{"nbytes": 8, "owned": True, "contents": None}],
           "modules": [], "kernels": [], "ops": [op], "sequence": bytes(4), "bindings": []}
    return writer.encode(doc)


def test_the_reader_refuses_an_unknown_kind_naming_it():
    with pytest.raises(FormatError, match=r"ops\[0\].kind: unknown op kind 99"):
        reader.read(_file_with_op({"kind": 99}))
    # and a kind its target cannot hold, by name
    with pytest.raises(FormatError, match=r"op kind 11 \(cuda_launch\) cannot appear in a graph with ABI"):
        reader.read(_file_with_op({"kind": 11, "kernel": 0, "dim": [1], "params": {"data": b"", "relocs": []},
                                   "grid": [1, 1, 1], "block": [1, 1, 1], "smem": 0}))
    assert reader.read(_file_with_op({"kind": 9, "target": 1})).recording.ops == (rec.Jump(1),)
