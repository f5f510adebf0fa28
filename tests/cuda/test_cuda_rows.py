"""A loaded CUDA graph's replays as op-table rows (``apic.replay.cuda.rows``), checked without a GPU.

The rows call the driver by address; here the driver is a stand-in shared object built by the test with the
system's C compiler (``benchmarks/cuda_standin.py``), which records each call it gets: which call, every
argument, and for a kernel launch the bytes of each kernel parameter at the moment of the call. The graph is
loaded through the real cuda-python bindings with a stand-in behind them (``test_cuda_python_offline``), so
the rows hold the handles, device addresses and kernelParams arrays that load made. The recorded calls are
compared with what the saved graph should issue, worked out here from its recording: in order, the kernel
handle, grid, block, shared memory, stream and parameter bytes of each launch (relocated to the loaded
regions), the pointers, values and sizes of each copy and memset. Both interpreters run the rows (the
native one and ``APIC_REPLAY=reference``).

Skips, saying why, where there is no C compiler, no cuda-python, or a real CUDA driver library
(tests/cuda/test_cuda_gpu.py runs the real thing there).
"""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
import warp as wp

from apic.replay.cuda import rows as cuda_rows
from apic.replay.cuda.driver import CudaReplayError
from benchmarks import cuda_standin
from benchmarks.cuda_standin import Call
from cuda_expected import expected_calls
from cuda_expected import same as _same
from test_cuda_offline import ptx  # noqa: F401  (a fixture)
from test_cuda_python_offline import _load, cu  # noqa: F401  (cu is a fixture)

pytestmark = [pytest.mark.warp_version]

CONTEXT = 0x100  # the primary context the stand-in cuda-python hands out


@pytest.fixture(scope="module")
def standin(tmp_path_factory):
    if cuda_standin.compiler() is None:
        pytest.skip("no C compiler (cc, gcc or clang) to build the stand-in CUDA driver library")
    return cuda_standin.StandIn(str(tmp_path_factory.mktemp("standin")))


@pytest.fixture(params=["numba", "reference"])
def interpreter(request, monkeypatch):
    """The interpreter the rows run in, chosen as ``APIC_REPLAY`` chooses it (``numba``: the native one)."""
    from apic.replay import program

    monkeypatch.setenv("APIC_REPLAY", request.param)  # a Program takes its backend from it at its first replay
    if request.param == "numba":  # the cached machine code of the loop CPU graphs run (native_interpreter.py)
        assert program.native_replay(), "the native serial interpreter could not be had here"
    return request.param


@pytest.fixture
def loaded(cu, ptx, monkeypatch, standin, interpreter):  # noqa: F811
    """A graph loaded with the stand-in library for the rows; its kernels' parameter sizes registered."""
    device, saved, graph = _load(cu, monkeypatch, ptx, entry_library=standin.path)
    assert graph._rows is not None, "the rows were not made with the stand-in library"
    standin.reset()
    symbols = {kernel.symbol: kernel for kernel in saved.recording.kernels}
    for handle, symbol in device.symbols.items():
        sizes = [n for _, n in symbols[symbol].params] if symbol in symbols else [8] * 4  # the fill kernel's
        standin.kernel(handle, sizes)
    return device, saved, graph


def expected_ops(device, saved, graph, stream: int) -> list[Call]:
    """The driver calls the graph's ops should make, in order, worked out from its recording."""
    handle = {symbol: h for h, symbol in device.symbols.items()}
    constants = int(graph._resources.memory[-1])  # the fill values: the last allocation
    return expected_calls(saved.recording, graph.region_addresses, handle, constants, stream)


def _entered(calls: list[Call], current: int) -> list[Call]:
    """``calls`` between the rows' context entry and exit, with ``current`` the context current before."""
    if current == CONTEXT:
        return [Call("cuCtxGetCurrent", (CONTEXT,)), *calls]
    return [Call("cuCtxGetCurrent", (current,)), Call("cuCtxPushCurrent", (CONTEXT,)), *calls,
            Call("cuCtxPopCurrent", (CONTEXT,))]


@pytest.mark.parametrize("current", [0, CONTEXT, 0x200], ids=["no-context", "graph-context", "other-context"])
def test_op_by_op_replay_issues_each_op_as_the_graph_should(loaded, standin, current):
    device, saved, graph = loaded
    standin.set_current(current)
    graph.mode = "launch"
    wp.capture_launch(graph)
    wp.capture_launch(graph)
    stream = int(graph._resources.stream)
    once = _entered(expected_ops(device, saved, graph, stream), current)
    _same(standin.calls(), once + once)
    assert not device.named("cuLaunchKernel") and not device.named("cuMemcpyDtoDAsync")  # no cuda-python per op
    assert standin.depth == (1 if current else 0)  # the context is as it was
    kernel_params = [int(n[3].kernelParams) for n in device.named("cuGraphAddKernelNode")]
    launched = [c.args[9] for c in standin.calls() if c.name == "cuLaunchKernel"]
    assert launched == kernel_params + kernel_params  # the kernelParams arrays built once, at load


