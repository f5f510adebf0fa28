"""``warp.sparse`` and ``warp.fem`` inside a CPU capture (issue #5): recorded, replayed, saved, refused.

A simulation step that assembles and applies sparse matrices must replay exactly as it runs eagerly:
``bsr_set_from_triplets``, ``bsr_mv``, ``bsr_axpy``, ``bsr_mm`` and the transposes, in the forms Warp
itself makes capturable (sizes bounded up front: triplet counts, ``reuse_topology=True``,
``max_new_nnz=``, masked topologies), and ``fem.integrate`` with its temporaries. Each program below
regenerates its inputs with a kernel driven by a counter, so every replay works on new data (new
triplets, hence a new topology for the compact builds). The oracle runs the program eagerly on one
fresh state and captured-then-replayed on another and compares, after every run and bit for bit,
the plain arrays and each BSR matrix's active storage: ``offsets[:nrow + 1]``, ``row_counts``, the
columns and values of the active blocks, and the host-side bounds (``nrow``, ``ncol``, ``nnz``).
Slots past the active blocks are uninitialised in both runs (Warp allocates them with ``wp.empty``)
and are not part of the matrix. A graph with every operation is also saved, then loaded and replayed
in a fresh process.

What would need a result on the host during the capture fails closed, naming the operation and the
argument that makes it capturable. Forms a warp-lang version lacks (padded topologies before 1.13)
are tested where the installed one has them. Sizes are tiny and kernels few: warp.sparse and
warp.fem kernels compile slowly.
"""

from __future__ import annotations

import inspect

import numpy as np
import pytest
import warp as wp
import warp.fem as fem
import warp.sparse as sparse

import apic
from apic.record import ops as rec
from conftest import CPU, as_bytes, assert_same, churn
from persist_helpers import run_child, same_bits
from wrp_helpers import body_of, read_doc

pytestmark = [pytest.mark.warp_version, pytest.mark.interpreter]

NROW, NCOL, NDEP = 6, 5, 4  # A is NROW x NCOL blocks, B is NCOL x NDEP
N = 24  # triplets per build

# What the installed warp-lang has (probed): 1.13+ names topologies, 1.12 has masked=True.
HAS_TOPOLOGY = "topology" in inspect.signature(sparse.bsr_axpy).parameters
MASKED = {"topology": "masked"} if HAS_TOPOLOGY else {"masked": True}
needs_padded = pytest.mark.skipif(not HAS_TOPOLOGY, reason="padded BSR topologies arrived in warp-lang 1.13")


# --- kernels -----------------------------------------------------------------------------------------
@wp.kernel
def bump(t: wp.array(dtype=wp.int32)):
    t[0] = t[0] + 1


@wp.kernel
def gen_triplets(t: wp.array(dtype=wp.int32), seed: int, nrow: int, ncol: int, rows: wp.array(dtype=wp.int32),
                 cols: wp.array(dtype=wp.int32)):
    i = wp.tid()
    k = t[0] + seed
    rows[i] = (k * 5 + i * 7) % nrow
    cols[i] = (k * 3 + i * 7 + i / 4) % ncol  # repeated (row, col) pairs: summed
    if (i + k) % 11 == 5:
        rows[i] = nrow  # out of range: discarded


@wp.kernel
def gen_values(t: wp.array(dtype=wp.int32), seed: int, values: wp.array3d(dtype=float)):
    i, r, c = wp.tid()
    k = t[0] + seed
    v = wp.sin(float(k) * 0.7 + float(i) * 1.3 + float(r * 3 + c) * 0.2)
    if (i + k) % 5 == 0:
        v = 0.0  # a zero block: pruned when prune_numerical_zeros
    values[i, r, c] = v


@wp.kernel
def gen_count(t: wp.array(dtype=wp.int32), n: int, count: wp.array(dtype=wp.int32)):
    count[0] = n - t[0] % 4


@wp.kernel
def gen_vector(t: wp.array(dtype=wp.int32), seed: int, x: wp.array(dtype=float)):
    i = wp.tid()
    x[i] = wp.cos(float(t[0] + seed) * 0.9 + float(i) * 0.4)


@wp.kernel
def wobble(t: wp.array(dtype=wp.int32), values: wp.array(dtype=float)):
    """New values on an unchanged topology."""
    i = wp.tid()
    values[i] = values[i] * 0.5 + wp.sin(float(t[0]) + float(i) * 0.3)


# --- state and oracle ----------------------------------------------------------------------------------
def counter():
    return wp.zeros(1, dtype=wp.int32, device=CPU)


def zeros(shape, dtype=float):
    return wp.zeros(shape, dtype=dtype, device=CPU)


def block_type(block):
    return float if block == (1, 1) else wp.types.matrix(shape=block, dtype=float)


def triplet_arrays(block=(1, 1)):
    return {"rows": zeros(N, wp.int32), "cols": zeros(N, wp.int32), "vals": zeros((N, *block))}


def fill_triplets(s, seed, nrow=NROW, ncol=NCOL, prefix=""):
    rows, cols = s[prefix + "rows"], s[prefix + "cols"]
    wp.launch(gen_triplets, dim=N, inputs=[s["t"], seed, nrow, ncol, rows, cols], device=CPU)
    vals = s[prefix + "vals"]
    wp.launch(gen_values, dim=vals.shape, inputs=[s["t"], seed, vals], device=CPU)


