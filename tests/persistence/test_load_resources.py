"""Resources: what loading a graph costs, and that dropping it gives everything back.

* load, replay and drop a graph 1,000 times: the process's resident memory grows by less than a
  small bound (a leaked module alone would add about 65 MB), and every compiled module loaded for a
  graph is unloaded as soon as the graph is freed, by reference counting;
* nothing is looked up in a module once it is unloaded (warp <= 1.12 crashes on such a lookup);
* while loading, memory is bounded by the regions the file declares (after they are validated) plus
  a small multiple of the file's size, even for files built to make msgpack or the loader allocate;
* a graph whose regions need more memory than the limit is refused before anything is allocated.
"""

from __future__ import annotations

import copy
import gc
import hashlib
import os
import sys
import time
import tracemalloc
import weakref

import pytest
import warp as wp

import apic
import fuzz_wrp
import persist_kernels as pk
from apic import loading
from apic.format import manifest
from conftest import CPU
from persist_helpers import run_cli

pytestmark = [pytest.mark.warp_version, pytest.mark.interpreter, pytest.mark.serial]

RSS_BOUND = 16 << 20  # bytes the process may grow over 1,000 load/replay/drop cycles
ALLOC_FACTOR = 100  # transient bytes per file byte while loading (msgpack objects: an empty map is ~70)
ALLOC_CONSTANT = 2 << 20


def rss() -> int:
    """Resident memory now (Linux), or the peak so far elsewhere."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:  # pragma: no cover - not Linux
        import resource

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak if sys.platform == "darwin" else peak * 1024


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """The fuzzer's seeds (memory-only, Sim with kernels, indexed) saved once: name -> (data, modules)."""
    folder = tmp_path_factory.mktemp("resources")
    found = {}
    for name, path in fuzz_wrp.make_seeds(str(folder)).items():
        with open(path, "rb") as f:
            data = f.read()
        modules_dir = path[: -len(".wrp")] + "_modules"
        modules = {}
        for file in os.listdir(modules_dir):
            with open(os.path.join(modules_dir, file), "rb") as f:
                modules[file] = f.read()
        found[name] = (path, data, modules)
    return found


def _handles(graph) -> set[str]:
    return {m.module_exec.handle for m in graph.recording.modules}


# --- load / replay / drop ---------------------------------------------------------------------------
def test_load_replay_drop_1000_times(saved):
    path, data, modules = saved["sim"]
    baseline = loading.loaded_modules()

    def cycle(from_file: bool) -> None:
        graph = wp.capture_load(path) if from_file else wp.capture_load_from_bytes(data, modules)
        handles = _handles(graph)
        assert handles and handles <= loading.loaded_modules()
        wp.capture_launch(graph)
        del graph  # freed by reference counting: its modules go at once, no gc.collect() needed
        assert not handles & loading.loaded_modules(), "a dropped graph's module is still loaded"

    gc.disable()  # a graph's modules go when it is freed, not at the next cycle collection
    try:
        for i in range(20):
            cycle(i % 2 == 0)
    finally:
        gc.enable()
    for i in range(50):  # warm-up: Numba's interpreter, Warp's JIT, allocator pools
        cycle(i % 2 == 0)
    gc.collect()
    before, started = rss(), time.perf_counter()
    for i in range(1000):
        cycle(i % 4 == 0)
    gc.collect()
    grown, seconds = rss() - before, time.perf_counter() - started
    assert loading.loaded_modules() == baseline
    print(f"1000 load/replay/drop cycles: RSS grew {grown / 1e6:.2f} MB in {seconds:.1f} s")
    assert grown < RSS_BOUND, f"1000 load/replay/drop cycles grew RSS by {grown / 1e6:.1f} MB"


def test_modules_unloaded_with_their_graph_and_never_looked_up_after(saved):
    path, data, modules = saved["sim"]
    first = wp.capture_load_from_bytes(data, modules)
    second = wp.capture_load(path)  # the same file loaded twice: two separate module loads
    handles_1, handles_2 = _handles(first), _handles(second)
    assert handles_1.isdisjoint(handles_2) and (handles_1 | handles_2) <= loading.loaded_modules()
    module = first.recording.modules[0].module_exec
    symbol = first.recording.kernels[0].symbol
    assert module.lookup(symbol) == first.recording.kernels[0].address

    ref = weakref.ref(first)
    del first
    assert ref() is None
    assert handles_1 <= loading.loaded_modules(), "a module still referenced was unloaded"
    del module  # the last reference: now it goes
    assert not handles_1 & loading.loaded_modules()
    assert handles_2 <= loading.loaded_modules()  # the other graph's are untouched
    wp.capture_launch(second)

    stale = second.recording.modules[0].module_exec
    stale._unload()  # unloaded while something still holds it: a lookup must not reach Warp
    assert not handles_2 & loading.loaded_modules()
    with pytest.raises(RuntimeError, match="unloaded"):
        stale.lookup(symbol)
    stale._unload()  # a second unload is a no-op


