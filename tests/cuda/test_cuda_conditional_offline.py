"""``wp.capture_if`` / ``wp.capture_while`` in saved CUDA graphs, without a GPU: the bodies read back from the
branch-and-jump layout (``apic.record.cuda.conditional_tree``), the file format and its limits, and the lowering to
CUDA conditional nodes checked call by call against the stand-in driver of tests/test_cuda_python_offline.py
(every call first goes to the real cuda-python binding, which must accept its arguments).

tests/test_cuda_conditional_gpu.py runs the same graphs on a GPU against eager execution and Warp's own graph.
"""

from __future__ import annotations

import ctypes
import dataclasses
import os

import pytest
import warp as wp

from apic import _compat, loading
from apic.errors import FormatError, IncompatibleGraphError
from apic.format import schema
from apic.record import ops as rec
from apic.record.cuda.conditional_tree import IfNode, StructureError, WhileNode, conditional_tree, depth_of
from apic.replay.cuda import conditional as cuda_conditional
from test_cuda_offline import ARCH, FileGraph, _read, _saxpy_recording, ptx  # noqa: F401  (ptx is a fixture)
from test_cuda_python_offline import FakeDevice, cu  # noqa: F401  (cu is a fixture)

pytestmark = [pytest.mark.warp_version]

C, C2 = rec.Ref(2, 60), rec.Ref(2, 56)  # the two conditions: int32s in the graph-owned region


def _plain():
    """The plain ops of tests/test_cuda_offline.py's recording: launch, copy, memset, 4-byte fill, 6-byte fill."""
    recording, contents = _saxpy_recording()
    launch, copy, memset, fill4, fill6, _alloc = recording.ops[:6]
    return recording, contents, (launch, copy, memset, fill4, fill6)


def _nested_ops():
    """if/else; a while holding a while; an if holding a while (the positions are the recorder's layout)."""
    _, _, (L, M, S, T4, T6) = _plain()
    B, J = rec.Branch, rec.Jump
    return (
        L,
        B(C, 5), M, S, J(7), T4, T6,  # if (C) {copy; memset} else {fill4; fill6}
        B(C, 13), L, B(C2, 12), M, J(9), J(7),  # while (C) {launch; while (C2) {copy}}
        B(C, 17), B(C2, 17), L, J(14),  # if (C) {while (C2) {launch}}
    )


def _document(ptx_text, ops):
    from apic.format import writer

    recording, contents, _ = _plain()
    recording = dataclasses.replace(recording, ops=tuple(ops))
    graph = FileGraph(recording, contents, ptx_text.encode("latin-1"), (ARCH, "", "ptx"), ARCH)
    return writer.document(graph, [])


# --- the bodies, read back ------------------------------------------------------------------------------
def test_the_recorders_layouts_read_back_as_nested_bodies():
    _, _, (L, M, S, T4, T6) = _plain()
    tree = conditional_tree(_nested_ops())
    assert tree == (
        L,
        IfNode(C, (M, S), (T4, T6)),
        WhileNode(C, (L, WhileNode(C2, (M,)))),
        IfNode(C, (WhileNode(C2, (L,)),), None),
    )
    assert depth_of(tree) == 2


def test_empty_bodies_and_an_else_without_a_then():
    _, _, (L, M, *_rest) = _plain()
    B, J = rec.Branch, rec.Jump
    assert conditional_tree([B(C, 1)]) == (IfNode(C, (), None),)
    assert conditional_tree([B(C, 2), J(0)]) == (WhileNode(C, ()),)  # a while whose body records nothing
    assert conditional_tree([B(C, 2), J(3), M]) == (IfNode(C, (), (M,)),)  # on_true=None, on_false given
    # an if whose then-body ends in an if/else: the inner jump ends inside the outer body
    assert conditional_tree([B(C, 5), B(C2, 4), L, J(5), M]) == (IfNode(C, (IfNode(C2, (L,), (M,)),), None),)