def build(s, name, seed, nrow=NROW, ncol=NCOL, prefix="", **kwargs):
    fill_triplets(s, seed, nrow, ncol, prefix)
    sparse.bsr_set_from_triplets(s[name], s[prefix + "rows"], s[prefix + "cols"], s[prefix + "vals"], **kwargs)


def matrix(nrow=NROW, ncol=NCOL, block=(1, 1)):
    return sparse.bsr_zeros(nrow, ncol, block_type(block), device=CPU)


def fixed_matrix(seed, nrow=NROW, ncol=NCOL, block=(1, 1)):
    """A matrix built eagerly (before any capture) from the triplets of counter value 0."""
    s = {"t": counter(), "m": matrix(nrow, ncol, block), **triplet_arrays(block)}
    build(s, "m", seed, nrow, ncol)
    return s["m"]


def bsr_image(name: str, m) -> dict:
    """The bytes that make up matrix ``m``: bounds, offsets, row counts, active columns and values."""
    offsets = m.offsets.numpy()[: m.nrow + 1].copy()
    row_counts = getattr(m, "row_counts", None)  # absent before warp-lang 1.13
    if row_counts is None:
        active = np.arange(offsets[-1])
    else:
        counts = row_counts.numpy()[: m.nrow].copy()
        active = np.concatenate([np.arange(b, b + c) for b, c in zip(offsets[:-1], counts)] + [np.zeros(0, int)])
    image = {
        f"{name}.bounds": np.array([m.nrow, m.ncol, m.nnz]),
        f"{name}.offsets": offsets,
        f"{name}.columns": m.columns.numpy()[active],
        f"{name}.values": np.ascontiguousarray(m.values.numpy()[active]).view(np.uint8).reshape(-1),
    }
    if row_counts is not None:
        image[f"{name}.row_counts"] = counts
    return image


def image(state: dict) -> dict:
    found = {}
    for name, value in state.items():
        if isinstance(value, sparse.BsrMatrix):
            found.update(bsr_image(name, value))
        elif isinstance(value, wp.array):
            found[name] = as_bytes(value).copy()
    return found


def arrays_of(state: dict) -> list:
    found = []
    for value in state.values():
        if isinstance(value, sparse.BsrMatrix):
            arrays = (value.offsets, value.columns, value.values, getattr(value, "row_counts", None))
            found += [a for a in arrays if a is not None]
        elif isinstance(value, wp.array):
            found.append(value)
    return found


def eager_vs_replay(program, make_state, repeats: int = 3, between=None):
    """``program(state)`` eagerly ``repeats`` times, and captured once then replayed ``repeats`` times.

    After each run the two states' images must be equal; the capture itself must change nothing.
    ``between(run)``, if given, runs eagerly before each replay. Returns the graph and replayed state.
    """
    eager, replay = make_state(), make_state()
    assert_same(image(eager), image(replay), "make_state is not deterministic")
    expected = []
    for _ in range(repeats):
        program(eager)
        expected.append(image(eager))
    before = [(a, as_bytes(a).copy()) for a in arrays_of(replay)]
    with wp.ScopedCapture(device=CPU) as capture:
        program(replay)
    graph = capture.graph
    del capture
    assert isinstance(graph, apic.Graph)
    for a, data in before:
        assert np.array_equal(as_bytes(a), data), "the capture executed work"
    churn(generation=1)  # memory the graph failed to keep alive gets reused
    for run in range(repeats):
        if between is not None:
            between(run)
        wp.capture_launch(graph)
        assert_same(expected[run], image(replay), f"replay {run + 1}")
    return graph, replay


def native_calls(graph) -> list[str]:
    return [op.name for op in graph.recording.ops if isinstance(op, rec.NativeCall)]


# --- building from triplets, products with vectors -----------------------------------------------------
@pytest.mark.parametrize(
    "block,prune,with_count",
    [((1, 1), True, False), ((1, 1), False, True), ((2, 2), True, True)],
    ids=["csr", "csr_count_array", "bsr2x2_count_array"],
)
def test_set_from_triplets_and_mv(block, prune, with_count):
    """A new topology every step (compact build from triplets), then ``A @ x`` and ``A^T @ y``."""

    def program(s):
        wp.launch(bump, dim=1, inputs=[s["t"]], device=CPU)
        if with_count:
            wp.launch(gen_count, dim=1, inputs=[s["t"], N, s["count"]], device=CPU)
        build(s, "A", 0, count=s["count"] if with_count else None, prune_numerical_zeros=prune)
        wp.launch(gen_vector, dim=s["x"].shape[0], inputs=[s["t"], 1, s["x"]], device=CPU)
        sparse.bsr_mv(s["A"], s["x"], s["y"], alpha=1.5, beta=0.5)
        sparse.bsr_mv(s["A"], s["y"], s["z"], transpose=True)

    def state():
        return {"t": counter(), "A": matrix(block=block), "count": zeros(1, wp.int32), **triplet_arrays(block),
                "x": zeros(NCOL * block[1]), "y": zeros(NROW * block[0]), "z": zeros(NCOL * block[1])}

    graph, replayed = eager_vs_replay(program, state)
    assert native_calls(graph) == ["bsr_matrix_from_triplets_host"]
    assert 0 < replayed["A"].offsets.numpy()[NROW] < N, "the triplets should merge and drop some blocks"


