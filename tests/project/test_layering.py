"""The package's import structure: no cycles, layers in one order, function-local imports only where lazy.

The graph comes from ``scripts/import_graph.py`` (stdlib ``ast``; no import of apic runs). The rules:

1. no cycle among module-level imports;
2. no cycle even when function-local imports count as edges (a cycle closed by an import inside a
   function is still a cycle), except the ones listed in ``KNOWN_CYCLES``;
3. every import goes down (or sideways) the layer order ``LAYERS``, except ``KNOWN_INVERSIONS``; the file
   format and replay share a layer and do not import each other (``SEPARATE``): loading, above both,
   joins them; record and replay are each split into floors by folder (each folder's ``__init__`` says what
   it holds and what it may import), and the CPU and CUDA recorders do not import each other;
4. an import inside a function is a lazy optional dependency (``LAZY``: numba and the apic modules that
   import it, cuda-python, matplotlib) or kept out of ``import apic`` for start-up time
   (``LAZY_FOR_STARTUP``), on a line with a comment saying so, or is listed in ``KNOWN_LOCAL`` (what is
   left to clean up).

The known lists may only shrink: an entry that no longer occurs fails the test, so that it is removed.
"""

from __future__ import annotations

import fnmatch
import importlib.util
import os
import subprocess
import sys

import pytest

import apic
from persist_helpers import REPO

pytestmark = [pytest.mark.install]

# the folder holding the apic package under test: the checkout, or site-packages when the suite runs
# against an installed wheel (scripts/test_wheel.sh)
_PACKAGE_PARENT = os.path.dirname(os.path.dirname(os.path.abspath(apic.__file__)))
_SCRIPT = os.path.join(REPO, "scripts", "import_graph.py")
_spec = importlib.util.spec_from_file_location("import_graph", _SCRIPT)
import_graph = importlib.util.module_from_spec(_spec)
sys.modules["import_graph"] = import_graph  # dataclasses look their module up there
_spec.loader.exec_module(import_graph)

# The modules of the top folders of apic/record and apic/replay (their subpackages' modules go by pattern), and
# the CPU interpreter's floor of apic/replay/cpu (its other modules build on the program).
_RECORD_TOP = ("base", "bindings", "control_flow", "effects", "handle_words", "handles", "launch_args", "layout",
               "natives", "op_addresses", "ops", "params", "recording", "regions")
_REPLAY_TOP = ("budget", "guards", "lowering", "lowering_rows", "lowering_splits", "named_params", "program",
               "relocate")
_CPU_INTERPRETER = ("table", "_intrinsics", "jit_cache", "interpreter", "native_entry", "native_interpreter",
                    "param_slots")

