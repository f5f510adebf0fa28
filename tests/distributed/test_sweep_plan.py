"""A sweep without its engine (``apic.sweep_plan``): the typed worker reply, the order items go out in, the error
a caller sees; and ``apic.sweep.Replayer`` on a CUDA graph, through its backend.

The worker functions run a real ``Replayer`` in this process (no Ray) and are compared bit for bit with the step
run eagerly. The CUDA Replayer is loaded through the real cuda-python bindings over the offline driver stand-in
of ``tests/cuda/test_cuda_python_offline.py`` (skipped, saying why, where cuda-python is missing or a driver is
present): the stand-in runs no kernel, so what it checks is the path (each step one replay through the backend,
a fresh load per item, outputs copied from device memory), not numbers; ``test_a_cuda_sweep_on_the_gpu`` does
the numbers where a GPU is present.
"""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest
import warp as wp

import apic
import ray_kernels as rk
from apic import sweep
from apic.sweep import Replayer
from apic.sweep_plan import Schedule, WorkerError, WorkerReply, load_worker, raise_reply, run_batch, where
from persist_helpers import same_bits

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "cuda"))
from test_cuda_offline import ptx  # noqa: E402, F401  (a fixture)
from test_cuda_python_offline import _load, cu  # noqa: E402, F401  (cu is a fixture)

pytestmark = [pytest.mark.warp_version, pytest.mark.interpreter]

HOST = {"pid": 1, "host": "h", "warp": "1.19.0", "apic": "0"}


@pytest.fixture(scope="module")
def bundle():
    graph, x, v = rk.capture()
    return apic.capture_save_to_bytes(graph, inputs={"x0": x}, outputs={"x": x, "v": v})


def test_a_batch_replies_with_a_typed_record_of_every_result(bundle):
    replayer, failed = load_worker(lambda: Replayer(*bundle), HOST)
    assert failed is None
    reply = run_batch(replayer, None, HOST, [{"dt": 0.02, "inner": 3}, {"dt": 0.05}], 4, None, None)
    assert isinstance(reply, WorkerReply) and reply.ok and reply.host is HOST and len(reply.results) == 2
    assert same_bits(reply.results[0]["x"], rk.eager(4, 0.02, 3)["x"])
    assert same_bits(reply.results[1]["v"], rk.eager(4, 0.05, 1)["v"])


def test_a_failed_item_replies_with_its_type_message_and_place(bundle):
    replayer = Replayer(*bundle)
    reply = run_batch(replayer, None, HOST, [{"dt": 0.02}, {"nope": 1.0}, {"dt": 0.1}], 1, None, None)
    assert not reply.ok and reply.error == "BindingError" and reply.item == 1 and "nope" in reply.message
    with pytest.raises(apic.BindingError, match=r"Ray worker 3 \(pid 1 on h.*item 7: BindingError: .*nope"):
        raise_reply(3, reply, "item 7")


def test_a_worker_that_cannot_load_replies_so_to_every_call():
    replayer, failed = load_worker(lambda: Replayer(b"not a graph", {}), HOST)
    assert replayer is None and not failed.ok and failed.error
    assert run_batch(None, failed, HOST, [{}], 1, None, None) is failed
    with pytest.raises(apic.ApicError, match="Ray worker 0"):
        raise_reply(0, failed, "cannot load the graph")


@pytest.mark.parametrize("kind, expected", [("TypeError", TypeError), ("ValueError", ValueError),
                                            ("BindingError", apic.BindingError), ("KeyError", WorkerError),
                                            ("UnsupportedOperationError", WorkerError), ("__class__", WorkerError)])
def test_the_caller_gets_the_workers_class_where_it_can_be_made(kind, expected):
    with pytest.raises(expected) as info:
        raise_reply(2, WorkerReply(None, error=kind, message="boom"), "item 5", engine="Local")
    assert type(info.value) is expected and str(info.value) == f"Local worker 2: item 5: {kind}: boom"


def test_where_names_the_process_when_known():
    assert where(4, None) == "Ray worker 4"
    assert where(1, {**HOST, "node": "abc"}) == "Ray worker 1 (pid 1 on h, node abc, warp-lang 1.19.0, apic 0)"