def test_mv_on_a_fixed_matrix():
    def program(s):
        wp.launch(bump, dim=1, inputs=[s["t"]], device=CPU)
        wp.launch(gen_vector, dim=NCOL, inputs=[s["t"], 0, s["x"]], device=CPU)
        sparse.bsr_mv(s["A"], s["x"], s["y"], alpha=-1.0, beta=1.0)
        # beta 0 or 1: warp-lang 1.12's transposed product cannot scale a CSR z (even eagerly)
        sparse.bsr_mv(s["A"], s["y"], s["z"], alpha=0.5, transpose=True, beta=1.0)

    graph, _ = eager_vs_replay(program, lambda: {"t": counter(), "A": fixed_matrix(3), "x": zeros(NCOL),
                                                 "y": zeros(NROW), "z": zeros(NCOL)})
    assert native_calls(graph) == []


def test_graph_keeps_triplet_arrays_alive():
    """Arrays reached only through a warp.sparse call (here the triplets) live as long as the graph."""
    source = {"t": counter(), **triplet_arrays()}
    fill_triplets(source, 5)

    def program(s):
        sparse.bsr_set_from_triplets(s["A"], s["rows"], s["cols"], s["vals"])

    expected = {"A": matrix()}
    program({**source, **expected})
    A = matrix()
    with wp.ScopedCapture(device=CPU) as capture:
        program({**source, "A": A})
    del source  # the only references to the triplet arrays, apart from the graph's
    churn()
    wp.capture_launch(capture.graph)
    assert_same(image(expected), image({"A": A}), "replay after the inputs were dropped")


# --- sums, products, transposes ----------------------------------------------------------------------
def test_axpy_compact():
    """``Y = 2 X + 0.5 Y`` with both rebuilt from triplets: the sum's topology is new every step."""

    def program(s):
        wp.launch(bump, dim=1, inputs=[s["t"]], device=CPU)
        build(s, "X", 0)
        build(s, "Y", 7, prefix="y_")
        sparse.bsr_axpy(s["X"], s["Y"], alpha=2.0, beta=0.5)

    def state():
        return {"t": counter(), "X": matrix(), "Y": matrix(), **triplet_arrays(),
                **{"y_" + k: v for k, v in triplet_arrays().items()}}

    graph, _ = eager_vs_replay(program, state)
    assert native_calls(graph) == ["bsr_matrix_from_triplets_host"] * 3


def test_axpy_masked():
    """``Y = 2 X + 0.5 Y`` keeping Y's topology: X's blocks outside it are dropped."""

    def program(s):
        wp.launch(bump, dim=1, inputs=[s["t"]], device=CPU)
        build(s, "X", 0)
        sparse.bsr_axpy(s["X"], s["Y"], alpha=2.0, beta=0.5, **MASKED)

    eager_vs_replay(program, lambda: {"t": counter(), "X": matrix(), "Y": fixed_matrix(4), **triplet_arrays()})


def _mm_state(primed: bool):
    """A and B of fixed topology; Z = A @ B computed twice eagerly so ``work_arrays`` hold its topology."""
    s = {"t": counter(), "A": fixed_matrix(1), "B": fixed_matrix(2, NCOL, NDEP), "Z": matrix(NROW, NDEP)}
    s["work"] = sparse.bsr_mm_work_arrays()
    if primed:
        sparse.bsr_mm(s["A"], s["B"], s["Z"], work_arrays=s["work"])
        sparse.bsr_mm(s["A"], s["B"], s["Z"], beta=0.5, work_arrays=s["work"])  # the topology keeps Z's blocks
    return s


def _wobble(s, *names):
    for name in names:
        values = s[name].values
        wp.launch(wobble, dim=values.shape[0], inputs=[s["t"], values], device=CPU)


def test_mm_reuse_topology():
    def program(s):
        wp.launch(bump, dim=1, inputs=[s["t"]], device=CPU)
        _wobble(s, "A", "B")
        sparse.bsr_mm(s["A"], s["B"], s["Z"], alpha=1.5, beta=0.5, work_arrays=s["work"], reuse_topology=True)

    graph, replayed = eager_vs_replay(program, lambda: _mm_state(primed=True))
    assert native_calls(graph) == ["bsr_matrix_from_triplets_host"]
    assert replayed["Z"].offsets.numpy()[NROW] > 0


def test_mm_max_new_nnz():
    """A's topology changes every step; ``max_new_nnz`` bounds the product's blocks up front."""

    def program(s):
        wp.launch(bump, dim=1, inputs=[s["t"]], device=CPU)
        build(s, "A", 0)
        sparse.bsr_mm(s["A"], s["B"], s["Z"], work_arrays=s["work"], max_new_nnz=N * NDEP)

    eager_vs_replay(program, lambda: {**_mm_state(primed=False), **triplet_arrays()})