@pytest.mark.parametrize("ops, message", [
    ([rec.Jump(1)], "the jump at position 0 does not end a loop"),
    ([rec.Branch(C, 3), rec.Jump(0)], "goes to position 3, outside its body"),
    ([rec.Branch(C, 2), rec.Jump(2)], "an empty else-body the recorder does not write"),
    ([rec.Branch(C, 3), rec.Branch(C2, 4), rec.Jump(1), rec.Jump(0)], "outside its body"),
    ([rec.Branch(C, 2), rec.Jump(5), rec.Jump(0)], "goes to position 5, outside its body"),
])
def test_layouts_that_do_not_nest_are_refused_naming_the_position(ops, message):
    with pytest.raises(StructureError, match=message):
        conditional_tree(ops)


def _nest(depth: int) -> list:
    """``depth`` if-nodes, one inside the other, around a jump-free body."""
    _, _, (L, *_rest) = _plain()
    return [rec.Branch(C, depth + 1) for _ in range(depth)] + [L]


def test_the_depth_and_body_limits_accept_up_to_them_and_refuse_beyond():
    assert depth_of(conditional_tree(_nest(4), max_depth=4)) == 4
    with pytest.raises(StructureError, match="nested 5 deep, deeper than the 4"):
        conditional_tree(_nest(5), max_depth=4)
    ops = _nest(1) + [ _plain()[2][1]] * 2  # one if around three ops
    ops[0] = rec.Branch(C, 4)
    assert conditional_tree(ops, max_body=3)
    with pytest.raises(StructureError, match="holds 3 ops, more than the 2"):
        conditional_tree(ops, max_body=2)


# --- the file format --------------------------------------------------------------------------------------
def test_a_cuda_file_with_conditionals_round_trips(ptx):
    doc, _images = _document(ptx, _nested_ops())
    saved = _read(doc)
    assert saved.recording.ops == _nested_ops()
    assert depth_of(conditional_tree(saved.recording.ops)) == 2


def test_the_reader_refuses_a_cuda_sequence_that_does_not_nest(ptx):
    _, _, (L, *_rest) = _plain()
    # forward branches a CPU graph may hold, but no conditional node can: the inner one leaves the outer body
    ops = [L, rec.Branch(C, 4), rec.Branch(C2, 5), L, L]
    doc, _images = _document(ptx, ops)
    with pytest.raises(FormatError, match="sequence.*the branch at position 2 goes to position 5, outside its body"
                                          ".*must nest as conditional nodes"):
        _read(doc)


def test_the_reader_limits_on_depth_and_body_size(ptx, monkeypatch):
    doc, _images = _document(ptx, _nest(3))
    monkeypatch.setattr(schema, "MAX_CONDITIONAL_DEPTH", 3)
    assert len(_read(doc).recording.ops) == 4
    monkeypatch.setattr(schema, "MAX_CONDITIONAL_DEPTH", 2)
    with pytest.raises(FormatError, match="nested 3 deep, deeper than the 2 this reader accepts"):
        _read(doc)
    monkeypatch.setattr(schema, "MAX_CONDITIONAL_DEPTH", 16)
    monkeypatch.setattr(schema, "MAX_CONDITIONAL_BODY_OPS", 3)  # the outer body: two ifs and the launch
    assert _read(doc)
    monkeypatch.setattr(schema, "MAX_CONDITIONAL_BODY_OPS", 2)
    with pytest.raises(FormatError, match="holds 3 ops, more than the 2 this reader accepts in one body"):
        _read(doc)


def test_the_limits_are_named_in_the_schema():
    assert schema.MAX_CONDITIONAL_DEPTH == 16 and schema.MAX_CONDITIONAL_BODY_OPS == 1 << 20


# --- lowering to conditional nodes, against the stand-in driver --------------------------------------------
def _load(cu, monkeypatch, ptx_text, ops, **fake):
    device = FakeDevice(cu)
    for name, value in fake.items():
        setattr(device, name, value)
    monkeypatch.setattr(_compat, "cuda_driver", lambda: device)
    saved = _read(_document(ptx_text, ops)[0])
    for kernel in saved.recording.kernels:
        device.param_info[kernel.symbol] = tuple(tuple(p) for p in kernel.params)
    images = {m.file: ptx_text.encode("latin-1") for m in saved.modules}
    return device, loading.load(saved, images.get, "the test's modules", "cuda:0")


