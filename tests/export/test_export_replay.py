"""A saved graph exported to a C library (``apic.export``), run by a C program in a process with no Python,
leaves every binding bit for bit as eager Warp and as apic's Python replay of the same file: the demo scene,
a graph with ``capture_while`` / ``capture_if`` and a named scalar parameter swept from C."""

from __future__ import annotations

import subprocess

import numpy as np
import pytest
import warp as wp

import apic
import param_kernels as PK
from apic.c_library.from_graph import python_replay
from conftest import CPU, snapshot
from export_helpers import as_bytes, build, dumped, exported, run, saved_demo

pytestmark = [pytest.mark.warp_version, pytest.mark.interpreter, pytest.mark.install]

DEMO_BINDINGS = ("x", "v", "x_prev")


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """(folder, runner binary, the chain as saved) for the demo scene's export."""
    folder = tmp_path_factory.mktemp("demo")
    chain = saved_demo(folder / "demo.wrp")
    exported(folder / "demo.wrp", folder / "out", "demo")
    return folder, build("runner.c", folder / "out", "demo", folder / "runner"), chain


def test_demo_scene_matches_eager_and_python_replay(demo):
    folder, runner, chain = demo
    (folder / "d").mkdir()
    done = run(runner, ["m", "r:5", f"d:{folder / 'd'}"], folder)
    assert done.returncode == 0, done.stderr
    got = dumped(folder / "d", DEMO_BINDINGS)
    # eager: the scene from the state saved (the capture ran nothing), stepped five times
    with wp.ScopedDevice(CPU):
        for _ in range(5):
            chain.step()
    assert got["x"] == as_bytes(chain.x) and got["v"] == as_bytes(chain.v) and got["x_prev"] == as_bytes(chain.x_prev)
    python = python_replay(apic.capture_load(folder / "demo.wrp"), {}, {}, 5)
    assert got == python


def test_inputs_written_from_c_and_instances_are_independent(demo, tmp_path):
    folder, runner, _ = demo
    start = np.random.default_rng(3).normal(size=(16, 3)).astype(np.float32)
    (tmp_path / "x.in").write_bytes(start.tobytes())
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    # two processes are two instances; within one, the second open starts from the saved state again
    done = run(runner, [f"w:x={tmp_path / 'x.in'}", "r:3", f"d:{tmp_path / 'a'}"], tmp_path)
    assert done.returncode == 0, done.stderr
    done = run(runner, ["r:3", f"d:{tmp_path / 'b'}"], tmp_path)
    assert done.returncode == 0, done.stderr
    graph = apic.capture_load(folder / "demo.wrp")
    assert dumped(tmp_path / "a", DEMO_BINDINGS) == python_replay(graph, {"x": start.tobytes()}, {}, 3)
    assert dumped(tmp_path / "b", DEMO_BINDINGS) == python_replay(apic.capture_load(folder / "demo.wrp"), {}, {}, 3)
    assert dumped(tmp_path / "a", DEMO_BINDINGS) != dumped(tmp_path / "b", DEMO_BINDINGS)


def test_no_python_library_in_the_program(demo):
    folder, runner, _ = demo
    listed = subprocess.run(["ldd", runner], capture_output=True, text=True, timeout=60)
    assert listed.returncode == 0 and "libdemo.so" in listed.stdout
    for word in ("python", "numba", "numpy", "warp"):
        assert word not in listed.stdout.lower().replace("libdemo", ""), listed.stdout
    library = subprocess.run(["ldd", str(folder / "out" / "libdemo.so")], capture_output=True, text=True, timeout=60)
    assert "python" not in library.stdout and "warp" not in library.stdout, library.stdout
    # and at run time (runner.c's "m" step reads /proc/self/maps: exit status 3 if one is mapped)
    assert run(runner, ["m", "r:1", "m"], folder).returncode == 0