def test_mm_masked():
    def program(s):
        wp.launch(bump, dim=1, inputs=[s["t"]], device=CPU)
        _wobble(s, "A", "B")
        sparse.bsr_mm(s["A"], s["B"], s["Z"], alpha=2.0, beta=0.5, **MASKED)

    graph, _ = eager_vs_replay(program, lambda: _mm_state(primed=True))
    assert native_calls(graph) == []


def test_transposes():
    """``T = 0.5 A^T`` into an existing matrix, and ``bsr_transposed`` making a new one in the capture."""

    def program(s):
        wp.launch(bump, dim=1, inputs=[s["t"]], device=CPU)
        build(s, "A", 0)
        sparse.bsr_set_transpose(s["T"], 0.5 * s["A"])
        s["U"] = sparse.bsr_transposed(s["A"])  # the graph owns the new matrix's arrays

    graph, replayed = eager_vs_replay(program, lambda: {"t": counter(), "A": matrix(), "T": matrix(NCOL, NROW),
                                                        "U": matrix(NCOL, NROW), **triplet_arrays()})
    assert native_calls(graph) == ["bsr_matrix_from_triplets_host"] + ["bsr_transpose_host"] * 2
    assert replayed["U"].nrow == NCOL


def test_copy_and_assign():
    """Copies (a new matrix in the capture) and an assignment that splits 2x2 blocks into 1x1 ones."""

    def program(s):
        wp.launch(bump, dim=1, inputs=[s["t"]], device=CPU)
        build(s, "A", 0)
        s["C"] = sparse.bsr_copy(s["A"])
        sparse.bsr_assign(dest=s["D"], src=s["A"])
        sparse.bsr_assign(dest=s["E"], src=s["A"], **MASKED)  # keeps E's topology

    eager_vs_replay(program, lambda: {"t": counter(), "A": matrix(block=(2, 2)), "C": matrix(block=(2, 2)),
                                      "D": matrix(2 * NROW, 2 * NCOL), "E": fixed_matrix(6, block=(2, 2)),
                                      **triplet_arrays((2, 2))})


@needs_padded
def test_padded_topology():
    """Padded rows (warp-lang 1.13+): row capacity from an array, with its total given up front; then
    compressed back to compact storage."""

    def program(s):
        wp.launch(bump, dim=1, inputs=[s["t"]], device=CPU)
        fill_triplets(s, 0)
        s["P"] = sparse.bsr_zeros(NROW, NCOL, float, device=CPU, row_capacity=s["capacity"], nnz_capacity=NROW * NCOL)
        sparse.bsr_set_from_triplets(s["P"], s["rows"], s["cols"], s["vals"], topology="padded")
        wp.launch(gen_vector, dim=NCOL, inputs=[s["t"], 0, s["x"]], device=CPU)
        sparse.bsr_mv(s["P"], s["x"], s["y"])
        s["Q"] = sparse.bsr_compress(sparse.bsr_copy(s["P"]))  # compact again: native compression
        s["R"] = sparse.bsr_compress(sparse.bsr_copy(s["P"]), inplace=True)

    def state():
        return {"t": counter(), "capacity": wp.full(NROW, NCOL, dtype=wp.int32, device=CPU), "x": zeros(NCOL),
                "y": zeros(NROW), **triplet_arrays()}

    graph, _ = eager_vs_replay(program, state)
    assert "bsr_compress_inplace_host" in native_calls(graph)


# --- what cannot be recorded ------------------------------------------------------------------------------
def _refused(program, error, match):
    with pytest.raises(error, match=match) as caught:
        with wp.ScopedCapture(device=CPU) as capture:
            program()
    assert capture.graph is None, "a partly recorded graph was handed out"
    return caught.value


def test_mm_without_a_bound_is_refused():
    """Warp's own graph-capture check: the product's size would be read back to the host."""
    s = _mm_state(primed=False)
    _refused(lambda: sparse.bsr_mm(s["A"], s["B"], s["Z"]), RuntimeError, "reuse_topology=True")


def test_nnz_sync_of_a_matrix_the_capture_changed_is_refused():
    s = {"t": counter(), "A": matrix(), **triplet_arrays()}

    def program():
        build(s, "A", 0)
        s["A"].nnz_sync()

    error = _refused(program, apic.UnsupportedOperationError, r"BsrMatrix\.nnz_sync\(\)")
    assert "after wp.capture_launch()" in str(error)


def test_nnz_sync_of_an_untouched_matrix_reads_it_now():
    fixed = fixed_matrix(2)
    expected = int(fixed.offsets.numpy()[NROW])
    with wp.ScopedCapture(device=CPU) as capture:
        assert fixed.nnz_sync() == expected
    assert capture.graph.recording.ops == ()