def _set_node_args(params) -> tuple[int, int, int]:
    """(handle, condition address, negate) of a set-condition kernel node."""
    pointers = (ctypes.c_void_p * 3).from_address(int(params.kernelParams))
    return (ctypes.c_uint64.from_address(pointers[0]).value, ctypes.c_uint64.from_address(pointers[1]).value,
            ctypes.c_uint32.from_address(pointers[2]).value)


def test_a_driver_before_cuda_12_4_is_refused_naming_the_version(cu, ptx, monkeypatch):
    with pytest.raises(IncompatibleGraphError, match=r"need a CUDA driver for CUDA 12\.4 or newer; this driver "
                                                     r"is for CUDA 12\.2"):
        _load(cu, monkeypatch, ptx, _nested_ops(), driver_version=12020)


def test_a_graph_without_conditionals_does_not_ask_the_driver_version(cu, ptx, monkeypatch):
    device, graph = _load(cu, monkeypatch, ptx, _plain()[2], driver_version=11040)
    assert not device.named("cuDriverGetVersion") and not device.named("cuGraphAddNode")
    assert len(device.named("cuModuleLoadData")) == 2  # the graph's module and the fill kernel, no set-condition


def test_conditionals_become_conditional_nodes_with_their_bodies(cu, ptx, monkeypatch):
    device, graph = _load(cu, monkeypatch, ptx, _nested_ops())
    driver = cu
    regions = graph.region_addresses
    c, c2 = regions[2] + 60, regions[2] + 56
    assert device.named("cuDriverGetVersion")
    set_fn = int(graph._set_condition)
    assert device.symbols[set_fn] == cuda_conditional.SET_CONDITION_SYMBOL
    root = int(graph._resources.graph)

    nodes = device.named("cuGraphAddNode")
    cond = [(int(a[0]), a[-1].conditional) for a in nodes]
    IF = driver.CUgraphConditionalNodeType.CU_GRAPH_COND_TYPE_IF
    WHILE = driver.CUgraphConditionalNodeType.CU_GRAPH_COND_TYPE_WHILE
    assert all(a[-1].type == driver.CUgraphNodeType.CU_GRAPH_NODE_TYPE_CONDITIONAL for a in nodes)
    assert all(p.size == 1 and int(p.ctx) == 0x100 for _, p in cond)
    # top level: IF, IF (the else), WHILE, IF; the inner WHILEs sit in the outer WHILE's and the last IF's bodies
    assert [(g == root, p.type) for g, p in cond] == [(True, IF), (True, IF), (True, WHILE), (False, WHILE),
                                                      (True, IF), (False, WHILE)]
    handles = [int(p.handle) for _, p in cond]
    assert len(set(handles)) == 6 and len(device.named("cuGraphConditionalHandleCreate")) == 6
    created_on = [int(a[0]) for a in device.named("cuGraphConditionalHandleCreate")]
    bodies = [graphs[0] for graphs in device.body_graphs.values()]  # of each conditional node, in order
    assert created_on[3] == bodies[2] and created_on[5] == bodies[4]  # a nested node's handle: on its graph

    kernels = device.named("cuGraphAddKernelNode")
    setters = [(int(a[0]), _set_node_args(a[3])) for a in kernels if int(a[3].func) == set_fn]
    # if/else: both handles set (the else negated) before either node; a while: before it and at its body's end
    assert setters == [
        (root, (handles[0], c, 0)), (root, (handles[1], c, 1)),
        (root, (handles[2], c, 0)), (bodies[2], (handles[3], c2, 0)), (bodies[3], (handles[3], c2, 0)),
        (bodies[2], (handles[2], c, 0)),
        (root, (handles[4], c, 0)), (bodies[4], (handles[5], c2, 0)), (bodies[5], (handles[5], c2, 0)),
    ]
    # each body holds its own steps: then (copy, memset), else (two fills), the loops' launches and copies
    def in_graph(name, g):
        return [a for a in device.named(name) if int(a[0]) == g]
    assert len(in_graph("cuGraphAddMemcpyNode", bodies[0])) == 1
    assert len(in_graph("cuGraphAddMemsetNode", bodies[0])) == 1
    assert len(in_graph("cuGraphAddMemsetNode", bodies[1])) == 1  # the 4-byte fill
    assert [int(a[3].func) for a in in_graph("cuGraphAddKernelNode", bodies[1])] == [int(graph._fill)]
    assert len(in_graph("cuGraphAddMemcpyNode", bodies[3])) == 1
    assert len(in_graph("cuGraphAddKernelNode", bodies[5])) == 2  # the launch, then the set-condition
    assert len(device.named("cuGraphInstantiate") + device.named("cuGraphInstantiateWithFlags")) == 1
    graph.launch()
    assert len(device.named("cuGraphLaunch")) == 1