def test_graph_replay_is_one_cuGraphLaunch_in_the_same_loop(loaded, standin):
    device, saved, graph = loaded
    graph.mode = "graph"
    wp.capture_launch(graph)
    res = graph._resources
    _same(standin.calls(), _entered([Call("cuGraphLaunch", (int(res.exec), int(res.stream)))], 0))
    assert not device.named("cuGraphLaunch")


def test_a_replay_on_another_stream_issues_there(loaded, standin):
    device, saved, graph = loaded
    standin.set_current(CONTEXT)
    graph.launch(stream=0x1234, mode="launch")
    _same(standin.calls(), _entered(expected_ops(device, saved, graph, 0x1234), CONTEXT))
    standin.clear()
    graph.launch(stream=0x1234, mode="graph")
    _same(standin.calls(), _entered([Call("cuGraphLaunch", (int(graph._resources.exec), 0x1234))], CONTEXT))


def test_a_replay_into_a_capture_issues_op_by_op_in_both_modes(loaded, standin, cu):  # noqa: F811
    device, saved, graph = loaded
    device.capture_status = cu.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_ACTIVE
    standin.set_current(CONTEXT)
    graph.launch(stream=0x5678, mode="graph")
    _same(standin.calls(), _entered(expected_ops(device, saved, graph, 0x5678), CONTEXT))


@pytest.mark.parametrize("failing", ["cuLaunchKernel", "cuMemcpyDtoDAsync", "cuMemsetD32Async", "cuCtxPushCurrent"])
def test_a_call_that_fails_stops_the_replay_naming_it(loaded, standin, failing):
    device, saved, graph = loaded
    graph.mode = "launch"
    once = _entered(expected_ops(device, saved, graph, int(graph._resources.stream)), 0)
    at = [c.name for c in once].index(failing)
    standin.fail(at, 700)  # CUDA_ERROR_ILLEGAL_ADDRESS
    symbol = cuda_rows.SYMBOLS[{"cuLaunchKernel": "launch", "cuMemcpyDtoDAsync": "memcpy",
                                "cuMemsetD32Async": "memset4", "cuCtxPushCurrent": "push"}[failing]]
    message = rf"CUDA graph replay failed: .*{symbol} returned CUDA_ERROR_ILLEGAL_ADDRESS \(700\) at op-table row "
    with pytest.raises(CudaReplayError, match=message + r"\d+; the ops before it were issued"):
        wp.capture_launch(graph)
    issued = standin.calls()
    if failing == "cuCtxPushCurrent":
        _same(issued, once[: at + 1])  # nothing issued, nothing to pop
    else:
        _same(issued[: at + 1], once[: at + 1])
        assert [c.name for c in issued[at + 1 :]] == ["cuCtxPopCurrent"]  # the pushed context popped by apic
    assert standin.depth == 0
    standin.clear()
    wp.capture_launch(graph)  # the next replay runs whole
    _same(standin.calls(), once)


def test_repeated_replays_take_the_short_path_only_where_nothing_changed(loaded, standin, monkeypatch, interpreter):
    """``wp.capture_launch`` repeats the last common replay in one step (``CudaRun.issue``; the native interpreter
    only), but not after a mode change, during a recording on this thread or a capture on the device, or with a
    release pending: the full path replays (or refuses) then. A failing call still raises, naming it."""
    from apic.record.cuda import recorder as cuda_recorder
    from apic.replay.cuda import resources as cuda_resources

    device, saved, graph = loaded
    graph.mode = "graph"
    assert not graph.issue()  # nothing to repeat before a first replay
    wp.capture_launch(graph)
    graph_launch = [Call("cuGraphLaunch", (int(graph._resources.exec), int(graph._resources.stream)))]
    standin.clear()
    assert graph.issue() is (interpreter == "numba")
    wp.capture_launch(graph)
    _same(standin.calls(), _entered(graph_launch, 0) * (1 + (interpreter == "numba")))
    graph.mode = "launch"
    assert not graph.issue()
    monkeypatch.setattr(cuda_recorder._local, "recorder", object())
    graph.mode = "graph"
    assert not graph.issue()
    monkeypatch.setattr(cuda_recorder._local, "recorder", None)
    monkeypatch.setattr(cuda_resources, "PENDING", [object()])
    assert not graph.issue()
    monkeypatch.setattr(cuda_resources, "PENDING", [])
    monkeypatch.setattr(graph, "device", type("Capturing", (), {"captures": {"stream": "graph"}})())
    assert not graph.issue()
    monkeypatch.undo()
    standin.clear()
    standin.fail(2, 700)  # cuCtxGetCurrent, cuCtxPushCurrent, then cuGraphLaunch
    with pytest.raises(CudaReplayError, match=r"cuGraphLaunch returned CUDA_ERROR_ILLEGAL_ADDRESS \(700\)"):
        wp.capture_launch(graph)