# Bottom to top. A module may import modules of its own layer or of a lower one; the first layer whose patterns
# match a module is its layer.
LAYERS = (
    ("base", ("apic.errors", "apic._version", "apic._text", "apic._compat", "apic._probes", "apic._probes.*",
              "apic.patches", "apic.targets", "apic.targets.*")),
    # record/: the ops and what a recording holds besides them (named scalar parameters, noted per launch by the
    # shims: record/params.py; the type facts of named array bindings: record/bindings.py), then the proofs of the
    # parallel replay (record/parallel/), then the two recorders, which import nothing of each other (SEPARATE)
    ("record", ("apic.record", "apic.record.cpu", "apic.record.cuda", "apic.record.parallel",
                *(f"apic.record.{m}" for m in _RECORD_TOP))),
    ("record: the parallel proofs", ("apic.record.parallel.*",)),
    ("record: the recorders", ("apic.record.cpu.*", "apic.record.cuda.*")),
    # format/ and replay/ share the bottom floor and import nothing of each other (SEPARATE); replay's floors
    # follow: the CPU interpreter, the parallel planner, the program and its lowering, what a CPU graph's replay
    # builds on the program, CUDA, the backends (the seam's package is at the bottom: every floor asks it)
    ("format and replay", ("apic.format", "apic.format.*", "apic.replay", "apic.replay.cpu", "apic.replay.cuda",
                           "apic.replay.parallel", "apic.replay.backends", "apic.replay.cuda.driver")),
    ("replay: the CPU interpreter", tuple(f"apic.replay.cpu.{m}" for m in _CPU_INTERPRETER)),
    ("replay: the parallel planner", ("apic.replay.parallel.*",)),
    ("replay: the program and its lowering", tuple(f"apic.replay.{m}" for m in _REPLAY_TOP)),
    ("replay: a CPU graph's replay", ("apic.replay.cpu.*",)),
    ("replay: CUDA", ("apic.replay.cuda.*",)),
    ("replay: the backends", ("apic.replay.backends.*",)),
    # the graph types a user holds: a recording and the replay backend that replays it (apic.replay.backends);
    # replay never imports them (a loaded CPU graph's type is handed to its backend by the loader)
    ("graph types", ("apic.graph", "apic.cuda_graph")),
    # a file read by the format, checked and made into a replayable graph
    ("loading", ("apic.loading",)),
    # apic.c_library: a saved graph linked into a C library (apic.export; it loads the file as capture_load does)
    ("capture and persistence API", ("apic.dot", "apic.persist", "apic.capture", "apic.capture_flow", "apic.demo",
                                     "apic.sweep", "apic.sweep_plan", "apic.c_library", "apic.c_library.*")),
    ("installation", ("apic.installation", "apic")),
    ("tools", ("apic.cli", "apic.cli.*", "apic.bench", "apic.bench.*", "apic.__main__")),
    # integrations with other systems, each an optional extra that `import apic` never imports
    ("integrations", ("apic.ray",)),
)

# Optional dependencies imported lazily (inside the function that needs them), and the apic modules
# that import Numba at module level (importing them costs about a second).
LAZY = ("numba", "llvmlite", "cuda", "matplotlib", "apic.replay.cpu.interpreter", "apic.replay.cpu._intrinsics",
        "apic.replay.parallel.split_pool", "apic.replay.cpu.param_slots", "apic.replay.cpu.native_entry", "mujoco",
        "mujoco_warp")

# Imports kept out of ``import apic`` (or of ``python -m apic --help``) for start-up time, each with a comment
# saying so: importer -> imported.
LAZY_FOR_STARTUP = {
    # the CLI imports NumPy, Warp and the library only for the command that needs them (a quick --help;
    # importing any apic module imports apic, and so Warp)
    "apic.cli": {"apic.errors", "apic._version", "apic._text"},
    "apic.cli.bench": {"apic._text", "apic.bench.markdown", "apic.bench.run"},
    "apic.cli.demo": {"apic", "apic._compat", "apic.demo", "numpy", "warp"},
    "apic.cli.export": {"apic._compat", "apic.c_library.library"},
    "apic.cli.replay": {"apic", "apic._compat", "apic.format.module_folder", "numpy", "warp"},
    # the .wrp format and the loaders: about 70 ms, needed by the first save or load only
    # the C export: its toolchain and code generation, needed by apic.export only
    "apic": {"apic.c_library.library"},
    "apic.persist": {"apic.format.reader", "apic.format.unrecorded_bindings", "apic.format.write_bindings",
                     "apic.format.writer", "apic.loading"},
}

# Packages that import nothing of each other, either way: the reader never sees replay, and replay never sees
# the file; the CPU and the CUDA recorders are apart, and the CUDA recorder needs none of the split proofs.
SEPARATE = (("apic.format", "apic.replay"), ("apic.record.cpu", "apic.record.cuda"),
            ("apic.record.cuda", "apic.record.parallel"))

# (importer, imported) module-level or local edges that go up the layers, and why they remain.
KNOWN_INVERSIONS: set = set()

KNOWN_CYCLES: list = []

# Lazy imports still without a comment saying why.
KNOWN_UNCOMMENTED: set = set()

