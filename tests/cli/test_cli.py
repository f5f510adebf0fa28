"""``python -m apic replay`` and ``python -m apic inspect``, run as a user would, in fresh processes."""

from __future__ import annotations

import json
import re
import struct

import numpy as np
import pytest
import warp as wp

import apic

import persist_kernels as pk
from wrp_helpers import save_sim
from persist_helpers import run_cli, run_cli_each, same_bits

pytestmark = [pytest.mark.warp_version, pytest.mark.interpreter, pytest.mark.install]

ITERS = 3


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    stem = save_sim(tmp_path_factory.mktemp("cli"))
    return stem.with_suffix(".wrp")


def eager(iters: int, overrides: dict | None = None) -> pk.Sim:
    sim = pk.Sim(0)
    for name, values in (overrides or {}).items():
        sim.a[name].assign(values)
    for _ in range(iters):
        sim.step()
    return sim


@pytest.mark.parametrize("threads", [1, 3])
def test_replay_outputs_equal_eager(saved, tmp_path, threads):
    outputs = ["x", "energy", "grid", "acc", "w_adj"]
    args = ["replay", str(saved), "--iters", str(ITERS), "--threads", str(threads)]
    for name in outputs:
        args += ["--output", f"{name}={tmp_path / name}.npy"]
    done = run_cli(args, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""
    expected = eager(ITERS)
    for name in outputs:
        assert same_bits(np.load(tmp_path / f"{name}.npy"), expected.numpy(name)), name


def test_replay_with_inputs_and_time(saved, tmp_path):
    x = np.random.default_rng(3).standard_normal((pk.N, 3)).astype(np.float32)
    np.save(tmp_path / "x_in.npy", x)
    done = run_cli(["replay", str(saved), "--device", "cpu", "--iters", "2", "--input", f"x={tmp_path / 'x_in.npy'}",
                    "--output", f"x_prev={tmp_path / 'x_prev.npy'}", "--time"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "replayed 2 iteration(s) of" in done.stdout and "us per iteration" in done.stdout
    assert same_bits(np.load(tmp_path / "x_prev.npy"), eager(2, {"x": x}).numpy("x_prev"))


def test_replay_zero_iterations_reads_saved_state(saved, tmp_path):
    done = run_cli(["replay", str(saved), "--iters", "0", "--output", f"x={tmp_path / 'x.npy'}"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert same_bits(np.load(tmp_path / "x.npy"), pk.Sim(0).numpy("x"))


def test_inspect_text(saved, tmp_path):
    done = run_cli(["inspect", str(saved)], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert f"written by: apic {apic.__version__}, warp-lang {wp.config.version}" in out
    assert "loads here: yes" in out
    assert "modules (1):" in out and "persist_kernels" in out and " ok" in out
    assert "kernels (7):" in out and "square (backward" in out
    assert "graph-owned" in out and "vec3f (32,)" in out
    assert "x: input vec3f (32,)" in out and "grid: output float32 (8, 6)" in out
    assert "ops (17: alloc 1, array_copy 1, array_fill 1, launch 7, memcpy 3, memset 3, memtile 1; " in out
    assert "launch diffuse dim=(8, 6)" in out


def test_inspect_json(saved, tmp_path):
    done = run_cli(["inspect", str(saved), "--json"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    info = json.loads(done.stdout)
    assert info["format_version"] == 1 and info["writer"]["warp"] == wp.config.version
    assert info["op_counts"]["launch"] == 7 and info["op_count"] == 17 == sum(op["count"] for op in info["ops"])
    assert {b["name"]: b["shape"] for b in info["bindings"]}["grid"] == [8, 6]
    assert info["modules"][0]["status"] == "ok"
    assert sum(r["owned"] for r in info["regions"]) == 1
    assert info["loads_here"]["ok"] is True


USER_MISTAKES = [
    (["replay", "missing.wrp"], "No such file"),
    (["inspect", "missing.wrp"], "No such file"),
    (["replay", "{saved}", "--input", "x"], "expects NAME=FILE.npy"),
    (["replay", "{saved}", "--input", "nope={tmp}/x.npy"], "no parameter named 'nope'"),
    (["replay", "{saved}", "--output", "nope={tmp}/o.npy"], "no parameter named 'nope'"),
    (["replay", "{saved}", "--input", "x={tmp}/wrong.npy"], "holds float64 \\(32, 3\\), the parameter is float32"),
    (["replay", "{saved}", "--input", "x={tmp}/garbage.npy"], "not a .npy file"),
    (["replay", "{saved}", "--iters", "-1"], "argument --iters: must be between 0 and"),
    (["replay", "{saved}", "--device", "cuda:7"], "--device cuda:7"),
    (["replay", "{tmp}/corrupt.wrp"], "truncated apic graph file"),
    (["inspect", "{tmp}/corrupt.wrp"], "truncated apic graph file"),
    (["replay", "{tmp}/upstream.wrp"], "upstream NVIDIA Warp graph file"),
]


@pytest.fixture(scope="module")
def mistakes(saved, tmp_path_factory) -> list:
    """Every USER_MISTAKES command run in one fresh process (none writes a file another reads)."""
    tmp = tmp_path_factory.mktemp("mistakes")
    np.save(tmp / "wrong.npy", np.zeros((pk.N, 3)))
    (tmp / "garbage.npy").write_bytes(b"not numpy")
    (tmp / "corrupt.wrp").write_bytes(saved.read_bytes()[:-10])
    (tmp / "upstream.wrp").write_bytes(b"WRP1" + struct.pack("<I", 18) + bytes(32))
    return run_cli_each([[a.format(saved=saved, tmp=tmp) for a in args] for args, _ in USER_MISTAKES], cwd=tmp)


@pytest.mark.parametrize("case", range(len(USER_MISTAKES)),
                         ids=[" ".join(a[:2]) + "|" + m[:20] for a, m in USER_MISTAKES])
def test_user_mistakes_exit_2_without_traceback(mistakes, case):
    status, stdout, stderr = mistakes[case]
    assert status == 2, stdout + stderr
    assert "Traceback" not in stderr
    assert stderr.count("error:") == 1
    assert re.search(USER_MISTAKES[case][1], stderr), stderr


def test_bad_arguments_are_argparse_errors(tmp_path):
    done = run_cli(["replay"], cwd=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr == "error: the following arguments are required: path (see python -m apic replay --help)\n"