def test_op_by_op_replay_reads_each_condition_on_the_host(cu, ptx, monkeypatch):
    """mode="launch": the stream is synchronised and the int32 copied back before each test."""
    device, graph = _load(cu, monkeypatch, ptx, _nested_ops())
    # if: true (then-body); outer while: 2 passes, the inner while 1 then 0 passes; last if: false
    device.conditions = [1, 1, 1, 0, 1, 0, 0, 0]
    before = len(device.calls)
    graph.launch(mode="launch", stream=0x1234)
    calls = [(name, args) for name, args in device.calls[before:]]
    names = [n for n, _ in calls]
    assert not device.conditions  # every scripted value read, no more
    reads = [i for i, n in enumerate(names) if n == "cuMemcpyDtoH"]
    assert len(reads) == 8 and all(names[i - 1] == "cuStreamSynchronize" for i in reads)
    regions = graph.region_addresses
    assert [int(calls[i][1][1]) for i in reads] == [regions[2] + o for o in (60, 60, 56, 56, 60, 56, 60, 60)]
    work = [n for n in names if n in ("cuLaunchKernel", "cuMemcpyDtoDAsync", "cuMemsetD8Async", "cuMemsetD32Async")]
    assert work == ["cuLaunchKernel", "cuMemcpyDtoDAsync", "cuMemsetD8Async",  # the launch; then-body
                    "cuLaunchKernel", "cuMemcpyDtoDAsync", "cuLaunchKernel"]  # two passes of the outer loop
    assert not device.named("cuGraphLaunch")


def test_op_by_op_on_the_graphs_own_stream_reads_conditions_where_rows_replay_the_graph(
        cu, ptx, monkeypatch, tmp_path_factory):
    """With the op-table rows in place (they replay such a graph in graph mode only), ``wp.capture_launch`` in
    mode="launch" on the graph's own stream still runs the ops, reading each condition on the host. (On a GPU
    the rows' missing launch table once made this replay do nothing at all.)"""
    from benchmarks import cuda_standin

    if cuda_standin.compiler() is None:
        pytest.skip("no C compiler (cc, gcc or clang) to build the stand-in CUDA driver library")
    standin = cuda_standin.StandIn(str(tmp_path_factory.mktemp("standin")))
    device, graph = _load(cu, monkeypatch, ptx, _nested_ops(), entry_library=standin.path)
    assert graph._rows is not None and graph._rows.has("graph") and not graph._rows.has("launch")
    device.conditions = [1, 1, 1, 0, 1, 0, 0, 0]  # as in the test above
    graph.mode = "launch"
    wp.capture_launch(graph)
    assert not device.conditions  # every condition read: the ops ran
    assert len(device.named("cuLaunchKernel")) == 3 and not device.named("cuGraphLaunch")
    assert not [c for c in standin.calls() if c.name == "cuGraphLaunch"]  # the rows' graph table did not run
    graph.mode = "graph"
    wp.capture_launch(graph)
    assert [c.name for c in standin.calls()].count("cuGraphLaunch") == 1  # graph mode: the rows, one call


