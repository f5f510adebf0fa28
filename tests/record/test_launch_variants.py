"""Launch variants inside a CPU capture: ``wp.launch_tiled``, tile kernels, and CPU blocks (``block_dim``).

Warp reaches a CPU kernel by two native paths: ``invoke`` (one lane per block) and, from warp 1.19
with ``wp.config.enable_cpu_blocks = True``, ``invoke_cpu_blocks``, whose compiled entry point runs
every block of ``block_dim`` lanes as cooperative fibers sharing tile memory. apic records both as a
call of the compiled entry point, so replay must run the same block scheduler: lanes, ``wp.tid()``
across blocks, ``wp.block_dim()``, shared tiles, tile reductions, a partial last block and adjoint
tile kernels must all replay as they ran eagerly, bit for bit, live and after a save and a load in
a fresh process (which never sets ``enable_cpu_blocks``: the block width is compiled in).

Without CPU blocks (warp 1.12, or 1.19 with the option off) Warp accepts ``block_dim`` on the CPU
and runs one lane per block (``launch_tiled`` appends a trailing dimension of 1); the tests check
that this is what eager Warp did, so that they compare real tile work, and that replay matches.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
import warp as wp

from apic import _compat
from apic.record import ops as rec
from conftest import CPU, eager_vs_replay
from persist_helpers import run_child, same_bits

pytestmark = [pytest.mark.warp_version, pytest.mark.interpreter]

TILE = 8  # tile edge
BLOCK = 16  # CPU lanes per block when blocks are on
ROWS = 4  # blocks of a tiled launch

# Cooperative CPU blocks exist from warp 1.19 (opt-in through wp.config.enable_cpu_blocks).
HAS_CPU_BLOCKS = hasattr(wp.config, "enable_cpu_blocks") and _compat.invoke_cpu_blocks is not None
needs_cpu_blocks = pytest.mark.skipif(not HAS_CPU_BLOCKS, reason="this warp-lang runs CPU kernels one lane per block")


@pytest.fixture(params=[False, True], ids=["one_lane", "cpu_blocks"])
def blocks(request, monkeypatch) -> bool:
    """Run a test without and with Warp's CPU blocks (the second skips where this warp-lang has none)."""
    if request.param:
        if not HAS_CPU_BLOCKS:
            pytest.skip("this warp-lang runs CPU kernels one lane per block")
        monkeypatch.setattr(wp.config, "enable_cpu_blocks", True)
    return request.param


@pytest.fixture
def cpu_blocks(monkeypatch):
    """Turn Warp's CPU blocks on for one test (block_dim > 1 then runs cooperative lanes)."""
    monkeypatch.setattr(wp.config, "enable_cpu_blocks", True)


# --- kernels --------------------------------------------------------------------------------------
@wp.kernel
def tile_step(x: wp.array2d(dtype=float), w: wp.array2d(dtype=float), total: wp.array(dtype=float)):
    """One TILE x TILE block of rows per launched block: matmul, map, reduce, store back, accumulate."""
    i = wp.tid()
    a = wp.tile_load(x, shape=(TILE, TILE), offset=(i * TILE, 0))
    b = wp.tile_load(w, shape=(TILE, TILE), storage="shared")
    c = wp.tile_zeros(shape=(TILE, TILE), dtype=float)
    wp.tile_matmul(wp.tile_map(wp.sin, a), b, c)
    wp.tile_store(x, a * 0.5 + c, offset=(i * TILE, 0))
    wp.tile_atomic_add(total, wp.tile_sum(c))


@wp.kernel
def tile_step_adjoint_source(x: wp.array2d(dtype=float), loss: wp.array(dtype=float)):
    """A differentiable tile kernel: loss += sum(sin(x)) over each TILE x TILE block."""
    i = wp.tid()
    a = wp.tile_load(x, shape=(TILE, TILE), offset=(i * TILE, 0))
    wp.tile_atomic_add(loss, wp.tile_sum(wp.tile_map(wp.sin, a)))


@wp.kernel
def lanes(x: wp.array2d(dtype=float), out: wp.array2d(dtype=float), sums: wp.array(dtype=float)):
    """Block ``i`` of a tiled launch, lane ``lane``: per-lane values summed as a tile, the sum read by every lane."""
    i, lane = wp.tid()
    shared = wp.tile_load(x, shape=(1, BLOCK), offset=(i, 0), storage="shared")
    s = wp.tile_sum(wp.tile(x[i, lane] * float(lane + 1)))
    u = wp.tile_extract(s, 0)
    out[i, lane] = u + float(wp.block_dim() * 100 + lane) + wp.tile_sum(shared)[0]
    if lane == 0:
        sums[i] = sums[i] + u
    x[i, lane] = x[i, lane] * 0.5 + u * 0.01