# importer -> the modules it still imports inside functions without being lazy for a reason above: none left.
# A new entry needs a reason; better, move the import to module level or list it as lazy, with its comment.
KNOWN_LOCAL: dict = {}


@pytest.fixture(scope="module")
def graph():
    return import_graph.build(_PACKAGE_PARENT)


def _layer(module: str) -> int:
    for i, (_, patterns) in enumerate(LAYERS):
        if any(fnmatch.fnmatchcase(module, p) for p in patterns):
            return i
    raise AssertionError(f"{module} is in no layer of tests/project/test_layering.py: add it to LAYERS")


def test_every_module_has_a_layer(graph):
    for module in graph.modules:
        _layer(module)


def test_no_cycle_among_module_level_imports(graph):
    assert import_graph.cycles(graph) == []


def test_no_cycle_closed_by_a_function_local_import(graph):
    assert import_graph.cycles_with_local(graph) == KNOWN_CYCLES


def test_imports_go_down_the_layers(graph):
    edges = {(m, t) for m, targets in graph.edges.items() for t in targets}
    edges |= {(i.module, i.target) for i in graph.local if i.target in graph.edges}
    upward = {(m, t) for m, t in edges if _layer(t) > _layer(m)}
    assert upward - KNOWN_INVERSIONS == set(), "imports that go up the layers"
    assert KNOWN_INVERSIONS - upward == set(), "fixed: remove them from KNOWN_INVERSIONS"


def _in(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def test_separate_packages_do_not_import_each_other(graph):
    edges = {(m, t) for m, targets in graph.edges.items() for t in targets}
    edges |= {(i.module, i.target) for i in graph.local}
    for first, second in SEPARATE:
        across = sorted((m, t) for m, t in edges
                        if (_in(m, first) and _in(t, second)) or (_in(m, second) and _in(t, first)))
        assert across == [], f"{first} and {second} import each other"


def _lazy(target: str) -> bool:
    return any(target == name or target.startswith(name + ".") for name in LAZY)


def test_function_local_imports_are_lazy_optional_dependencies(graph):
    found: dict = {}
    for imp in graph.local:
        if _lazy(imp.target) or imp.target in LAZY_FOR_STARTUP.get(imp.module, ()):
            assert imp.comment or (imp.module, imp.target) in KNOWN_UNCOMMENTED, (
                f"{imp.module}:{imp.line}: say why {imp.target} is imported lazily")
        else:
            found.setdefault(imp.module, set()).add(imp.target)
    unexpected = {m: t - KNOWN_LOCAL.get(m, set()) for m, t in found.items()}
    assert {m: t for m, t in unexpected.items() if t} == {}, "new function-local imports"
    stale = {m: t - found.get(m, set()) for m, t in KNOWN_LOCAL.items()}
    assert {m: t for m, t in stale.items() if t} == {}, "gone: remove them from KNOWN_LOCAL"


def test_the_script_prints_the_graph():
    done = subprocess.run([sys.executable, _SCRIPT, "--root", _PACKAGE_PARENT], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert "# cycles among module-level imports: 0" in done.stdout
    assert "apic.capture:" in done.stdout


def test_targets_hold_facts_only(graph):
    """``apic/targets/`` says what a device is (ABI, layouts, naming, limits) with the standard library alone:
    nothing there reads Warp or imports another apic module, so a fact about a device has one home."""
    for module, targets in graph.edges.items():
        if _in(module, "apic.targets"):
            assert {t for t in targets if t.startswith("apic") and not _in(t, "apic.targets")} == set(), module
            assert not {"warp", "numpy", "numba"} & set(targets), module
    assert not [i for i in graph.local if _in(i.module, "apic.targets")]


def test_only_the_package_imports_the_installation(graph):
    """The patch logs have one owner: nothing in apic but ``apic/__init__`` imports ``apic.installation``."""
    importers = {m for m, targets in graph.edges.items() if "apic.installation" in targets}
    importers |= {i.module for i in graph.local if i.target == "apic.installation"}
    assert importers == {"apic"}