@pytest.mark.parametrize("mode", ["graph", "launch"])
def test_a_replay_inside_a_callers_capture_adds_conditional_nodes_to_its_graph(cu, ptx, monkeypatch, mode):
    """warp#1827: the loaded graph's nodes, conditional ones included, join the graph the caller captures (in both
    modes: a capture cannot wait for the host to read a condition)."""
    device, graph = _load(cu, monkeypatch, ptx, _nested_ops())
    device.capture_status = cu.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_ACTIVE
    before = len(device.calls)
    graph.launch(stream=0x5678, mode=mode)
    names = [n for n, _ in device.calls[before:]]
    assert "cuGraphLaunch" not in names and "cuLaunchKernel" not in names and "cuMemcpyDtoH" not in names
    captured = int(device.capture_graph)
    added = [args for n, args in device.calls[before:] if n.startswith("cuGraphAdd")]
    top = [a for a in added if int(a[0]) == captured]
    assert len(top) == 1 + 2 + 2 + 2 + 2  # the launch, then per conditional its set-condition and its node(s)
    first = top[0]
    assert [int(d) for d in first[1]] == [0x99]  # after what the caller's capture added last
    (update,) = [args for n, args in device.calls[before:] if n == "cuStreamUpdateCaptureDependencies"]
    assert int(update[0]) == 0x5678 and len(update[1]) == 1
    assert update[-1] == cu.CUstreamUpdateCaptureDependencies_flags.CU_STREAM_SET_CAPTURE_DEPENDENCIES
    conditional_nodes = list(device.body_graphs)  # the load's six, then the capture's six
    assert len(conditional_nodes) == 12 and int(update[1][0]) == conditional_nodes[-2]  # the capture goes on
    # after the last top-level node (the if around the while), not after a node inside a body


def test_the_set_condition_kernel_ptx_declares_its_entry_and_the_driver_builtin():
    text = cuda_conditional.SET_CONDITION_PTX.decode()
    assert text.endswith("\0") and ".entry apic_set_condition(" in text
    assert ".extern .func cudaGraphSetConditional" in text and "call.uni cudaGraphSetConditional" in text
    assert text.count(".param .u64 apic_set_condition_param_") == 2 and ".param .u32 apic_set_condition_param_2" in text


GOLDEN = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "golden", "cuda-conditional")


def test_the_golden_cuda_graph_with_conditionals_reads_and_lowers(cu, monkeypatch):
    """tests/data/golden/cuda-conditional (written offline by generate_cuda_conditional.py, never rewritten): read
    by this apic, its sequence as written, and loaded through wp.capture_load against the stand-in driver."""
    import warp as wp

    from apic.format import reader

    with open(os.path.join(GOLDEN, "graph.wrp"), "rb") as f:
        saved = reader.read(f.read())
    assert saved.device["kind"] == "cuda"
    # as written (the launch's bytes are those of the warp-lang that wrote it; the layout is any version's)
    ops, written = saved.recording.ops, _nested_ops()
    assert [type(op) for op in ops] == [type(op) for op in written]
    assert [op for op in ops if isinstance(op, (rec.Branch, rec.Jump))] == [
        op for op in written if isinstance(op, (rec.Branch, rec.Jump))]
    device = FakeDevice(cu)
    monkeypatch.setattr(_compat, "cuda_driver", lambda: device)
    for kernel in saved.recording.kernels:
        device.param_info[kernel.symbol] = tuple(tuple(p) for p in kernel.params)
    graph = wp.capture_load(os.path.join(GOLDEN, "graph"), device="cuda:0")
    kinds = [a[-1].conditional.type.name[len("CU_GRAPH_COND_TYPE_"):] for a in device.named("cuGraphAddNode")]
    assert kinds == ["IF", "IF", "WHILE", "WHILE", "IF", "WHILE"]
    graph.launch()
    assert len(device.named("cuGraphLaunch")) == 1


