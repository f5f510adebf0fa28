"""Forms upstream warp-lang 1.19's CPU capture records that apic once refused.

* ``wp.utils.runlength_encode`` with ``value_count=0`` (or empty ``values``) and no ``run_count``:
  Warp returns 0 without touching memory, so there is nothing to record and no host read to refuse.
"""

from __future__ import annotations

import numpy as np
import pytest
import warp as wp

import apic
from conftest import CPU, eager_vs_replay
from persist_helpers import run_child, same_bits
from test_utils_ops import bump, gen_runs, recorded_calls

pytestmark = [pytest.mark.warp_version, pytest.mark.interpreter]


def _empty_encode(s):
    wp.launch(bump, dim=1, inputs=[s["t"]], device=CPU)
    wp.launch(gen_runs, dim=8, inputs=[s["t"], s["runs"]], device=CPU)
    s["counts"].append(wp.utils.runlength_encode(s["runs"], s["run_values"], s["run_lengths"], value_count=0))
    s["counts"].append(wp.utils.runlength_encode(s["runs"][:0], s["run_values"], s["run_lengths"]))


def _state():
    return {"t": wp.zeros(1, dtype=wp.int32, device=CPU), "runs": wp.zeros(8, dtype=wp.int32, device=CPU),
            "run_values": wp.full(8, 5, dtype=wp.int32, device=CPU),
            "run_lengths": wp.full(8, 7, dtype=wp.int32, device=CPU), "counts": []}


def test_runlength_encode_of_no_values_without_run_count():
    eager = _state()
    _empty_encode(eager)
    graph, replayed = eager_vs_replay(_empty_encode, _state)
    assert eager["counts"] == replayed["counts"][:2] == [0, 0]  # the value returned during the capture
    assert not recorded_calls(graph), "encoding no value records no native call"


def test_runlength_encode_of_some_values_without_run_count_is_still_refused():
    s = _state()
    with pytest.raises(apic.UnsupportedOperationError, match=r"runlength_encode\(\) without run_count"):
        with wp.ScopedCapture(device=CPU):
            wp.utils.runlength_encode(s["runs"], s["run_values"], s["run_lengths"], value_count=1)
    assert np.all(s["run_values"].numpy() == 5)


# --- Launch objects of kernels made in a closure (warp.optim's tiled dot products) -------------------
@wp.kernel
def gen_f32(t: wp.array(dtype=wp.int32), seed: int, out: wp.array(dtype=wp.float32)):
    i = wp.tid()
    out[i] = wp.float32((t[0] * 7919 + i * 104729 + seed * 31 + 13) % 1000) * 0.0137 - 6.0


def test_tiled_dot_launch_objects_made_before_their_module_grew():
    """warp.optim's ``TiledDot`` makes two kernels in a closure and ``wp.Launch`` objects for them: the
    second kernel reloads their module under a new hash, and only the first Launch holds the old one
    (warp-lang 1.12 failed with "cannot find the loaded module of kernel '..._block_dot_kernel'")."""
    from warp._src.optim import linear

    # Fresh kernels (a tile size no other test uses), so their first Launch is made before the module grows;
    # the replay state (the second made) gets that first TiledDot.
    made = [linear.TiledDot(100, wp.float32, tile_size=20, device=CPU) for _ in range(2)]

    def state():
        dot = made.pop()
        dot.partial_sums_a.zero_()  # scratch made with wp.empty
        dot.partial_sums_b.zero_()
        return {"t": wp.zeros(1, dtype=wp.int32, device=CPU), "a": wp.zeros(100, dtype=wp.float32, device=CPU),
                "b": wp.zeros(100, dtype=wp.float32, device=CPU), "result": dot.col(), "scratch": dot.partial_sums_a,
                "dot": dot}

    def program(s):
        wp.launch(bump, dim=1, inputs=[s["t"]], device=CPU)
        wp.launch(gen_f32, dim=100, inputs=[s["t"], 1, s["a"]], device=CPU)
        wp.launch(gen_f32, dim=100, inputs=[s["t"], 2, s["b"]], device=CPU)
        s["dot"].compute(s["a"], s["b"])

    graph, replayed = eager_vs_replay(program, state)
    assert replayed["result"].numpy()[0] != 0.0


