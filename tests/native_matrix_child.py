"""Child of ``test_native_layer.test_every_native_both_ways_in_either_import_order`` (run as a script).

``python native_matrix_child.py ORDER SUBMODULE``: imports SUBMODULE (``warp.fem``, ``warp.sparse``,
``warp.optim``) before or after ``import apic``, then runs every native host utility apic records in
this warp-lang (each scan, sort, reduction, run-length encoding and BSR build; every key and scalar
type the export has) in two programs: through its Python function, as bound by the submodule at its
import where it binds one (Warp's own function when imported before apic) or else ``wp.utils`` /
``warp.sparse``, and directly, each native by address (the BSR builders through Warp's own
warp.sparse code, which calls them itself). The ``wp.utils`` program run eagerly is the oracle: both
programs, captured once and replayed three times, must equal it bit for bit after every replay.
Prints one JSON line: the natives each capture recorded and where its functions came from.
"""

import importlib
import inspect
import json
import sys
from typing import Any

import numpy as np
import warp as wp

wp.config.quiet = True
order, submodule = sys.argv[1], sys.argv[2]
if order == "before":
    importlib.import_module(submodule)
else:

    importlib.import_module(submodule)
import warp.sparse as wps  # noqa: E402

from apic import _compat  # noqa: E402
from apic.record import natives  # noqa: E402
from apic.record import ops as rec  # noqa: E402

CPU = "cpu"
N, COUNT, NROW, NCOL, NTRI = 16, 10, 5, 4, 12
core = _compat.runtime().core
DTYPES = {"int": wp.int32, "uint": wp.uint32, "float": wp.float32, "double": wp.float64, "int64": wp.int64,
          "uint64": wp.uint64}
SIZE = {"int": 4, "uint": 4, "float": 4, "double": 8, "int64": 8, "uint64": 8}
HAS_TOPOLOGY = "topology" in inspect.signature(wps.bsr_axpy).parameters


def available(prefix: str) -> list:
    """The type suffixes of ``wp_<prefix>_<t>_host`` that this Warp exports with a signature apic records."""
    found = []
    for t in DTYPES:
        name = f"{prefix}_{t}_host"
        arity = natives.host_arity(name)
        if arity is not None and natives.signature(name, arity) is not None:
            found.append(t)
    return found


SCAN, RADIX, SEGMENTED = available("array_scan"), available("radix_sort_pairs"), available("segmented_sort_pairs")
SUM, INNER = available("array_sum"), available("array_inner")
MODERN_SCAN = natives.host_arity("array_scan_float_host") == 7
MODERN_SORT = natives.host_arity("radix_sort_pairs_int_host") == 6


def bound(name: str, home: str, fallback):
    """The function ``name`` as a Warp module other than its home bound it at import, else ``fallback``."""
    for key, module in list(sys.modules.items()):
        if key.startswith("warp._src.") and key != home and module is not None and callable(vars(module).get(name)):
            return vars(module)[name], key
    return fallback, None


UTILS = {n: bound(n, "warp._src.utils", getattr(wp.utils, n))
         for n in ("array_scan", "radix_sort_pairs", "segmented_sort_pairs", "runlength_encode", "array_sum",
                   "array_inner")}
SPARSE = {n: bound(n, "warp._src.sparse", getattr(wps, n))
          for n in ("bsr_set_from_triplets", "bsr_set_transpose") + (("bsr_compress",) if HAS_TOPOLOGY else ())}
# Warp's own warp.sparse functions (apic's shim holds the original): they call the BSR natives themselves
OWN = {n: getattr(getattr(wps, n), "__apic_original__", getattr(wps, n)) for n in SPARSE}


@wp.kernel
def bump(t: wp.array(dtype=wp.int32)):
    t[0] = t[0] + 1


@wp.kernel
def gen(t: wp.array(dtype=wp.int32), modulus: int, out: wp.array(dtype=Any)):
    i = wp.tid()
    v = (t[0] * 7919 + i * 104729 + 13) % modulus
    out[i] = out.dtype(float(v) * 0.37)


@wp.kernel
def gen_segments(t: wp.array(dtype=wp.int32), starts: wp.array(dtype=wp.int32), ends: wp.array(dtype=wp.int32)):
    cut = 2 + t[0] % 5
    starts[0] = 0
    ends[0] = cut
    starts[1] = cut
    ends[1] = COUNT


@wp.kernel
def gen_triplets(t: wp.array(dtype=wp.int32), rows: wp.array(dtype=wp.int32), cols: wp.array(dtype=wp.int32),
                 vals: wp.array(dtype=float)):
    i = wp.tid()
    k = t[0]
    rows[i] = (k * 5 + i * 7) % NROW
    cols[i] = (k * 3 + i * 7 + i / 4) % NCOL
    vals[i] = wp.sin(float(k) * 0.7 + float(i) * 1.3)


