"""One named-parameter API (``apic.replay.named_params``) for a loaded CPU graph and a loaded CUDA graph:
the same lookups refuse the same misuse with the same error, word for word.

The CUDA graph is loaded through the real cuda-python bindings over the offline driver stand-in of
``test_cuda_python_offline`` (skipped, saying why, where cuda-python is missing or a driver is present).
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import warp as wp

import apic  # noqa: F401  (installs the capture shims)
from apic.record.bindings import Binding
from test_cuda_offline import ptx  # noqa: F401  (a fixture)
from test_cuda_python_offline import _load, cu  # noqa: F401  (cu is a fixture)

pytestmark = [pytest.mark.warp_version, pytest.mark.interpreter]

N = 8


@wp.kernel
def _double(x: wp.array(dtype=wp.float32), y: wp.array(dtype=wp.float32)):
    i = wp.tid()
    y[i] = 2.0 * x[i]


@pytest.fixture
def cpu_graph(tmp_path):
    x = wp.array(np.arange(N, dtype=np.float32), device="cpu")
    y = wp.zeros(N, dtype=wp.float32, device="cpu")
    with wp.ScopedCapture(device="cpu", apic=True) as capture:
        wp.launch(_double, dim=N, inputs=[x, y], device="cpu")
    wp.capture_save(capture.graph, str(tmp_path / "g"), inputs={"x": x})
    return wp.capture_load(str(tmp_path / "g"))


@pytest.fixture
def cuda_graph(cu, ptx, monkeypatch):  # noqa: F811
    _device, _saved, graph = _load(cu, monkeypatch, ptx)
    graph.bindings = {"x": Binding("x", "input", 0, 0, 4 * N, "float32", (N,), (4,), 4, "<f4", ())}
    return graph


def _error(call) -> tuple[type, str]:
    with pytest.raises(Exception) as info:
        call()
    return type(info.value), str(info.value)


def _read_only():
    memory = np.zeros(N, dtype=np.float32)
    memory.flags.writeable = False
    return wp.array(memory, dtype=wp.float32, device="cpu", copy=False)


MISUSES = {
    "an unknown name": lambda g: g.set_param("nope", wp.zeros(N, dtype=wp.float32, device="cpu")),
    "another dtype": lambda g: g.set_param("x", wp.zeros(N, dtype=wp.float64, device="cpu")),
    "another shape": lambda g: g.get_param("x", wp.zeros(N // 2, dtype=wp.float32, device="cpu")),
    "no destination": lambda g: g.get_param("x"),
    "a read-only destination": lambda g: g.get_param("x", _read_only()),
    "not an array": lambda g: g.get_param("x", 3.0),
}


@pytest.mark.parametrize("misuse", MISUSES)
def test_both_graph_types_refuse_a_misuse_with_one_error(cpu_graph, cuda_graph, misuse):
    kind, message = _error(lambda: MISUSES[misuse](cpu_graph))
    assert _error(lambda: MISUSES[misuse](cuda_graph)) == (kind, message)
    assert re.search(r"(set|get)_param\(", message), message  # the error names the call


def test_both_graph_types_describe_and_find_a_parameter_alike(cpu_graph, cuda_graph):
    assert cpu_graph.params == cuda_graph.params == {
        "x": {"size": 4 * N, "kind": "input", "dtype": "float32", "shape": (N,), "strides": (4,)}}
    assert cpu_graph.get_param_ptr("nope") is None and cuda_graph.get_param_ptr("nope") is None
    assert cuda_graph.get_param_ptr("x") == cuda_graph.region_addresses[0]