@pytest.mark.parametrize("compiler", ["cc", "llvmlite"])
def test_the_floor_makes_the_same_launches_as_the_rows(loaded, standin, tmp_path, compiler):
    """benchmarks/cuda_floor.py (a native loop of cuLaunchKernel calls: C, or the same loop in LLVM IR where no C
    compiler is found) against the rows: the same calls, argument for argument."""
    from benchmarks.cuda_floor import Floor

    device, saved, graph = loaded
    graph.mode = "launch"
    wp.capture_launch(graph)
    rows = [c for c in standin.calls() if c.name == "cuLaunchKernel"]
    floor = Floor(graph, str(tmp_path), cuda_rows.driver_entries(graph._cu), launches_only=True, compiler=compiler)
    assert floor.compiler == compiler
    standin.clear()
    floor.run()
    found = standin.calls()
    assert [c.name for c in found] == ["cuCtxPushCurrent", *["cuLaunchKernel"] * len(rows), "cuCtxPopCurrent"]
    assert found[1:-1] == rows and len(rows) == 3  # every argument and every parameter's bytes
    standin.clear()
    standin.fail(2, 700)  # the second launch fails: the loop stops there, pops the context, and says so
    with pytest.raises(RuntimeError, match="cuLaunchKernel returned CUresult 700"):
        floor.run()
    assert [c.name for c in standin.calls()] == ["cuCtxPushCurrent", "cuLaunchKernel", "cuLaunchKernel",
                                                 "cuCtxPopCurrent"]
    with pytest.raises(RuntimeError, match="copies or memsets"):
        Floor(graph, str(tmp_path), cuda_rows.driver_entries(graph._cu), compiler=compiler)


def test_rows_are_built_once_at_load(loaded):
    """The tables point at the kernelParams arrays and fill arguments of the load, which the graph keeps."""
    _device, _saved, graph = loaded
    table = graph._rows.tables()["launch"]
    params = table[table[:, 0] == cuda_rows.tbl.OP_CUDA_LAUNCH][:, cuda_rows.tbl.COL_ARG0 + 8]
    kept = {ctypes.addressof(k) for k in graph._keep if isinstance(k, ctypes.Array)}
    assert set(params.tolist()) <= kept
    assert np.all(table[:, cuda_rows.tbl.COL_FN] != 0)


def test_the_issue_benchmark_times_each_path_to_the_driver(standin, tmp_path):
    """benchmarks/cuda_issue.py: every method it times reaches the (stand-in) driver as it should, each replay."""
    import json

    from benchmarks import cuda_issue

    path = tmp_path / "issue.json"
    assert cuda_issue.main(["--calls", "50", "--rounds", "2", "--launches", "20", "--json", str(path)]) == 0
    results = json.loads(path.read_text())
    assert set(results["methods"]) == set(cuda_issue.DRIVER_CALLS)
    assert results["methods"]["ctypes no-op"]["vs_noop"] == 1.0
    assert all(m["median_us"] > 0 for m in results["methods"].values())
    per_replay = sum(cuda_issue.DRIVER_CALLS.values())
    assert results["driver_calls"] == (cuda_issue.WARMUP + 50 * 2) * per_replay
    assert set(results["per_node"]) == {"op by op (rows)", "floor (cc)"} and results["launch_vs_floor"] > 0


def test_a_replay_from_another_thread_issues_the_same_calls(loaded, standin):
    import threading

    device, saved, graph = loaded
    graph.mode = "launch"
    errors = []

    def replay():
        try:
            wp.capture_launch(graph)
        except Exception as error:  # noqa: BLE001 - reported below
            errors.append(error)

    thread = threading.Thread(target=replay)
    thread.start()
    thread.join()
    assert errors == []
    _same(standin.calls(), _entered(expected_ops(device, saved, graph, int(graph._resources.stream)), 0))


@pytest.mark.parametrize("ops", [3, 40], ids=["short", "long"])
def test_rows_of_many_ops_run_under_the_lock_and_stop_alike(standin, interpreter, ops):
    """A table longer than prog.SHORT_REPLAY_OPS releases the GIL through its call (and takes the graph's lock):
    the same calls, the same stop."""
    entries = cuda_rows.driver_entries(None, library=standin.path)
    plan = [("memset", 0x9000 + 64 * k, k, 1, 64) for k in range(ops)]
    rows = cuda_rows.CudaRows(plan, entries, CONTEXT, 0x77)
    assert rows._own["launch"].short == (ops <= 16)
    standin.reset()
    assert rows.run_own("launch") and not rows.run_own("graph")  # no graph_exec: no graph-mode table
    memsets = [Call("cuMemsetD8Async", (0x9000 + 64 * k, k, 64, 0x77)) for k in range(ops)]
    _same(standin.calls(), _entered(memsets, 0))
    standin.clear()
    standin.fail(2 + ops // 2, 1)  # CUDA_ERROR_INVALID_VALUE, in the middle
    with pytest.raises(CudaReplayError, match=r"cuMemsetD8Async returned CUDA_ERROR_INVALID_VALUE \(1\) at op-table "
                                              rf"row {1 + ops // 2};"):
        rows.run_own("launch")
    assert standin.depth == 0 and standin.calls()[-1].name == "cuCtxPopCurrent"