@pytest.mark.parametrize("case", ["float32", "vec3", "bool"])
def test_scalar_parameter_swept_from_c_through_while_and_if(case, tmp_path):
    """``param_kernels``: a named scalar in a plain launch, a ``capture_while`` body and a ``capture_if``
    branch; each value written from C, one replay each, every binding compared after each."""
    _, dtype, _, initial, values = PK.CASES[case]
    p, state = PK.param(case), PK.make_state(case)
    with wp.ScopedCapture(device=CPU, apic=True) as capture:
        PK.step(case, state, p)
    names = ("x", "counter", "steps", "flag")
    apic.capture_save(capture.graph, tmp_path / "g", outputs={n: state[n] for n in names})
    exported(tmp_path / "g.wrp", tmp_path / "out", "swept")
    runner = build("runner.c", tmp_path / "out", "swept", tmp_path / "runner")

    eager_p, eager_state, expected = PK.param(case), PK.make_state(case), []
    steps, sequence = ["m"], [initial, *values]
    for k, value in enumerate(sequence):
        eager_p.value = value
        PK.step(case, eager_state, eager_p)
        expected.append(snapshot({n: eager_state[n] for n in names}))
        (tmp_path / f"p{k}").write_bytes(apic.param("check", dtype, value).packed)
        (tmp_path / f"d{k}").mkdir()
        steps += [f"w:p={tmp_path / f'p{k}'}", "r:1", f"d:{tmp_path / f'd{k}'}"]
    done = run(runner, steps, tmp_path)
    assert done.returncode == 0, done.stderr

    graph = apic.capture_load(tmp_path / "g.wrp")
    for k, value in enumerate(sequence):
        got = dumped(tmp_path / f"d{k}", names)
        for name in names:
            assert got[name] == expected[k][name].tobytes(), f"{case}: value {value!r}: {name} differs from eager"
        assert got == python_replay(graph, {}, {"p": value}, 1), f"{case}: value {value!r}: differs from Python"
        assert (tmp_path / f"d{k}" / "p.bin").read_bytes() == apic.param("check", dtype, value).packed


def test_if_branch_off_and_loop_count_from_c(tmp_path):
    """The ``capture_if`` flag cleared and the ``capture_while`` count changed through bindings written from C."""
    case = "float32"
    p, state = PK.param(case), PK.make_state(case)
    with wp.ScopedCapture(device=CPU, apic=True) as capture:
        PK.step(case, state, p)
    names = ("x", "counter", "steps", "flag")
    apic.capture_save(capture.graph, tmp_path / "g", inputs={n: state[n] for n in names})
    exported(tmp_path / "g.wrp", tmp_path / "out", "flow")
    runner = build("runner.c", tmp_path / "out", "flow", tmp_path / "runner")
    inputs = {"flag": np.zeros(1, np.int32).tobytes(), "steps": np.array([5], np.int32).tobytes()}
    for name, data in inputs.items():
        (tmp_path / f"{name}.in").write_bytes(data)
    (tmp_path / "d").mkdir()
    done = run(runner, [f"w:flag={tmp_path / 'flag.in'}", f"w:steps={tmp_path / 'steps.in'}", "r:2",
                        f"d:{tmp_path / 'd'}"], tmp_path)
    assert done.returncode == 0, done.stderr
    got = dumped(tmp_path / "d", names)
    assert got == python_replay(apic.capture_load(tmp_path / "g.wrp"), inputs, {}, 2)
    # eager: the same inputs, the step twice
    eager_p, eager = PK.param(case), PK.make_state(case)
    eager["flag"].assign(np.zeros(1, np.int32))
    eager["steps"].assign(np.array([5], np.int32))
    for _ in range(2):
        PK.step(case, eager, eager_p)
    assert got["x"] == as_bytes(eager["x"]) and got["counter"] == as_bytes(eager["counter"])