def test_failed_load_unloads_what_it_loaded(saved, monkeypatch):
    """A load that fails after loading a module (a kernel symbol that is not there) unloads it."""
    monkeypatch.setattr(loading, "allow_files_without_manifests", True)  # the manifest would refuse it first
    _, data, modules = saved["sim"]
    doc = fuzz_wrp.decode(data)
    doc["kernels"][-1]["symbol"] = "not_in_the_module_cpu_backward"
    # a file without kernel manifests (as before them), so that the symbol is looked for in the loaded module
    bare = {name: manifest.carried(data, name)[0] for name, data in modules.items()}
    for module in doc["modules"]:
        module.update(sha256=hashlib.sha256(bare[module["file"]]).hexdigest(), size=len(bare[module["file"]]))
    modules = bare
    baseline = loading.loaded_modules()
    with pytest.raises(apic.FormatError, match="not in module file"):
        wp.capture_load_from_bytes(fuzz_wrp.encode(doc), modules)
    assert loading.loaded_modules() == baseline


def test_captured_graph_releases_warp_module(tmp_path):
    """A live graph holds Warp's compiled module only while it lives (Warp unloads it after)."""
    sim = pk.Sim(0)
    graph = pk.capture(sim)
    execs = [m.module_exec for m in graph.recording.modules if m.module_exec is not None]
    assert execs
    refs = [weakref.ref(e) for e in execs]
    wp.get_module(pk.__name__).unload()  # Warp lets go of its own reference
    del execs
    assert all(r() is not None for r in refs), "the graph must keep its modules alive"
    wp.capture_launch(graph)
    del graph
    gc.collect()
    assert all(r() is None for r in refs), "the dropped graph still holds Warp's module"
    wp.launch(pk.square, dim=1, inputs=[sim.a["weights"], sim.a["sq"]], device=CPU)  # loads it again


# --- bounded allocation -----------------------------------------------------------------------------
def _peak_while(fn) -> int:
    gc.collect()
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        result = fn()
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    del result
    return peak


def _grown(doc: dict, kind: str) -> dict:
    """Valid (or merely well-formed) documents built to make the reader allocate."""
    doc = copy.deepcopy(doc)
    if kind == "long sequence":
        doc["sequence"] = doc["sequence"] * 20000
    elif kind == "empty maps":  # unknown keys are ignored, but msgpack builds them first
        doc["junk"] = [{}] * 100_000
    elif kind == "empty lists":
        doc["junk"] = [[]] * 100_000
    elif kind == "many regions":
        doc["regions"] = doc["regions"] + [{"nbytes": 0, "owned": True, "contents": None}] * 20_000
    elif kind == "many ops":
        doc["ops"] = doc["ops"] + [doc["ops"][-1]] * 20_000
    elif kind == "big owned region":
        doc["regions"].append({"nbytes": 64 << 20, "owned": True, "contents": None})
    return doc


@pytest.mark.parametrize("kind", ["long sequence", "empty maps", "empty lists", "many regions", "many ops",
                                  "big owned region"])
def test_load_allocates_at_most_regions_plus_a_multiple_of_the_file(saved, kind):
    _, data, _ = saved["memory"]
    doc = _grown(fuzz_wrp.decode(data), kind)
    data = fuzz_wrp.encode(doc)
    regions = sum(r["nbytes"] for r in doc["regions"])
    wp.capture_launch(wp.capture_load_from_bytes(data))  # warm: imports and caches are not the load's
    peak = _peak_while(lambda: wp.capture_load_from_bytes(data))
    bound = regions + ALLOC_FACTOR * len(data) + ALLOC_CONSTANT
    print(f"{kind}: file {len(data):,} B, regions {regions:,} B, peak {peak:,} B")
    assert peak <= bound, f"{kind}: loading a {len(data):,}-byte file allocated {peak:,} bytes (bound {bound:,})"


def test_regions_beyond_the_memory_limit_are_refused_before_allocating(saved, monkeypatch):
    _, data, _ = saved["memory"]
    doc = fuzz_wrp.decode(data)
    doc["regions"].append({"nbytes": 1 << 46, "owned": True, "contents": None})  # 64 TiB, from a tiny file
    huge = fuzz_wrp.encode(doc)
    peak = _peak_while(lambda: pytest.raises(apic.GraphMemoryError, wp.capture_load_from_bytes, huge))
    assert peak < ALLOC_FACTOR * len(huge) + ALLOC_CONSTANT
    with pytest.raises(MemoryError, match="more than a load may allocate here"):  # also a MemoryError
        wp.capture_load_from_bytes(huge)

    doc["regions"][-1]["nbytes"] = 8 << 20
    monkeypatch.setattr(loading, "max_graph_bytes", 4 << 20)
    with pytest.raises(apic.GraphMemoryError, match="max_graph_bytes"):
        wp.capture_load_from_bytes(fuzz_wrp.encode(doc))
    monkeypatch.setattr(loading, "max_graph_bytes", 16 << 20)
    wp.capture_load_from_bytes(fuzz_wrp.encode(doc))


def test_cli_reports_a_graph_too_large_without_traceback(saved, tmp_path):
    path, data, _ = saved["memory"]
    doc = fuzz_wrp.decode(data)
    doc["regions"].append({"nbytes": 1 << 46, "owned": True, "contents": None})
    (tmp_path / "huge.wrp").write_bytes(fuzz_wrp.encode(doc))
    done = run_cli(["replay", str(tmp_path / "huge.wrp")], tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert any(line.startswith("error: ") and "memory" in line for line in done.stderr.splitlines()), done.stderr
    done = run_cli(["inspect", str(tmp_path / "huge.wrp")], tmp_path)  # inspect allocates nothing: it works
    assert done.returncode == 0, done.stderr