def test_native_call_outside_a_warp_sparse_function_is_recorded():
    """The native builder reached without apic's warp.sparse shim (a name taken before ``import apic``):
    recorded at the native layer, as upstream records it (see tests/record/test_native_layer.py)."""
    original = sparse.bsr_set_from_triplets.__apic_original__

    def program(s):
        wp.launch(bump, dim=1, inputs=[s["t"]], device=CPU)
        fill_triplets(s, 0)
        original(s["A"], s["rows"], s["cols"], s["vals"])
        wp.launch(gen_vector, dim=NCOL, inputs=[s["t"], 1, s["x"]], device=CPU)
        sparse.bsr_mv(s["A"], s["x"], s["y"])

    graph, _ = eager_vs_replay(program, lambda: {"t": counter(), "A": matrix(), **triplet_arrays(),
                                                 "x": zeros(NCOL), "y": zeros(NROW)})
    assert native_calls(graph) == ["bsr_matrix_from_triplets_host"]


@needs_padded
def test_padded_capacity_array_without_nnz_capacity_is_refused():
    capacity = wp.full(NROW, 2, dtype=wp.int32, device=CPU)
    error = _refused(lambda: sparse.bsr_zeros(NROW, NCOL, float, device=CPU, row_capacity=capacity),
                     apic.UnsupportedOperationError, r"warp\.sparse\.bsr_zeros")
    assert "nnz_capacity=" in str(error) and "nnz_sync()" in str(error)


@needs_padded
def test_status_read_is_refused():
    padded = sparse.bsr_zeros(NCOL, NROW, float, device=CPU, row_capacity=NROW)
    s = {"t": counter(), **triplet_arrays()}
    fill_triplets(s, 0)

    def status_read():
        sparse.bsr_set_from_triplets(padded, s["rows"], s["cols"], s["vals"], topology="padded")
        padded.status_sync()

    _refused(status_read, apic.UnsupportedOperationError, r"BsrMatrix\.status_sync\(\)")


# --- a padded transpose, recorded as upstream records it (warp-lang 1.13+) ---------------------------------
def padded_transposes(s):
    """``P = 0.5 A^T`` into rows with room for every block, ``Q = A^T`` into rows of 2 blocks: Q's rows that
    overflow are left empty and its status says so. A has a new topology every step."""
    wp.launch(bump, dim=1, inputs=[s["t"]], device=CPU)
    build(s, "A", 0)
    sparse.bsr_set_transpose(s["P"], 0.5 * s["A"], topology="padded")
    sparse.bsr_set_transpose(s["Q"], s["A"], topology="padded")


def padded_state():
    P = sparse.bsr_zeros(NCOL, NROW, float, device=CPU, row_capacity=NROW)
    Q = sparse.bsr_zeros(NCOL, NROW, float, device=CPU, row_capacity=2)
    # the status arrays made up front, so that both runs' matrices hold theirs from the start
    return {"t": counter(), "A": matrix(), "P": P, "P_status": P._ensure_status(), "Q": Q,
            "Q_status": Q._ensure_status(), **triplet_arrays()}


@needs_padded
def test_padded_transpose():
    graph, replayed = eager_vs_replay(padded_transposes, padded_state)
    assert native_calls(graph) == ["bsr_matrix_from_triplets_host"] + ["bsr_transpose_host"] * 2
    calls = [op for op in graph.recording.ops if isinstance(op, rec.NativeCall) and op.name == "bsr_transpose_host"]
    assert [op.args[-1] for op in calls] == [NCOL * NROW, NCOL * 2], "the recorded capacities"
    assert int(replayed["P_status"].numpy()[0]) == 0
    assert int(replayed["Q_status"].numpy()[0]) == sparse.BSR_STATUS_ROW_CAPACITY_EXCEEDED, "no row overflowed"


@needs_padded
def test_padded_transpose_restores_the_destination_capacity():
    """As upstream: the row offsets (the capacity layout) are those of the capture, restored before the
    transpose at replay, so a destination whose offsets were reset after the capture is rebuilt."""

    made = []  # eager_vs_replay makes the eager state first, then the replayed one

    def make():
        made.append(padded_state())
        return made[-1]

    def reset(_run):
        for name in ("P", "Q"):
            made[1][name].offsets.zero_()
            made[1][name].row_counts.zero_()

    eager_vs_replay(padded_transposes, make, between=reset)


@needs_padded
def test_saved_padded_transpose_replays_in_a_fresh_process(tmp_path):
    state = padded_state()
    with wp.ScopedCapture(device=CPU, apic=True) as capture:
        padded_transposes(state)
    outputs = {f"{m}_{part}": getattr(state[m], part) for m in ("P", "Q")
               for part in ("offsets", "row_counts", "columns", "values")}
    outputs.update(P_status=state["P_status"], Q_status=state["Q_status"])
    wp.capture_save(capture.graph, str(tmp_path / "padded"), outputs=outputs)
    expected = padded_state()
    for _ in range(ITERS):
        padded_transposes(expected)
    job = {"mode": "file", "path": str(tmp_path / "padded"), "iters": ITERS,
           "get": {n: str(tmp_path / f"{n}.npy") for n in outputs}}
    run_child(job, cwd=tmp_path)
    got = {n: np.load(tmp_path / f"{n}.npy") for n in outputs}
    for name in ("P_status", "Q_status"):
        assert same_bits(got[name], expected[name].numpy()), name
    for m in ("P", "Q"):
        offsets, counts = got[f"{m}_offsets"][: NCOL + 1], got[f"{m}_row_counts"][:NCOL]
        active = np.concatenate([np.arange(b, b + c) for b, c in zip(offsets[:-1], counts)] + [np.zeros(0, int)])
        want = bsr_image(m, expected[m])
        assert same_bits(offsets, want[f"{m}.offsets"]) and same_bits(counts, want[f"{m}.row_counts"]), m
        assert same_bits(got[f"{m}_columns"][active], want[f"{m}.columns"]), m
        assert np.array_equal(got[f"{m}_values"][active].view(np.uint8).reshape(-1), want[f"{m}.values"]), m
    assert int(got["Q_status"][0]) == sparse.BSR_STATUS_ROW_CAPACITY_EXCEEDED


