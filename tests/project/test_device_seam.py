"""One device seam: what a device does differently is reached through its replay backend
(``apic/replay/backends/``), never by asking what kind of graph or device is at hand.

The scan reads the package's AST (no import runs) and fails on:

1. a type test on an apic graph class (``isinstance`` / ``issubclass`` / ``type(x) is``) outside the backends;
2. a branch on a device kind in the modules that capture (with control flow), launch, load, replay, copy
   bindings, free and save (``SEAM``): ``.is_cpu`` / ``.is_cuda``, a comparison with ``"cpu"`` / ``"cuda"`` /
   ``"cuda:N"`` or with a ``device_kind``, a saved graph's ``device`` compared with None;
3. a private part of a backend reached from outside the backends (``backend._run_table``).

A planted module proves that each rule catches what it is for. It also checks that every part of the
:class:`apic.replay.backends.Backend` interface has a caller in the package outside the backends.
"""

from __future__ import annotations

import ast
import os

import pytest

import apic
from apic.replay import backends

pytestmark = [pytest.mark.once]

_PACKAGE = os.path.dirname(os.path.abspath(apic.__file__))
_BACKENDS = os.path.join("replay", "backends")
GRAPH_CLASSES = frozenset({"Graph", "CudaGraph", "CapturedCudaGraph", "LoadedCudaGraph"})
# the modules of the seam's callers (relative to the package), each scanned whole (None) or in the functions
# named; whether a capture on a device is apic's own or Warp's is ``backends.apic_captures``
SEAM = {"capture.py": None, "capture_flow.py": None, "persist.py": None, "loading.py": None, "graph.py": None,
        "cuda_graph.py": None, "sweep.py": None, "replay/program.py": None, "replay/cpu/plans.py": None,
        "replay/named_params.py": None}
# (module, line text) type tests on graph classes that remain, each with why; may only shrink (it is empty:
# a conditional's body asks its graph's backend: ``records_inline``, ``conditional_body``)
KNOWN_TYPE_TESTS: set = set()
_DEVICE_WORDS = ("cpu", "cuda")


def _names(node) -> set[str]:
    """The class names a type test's second argument spells (a name, an attribute, or a tuple of them)."""
    if isinstance(node, ast.Tuple):
        return set().union(*(_names(e) for e in node.elts)) if node.elts else set()
    if isinstance(node, ast.Name):
        return {node.id}
    if isinstance(node, ast.Attribute):
        return {node.attr}
    return set()


def type_tests(tree) -> list[int]:
    """Lines that test a value against an apic graph class."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in (
                "isinstance", "issubclass") and len(node.args) == 2 and _names(node.args[1]) & GRAPH_CLASSES:
            found.append(node.lineno)
        elif isinstance(node, ast.Compare) and isinstance(node.left, ast.Call) and \
                isinstance(node.left.func, ast.Name) and node.left.func.id == "type" and \
                any(_names(c) & GRAPH_CLASSES for c in node.comparators):
            found.append(node.lineno)
    return found


def _device_word(node) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str) and (
        node.value in _DEVICE_WORDS or node.value.startswith("cuda:"))


def device_branches(tree, functions=None) -> list[int]:
    """Lines that ask what kind of device is at hand (in ``functions`` only, if given)."""
    roots = [tree] if functions is None else [n for n in ast.walk(tree) if isinstance(
        n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name in functions]
    found = []
    for root in roots:
        for node in ast.walk(root):
            if isinstance(node, ast.Attribute) and node.attr in ("is_cpu", "is_cuda"):
                found.append(node.lineno)
            elif isinstance(node, ast.Compare):
                operands = [node.left, *node.comparators]
                if any(_device_word(o) for o in operands) or any(
                        isinstance(o, ast.Attribute) and o.attr == "device_kind" for o in operands):
                    found.append(node.lineno)
                elif any(isinstance(o, ast.Attribute) and o.attr == "device" for o in operands) and any(
                        isinstance(o, ast.Constant) and o.value is None for o in operands):
                    found.append(node.lineno)
    return found


def private_backend_parts(tree) -> list[int]:
    """Lines that reach a private part of a backend (``backend._x``, ``program.backend._x``)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            value = node.value
            name = value.id if isinstance(value, ast.Name) else value.attr if isinstance(value, ast.Attribute) else ""
            if name == "backend" or name.endswith("_backend"):
                found.append(node.lineno)
    return found


def _modules():
    for folder, _, files in os.walk(_PACKAGE):
        for file in sorted(files):
            if file.endswith(".py"):
                path = os.path.join(folder, file)
                relative = os.path.relpath(path, _PACKAGE)
                with open(path, encoding="utf-8") as f:
                    text = f.read()
                yield relative.replace(os.sep, "/"), text, ast.parse(text)