@functools.lru_cache(maxsize=None)
def spread_kernel():
    """The ``spread`` kernel, defined at its first use rather than at import.

    It compiles only for BLOCK lanes (untile needs the block width), and a capture_begin with
    force_module_load=True (tests/replay/test_replay_engine.py) compiles every module defined so far,
    a fresh CPU one for a single lane: defined at import, this module failed that test whenever this
    file was collected in the same process but its untile test had not run first (the suite's order
    hid it; a parallel run or another order did not). Once loaded for BLOCK lanes, a later force load
    reuses that variant."""

    @wp.kernel(module="unique")
    def spread(x: wp.array2d(dtype=float), out: wp.array2d(dtype=float)):
        """A block's sum broadcast to a BLOCK-wide tile and handed back one element per lane (untile)."""
        i, lane = wp.tid()
        t = wp.tile_load(x, shape=(1, BLOCK), offset=(i, 0))
        u = wp.untile(wp.tile_broadcast(wp.tile_sum(t), shape=(BLOCK,)))
        out[i, lane] = out[i, lane] + u * float(lane + 1)

    spread.module.options["block_dim"] = BLOCK
    return spread


@wp.kernel
def blocked(x: wp.array(dtype=float), y: wp.array(dtype=float), ids: wp.array(dtype=int)):
    """A plain launch with ``block_dim``: the block of thread ``i`` is ``i / block_dim()``."""
    i = wp.tid()
    v = x[i] + 0.0  # a value, not a reference into x
    s = wp.tile_sum(wp.tile(v))
    y[i] = y[i] + wp.tile_extract(s, 0) * 0.125 + x[i]
    ids[i] = (i / wp.block_dim()) * 1000 + i % wp.block_dim()
    x[i] = wp.sin(x[i]) + 0.25


@wp.kernel
def mix(x: wp.array2d(dtype=float), total: wp.array(dtype=float)):
    """An ordinary kernel between tile launches, so the order of operations matters."""
    i, j = wp.tid()
    x[i, j] = x[i, j] * 0.75 + total[0] * 0.001


# --- states ---------------------------------------------------------------------------------------
def values(shape, seed=0):
    return np.random.default_rng(seed).uniform(-1.0, 1.0, size=shape).astype(np.float32)


def tile_state():
    return {
        "x": wp.array(values((ROWS * TILE, TILE)), device=CPU),
        "w": wp.array(values((TILE, TILE), seed=1), device=CPU),
        "total": wp.zeros(1, dtype=float, device=CPU),
    }


def lanes_state():
    return {
        "x": wp.array(values((ROWS, BLOCK), seed=2), device=CPU),
        "out": wp.zeros((ROWS, BLOCK), dtype=float, device=CPU),
        "sums": wp.zeros(ROWS, dtype=float, device=CPU),
    }


def blocked_state(n):
    return {
        "x": wp.array(values(n, seed=3), device=CPU),
        "y": wp.zeros(n, dtype=float, device=CPU),
        "ids": wp.full(n, -1, dtype=int, device=CPU),
    }


def tile_program(block_dim):
    def program(s):
        wp.launch_tiled(tile_step, dim=[ROWS], inputs=[s["x"], s["w"], s["total"]], device=CPU, block_dim=block_dim)
        wp.launch(mix, dim=s["x"].shape, inputs=[s["x"], s["total"]], device=CPU)
        wp.launch_tiled(tile_step, dim=(ROWS,), inputs=[s["x"], s["w"], s["total"]], device=CPU, block_dim=block_dim)

    return program


def lanes_program(s):
    wp.launch_tiled(lanes, dim=[ROWS], inputs=[s["x"], s["out"], s["sums"]], device=CPU, block_dim=BLOCK)


def blocked_program(n, block_dim):
    def program(s):
        wp.launch(blocked, dim=n, inputs=[s["x"], s["y"], s["ids"]], device=CPU, block_dim=block_dim)

    return program


def launches(graph) -> list:
    return [op for op in graph.recording.ops if isinstance(op, rec.Launch)]


# --- launch_tiled and tile kernels ---------------------------------------------------------------
@pytest.mark.parametrize("block_dim", [1, BLOCK], ids=["block_dim1", f"block_dim{BLOCK}"])
def test_launch_tiled_tile_ops(block_dim):
    """tile_load / matmul / map / sum / atomic add / store; blocks off, so Warp runs one lane either way."""
    graph, state = eager_vs_replay(tile_program(block_dim), tile_state)
    assert len(launches(graph)) == 3
    assert state["total"].numpy()[0] != 0.0  # the tile work really ran