@needs_padded
def test_saved_padded_transpose_capacity_is_checked(tmp_path):
    """The recorded capacity bounds what the call reaches: one past the destination's columns is refused."""
    import copy


    from apic.format import schema

    state = padded_state()
    with wp.ScopedCapture(device=CPU, apic=True) as capture:
        padded_transposes(state)
    wp.capture_save(capture.graph, str(tmp_path / "padded"))
    doc = body_of(tmp_path / "padded.wrp")
    i = next(k for k, op in enumerate(doc["ops"]) if op["kind"] == schema.WireOp.NATIVE_CALL
             and op["fn"] == "bsr_transpose_host")
    args = doc["ops"][i]["args"]
    assert len(args) == 12
    columns_bytes = doc["regions"][args[8][0]]["nbytes"] - args[8][1]
    bad = copy.deepcopy(doc)
    bad["ops"][i]["args"][11] = columns_bytes // 4 + 1
    with pytest.raises(apic.FormatError, match="outside region"):
        read_doc(bad)
    read_doc(doc)


@needs_padded
def test_padded_transpose_into_rows_that_are_no_capacity_layout_is_refused():
    """Row offsets that decrease when the transpose is captured are no capacity layout: refused, naming it."""
    s = padded_state()
    fill_triplets(s, 0)
    sparse.bsr_set_from_triplets(s["A"], s["rows"], s["cols"], s["vals"])
    offsets = s["P"].offsets.numpy()
    offsets[1], offsets[2] = offsets[2] + 1, offsets[1]
    s["P"].offsets.assign(offsets)
    _refused(lambda: sparse.bsr_set_transpose(s["P"], s["A"], topology="padded"), apic.UnsupportedOperationError,
             r"bsr_set_transpose.*padded.*not a row-capacity layout")


@needs_padded
@pytest.mark.parametrize("edit", ["past_capacity", "decreasing", "negative"])
def test_changed_capacity_layout_stops_the_replay(tmp_path, edit):
    """A file whose restored row offsets (the memtile before a padded transpose) no longer fit the recorded
    capacity loads, and its replay stops before the transpose with a RuntimeError naming it."""

    from apic.format import schema, writer

    state = padded_state()
    with wp.ScopedCapture(device=CPU, apic=True) as capture:
        padded_transposes(state)
    wp.capture_save(capture.graph, str(tmp_path / "padded"))
    doc = body_of(tmp_path / "padded.wrp")
    call = next(op for op in doc["ops"] if op["kind"] == schema.WireOp.NATIVE_CALL and op["fn"] == "bsr_transpose_host")
    restore = next(op for op in doc["ops"] if op["kind"] == schema.WireOp.MEMTILE and op["dst"] == call["args"][6])
    layout = np.frombuffer(restore["value"]["data"], dtype=np.int32).copy()
    assert layout[-1] == call["args"][11], "the capacity recorded is the restored layout's last offset"
    if edit == "past_capacity":
        layout[-1] += 1
    elif edit == "decreasing":
        layout[1] = layout[2] + 1
    else:
        layout[0] = -1
    restore["value"]["data"] = layout.tobytes()
    modules = {f.name: f.read_bytes() for f in (tmp_path / "padded_modules").iterdir()}
    graph = wp.capture_load_from_bytes(writer.encode(doc), modules)
    with pytest.raises(RuntimeError, match=r"CPU graph replay failed: the row offsets of a padded "
                                           r"bsr_set_transpose destination") as caught:
        wp.capture_launch(graph)
    assert isinstance(caught.value, apic.ReplayError)


# --- save, load, fresh process -----------------------------------------------------------------------------
def everything(s):
    wp.launch(bump, dim=1, inputs=[s["t"]], device=CPU)
    build(s, "A", 0)
    wp.launch(gen_vector, dim=NCOL, inputs=[s["t"], 1, s["x"]], device=CPU)
    sparse.bsr_mv(s["A"], s["x"], s["y"], alpha=1.5, beta=0.5)
    build(s, "X", 3, prefix="x_")
    build(s, "Y", 7, prefix="y_")
    sparse.bsr_axpy(s["X"], s["Y"], alpha=2.0, beta=0.5)
    _wobble(s, "MA", "MB")
    sparse.bsr_mm(s["MA"], s["MB"], s["Z"], beta=0.5, work_arrays=s["work"], reuse_topology=True)
    sparse.bsr_set_transpose(s["T"], s["A"])