def test_memory_ops_fill_zero_and_copy(tmp_path):
    """Warp's host memory natives as the runtime ports them: fills of several widths (memset_host,
    memtile_host), zero_ and wp.copy (memcpy_h2h), against eager and the Python replay."""
    def arrays():
        return {"u8": wp.zeros(13, dtype=wp.uint8), "i32": wp.zeros(8, dtype=wp.int32),
                "f32": wp.zeros(8, dtype=wp.float32), "v3": wp.zeros(5, dtype=wp.vec3),
                "i16": wp.zeros(6, dtype=wp.int16), "f64": wp.zeros(4, dtype=wp.float64),
                "copy": wp.zeros(8, dtype=wp.int32)}

    def step(s):
        s["u8"].fill_(7)
        s["i32"].fill_(0x01020304)
        s["f32"].fill_(2.5)
        s["v3"].fill_(wp.vec3(1.0, -2.0, 3.5))
        s["i16"].fill_(-3)
        s["f64"].fill_(1.0 / 3.0)
        wp.copy(s["copy"], s["i32"])
        s["i32"].zero_()

    with wp.ScopedDevice(CPU):
        state = arrays()
        with wp.ScopedCapture(device=CPU, apic=True) as capture:
            step(state)
        apic.capture_save(capture.graph, tmp_path / "mem", outputs=state)
        eager = arrays()
        step(eager)
    exported(tmp_path / "mem.wrp", tmp_path / "out", "mem")
    runner = build("runner.c", tmp_path / "out", "mem", tmp_path / "runner")
    (tmp_path / "d").mkdir()
    done = run(runner, ["r:1", f"d:{tmp_path / 'd'}"], tmp_path)
    assert done.returncode == 0, done.stderr
    got = dumped(tmp_path / "d", list(state))
    assert got == {name: as_bytes(a) for name, a in eager.items()}
    assert got == python_replay(apic.capture_load(tmp_path / "mem.wrp"), {}, {}, 1)


@wp.kernel
def _tile_row_sums(a: wp.array2d(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    wp.tile_store(out, wp.tile_sum(wp.tile_load(a[i], shape=8)), offset=i)


@pytest.fixture(scope="module")
def tile_graph(tmp_path_factory):
    """(folder, eager result) of a saved graph of one tile kernel launch."""
    folder = tmp_path_factory.mktemp("tile")
    values = np.random.default_rng(5).normal(size=(4, 8)).astype(np.float32)
    a, out = wp.array(values, dtype=float, device=CPU), wp.zeros(4, dtype=float, device=CPU)
    with wp.ScopedCapture(device=CPU, apic=True) as capture:
        wp.launch_tiled(_tile_row_sums, dim=[4], inputs=[a, out], block_dim=1, device=CPU)
    apic.capture_save(capture.graph, folder / "tile", inputs={"a": a}, outputs={"out": out})
    eager = wp.zeros(4, dtype=float, device=CPU)
    wp.launch_tiled(_tile_row_sums, dim=[4], inputs=[a, eager], block_dim=1, device=CPU)
    return folder, eager


@pytest.fixture(scope="module")
def tile_export(tile_graph):
    folder, _ = tile_graph
    exported(folder / "tile.wrp", folder / "out", "tiles")
    return folder / "out"


def test_tile_kernel(tile_graph, tile_export, tmp_path):
    """A kernel using tiles (its tile memory is a static of its object, linked into the library as it is)."""
    folder, eager = tile_graph
    runner = build("runner.c", tile_export, "tiles", tmp_path / "runner")
    (tmp_path / "d").mkdir()
    done = run(runner, ["r:2", f"d:{tmp_path / 'd'}"], tmp_path)
    assert done.returncode == 0, done.stderr
    got = dumped(tmp_path / "d", ["a", "out"])
    assert got["out"] == as_bytes(eager)
    assert got == python_replay(apic.capture_load(folder / "tile.wrp"), {}, {}, 2)

def test_instances_replayed_from_threads_at_once(demo, tile_export):
    """Four threads, four instances, replaying at once: each ends as a lone instance does (threads.c), for the
    demo scene and for a tile kernel's graph (its tile memory's pointer is a static of the library)."""
    for folder, name, binding in ((demo[0] / "out", "demo", "x"), (tile_export, "tiles", "out")):
        binary = build("threads.c", folder, name, folder.parent / f"threads_{name}")
        done = run(binary, [binding, "200"], folder.parent)
        assert done.returncode == 0, done.stdout + done.stderr