def test_tiled_dot_saved_and_loaded_in_a_fresh_process(tmp_path):
    from warp._src.optim import linear

    dots = [linear.TiledDot(64, wp.float32, tile_size=24, device=CPU) for _ in range(2)]
    states = []
    for dot in dots:
        dot.partial_sums_a.zero_()
        dot.partial_sums_b.zero_()
        states.append({"t": wp.zeros(1, dtype=wp.int32, device=CPU), "a": wp.zeros(64, dtype=wp.float32, device=CPU),
                       "b": wp.zeros(64, dtype=wp.float32, device=CPU), "dot": dot})

    def program(s):
        wp.launch(bump, dim=1, inputs=[s["t"]], device=CPU)
        wp.launch(gen_f32, dim=64, inputs=[s["t"], 1, s["a"]], device=CPU)
        wp.launch(gen_f32, dim=64, inputs=[s["t"], 2, s["b"]], device=CPU)
        wp.copy(s["out"], s["dot"].compute(s["a"], s["b"]), count=1)

    captured, eager = states
    captured["out"], eager["out"] = (wp.zeros(1, dtype=wp.float32, device=CPU) for _ in range(2))
    with wp.ScopedCapture(device=CPU, apic=True) as capture:
        program(captured)  # the first TiledDot: its dot Launch holds the module before it grew
    wp.capture_save(capture.graph, str(tmp_path / "dot"), outputs={"out": captured["out"]})
    for _ in range(3):
        program(eager)
    job = {"mode": "file", "path": str(tmp_path / "dot"), "iters": 3, "get": {"out": str(tmp_path / "out.npy")}}
    run_child(job, cwd=tmp_path)
    assert same_bits(np.load(tmp_path / "out.npy"), eager["out"].numpy())
    assert eager["out"].numpy()[0] != 0.0


@pytest.mark.parametrize("solver", ["cg", "bicgstab"])
def test_linear_solver_with_tiled_dot_kernels(solver):
    """warp.optim's Krylov solvers (what warp.fem's examples solve with) compute their dot products with the
    closure-made tiled dot kernels: a fixed-iteration solve captured and replayed equals the eager solve."""
    import warp.sparse as sparse
    from warp.optim import linear

    n = 40
    rows = np.concatenate([np.arange(n), np.arange(n - 1), np.arange(1, n)]).astype(np.int32)
    cols = np.concatenate([np.arange(n), np.arange(1, n), np.arange(n - 1)]).astype(np.int32)
    vals = np.concatenate([np.full(n, 4.0), np.full(n - 1, -1.0), np.full(n - 1, -1.5)]).astype(np.float32)

    def state():
        A = sparse.bsr_from_triplets(n, n, wp.array(rows, device=CPU), wp.array(cols, device=CPU),
                                     wp.array(vals, device=CPU))
        return {"A": A, "b": wp.array(np.sin(np.arange(n, dtype=np.float32)), device=CPU),
                "x": wp.zeros(n, dtype=float, device=CPU)}

    def program(s):  # each run continues from the last x: new work every replay (few iterations: no breakdown)
        getattr(linear, solver)(s["A"], s["b"], s["x"], maxiter=5, tol=0.0, check_every=0)

    _, replayed = eager_vs_replay(program, state)
    assert np.all(np.isfinite(replayed["x"].numpy())) and np.abs(replayed["x"].numpy()).max() > 0.0


# --- a Tape backward that consumes the output's gradient (upstream's test_capture_backward_consumes_y_grad)
@wp.kernel
def assign(x: wp.array(dtype=float), y: wp.array(dtype=float)):
    i = wp.tid()
    y[i] = x[i]


@pytest.mark.parametrize("retain", [False, True])
def test_backward_consumes_the_seeded_output_gradient(retain):
    """Upstream's form: capture a tape's backward, then seed ``y.grad`` and replay. Whatever this warp-lang's
    backward does with ``y.grad`` (1.19 consumes it unless ``retain_grad``; 1.12 leaves it), replay does the same."""

    def arrays():
        x = wp.array(np.arange(4, dtype=np.float32), device=CPU, requires_grad=True)
        y = wp.zeros(4, dtype=float, device=CPU, requires_grad=True)
        if retain and hasattr(y, "retain_grad"):
            y.retain_grad = True
        return x, y

    def program(x, y, ones):
        tape = wp.Tape()
        with tape:
            wp.launch(assign, dim=4, inputs=[x, y], device=CPU)
        tape.backward(grads={y: ones})

    eager, replayed = arrays(), arrays()
    eager_ones, replay_ones = (wp.ones(4, dtype=float, device=CPU) for _ in range(2))
    with wp.ScopedCapture(device=CPU) as capture:
        program(*replayed, replay_ones)
    for _ in range(2):
        for x, y in (eager, replayed):
            x.grad.zero_()
            y.grad.fill_(1.0)
        program(*eager, eager_ones)
        wp.capture_launch(capture.graph)
        for e, r in zip(eager, replayed):
            assert same_bits(e.grad.numpy(), r.grad.numpy())
            assert same_bits(e.numpy(), r.numpy())
    assert np.all(replayed[0].grad.numpy() == 1.0)