def everything_state():
    mm = _mm_state(primed=True)
    return {
        "t": counter(), "A": matrix(), "x": zeros(NCOL), "y": zeros(NROW), "X": matrix(), "Y": matrix(),
        "T": matrix(NCOL, NROW), "MA": mm["A"], "MB": mm["B"], "Z": mm["Z"], "work": mm["work"], **triplet_arrays(),
        **{p + k: v for p in ("x_", "y_") for k, v in triplet_arrays().items()},
    }


MATRICES = ("A", "Y", "Z", "T")
ITERS = 3


def _outputs(s) -> dict:
    found = {"y": s["y"]}
    for name in MATRICES:
        found.update({f"{name}_offsets": s[name].offsets, f"{name}_columns": s[name].columns,
                      f"{name}_values": s[name].values})
    return found


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    folder = tmp_path_factory.mktemp("sparse")
    state = everything_state()
    with wp.ScopedCapture(device=CPU, apic=True) as capture:
        everything(state)
    assert sorted(set(native_calls(capture.graph))) == ["bsr_matrix_from_triplets_host", "bsr_transpose_host"]
    wp.capture_save(capture.graph, str(folder / "sparse"), outputs=_outputs(state))
    return folder / "sparse"


def test_fresh_process_replay_equals_eager(saved, tmp_path):
    expected = everything_state()
    for _ in range(ITERS):
        everything(expected)
    names = list(_outputs(expected))
    job = {"mode": "file", "path": str(saved), "iters": ITERS, "get": {n: str(tmp_path / f"{n}.npy") for n in names}}
    run_child(job, cwd=tmp_path)
    got = {n: np.load(tmp_path / f"{n}.npy") for n in names}
    assert same_bits(got["y"], expected["y"].numpy())
    for name in MATRICES:
        m = expected[name]
        want = bsr_image(name, m)
        offsets = got[f"{name}_offsets"][: m.nrow + 1]
        active = offsets[-1]
        assert same_bits(offsets, want[f"{name}.offsets"]), name
        assert same_bits(got[f"{name}_columns"][:active], want[f"{name}.columns"]), name
        assert np.array_equal(got[f"{name}_values"][:active].view(np.uint8).reshape(-1), want[f"{name}.values"]), name


def test_saved_calls_are_checked(saved):
    """A saved BSR call whose pointer would reach past its region, or null where Warp needs one, is refused."""
    import copy


    from apic.format import schema

    doc = body_of(saved.with_suffix(".wrp"))
    i = next(k for k, op in enumerate(doc["ops"]) if op["kind"] == schema.WireOp.NATIVE_CALL
             and op["fn"] == "bsr_matrix_from_triplets_host")
    args = doc["ops"][i]["args"]
    rows_at = 6  # tpl_rows: a pointer Warp always needs
    region_bytes = doc["regions"][args[rows_at][0]]["nbytes"]
    for edit, message in [
        ({rows_at: 0}, "expected a list"),
        ({4: region_bytes}, "outside region"),  # a triplet count that reaches past the rows array
        ({10: 2}, r"outside \[0, 1\]"),  # the masked flag
    ]:
        bad = copy.deepcopy(doc)
        for at, value in edit.items():
            bad["ops"][i]["args"][at] = value
        with pytest.raises(apic.FormatError, match=message):
            read_doc(bad)
    read_doc(doc)  # and the file itself, with its null optional pointers, is valid


# --- install / uninstall -------------------------------------------------------------------------------------
UNINSTALL = """
import warp as wp
import warp.fem as fem  # imported before apic: its names for warp.sparse functions are Warp's own
from warp._src import sparse as src
from warp._src.fem import integrate, cache
before = {n: getattr(src, n) for n in ("bsr_mm", "bsr_set_from_triplets")}
nnz_sync, borrow = vars(src.BsrMatrix)["nnz_sync"], vars(cache.TemporaryStore)["borrow"]
fem_names = integrate.bsr_set_from_triplets
import apic
assert wp.sparse.bsr_mm is not before["bsr_mm"] and src.bsr_mm is wp.sparse.bsr_mm
assert integrate.bsr_set_from_triplets is src.bsr_set_from_triplets, "warp.fem keeps Warp's own function"
with wp.ScopedCapture(device="cpu"):
    pass
assert vars(cache.TemporaryStore)["borrow"] is not borrow, "fem temporaries not patched at capture begin"
apic.uninstall()
assert all(getattr(src, n) is f for n, f in before.items()) and wp.sparse.bsr_mm is before["bsr_mm"]
assert integrate.bsr_set_from_triplets is fem_names
assert vars(src.BsrMatrix)["nnz_sync"] is nnz_sync and vars(cache.TemporaryStore)["borrow"] is borrow
print("ok")
"""