@needs_cpu_blocks
def test_launch_tiled_tile_ops_with_cpu_blocks(cpu_blocks):
    """The same program with 16 cooperative lanes per block: same results as eager Warp with blocks."""
    graph, _ = eager_vs_replay(tile_program(BLOCK), tile_state)
    assert len(launches(graph)) == 3


def test_launch_tiled_lanes_without_cpu_blocks():
    """Without CPU blocks, ``block_dim`` is accepted and Warp runs lane 0 of each block only."""
    if HAS_CPU_BLOCKS:
        assert not wp.config.enable_cpu_blocks  # Warp's default
    _, state = eager_vs_replay(lanes_program, lanes_state)
    out = state["out"].numpy()
    assert (out[:, 0] != 0).all() and (out[:, 1:] == 0).all()  # one lane: wp.block_dim() == 1


@needs_cpu_blocks
def test_launch_tiled_lanes_with_cpu_blocks(cpu_blocks):
    """Lanes, wp.tile(v) from per-lane values, shared tiles and wp.block_dim() across replays."""
    _, state = eager_vs_replay(lanes_program, lanes_state)
    out = state["out"].numpy()
    lane_part = out - out[:, :1]  # u and the shared sum are the same for every lane of a block
    assert np.allclose(lane_part, np.arange(BLOCK, dtype=np.float32)[None, :], atol=1e-3)


@needs_cpu_blocks
def test_untile_with_cpu_blocks(cpu_blocks):
    """untile of a BLOCK-wide tile: one element per lane, only meaningful with BLOCK lanes."""
    def program(s):
        lanes_program(s)
        wp.launch_tiled(spread_kernel(), dim=[ROWS], inputs=[s["x"], s["out"]], device=CPU, block_dim=BLOCK)

    eager_vs_replay(program, lanes_state)


# --- wp.launch with block_dim ---------------------------------------------------------------------
@pytest.mark.parametrize("n", [4 * 8, 3 * 8 + 5], ids=["whole_blocks", "partial_block"])
def test_launch_block_dim_without_cpu_blocks(n):
    """``block_dim`` on a plain CPU launch, blocks off: Warp runs one lane per block (block_dim() == 1)."""
    _, state = eager_vs_replay(blocked_program(n, 8), lambda: blocked_state(n))
    assert (state["ids"].numpy() == np.arange(n) * 1000).all()