def _outside_backends(relative: str) -> bool:
    return not relative.startswith(_BACKENDS.replace(os.sep, "/") + "/")


PLANTED = '''
def capture_launch(graph, stream=None, threads=None):
    if isinstance(graph, Graph):
        return graph.launch(1, threads)
    if type(graph) is LoadedCudaGraph or issubclass(type(graph), (CudaGraph, object)):
        return graph.launch(stream=stream)
    if graph.device.is_cuda or str(graph.device) == "cuda:0" or backend.device_kind != "cpu":
        raise ValueError
    if saved.device is not None:
        return program.backend._run_table(table)

def capture_begin(device):
    return device.is_cpu
'''


def test_the_scan_finds_a_planted_violation_of_each_rule():
    tree = ast.parse(PLANTED)
    assert type_tests(tree) == [3, 5, 5]
    assert sorted(set(device_branches(tree, ("capture_launch",)))) == [7, 9]
    assert len(device_branches(tree, ("capture_launch",))) == 4  # is_cuda, "cuda:0", device_kind, device is not None
    assert sorted(device_branches(tree)) == sorted(device_branches(tree, ("capture_launch",)) + [13])
    assert private_backend_parts(tree) == [10]
    clean = ast.parse("def f(graph, stream, threads):\n    return graph.backend.launch(graph, stream, threads)\n")
    assert type_tests(clean) == device_branches(clean) == private_backend_parts(clean) == []


def test_no_type_test_on_a_graph_class_outside_the_backends():
    found = set()
    for relative, text, tree in _modules():
        if _outside_backends(relative):
            lines = text.splitlines()
            found |= {(relative, lines[n - 1].split("#")[0].strip()) for n in type_tests(tree)}
    assert found - KNOWN_TYPE_TESTS == set(), "ask the graph's backend instead"
    assert KNOWN_TYPE_TESTS - found == set(), "fixed: remove them from KNOWN_TYPE_TESTS"


def test_the_seam_callers_do_not_branch_on_a_device_kind():
    found = {}
    for relative, _, tree in _modules():
        if relative in SEAM:
            lines = device_branches(tree, SEAM[relative])
            if lines:
                found[relative] = lines
    assert set(SEAM) <= {r for r, _, _ in _modules()}, "a module of SEAM is gone: update the list"
    assert found == {}, "a device branch outside apic/replay/backends/: give the backend the part instead"


def test_no_private_part_of_a_backend_is_reached_from_outside():
    found = {r: lines for r, _, tree in _modules() if _outside_backends(r) and (lines := private_backend_parts(tree))}
    assert found == {}


def test_every_part_of_the_interface_has_a_caller_outside_the_backends():
    parts = {name for name, value in vars(backends.Backend).items() if not name.startswith("_") and
             (callable(value) or isinstance(value, bool)) and name not in ("name", "device_kind")}
    assert parts == {"device", "load", "launch", "launch_many", "write_binding", "read_binding", "free",
                     "keeps_untouched_arrays", "memory_on_host", "records_inline", "conditional_body"}
    used = set()
    for relative, _, tree in _modules():
        if _outside_backends(relative):
            used |= {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    assert parts - used == set(), "a part nothing calls: remove it from the interface"


def test_a_capture_on_the_cpu_is_apics_own_and_only_cpu_graphs_inline_into_it():
    import warp as wp

    assert backends.apic_captures(wp.get_device("cpu")) is True
    assert backends.get("cpu_native").records_inline and backends.get("cpu_reference").records_inline
    assert backends.get("cuda").records_inline is False
    graph = object()
    assert backends.get("cpu_native").conditional_body(graph, None, None) is graph  # Warp's own refuses it
    if wp.is_cuda_available():
        assert backends.apic_captures(wp.get_device("cuda:0")) is False


def test_the_cuda_backend_gives_warp_a_captured_graphs_warp_graph_and_a_loaded_one_as_a_replaying_callable():
    # stand-ins for the two apic CUDA graphs (no GPU here): the part reads only ``warp_graph`` / ``launch``
    class Captured:
        warp_graph = object()

    class Loaded:
        def __init__(self):
            self.streams = []

        def launch(self, stream=None):
            self.streams.append(stream)

    class Device:
        stream = "the device's current stream"

    cuda = backends.get("cuda")
    assert cuda.conditional_body(Captured(), None, Device()) is Captured.warp_graph
    loaded = Loaded()
    body = cuda.conditional_body(loaded, None, Device())
    body(some_kwarg=1)  # Warp calls a body with the conditional's keyword arguments
    cuda.conditional_body(loaded, "the condition's stream", Device())()
    assert loaded.streams == ["the device's current stream", "the condition's stream"]