def test_install_patches_sparse_and_fem_and_uninstall_restores_them():
    import subprocess
    import sys

    from persist_helpers import child_env

    result = subprocess.run([sys.executable, "-c", UNINSTALL], env=child_env(), capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0 and result.stdout.strip().endswith("ok"), result.stderr


# --- warp.fem ------------------------------------------------------------------------------------------------
@fem.integrand
def _mass_rhs(s: fem.Sample, v: fem.Field, c: fem.Field):
    return c(s) * v(s)


@fem.integrand
def _diffusion(s: fem.Sample, u: fem.Field, v: fem.Field, c: fem.Field):
    return (1.0 + c(s) * c(s)) * wp.dot(fem.grad(u, s), fem.grad(v, s)) + u(s) * v(s)


@wp.kernel
def gen_dofs(t: wp.array(dtype=wp.int32), dofs: wp.array(dtype=float)):
    i = wp.tid()
    dofs[i] = wp.sin(float(t[0]) * 0.8 + float(i) * 0.45)


@pytest.fixture(scope="module")
def fem_setup():
    geo = fem.Grid2D(res=wp.vec2i(3, 3))
    space = fem.make_polynomial_space(geo, degree=1)
    domain = fem.Cells(geo)
    return space, fem.make_test(space, domain=domain), fem.make_trial(space, domain=domain)


def fem_program(space, test, trial):
    """A step (a coefficient field that changes every step, a linear and a bilinear form integrated into
    preallocated outputs with a shared TemporaryStore) and a maker of its state."""
    store = fem.TemporaryStore()

    def program(s):
        wp.launch(bump, dim=1, inputs=[s["t"]], device=CPU)
        wp.launch(gen_dofs, dim=space.node_count(), inputs=[s["t"], s["c"].dof_values], device=CPU)
        fem.integrate(_mass_rhs, fields={"v": test, "c": s["c"]}, output=s["rhs"], temporary_store=store)
        fem.integrate(_diffusion, fields={"u": trial, "v": test, "c": s["c"]}, output=s["K"], temporary_store=store)

    def state():
        c = space.make_field()
        K = fem.integrate(_diffusion, fields={"u": trial, "v": test, "c": c}, temporary_store=store)
        return {"t": counter(), "c": c, "dofs": c.dof_values, "rhs": zeros(space.node_count()), "K": K}

    return program, state


def test_fem_integrate(fem_setup):
    """A linear and a bilinear form with a coefficient field that changes every step, integrated into
    preallocated outputs with a shared TemporaryStore; eager integrations with the same store between
    replays must not disturb the graph."""
    program, state = fem_program(*fem_setup)
    other = state()
    eager_vs_replay(program, state, between=lambda run: program(other))


def test_fem_temporaries_borrowed_in_a_capture_are_never_recycled():
    store = fem.TemporaryStore()
    a = fem.borrow_temporary(store, shape=16, dtype=float, device=CPU)
    a_ptr = a.ptr
    a.release()
    b = fem.borrow_temporary(store, shape=16, dtype=float, device=CPU)
    assert b.ptr == a_ptr, "eagerly, the store recycles a released temporary"
    b.release()
    with wp.ScopedCapture(device=CPU) as capture:
        first = fem.borrow_temporary(store, shape=16, dtype=float, device=CPU)
        first.fill_(1.0)
        first.release()
        second = fem.borrow_temporary(store, shape=16, dtype=float, device=CPU)
        second.fill_(2.0)
        second.release()
        loose = fem.borrow_temporary(None, shape=16, dtype=float, device=CPU)  # no store: a plain array
        loose.fill_(3.0)
        loose.release()
    captured = {first.ptr, second.ptr, loose.ptr}
    assert len(captured) == 3 and a_ptr not in captured, "a temporary was recycled inside the capture"
    loose.release()  # after the capture too: the graph owns the memory
    later = fem.borrow_temporary(store, shape=16, dtype=float, device=CPU)
    assert later.ptr not in captured, "the store handed out memory the graph uses"
    later.fill_(-1.0)
    for temporary in (first, second, loose):
        temporary.zero_()
    churn()
    wp.capture_launch(capture.graph)
    for temporary, value in ((first, 1.0), (second, 2.0), (loose, 3.0)):
        assert (temporary.numpy() == value).all()
    assert (later.numpy() == -1.0).all()


def test_fem_integrate_saved_and_replayed_in_a_fresh_process(fem_setup, tmp_path):
    """The same fem program, saved right after its capture: a fresh process replays it like eager Warp."""
    program, state = fem_program(*fem_setup)

    def outputs(s):
        K = s["K"]
        return {"rhs": s["rhs"], "K_offsets": K.offsets, "K_columns": K.columns, "K_values": K.values}

    expected = state()
    for _ in range(ITERS):
        program(expected)
    captured = state()
    with wp.ScopedCapture(device=CPU, apic=True) as capture:
        program(captured)
    wp.capture_save(capture.graph, str(tmp_path / "fem"), outputs=outputs(captured))
    names = list(outputs(expected))
    job = {"mode": "file", "path": str(tmp_path / "fem"), "iters": ITERS,
           "get": {n: str(tmp_path / f"{n}.npy") for n in names}}
    run_child(job, cwd=tmp_path)
    got = {n: np.load(tmp_path / f"{n}.npy") for n in names}
    K = expected["K"]
    active = int(K.offsets.numpy()[K.nrow])
    assert same_bits(got["rhs"], expected["rhs"].numpy())
    assert same_bits(got["K_offsets"][: K.nrow + 1], K.offsets.numpy()[: K.nrow + 1])
    assert same_bits(got["K_columns"][:active], K.columns.numpy()[:active])
    assert same_bits(got["K_values"][:active], K.values.numpy()[:active])