def _cuda_tool(name: str) -> str:
    """A CUDA toolkit program (``ptxas``, ``nvcc``) on the PATH or under /usr/local/cuda*, or a skip saying so."""
    import glob
    import shutil

    found = shutil.which(name) or next(iter(sorted(glob.glob(f"/usr/local/cuda*/bin/{name}"))), None)
    if found is None:
        pytest.skip(f"no {name} here (a CUDA toolkit): the PTX is checked by the GPU check's load instead")
    return found


@pytest.mark.parametrize("arch", [75, 90])  # (CUDA 13's ptxas has no sm_50 any more; the driver JITs for its GPU)
def test_the_set_condition_ptx_assembles_leaving_the_driver_builtin_to_the_driver(tmp_path, arch):
    import subprocess

    ptxas = _cuda_tool("ptxas")
    source = tmp_path / "set.ptx"
    source.write_bytes(cuda_conditional.SET_CONDITION_PTX.rstrip(b"\0"))
    done = subprocess.run([ptxas, f"-arch=sm_{arch}", str(source), "-o", str(tmp_path / "set.cubin")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert b"cudaGraphSetConditional" in (tmp_path / "set.cubin").read_bytes()  # resolved when the driver loads it


def _instructions(ptx: str) -> str:
    """A PTX text's statements as one string without whitespace, comments, its ISA version and target, or the
    compiler's scratch register."""
    import re

    text = re.sub(r"//[^\n]*", "", ptx.replace("\0", ""))
    kept = [line for line in text.splitlines()
            if not line.strip().startswith((".version", ".target")) and "temp_param_reg" not in line]
    return re.sub(r"\s+", "", "\n".join(kept))


def test_the_set_condition_ptx_is_what_nvcc_makes_of_its_cuda_source(tmp_path):
    """The hand-written kernel against nvcc's PTX of ``cudaGraphSetConditional(h, (*cond != 0) ^ negate)``."""
    import subprocess

    nvcc = _cuda_tool("nvcc")
    source = tmp_path / "set.cu"
    source.write_text(
        'extern "C" __global__ void apic_set_condition(cudaGraphConditionalHandle h, const int* cond, '
        "unsigned int negate)\n{\n    cudaGraphSetConditional(h, (unsigned int)(*cond != 0) ^ negate);\n}\n")
    done = subprocess.run([nvcc, "-ptx", "-arch=sm_50", str(source), "-o", str(tmp_path / "set.ptx")],
                          capture_output=True, text=True, timeout=300)
    if done.returncode != 0 and "sm_50" in done.stderr:  # a toolkit that dropped sm_50: the oldest it has
        done = subprocess.run([nvcc, "-ptx", "-arch=sm_75", str(source), "-o", str(tmp_path / "set.ptx")],
                              capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    made = _instructions((tmp_path / "set.ptx").read_text())
    assert _instructions(cuda_conditional.SET_CONDITION_PTX.decode()) == made, made


def test_a_graph_nested_deeper_than_a_reader_takes_is_not_saved(ptx, tmp_path, monkeypatch):
    """Fail closed at save, not at the load on another machine: the writer checks the reader's limits."""
    import warp as wp

    from apic.errors import UnsupportedOperationError

    recording, contents, _ = _plain()
    graph = FileGraph(dataclasses.replace(recording, ops=tuple(_nest(3))), contents, ptx.encode("latin-1"),
                      (ARCH, "", "ptx"), ARCH)
    monkeypatch.setattr(schema, "MAX_CONDITIONAL_DEPTH", 2)
    with pytest.raises(UnsupportedOperationError, match="nested 3 deep, deeper than the 2"):
        wp.capture_save(graph, str(tmp_path / "deep"))
    assert not os.path.exists(tmp_path / "deep.wrp")
    monkeypatch.setattr(schema, "MAX_CONDITIONAL_DEPTH", 3)
    wp.capture_save(graph, str(tmp_path / "deep"))
    assert os.path.exists(tmp_path / "deep.wrp")