def fill(s, out, modulus=1000, dim=None):
    wp.launch(gen, dim=dim or out.shape[0], inputs=[s["t"], modulus, out], device=CPU)


def state() -> dict:
    s = {"t": wp.zeros(1, dtype=wp.int32, device=CPU)}
    for t in SCAN:
        s[f"scan_in_{t}"] = wp.zeros(N, dtype=DTYPES[t], device=CPU)
        s[f"scan_out_{t}"] = wp.zeros(N, dtype=DTYPES[t], device=CPU)
    for t in RADIX:
        s[f"radix_keys_{t}"] = wp.zeros(2 * COUNT, dtype=DTYPES[t], device=CPU)
        s[f"radix_values_{t}"] = wp.zeros(2 * COUNT, dtype=wp.int32, device=CPU)
    for t in SEGMENTED:
        s[f"seg_keys_{t}"] = wp.zeros(2 * COUNT, dtype=DTYPES[t], device=CPU)
        s[f"seg_values_{t}"] = wp.zeros(2 * COUNT, dtype=wp.int32, device=CPU)
    s["starts"], s["ends"] = wp.zeros(2, dtype=wp.int32, device=CPU), wp.zeros(2, dtype=wp.int32, device=CPU)
    for name in ("runs", "run_values", "run_lengths"):
        s[name] = wp.zeros(N, dtype=wp.int32, device=CPU)
    s["run_count"] = wp.zeros(1, dtype=wp.int32, device=CPU)
    for t in sorted(set(SUM) | set(INNER)):
        s[f"red_a_{t}"] = wp.zeros(N, dtype=DTYPES[t], device=CPU)
        s[f"red_b_{t}"] = wp.zeros(N, dtype=DTYPES[t], device=CPU)
        s[f"sum_{t}"] = wp.zeros(1, dtype=DTYPES[t], device=CPU)
        s[f"inner_{t}"] = wp.zeros(1, dtype=DTYPES[t], device=CPU)
    s["rows"], s["cols"] = wp.zeros(NTRI, dtype=wp.int32, device=CPU), wp.zeros(NTRI, dtype=wp.int32, device=CPU)
    s["vals"] = wp.zeros(NTRI, dtype=float, device=CPU)
    s["A"] = wps.bsr_zeros(NROW, NCOL, float, device=CPU)
    s["T"] = wps.bsr_zeros(NCOL, NROW, float, device=CPU)
    if HAS_TOPOLOGY:
        s["P"] = wps.bsr_zeros(NROW, NCOL, float, device=CPU, row_capacity=NCOL)
        s["Q"] = wps.bsr_zeros(NCOL, NROW, float, device=CPU, row_capacity=NROW)
        s["Q_status"] = s["Q"]._ensure_status()
    return s


def inputs(s):
    """New inputs every step (the same in both programs)."""
    wp.launch(bump, dim=1, inputs=[s["t"]], device=CPU)
    for t in SCAN:
        fill(s, s[f"scan_in_{t}"])
    for t in RADIX:
        fill(s, s[f"radix_keys_{t}"], dim=COUNT)
        fill(s, s[f"radix_values_{t}"], 64, dim=COUNT)
    wp.launch(gen_segments, dim=1, inputs=[s["t"], s["starts"], s["ends"]], device=CPU)
    for t in SEGMENTED:
        fill(s, s[f"seg_keys_{t}"], dim=COUNT)
        fill(s, s[f"seg_values_{t}"], 64, dim=COUNT)
    fill(s, s["runs"], 11)  # runs of equal values: (v * 0.37) truncated
    for t in sorted(set(SUM) | set(INNER)):
        fill(s, s[f"red_a_{t}"])
        fill(s, s[f"red_b_{t}"], 97)
    wp.launch(gen_triplets, dim=NTRI, inputs=[s["t"], s["rows"], s["cols"], s["vals"]], device=CPU)


def through_functions(s):
    inputs(s)
    for t in SCAN:
        UTILS["array_scan"][0](s[f"scan_in_{t}"], s[f"scan_out_{t}"], inclusive=True)
    for t in RADIX:
        UTILS["radix_sort_pairs"][0](s[f"radix_keys_{t}"], s[f"radix_values_{t}"], COUNT)
    for t in SEGMENTED:
        UTILS["segmented_sort_pairs"][0](s[f"seg_keys_{t}"], s[f"seg_values_{t}"], COUNT, s["starts"], s["ends"])
    UTILS["runlength_encode"][0](s["runs"], s["run_values"], s["run_lengths"], run_count=s["run_count"])
    for t in SUM:
        UTILS["array_sum"][0](s[f"red_a_{t}"], out=s[f"sum_{t}"])
    for t in INNER:
        UTILS["array_inner"][0](s[f"red_a_{t}"], s[f"red_b_{t}"], out=s[f"inner_{t}"])
    sparse(s, SPARSE)