@needs_cpu_blocks
@pytest.mark.parametrize("n", [4 * 8, 3 * 8 + 5], ids=["whole_blocks", "partial_block"])
def test_launch_block_dim_with_cpu_blocks(cpu_blocks, n):
    """Thread ``i`` runs in block ``i / 8`` as lane ``i % 8``; a partial last block runs its active lanes."""
    _, state = eager_vs_replay(blocked_program(n, 8), lambda: blocked_state(n))
    i = np.arange(n)
    assert (state["ids"].numpy() == (i // 8) * 1000 + i % 8).all()


def test_max_blocks_is_a_cuda_limit(blocks):
    """``max_blocks`` caps CUDA grids only: on the CPU every thread still runs, eagerly and replayed."""
    n = 3 * 8 + 5

    def program(s):
        wp.launch(blocked, dim=n, inputs=[s["x"], s["y"], s["ids"]], device=CPU, block_dim=8, max_blocks=1)

    _, state = eager_vs_replay(program, lambda: blocked_state(n))
    assert (state["ids"].numpy() >= 0).all()


@needs_cpu_blocks
def test_launch_command_with_cpu_blocks(cpu_blocks):
    """``Launch.launch()`` of a ``record_cmd=True`` launch with block_dim > 1 (Warp's other block path)."""
    n = 3 * 8 + 5

    def program(s):
        cmd = wp.launch(blocked, dim=n, inputs=[s["x"], s["y"], s["ids"]], device=CPU, block_dim=8, record_cmd=True)
        cmd.launch()
        cmd.launch()

    _, state = eager_vs_replay(program, lambda: blocked_state(n))
    assert state["ids"].numpy()[-1] == (n - 1) // 8 * 1000 + (n - 1) % 8


@needs_cpu_blocks
def test_cpu_blocks_only_during_capture_replays_with_blocks(monkeypatch):
    """The block width is fixed when the launch is recorded: turning blocks off afterwards changes nothing."""
    n = 3 * 8 + 5
    eager = blocked_state(n)
    monkeypatch.setattr(wp.config, "enable_cpu_blocks", True)
    blocked_program(n, 8)(eager)
    replayed = blocked_state(n)
    initial = {name: value.numpy().copy() for name, value in replayed.items()}
    with wp.ScopedCapture(device=CPU) as capture:
        blocked_program(n, 8)(replayed)
    for name in replayed:
        assert same_bits(replayed[name].numpy(), initial[name]), f"the capture ran {name}"
    monkeypatch.setattr(wp.config, "enable_cpu_blocks", False)
    wp.capture_launch(capture.graph)
    for name in eager:
        assert same_bits(replayed[name].numpy(), eager[name].numpy()), name


def test_tiled_adjoint_through_tape(blocks):
    """Backward of a tile kernel (``tape.backward``), recorded with the block width of the forward launch."""

    def program(s):
        s["loss"].zero_()
        tape = wp.Tape()
        with tape:
            wp.launch_tiled(tile_step_adjoint_source, dim=[ROWS], inputs=[s["x"], s["loss"]], device=CPU,
                            block_dim=BLOCK)
        tape.backward(loss=s["loss"])
        wp.launch(mix, dim=s["x"].shape, inputs=[s["x"].grad, s["loss"]], device=CPU)
        wp.launch(mix, dim=s["x"].shape, inputs=[s["x"], s["x"].grad[0]], device=CPU)

    def state():
        x = wp.array(values((ROWS * TILE, TILE), seed=4), device=CPU, requires_grad=True)
        return {"x": x, "grad": x.grad, "loss": wp.zeros(1, dtype=float, device=CPU, requires_grad=True)}

    graph, out = eager_vs_replay(program, state)
    assert any(graph.recording.kernels[op.kernel].adjoint for op in launches(graph))
    assert np.abs(out["grad"].numpy()).sum() > 0


def test_lane_count_is_recorded_in_the_launch(blocks):
    """launch_tiled appends the block width Warp resolved: 1 lane without CPU blocks, BLOCK with them."""
    with wp.ScopedCapture(device=CPU) as capture:
        lanes_program(lanes_state())
    (op,) = launches(capture.graph)
    assert tuple(op.dim) == (ROWS, BLOCK if blocks else 1)


def test_block_kernels_are_marked_for_the_dispatcher_check(tmp_path, blocks):
    """A kernel run as cooperative blocks is marked, live and after a load: replay then checks Warp's
    block-dispatcher error after running, as eager Warp does after each such launch."""
    with wp.ScopedCapture(device=CPU, apic=True) as capture:
        lanes_program(lanes_state())
    assert [k.cpu_blocks for k in capture.graph.recording.kernels] == [blocks]
    wp.capture_save(capture.graph, str(tmp_path / "marked"))
    loaded = wp.capture_load(str(tmp_path / "marked"))
    assert [k.cpu_blocks for k in loaded.recording.kernels] == [blocks]
    assert loaded.plans.checks_blocks is blocks
    wp.capture_launch(loaded)


# --- save, load, fresh process ---------------------------------------------------------------------
ITERS = 3


def everything(s, block_dim):
    tile_program(block_dim)(s)
    wp.launch_tiled(lanes, dim=[ROWS], inputs=[s["lx"], s["out"], s["sums"]], device=CPU, block_dim=block_dim)
    wp.launch(blocked, dim=s["bx"].shape[0], inputs=[s["bx"], s["by"], s["ids"]], device=CPU, block_dim=8)


def everything_state():
    n = 3 * 8 + 5
    lane, blocks = lanes_state(), blocked_state(n)
    return {**tile_state(), "lx": lane["x"], "out": lane["out"], "sums": lane["sums"],
            "bx": blocks["x"], "by": blocks["y"], "ids": blocks["ids"]}


def test_fresh_process_replay_equals_eager(tmp_path, blocks):
    """Saved with tile kernels (and CPU blocks), loaded and replayed in a fresh process: eager, bit for bit."""
    expected = everything_state()
    for _ in range(ITERS):
        everything(expected, BLOCK)
    state = everything_state()
    with wp.ScopedCapture(device=CPU, apic=True) as capture:
        everything(state, BLOCK)
    wp.capture_save(capture.graph, str(tmp_path / "tiled"), outputs=dict(state))
    names = list(state)
    job = {"mode": "file", "path": str(tmp_path / "tiled"), "iters": ITERS,
           "get": {n: str(tmp_path / f"{n}.npy") for n in names}}
    run_child(job, cwd=tmp_path)  # the child never turns CPU blocks on: the width is compiled in
    for name in names:
        assert same_bits(np.load(tmp_path / f"{name}.npy"), expected[name].numpy()), name
    if blocks:
        i = np.arange(3 * 8 + 5)
        assert (np.load(tmp_path / "ids.npy") == (i // 8) * 1000 + i % 8).all()
