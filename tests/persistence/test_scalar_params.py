"""Named scalar parameters (``apic.param``): eager == replay bit for bit after every ``set_param``, live and
saved-then-loaded in a fresh process; types and shapes checked; misuse refused, naming the parameter."""

from __future__ import annotations

import json
import os
import sys
import textwrap

import numpy as np
import pytest
import warp as wp

import apic
import fork_server
import param_kernels as PK
from apic.format import reader, schema
from conftest import CPU, churn, snapshot
from persist_helpers import TESTS, child_env, run_cli, same_bits

pytestmark = [pytest.mark.warp_version, pytest.mark.interpreter]

CASES = list(PK.CASES)
ARRAYS = ("x", "counter")


def _eager_sequence(case: str) -> list[dict]:
    """The eager oracle: the step with the initial value, then with each value in turn, snapshots after each."""
    _, _, _, initial, values = PK.CASES[case]
    p, state, found = PK.param(case), PK.make_state(case), []
    for value in [initial, *values]:
        p.value = value
        PK.step(case, state, p)
        found.append(snapshot({n: state[n] for n in ARRAYS}))
    return found


def _capture(case: str):
    p, state = PK.param(case), PK.make_state(case)
    with wp.ScopedCapture(device=CPU, apic=True) as capture:
        PK.step(case, state, p)
    return capture.graph, state


@pytest.mark.parametrize("case", CASES)
def test_live_graph_follows_every_set_param(case):
    expected = _eager_sequence(case)
    graph, state = _capture(case)
    churn(generation=1)
    _, dtype, _, initial, values = PK.CASES[case]
    assert graph.params["p"]["kind"] == "scalar"
    for run, value in enumerate([initial, *values]):
        graph.set_param("p", value)
        wp.capture_launch(graph)
        got = snapshot({n: state[n] for n in ARRAYS})
        for name in ARRAYS:
            assert same_bits(expected[run][name], got[name]), f"{case}: replay after set_param({value!r}): {name}"
        back = graph.get_param("p")
        p = apic.param("check", dtype, value)  # the value as a kernel receives it
        assert np.asarray(back, dtype=p.spec.np_dtype).tobytes() == p.packed