def directly(s):
    inputs(s)
    for t in SCAN:
        src, dst = s[f"scan_in_{t}"], s[f"scan_out_{t}"]
        scan = getattr(core, f"wp_array_scan_{t}_host")
        scan(src.ptr, dst.ptr, N, SIZE[t], SIZE[t], 1, True) if MODERN_SCAN else scan(src.ptr, dst.ptr, N, True)
    for t in RADIX:
        keys, values = s[f"radix_keys_{t}"], s[f"radix_values_{t}"]
        sort = getattr(core, f"wp_radix_sort_pairs_{t}_host")
        sort(keys.ptr, values.ptr, COUNT, 0, 8 * SIZE[t], 4) if MODERN_SORT else sort(keys.ptr, values.ptr, COUNT)
    for t in SEGMENTED:
        getattr(core, f"wp_segmented_sort_pairs_{t}_host")(
            s[f"seg_keys_{t}"].ptr, s[f"seg_values_{t}"].ptr, COUNT, s["starts"].ptr, s["ends"].ptr, 2)
    core.wp_runlength_encode_int_host(s["runs"].ptr, s["run_values"].ptr, s["run_lengths"].ptr, s["run_count"].ptr, N)
    for t in SUM:
        getattr(core, f"wp_array_sum_{t}_host")(s[f"red_a_{t}"].ptr, s[f"sum_{t}"].ptr, N, SIZE[t], 1)
    for t in INNER:
        getattr(core, f"wp_array_inner_{t}_host")(
            s[f"red_a_{t}"].ptr, s[f"red_b_{t}"].ptr, s[f"inner_{t}"].ptr, N, SIZE[t], SIZE[t], 1)
    sparse(s, {n: (f, None) for n, f in OWN.items()})


def sparse(s, functions):
    functions["bsr_set_from_triplets"][0](s["A"], s["rows"], s["cols"], s["vals"])
    functions["bsr_set_transpose"][0](s["T"], s["A"])
    if HAS_TOPOLOGY:
        functions["bsr_set_from_triplets"][0](s["P"], s["rows"], s["cols"], s["vals"], topology="padded")
        functions["bsr_compress"][0](s["P"], inplace=True, topology="padded")
        functions["bsr_set_transpose"][0](s["Q"], s["A"], topology="padded")


def image(s) -> dict:
    """Every array's bytes; a BSR matrix's active blocks only (slots past them are uninitialised)."""
    found = {}
    for name, value in s.items():
        if isinstance(value, wps.BsrMatrix):
            offsets = value.offsets.numpy()[: value.nrow + 1]
            counts = getattr(value, "row_counts", None)
            counts = np.diff(offsets) if counts is None else counts.numpy()[: value.nrow]
            active = np.concatenate([np.arange(b, b + c) for b, c in zip(offsets[:-1], counts)] + [np.zeros(0, int)])
            for part, data in (("offsets", offsets), ("counts", counts), ("columns", value.columns.numpy()[active]),
                               ("values", value.values.numpy()[active])):
                found[f"{name}.{part}"] = np.ascontiguousarray(data).view(np.uint8).tobytes()
        else:
            found[name] = value.numpy().view(np.uint8).tobytes()
    return found


def main():
    through_functions(state())  # compile every module first: compilation is not captured
    directly(state())
    eager = state()
    graphs, replayed, recorded = {}, {}, {}
    for form, program in (("functions", through_functions), ("direct", directly)):
        replayed[form] = state()
        with wp.ScopedCapture(device=CPU) as capture:
            program(replayed[form])
        graphs[form] = capture.graph
        recorded[form] = sorted({op.name for op in capture.graph.recording.ops if isinstance(op, rec.NativeCall)})
    for step in range(3):
        through_functions(eager)
        want = image(eager)
        for form, graph in graphs.items():
            wp.capture_launch(graph)
            got = image(replayed[form])
            differ = [name for name in want if got[name] != want[name]]
            assert not differ, f"{form}, replay {step + 1}: {differ} differ from the eager wp.utils program"
    bound_in = {n: where for n, (_, where) in {**UTILS, **SPARSE}.items() if where}
    print(json.dumps({"recorded": recorded, "bound_in": bound_in}))


main()