# --- warp.sparse: a topology built from triplets without values ---------------------------------------
@wp.kernel
def topology_image(offsets: wp.array(dtype=wp.int32), columns: wp.array(dtype=wp.int32), nrow: int,
                   out: wp.array(dtype=wp.int32)):
    j = wp.tid()
    out[j] = -1
    if j < offsets[nrow] and j < columns.shape[0]:
        out[j] = columns[j]


def _topology_only_supported() -> bool:
    """Probed eagerly: warp-lang 1.12's bsr_set_from_triplets dereferences values=None."""
    import warp.sparse as sparse

    m = sparse.bsr_zeros(2, 2, float, device=CPU)
    try:
        sparse.bsr_set_from_triplets(m, wp.zeros(1, dtype=int, device=CPU), wp.zeros(1, dtype=int, device=CPU), None)
    except AttributeError:
        return False
    return True


def test_bsr_set_from_triplets_topology_only():
    if not _topology_only_supported():
        pytest.skip("this warp-lang cannot build a BSR topology without values, even eagerly")
    import warp.sparse as sparse
    from test_sparse_fem import N, NCOL, NROW, fill_triplets, matrix, native_calls, triplet_arrays

    def program(s):
        wp.launch(bump, dim=1, inputs=[s["t"]], device=CPU)
        fill_triplets(s, 0)
        sparse.bsr_set_from_triplets(s["A"], s["rows"], s["cols"], None)
        wp.copy(s["offsets"], s["A"].offsets, count=NROW + 1)
        wp.launch(topology_image, dim=N, inputs=[s["A"].offsets, s["A"].columns, NROW, s["columns"]], device=CPU)

    def state():
        return {"t": wp.zeros(1, dtype=wp.int32, device=CPU), "A": matrix(), **triplet_arrays(),
                "offsets": wp.zeros(NROW + 1, dtype=wp.int32, device=CPU),
                "columns": wp.zeros(N, dtype=wp.int32, device=CPU)}

    graph, replayed = eager_vs_replay(program, state)
    assert native_calls(graph) == ["bsr_matrix_from_triplets_host"]
    assert 0 < replayed["offsets"].numpy()[NROW] <= N and NCOL > 0


# --- launches over more than 2^31 threads of a kernel that never reads wp.tid() ----------------------
@wp.kernel
def no_tid():
    pass


def test_oversized_launch_of_a_kernel_without_tid_saves_and_loads(tmp_path):
    """Upstream's test_load_accepts_current_oversized_no_tid_launch_shape: Warp launches such a kernel, so
    a capture records it and a load accepts it (replaying 2^31 threads is left out: it only takes time)."""
    with wp.ScopedCapture(device=CPU, apic=True) as capture:
        wp.launch(no_tid, dim=2**31 + 1, device=CPU)
    assert [op.dim for op in capture.graph.recording.ops] == [(2**31 + 1,)]
    wp.capture_save(capture.graph, str(tmp_path / "big"))
    loaded = wp.capture_load(str(tmp_path / "big"))
    assert loaded.is_loaded
    assert [op.dim for op in loaded.recording.ops] == [(2**31 + 1,)]
    run_child({"mode": "file", "path": str(tmp_path / "big"), "iters": 0}, cwd=tmp_path)


# --- BsrMatrix.status_sync() during a CPU capture ---------------------------------------------------
def test_status_read_in_a_capture_is_refused_even_on_an_untouched_matrix():
    """Upstream refuses any status read in a CPU capture once the matrix has a status array, used or not."""
    import warp.sparse as sparse

    m = sparse.bsr_zeros(3, 3, float, device=CPU)
    if not hasattr(m, "status_sync"):
        pytest.skip("this warp-lang's BsrMatrix has no sparse status (arrived with padded topologies in 1.13)")
    m._ensure_status()
    assert m.status_sync() == 0  # outside a capture: read now
    with pytest.raises(apic.UnsupportedOperationError, match=r"BsrMatrix\.status_sync\(\).*only at replay") as caught:
        with wp.ScopedCapture(device=CPU):
            m.status_sync()
    assert isinstance(caught.value, NotImplementedError)
    fresh = sparse.bsr_zeros(3, 3, float, device=CPU)  # no status array: nothing to read, success
    with wp.ScopedCapture(device=CPU):
        assert fresh.status_sync() == 0