_CHILD = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    import warp as wp
    wp.config.quiet = True
    import apic

    params = []
    for job in json.loads(sys.argv[1]):
        graph = wp.capture_load(job["path"])
        for run, value in enumerate(job["values"]):
            graph.set_param("p", value)
            wp.capture_launch(graph)
            for name in job["outputs"]:
                np.save(f"{job['out']}_{run}_{name}.npy", graph.param_numpy(name))
        params.append(sorted(graph.params))
    assert "param_kernels" not in sys.modules, "the child imported the kernels' module"
    print(json.dumps(params))
    """
)


def _json_value(value):
    return np.asarray(value).tolist() if isinstance(value, (np.ndarray, tuple)) else value


@pytest.fixture(scope="module")
def loaded_runs(tmp_path_factory):
    """Every case captured and saved, then loaded, set and replayed in one fresh process that never imports
    the kernels (one Python start for all cases: each loads its own file): per case, its job and the
    child's list of the loaded graph's parameters."""
    folder = tmp_path_factory.mktemp("loaded")
    jobs = {}
    for case in CASES:
        graph, state = _capture(case)
        stem = folder / case
        wp.capture_save(graph, stem, outputs={n: state[n] for n in ARRAYS})
        assert schema.HEADER.unpack_from(stem.with_suffix(".wrp").read_bytes())[1] == schema.PARAMS_VERSION
        _, _, _, initial, values = PK.CASES[case]
        jobs[case] = {"path": str(stem), "values": [_json_value(v) for v in [initial, *values]],
                      "outputs": list(ARRAYS), "out": str(folder / f"out_{case}")}
    result = fork_server.run([sys.executable, "-c", _CHILD, json.dumps(list(jobs.values()))], cwd=folder,
                             env=child_env(), capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    params = json.loads(result.stdout.strip().splitlines()[-1])
    return {case: (job, found) for (case, job), found in zip(jobs.items(), params)}


@pytest.mark.parametrize("case", CASES)
def test_loaded_graph_follows_every_set_param(case, loaded_runs):
    """Saved, then loaded in a fresh process that never imports the kernels: set, replay, compare."""
    expected = _eager_sequence(case)
    job, params = loaded_runs[case]
    assert params == sorted([*ARRAYS, "p"])
    for run in range(len(job["values"])):
        for name in ARRAYS:
            got = np.load(f"{job['out']}_{run}_{name}.npy")
            assert np.array_equal(expected[run][name], np.ascontiguousarray(got).view(np.uint8).reshape(-1)), (
                f"{case}: loaded replay {run}: {name}")


def test_packing_rounds_as_warp_packs_kernel_arguments():
    """``set_param``'s conversion gives the bytes Warp's own ``pack_arg`` gives, value by value."""
    from apic._compat import wp_context

    gen = np.random.default_rng(7)
    doubles = [*gen.standard_normal(200) * 10.0 ** gen.integers(-45, 40, 200), 1e-46, -0.0, 3.5e38, 65520.0,
               float("inf"), float("nan"), 1 / 3, 0.1]
    for dtype, values in ((wp.float32, doubles), (wp.float64, doubles), (wp.float16, doubles),
                          (wp.int8, [-128, 127, 5]), (wp.uint8, [0, 255]), (wp.int16, [-32768, 32767]),
                          (wp.uint16, [65535]), (wp.int32, [-(2**31), 2**31 - 1]), (wp.uint32, [2**32 - 1]),
                          (wp.int64, [-(2**63), 2**63 - 1]), (wp.uint64, [2**64 - 1, 2**63])):
        spec = apic.param("v", dtype, values[0]).spec
        for value in values:
            warp_bytes = bytes(wp_context.pack_arg(PK.axpy_f32, dtype, "v", value, wp.get_device(CPU)))
            assert apic.record.params.pack(spec, value, "test") == warp_bytes, (dtype.__name__, value)


def test_same_parameter_in_several_kernels_and_nested_graph():
    """One name in launches of two kernels, and a graph holding it launched inside another capture."""
    p = apic.param("gain", wp.float32, 2.0)
    a, b = wp.zeros(8, dtype=wp.float32, device=CPU), wp.zeros(8, dtype=wp.int32, device=CPU)
    ea, eb = wp.zeros(8, dtype=wp.float32, device=CPU), wp.zeros(8, dtype=wp.int32, device=CPU)
    q = apic.param("offset", wp.int32, 3)

    def step(x, y):
        wp.launch(PK.axpy_f32, dim=8, inputs=[x, p], device=CPU)
        wp.launch(PK.mix_i32, dim=8, inputs=[y, q], device=CPU)
        wp.launch(PK.axpy_f32, dim=8, inputs=[x, p], device=CPU)

    with wp.ScopedCapture(device=CPU, apic=True) as inner:
        step(a, b)
    with wp.ScopedCapture(device=CPU, apic=True) as outer:
        wp.capture_launch(inner.graph)
        wp.launch(PK.axpy_f32, dim=8, inputs=[a, p], device=CPU)
    graph = outer.graph
    assert sorted(n for n, d in graph.params.items() if d["kind"] == "scalar") == ["gain", "offset"]
    for gain, offset in ((2.0, 3), (0.75, -9), (-1.5, 40)):
        graph.set_param("gain", gain)
        graph.set_param("offset", offset)
        p.value, q.value = gain, offset
        step(ea, eb)
        wp.launch(PK.axpy_f32, dim=8, inputs=[ea, p], device=CPU)
        wp.capture_launch(graph)
        assert same_bits(ea.numpy(), a.numpy()) and same_bits(eb.numpy(), b.numpy())


@wp.kernel
def _loss(x: wp.array(dtype=wp.float32), k: wp.float32, out: wp.array(dtype=wp.float32)):
    i = wp.tid()
    wp.atomic_add(out, 0, k * x[i] * x[i])


def test_tape_backward_uses_the_set_value():
    """A parameter reaches the adjoint launch too (forward and adjoint blobs): gradients follow set_param."""
    k = apic.param("k", wp.float32, 0.5)

    def make():
        x = wp.array(np.linspace(-1, 1, 8, dtype=np.float32), dtype=wp.float32, device=CPU, requires_grad=True)
        out = wp.zeros(1, dtype=wp.float32, device=CPU, requires_grad=True)
        return x, out

    def step(x, out):
        tape = wp.Tape()
        with tape:
            wp.launch(_loss, dim=8, inputs=[x, k, out], device=CPU)
        tape.backward(loss=out)

    x, out = make()
    with wp.ScopedCapture(device=CPU, apic=True) as capture:
        step(x, out)
    graph = capture.graph
    launches = [op for op in graph.recording.ops if isinstance(op, apic.record.ops.Launch)]
    # the backward launch packs the forward arguments too (its scalar adjoints are zero, as Warp's Tape makes them)
    assert any(op.adj_args is not None and op.args.params for op in launches)
    for value in (0.5, -3.25, 1e-3):
        graph.set_param("k", value)
        k.value = value
        ex, eout = make()
        step(ex, eout)
        x.grad.zero_()
        out.zero_()
        out.grad.zero_()
        wp.capture_launch(graph)
        assert same_bits(ex.grad.numpy(), x.grad.numpy()) and same_bits(eout.numpy(), out.numpy())


def test_saved_value_is_the_value_set_on_the_live_graph(tmp_path):
    graph, state = _capture("vec3")
    graph.set_param("p", (4.0, 5.0, 6.0))
    wp.capture_save(graph, tmp_path / "g", outputs={"x": state["x"]})
    loaded = wp.capture_load(tmp_path / "g")
    assert loaded.get_param("p").tolist() == [4.0, 5.0, 6.0]
    described = loaded.params["p"]
    assert described["value"].tolist() == [4.0, 5.0, 6.0]
    assert {k: v for k, v in described.items() if k != "value"} == {"size": 12, "kind": "scalar", "dtype": "vec3f",
                                                                     "shape": ()}
    loaded.set_param("p", [1, 2, 3])
    wp.capture_save(loaded, tmp_path / "again")  # a loaded graph saved again keeps its parameters
    assert wp.capture_load(tmp_path / "again").get_param("p").tolist() == [1.0, 2.0, 3.0]


def test_warp_and_numpy_scalars_are_values():
    graph, _ = _capture("float32")
    for value in (wp.float32(0.1), np.float32(0.1), np.float64(0.1), wp.float64(0.1), 0.1):
        graph.set_param("p", value)
        assert graph.get_param("p") == float(np.float32(0.1)), value
    graph, _ = _capture("int32")
    for value in (wp.int32(-5), np.int64(-5), -5):
        graph.set_param("p", value)
        assert graph.get_param("p") == -5


def test_parameter_of_a_zero_size_launch_is_kept_without_slots(tmp_path):
    x = wp.zeros(4, dtype=wp.float32, device=CPU)
    with wp.ScopedCapture(device=CPU, apic=True) as capture:
        wp.launch(PK.axpy_f32, dim=0, inputs=[x, apic.param("p", wp.float32, 0.25)], device=CPU)
    graph = capture.graph
    assert graph.get_param("p") == 0.25 and "p" not in graph.program.param_offsets
    graph.set_param("p", 0.5)
    wp.capture_launch(graph)
    wp.capture_save(graph, tmp_path / "g")
    assert wp.capture_load(tmp_path / "g").get_param("p") == 0.5


def test_graph_without_parameters_keeps_its_format_version(tmp_path):
    x = wp.zeros(4, dtype=wp.float32, device=CPU)
    with wp.ScopedCapture(device=CPU, apic=True) as capture:
        wp.launch(PK.axpy_f32, dim=4, inputs=[x, 0.5], device=CPU)
    wp.capture_save(capture.graph, tmp_path / "g")
    assert schema.HEADER.unpack_from((tmp_path / "g.wrp").read_bytes())[1] == schema.BASE_VERSION


# --- misuse ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("case, value, message", [
    ("int32", 2**31, "out of range"),
    ("int32", 1.5, "expected an integer"),
    ("uint64", -1, "out of range"),
    ("float32", "0.1", "expected a number"),
    ("int32", wp.float32(1.0), "expected an integer"),
    ("float32", True, "expected a number"),
    ("vec3", [1.0, 2.0], "shape (2,)"),
    ("vec3", 1.0, "expected a vec3f"),
    ("vec3", wp.vec2(1.0, 2.0), "vec2f value"),
    ("mat22", [1, 2, 3, 4], "shape (4,)"),
    ("bool", 2, "expected a bool"),
])
def test_set_param_refuses_a_value_of_the_wrong_type_or_shape(case, value, message):
    graph, _ = _capture(case)
    before = graph.get_param("p")
    with pytest.raises(apic.BindingError, match=message.replace("(", r"\(").replace(")", r"\)")):
        graph.set_param("p", value)
    assert np.array_equal(graph.get_param("p"), before)  # nothing changed


def test_misuse_is_refused_naming_the_parameter(tmp_path):
    graph, state = _capture("float32")
    with pytest.raises(apic.BindingError, match="no parameter named 'q'"):
        graph.set_param("q", 1.0)
    with pytest.raises(apic.BindingError, match="returns its value"):
        graph.get_param("p", np.zeros(1, np.float32))
    with pytest.raises(apic.BindingError, match="no one address"):
        graph.get_param_ptr("p")
    with pytest.raises(apic.BindingError, match="an array binding cannot take its name"):
        wp.capture_save(graph, tmp_path / "g", inputs={"p": state["x"]})
    with pytest.raises(RuntimeError, match="only supported on loaded"):  # arrays: as upstream, loaded graphs only
        graph.set_param("x", state["x"])


def test_parameter_of_another_type_than_the_kernel_argument_is_refused():
    p = apic.param("p", wp.float64, 0.5)
    x = wp.zeros(4, dtype=wp.float32, device=CPU)
    with pytest.raises(apic.BindingError, match="argument 'p' is float32, but the named parameter 'p'"):
        wp.launch(PK.axpy_f32, dim=4, inputs=[x, p], device=CPU)  # eagerly too
    with pytest.raises(apic.BindingError, match="is float32"):
        with wp.ScopedCapture(device=CPU):
            wp.launch(PK.axpy_f32, dim=4, inputs=[x, p], device=CPU)


def test_one_name_has_one_type_and_one_value_per_capture():
    x32, x64 = wp.zeros(4, dtype=wp.float32, device=CPU), wp.zeros(4, dtype=wp.float64, device=CPU)
    with pytest.raises(apic.BindingError, match="used as float32 and as float64"):
        with wp.ScopedCapture(device=CPU):
            wp.launch(PK.axpy_f32, dim=4, inputs=[x32, apic.param("p", wp.float32, 1.0)], device=CPU)
            wp.launch(PK.axpy_f64, dim=4, inputs=[x64, apic.param("p", wp.float64, 1.0)], device=CPU)
    p = apic.param("p", wp.float32, 1.0)
    with pytest.raises(apic.CaptureError, match="two values"):
        with wp.ScopedCapture(device=CPU):
            wp.launch(PK.axpy_f32, dim=4, inputs=[x32, p], device=CPU)
            p.value = 2.0
            wp.launch(PK.axpy_f32, dim=4, inputs=[x32, p], device=CPU)


@wp.struct
class _Holder:
    p: wp.float32


def test_unsupported_places_are_refused():
    with pytest.raises(TypeError, match="Param"):  # a struct is packed by value: Warp refuses the placeholder
        _Holder().p = apic.param("p", wp.float32, 1.0)
    with pytest.raises(apic.BindingError, match="scalar, vector or matrix value"):
        apic.param("p", wp.array(dtype=float), 1.0)
    with pytest.raises(apic.BindingError, match="not a Warp value type"):
        apic.param("p", str, "1.0")
    with pytest.raises(apic.BindingError, match="not"):
        apic.param("s", _Holder, _Holder())
    with pytest.raises(apic.BindingError, match="non-empty string"):
        apic.param("", wp.float32, 1.0)
    p = apic.param("p", wp.float32, 1.0)
    x = wp.zeros(4, dtype=wp.float32, device=CPU)
    cmd = wp.launch(PK.axpy_f32, dim=4, inputs=[x, p], device=CPU, record_cmd=True)
    cmd.launch()  # eagerly: the value it was made with
    with pytest.raises(apic.UnsupportedOperationError, match="named parameter 'p'"):
        with wp.ScopedCapture(device=CPU):
            cmd.launch()


def test_eager_launch_is_the_launch_of_the_value():
    """Outside a capture a parameter is its value: the same bytes as passing the value itself."""
    for case in ("float32", "vec3", "mat22", "uint64"):
        kernel, dtype, _, initial, values = PK.CASES[case]
        a, b = PK.make_state(case), PK.make_state(case)
        for value in [initial, *values]:
            wp.launch(kernel, dim=PK.N, inputs=[a["x"], apic.param("p", dtype, value)], device=CPU)
            wp.launch(kernel, dim=PK.N, inputs=[b["x"], dtype(*np.asarray(value, dtype=object).flat)
                                              if hasattr(dtype, "_shape_") else value], device=CPU)
            assert same_bits(a["x"].numpy(), b["x"].numpy()), (case, value)


def test_uninstall_restores_pack_arg_and_install_routes_it_again():
    code = textwrap.dedent(
        """
        import numpy as np, warp as wp
        wp.config.quiet = True
        import apic
        from warp._src import context as ctx
        original = ctx.pack_arg
        p = apic.param("p", wp.float32, 0.5)
        assert ctx.pack_arg is not original
        apic.uninstall()
        assert ctx.pack_arg is original
        apic.install()
        import param_kernels as PK
        x = wp.ones(4, dtype=wp.float32, device="cpu")
        wp.launch(PK.axpy_f32, dim=4, inputs=[x, p], device="cpu")
        with wp.ScopedCapture(device="cpu") as capture:
            wp.launch(PK.axpy_f32, dim=4, inputs=[x, p], device="cpu")
        capture.graph.set_param("p", 2.0)
        wp.capture_launch(capture.graph)
        assert x.numpy().tolist() == [1.0, 2.5, 4.0, 5.5], x.numpy()  # eagerly x*0.5 + i/2, then x*2 + i/2
        print("OK")
        """
    )
    env = child_env()
    env["PYTHONPATH"] = os.pathsep.join([TESTS, env["PYTHONPATH"]])
    result = fork_server.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0 and result.stdout.strip().endswith("OK"), result.stderr


# --- the file ---------------------------------------------------------------------------------------
def test_reader_refuses_inconsistent_parameter_entries(tmp_path):
    import msgpack
    import hashlib

    graph, state = _capture("float32")
    wp.capture_save(graph, tmp_path / "g")
    data = (tmp_path / "g.wrp").read_bytes()
    doc = msgpack.unpackb(data[56:], raw=False)

    def encode(body, version=schema.PARAMS_VERSION):
        raw = msgpack.packb(body, use_bin_type=True)
        return schema.HEADER.pack(schema.MAGIC, version, 0, len(raw), hashlib.sha256(raw).digest()) + raw

    assert len(reader.read(encode(doc)).recording.params) == 1
    old = dict(doc, format_version=2)
    with pytest.raises(apic.FormatError, match="need version 3"):
        reader.read(encode(old, 2))
    launch = next(op for op in doc["ops"] if op["kind"] == 1 and op["args"].get("params"))
    at, index = launch["args"]["params"][0]
    launch["args"]["params"][0] = [0, index]  # over the array descriptor
    with pytest.raises(apic.FormatError, match="overlap an array descriptor"):
        reader.read(encode(doc))
    launch["args"]["params"][0] = [at, 0]  # not a scalar binding? (0 is the scalar itself: use an unknown index)
    launch["args"]["params"][0] = [at, 9]
    with pytest.raises(apic.FormatError, match="not a named scalar parameter"):
        reader.read(encode(doc))
    launch["args"]["params"][0] = [at, index]
    for np_dtype in (">f4", "<c8", "<f16"):
        changed = dict(doc, bindings=[dict(b) for b in doc["bindings"]])
        changed["bindings"][index].update(np_dtype=np_dtype)
        with pytest.raises(apic.FormatError, match="np_dtype"):
            reader.read(encode(changed))
    doc["bindings"][index]["value"] = b"\0\0\0\0"
    with pytest.raises(apic.FormatError, match="not the value of parameter 'p'"):
        reader.read(encode(doc))


def test_cli_replay_set(tmp_path):
    """``python -m apic replay F.wrp --set p=...`` (vectors as comma-separated components) == eager."""
    case = "vec3"
    expected = _eager_sequence(case)
    graph, state = _capture(case)
    wp.capture_save(graph, tmp_path / "g", outputs={"x": state["x"]})
    _, _, _, initial, values = PK.CASES[case]
    value = values[0]
    # one replay with the initial value, then one with the first value: as the eager sequence's first two steps
    first = run_cli(["replay", "g.wrp", "--output", "x=x0.npy"], tmp_path)
    assert first.returncode == 0, first.stderr
    text = ",".join(repr(float(v)) for v in np.asarray(value, dtype=float))
    second = run_cli(["replay", "g.wrp", "--set", f"p={text}", "--input", "x=x0.npy", "--output", "x=x1.npy"], tmp_path)
    assert second.returncode == 0, second.stderr
    assert np.array_equal(expected[1]["x"], np.load(tmp_path / "x1.npy").view(np.uint8).reshape(-1))
    for bad, message in (("p=1,2", "takes 3 comma-separated components"), ("q=1", "no parameter named 'q'"),
                         ("p=a,b,c", "expected numbers"), ("p", "NAME=VALUE")):
        refused = run_cli(["replay", "g.wrp", "--set", bad], tmp_path)
        assert refused.returncode != 0 and message in refused.stderr, refused.stderr