def test_the_schedule_sends_chunks_round_robin_and_keeps_input_order():
    plan = Schedule(7, 2, chunk=2, in_flight=1, start=1)
    assert plan.first_calls() == [(1, 0, 2), (0, 2, 4)]
    assert plan.next_call(0) == (0, 4, 6) and plan.next_call(1) == (1, 6, 7) and plan.next_call(0) is None
    for first, end in ((6, 7), (0, 2), (4, 6), (2, 4)):  # finished in any order
        plan.done(first, WorkerReply(None, list(range(first, end))))
    assert plan.results == list(range(7))
    assert Schedule(0, 3).first_calls() == []
    assert len(Schedule(10, 2, in_flight=3).first_calls()) == 6
    for chunk in (0, 1.0, True, None):
        with pytest.raises(ValueError, match="chunk"):
            Schedule(3, 1, chunk=chunk)


# --- a CUDA graph: through its backend ------------------------------------------------------------------------
def _cuda_replayer(cu, ptx, monkeypatch):  # noqa: F811
    from apic.record.bindings import Binding

    loads = []

    def load(data, modules):
        device, _saved, graph = _load(cu, monkeypatch, ptx)
        graph.bindings = {"x": Binding("x", "output", 0, 0, 32, "float32", (8,), (4,), 4, "<f4", ())}
        loads.append(device)
        return graph

    monkeypatch.setattr(sweep, "capture_load_from_bytes", load)  # the stand-in's graph for the saved bytes
    return Replayer(b"", {}), loads


def test_a_cuda_graph_replays_through_its_backend_and_loads_again_per_item(cu, ptx, monkeypatch):  # noqa: F811
    replayer, loads = _cuda_replayer(cu, ptx, monkeypatch)
    assert replayer._reload  # device memory: no host copy is kept
    first = replayer.run({}, steps=3)
    assert len(loads) == 1 and len(loads[0].named("cuGraphLaunch")) == 3  # each step one replay of the exec graph
    assert first["x"].shape == (8,) and first["x"].dtype == np.float32  # copied from device memory
    assert loads[0].named("cuMemcpyDtoH")
    replayer.run({"x": wp.array(np.ones(8, dtype=np.float32), device="cpu")}, steps=1)
    assert len(loads) == 2 and len(loads[1].named("cuGraphLaunch")) == 1 and loads[1].named("cuMemcpyHtoD")
    replayer.run({}, steps=0)
    assert len(loads) == 3 and not loads[2].named("cuGraphLaunch")


def test_threads_on_a_cuda_graph_are_refused_before_a_replay(cu, ptx, monkeypatch):  # noqa: F811
    replayer, loads = _cuda_replayer(cu, ptx, monkeypatch)
    with pytest.raises(ValueError, match="only for apic CPU graphs"):
        replayer.run({}, steps=1, threads=2)
    assert not loads[-1].named("cuGraphLaunch")


@wp.kernel
def _step(x: wp.array(dtype=wp.float32), y: wp.array(dtype=wp.float32)):
    i = wp.tid()
    y[i] = y[i] * 0.5 + x[i]


def _eager(x_values, steps):
    x = wp.array(x_values, device="cuda:0")
    y = wp.zeros(16, dtype=wp.float32, device="cuda:0")
    for _ in range(steps):
        wp.launch(_step, dim=16, inputs=[x, y], device="cuda:0")
    return y.numpy()


def test_a_cuda_sweep_on_the_gpu():
    if not wp.is_cuda_available():
        pytest.skip("no CUDA device here: the CUDA sweep is checked on a GPU only (the stand-in tests above run)")
    x = wp.array(np.arange(16, dtype=np.float32), device="cuda:0")
    y = wp.zeros(16, dtype=wp.float32, device="cuda:0")
    with wp.ScopedCapture(device="cuda:0", apic=True) as capture:
        wp.launch(_step, dim=16, inputs=[x, y], device="cuda:0")
    replayer = Replayer(*apic.capture_save_to_bytes(capture.graph, inputs={"x": x}, outputs={"y": y}))
    items = [np.full(16, 3.0, dtype=np.float32), np.arange(16, dtype=np.float32) - 7.0]
    for values in items + items[:1]:  # the third item again: the same bits, whatever ran before
        got = replayer.run({"x": wp.array(values, device="cpu")}, steps=3)
        assert same_bits(got["y"], _eager(values, 3))