# --- a wp.Launch whose array parameter was set from a raw ctype -------------------------------------
@wp.kernel
def saxpy(x: wp.array(dtype=float), y: wp.array(dtype=float), a: float, out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = a * x[i] + y[i]


def test_launch_object_holding_a_raw_array_ctype_is_refused():
    """Upstream's test_record_cmd_raw_array_ctype_rejected_during_apic_capture."""
    x = wp.array(np.arange(4, dtype=np.float32), device=CPU)
    y = wp.ones(4, dtype=float, device=CPU)
    out = wp.zeros(4, dtype=float, device=CPU)
    cmd = wp.launch(saxpy, dim=4, inputs=[x, y, 2.0], outputs=[out], record_cmd=True, device=CPU)
    cmd.set_param_at_index_from_ctype(0, x.__ctype__())
    with pytest.raises(apic.UnsupportedOperationError, match=r"wp\.Launch\.launch\(\).*raw array ctype") as caught:
        with wp.ScopedCapture(device=CPU) as capture:
            cmd.launch()
    assert isinstance(caught.value, NotImplementedError) and capture.graph is None
    cmd.set_param_at_index(0, x)  # the documented way: recorded, and replays as eager
    with wp.ScopedCapture(device=CPU) as capture:
        cmd.launch()
    assert not out.numpy().any()
    wp.capture_launch(capture.graph)
    assert same_bits(out.numpy(), 2.0 * np.arange(4, dtype=np.float32) + 1.0)
    cmd.set_param_at_index_from_ctype(2, 3.0)  # a scalar from a ctype-able value stays recordable
    with wp.ScopedCapture(device=CPU) as capture:
        cmd.launch()
    wp.capture_launch(capture.graph)
    assert same_bits(out.numpy(), 3.0 * np.arange(4, dtype=np.float32) + 1.0)


# --- wp.handle arguments that hold no live object's id ----------------------------------------------
def test_save_refuses_a_handle_argument_that_holds_no_live_object(tmp_path):
    """Upstream's test_save_rejects_invalid_mesh_handles: an unknown or deleted mesh id in a ``wp.handle``
    argument is refused at save, naming it; a live one saves and replays as eager."""
    if not hasattr(wp, "handle"):
        pytest.skip("this warp-lang has no wp.handle type (arrived in 1.13)")
    import gc

    from handle_kernels import mesh_distance

    def unit_mesh():
        points = wp.array(np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0], [0, 0, 1]], dtype=np.float32), dtype=wp.vec3,
                          device=CPU)
        return wp.Mesh(points=points, indices=wp.array(np.array([0, 1, 2, 0, 1, 3, 0, 2, 3, 1, 2, 3], dtype=np.int32),
                                                       device=CPU))

    mesh = unit_mesh()
    stale = mesh.id
    del mesh
    gc.collect()
    out = wp.zeros(3, dtype=float, device=CPU)
    for name, candidate in (("unknown", 1), ("deleted", stale)):
        with wp.ScopedCapture(device=CPU, apic=True) as capture:
            wp.launch(mesh_distance, dim=3, inputs=[wp.uint64(candidate), out], device=CPU)
        with pytest.raises(RuntimeError, match=f"invalid or expired mesh ID {candidate:#x}.*no live wp.Mesh"):
            wp.capture_save(capture.graph, str(tmp_path / name))
        assert not (tmp_path / f"{name}.wrp").exists(), name
    mesh = unit_mesh()
    with wp.ScopedCapture(device=CPU, apic=True) as capture:
        wp.launch(mesh_distance, dim=3, inputs=[mesh.id, out], device=CPU)
    wp.capture_save(capture.graph, str(tmp_path / "live"))
    wp.capture_launch(capture.graph)
    expected = wp.zeros(3, dtype=float, device=CPU)
    wp.launch(mesh_distance, dim=3, inputs=[mesh.id, expected], device=CPU)
    assert same_bits(out.numpy(), expected.numpy())
