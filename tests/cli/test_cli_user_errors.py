"""Every user mistake on the command line ends in one ``error:`` line and exit status 2, never a traceback.

Each subcommand's every option is tried, as a careless user would, with every kind of name (an array
parameter, a scalar parameter, an unknown name, an empty one) and value (malformed, out of range, a file
that is missing, a folder, a FIFO, a device node, not a .npy, a .npz, a .npy of the wrong dtype or shape
or byte order, a hostile .npy header claiming 10^12 elements, a truncated one). Two fresh processes answer
them all (``persist_helpers.run_cli_each``: each mistake with its own stdout and stderr, taken at the file
descriptors); a sample of them also runs as ``python -m apic`` processes of their own, which must end the same.
"""

from __future__ import annotations

import os
import re
import struct
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import cli_kernels as ck
from persist_helpers import run_cli, run_cli_each

pytestmark = [pytest.mark.install]

BIG_INT = "9" * 5000  # Python refuses to parse past 4,300 digits: a ValueError the CLI must not show raw

# (arguments, a regular expression the error line must match); {g} is the saved graph, {t} the test's folder
MISTAKES = [
    # names: an array parameter where a scalar one goes and the reverse, unknown and empty names
    (["replay", "{g}", "--input", "dt={t}/x_ok.npy"], r"'dt' is a named scalar parameter .*--set dt=VALUE"),
    (["replay", "{g}", "--output", "g={t}/o.npy"], r"'g' is a named scalar parameter .*--set g=VALUE"),
    (["replay", "{g}", "--set", "x=1"], r"'x' is an array parameter \(float32 \(8,\)\).*--input x=FILE.npy"),
    (["replay", "{g}", "--set", "pairs=1"], r"'pairs' is an array parameter"),
    (["replay", "{g}", "--set", "nope=1"], r"no parameter named 'nope' \(its array parameters: 'pairs', 'v', "),
    (["replay", "{g}", "--input", "nope={t}/x_ok.npy"], r"no parameter named 'nope'"),
    (["replay", "{g}", "--output", "nope={t}/o.npy"], r"no parameter named 'nope'"),
    (["replay", "{g}", "--input", "x"], r"--input expects NAME=FILE.npy, got 'x'"),
    (["replay", "{g}", "--input", "={t}/x_ok.npy"], r"--input expects NAME=FILE.npy"),
    (["replay", "{g}", "--output", "x="], r"--output expects NAME=FILE.npy"),
    (["replay", "{g}", "--set", "dt"], r"--set expects NAME=VALUE"),
    (["replay", "{g}", "--set", "=1"], r"--set expects NAME=VALUE"),
    # --input files
    (["replay", "{g}", "--input", "x={t}/missing.npy"], r"cannot read the file: No such file"),
    (["replay", "{g}", "--input", "x={t}/folder"], r"cannot read the file: Is a directory"),
    (["replay", "{g}", "--input", "x={t}/fifo.npy"], r"cannot read the file: Not a regular file"),
    (["replay", "{g}", "--input", "x={t}/zero.npy"], r"cannot read the file: Not a regular file"),
    (["replay", "{g}", "--input", "x={t}/text.npy"], r"not a \.npy file"),
    (["replay", "{g}", "--input", "x={t}/empty.npy"], r"not a \.npy file"),
    (["replay", "{g}", "--input", "x={t}/archive.npz"], r"is a \.npz archive"),
    (["replay", "{g}", "--input", "x={t}/objects.npy"], r"holds object \(2,\), the parameter is float32 \(8,\)"),
    (["replay", "{g}", "--input", "x={t}/x_f64.npy"], r"holds float64 \(8,\), the parameter is float32 \(8,\)"),
    (["replay", "{g}", "--input", "x={t}/x_column.npy"], r"holds float32 \(8, 1\)"),
    (["replay", "{g}", "--input", "x={t}/x_big_endian.npy"], r"holds >f4 \(8,\)"),
    (["replay", "{g}", "--input", "v={t}/x_ok.npy"], r"holds float32 \(8,\), the parameter is float32 \(8, 3\)"),
    (["replay", "{g}", "--input", "x={t}/claims_1e12.npy"], r"holds float32 \(1000000000000,\)"),
    (["replay", "{g}", "--input", "x={t}/truncated.npy"], r"truncated"),
    (["replay", "{g}", "--input", "x={t}/trailing.npy"], r"data after the array"),
    (["replay", "{g}", "--input", "x={t}/bad_descr.npy"], r"not a \.npy file"),
    (["replay", "{g}", "--input", "x={t}/code_header.npy"], r"not a \.npy file"),
    (["replay", "{g}", "--input", "pairs={t}/x_ok.npy"], r"no NumPy equivalent"),
    # --output paths, checked before anything runs
    (["replay", "{g}", "--output", "pairs={t}/o.npy"], r"no NumPy equivalent"),
    (["replay", "{g}", "--output", "x={t}/no/such/folder/o.npy"], r"the folder .* does not exist"),
    (["replay", "{g}", "--output", "x={t}/folder"], r"is a folder"),
    # --set values
    (["replay", "{g}", "--set", "dt=abc"], r"expected numbers for a float32 parameter"),
    (["replay", "{g}", "--set", "dt=1,2"], r"a float32 parameter takes one number, got 2"),
    (["replay", "{g}", "--set", "n=1.5"], r"expected integers for a int32 parameter"),
    (["replay", "{g}", "--set", "n=99999999999"], r"out of range for a 32-bit signed integer"),
    (["replay", "{g}", "--set", f"n={BIG_INT}"], r"a component of 5000 characters is not a int32 value"),
    (["replay", "{g}", "--set", "big=-1"], r"out of range for a 64-bit unsigned integer"),
    (["replay", "{g}", "--set", "flag=2"], r"expected true/false"),
    (["replay", "{g}", "--set", "flag=yes"], r"expected true/false"),
    (["replay", "{g}", "--set", "g=1,2"], r"a vec3f parameter takes 3 comma-separated components, got 2"),
    (["replay", "{g}", "--set", "g=1,,3"], r"expected numbers"),
    (["replay", "{g}", "--set", "m=1,2,3"], r"a mat22f parameter takes 4 comma-separated components, got 3"),
    # the other options
    (["replay", "{g}", "--iters", "-1"], r"argument --iters: must be between 0 and"),
    (["replay", "{g}", "--iters", "abc"], r"argument --iters: expected an integer"),
    (["replay", "{g}", "--iters", "1" + "0" * 25], r"argument --iters: must be between 0 and"),
    (["replay", "{g}", "--threads", "0"], r"argument --threads: must be 1 or more"),
    (["replay", "{g}", "--device", "bogus"], r"--device bogus"),
    (["replay", "{g}", "--device", "cuda:7"], r"--device cuda:7"),
    (["replay", "{g}", "--device", ""], r"--device"),
    (["replay", "{g}", "--profile-plot", "{t}/no/such/folder/p.png"], r"--profile-plot .* does not exist"),
    (["replay", "{g}", "--profile-plot", "{t}/folder"], r"--profile-plot .*is a folder"),
    (["replay", "{g}", "--no-such-option"], r"unrecognized arguments: --no-such-option"),
    (["replay"], r"the following arguments are required: path"),
    # the graph file itself
    (["replay", "{t}/missing.wrp"], r"No such file"),
    (["replay", "{t}/x_ok.npy"], r"is not a saved graph: name its \.wrp file"),
    (["replay", "{t}/garbage.wrp"], r"apic graph file"),
    (["replay", "{t}/truncated.wrp"], r"truncated apic graph file"),
    (["replay", "{t}/fifo.wrp"], r"Not a regular file"),
    (["replay", "{t}/zero.wrp"], r"Not a regular file"),
    (["replay", "{t}/folder.wrp"], r"Is a directory"),
    (["inspect", "{t}/missing.wrp"], r"cannot read .*missing\.wrp: No such file"),
    (["inspect", "{t}/x_ok.npy"], r"is not a saved graph"),
    (["inspect", "{t}/garbage.wrp"], r"apic graph file"),
    (["inspect", "{t}/fifo.wrp"], r"Not a regular file"),
    (["inspect", "{t}/zero.wrp"], r"Not a regular file"),
    (["inspect", "{t}/folder.wrp"], r"Is a directory"),
    (["inspect", "{g}", "--dot", "{t}/no/such/folder/g.dot"], r"--dot .* does not exist"),
    (["inspect", "{g}", "--dot", "{t}/folder"], r"--dot .*is a folder"),
    (["inspect", "{g}", "--png", "{t}/no/such/folder/g.png"], r"--png .* does not exist"),
    (["inspect", "{g}", "--json", "--bogus"], r"unrecognized arguments: --bogus"),
    # demo and bench: refused before the (long) work
    (["demo", "--frames", "0"], r"argument --frames: must be between 1 and"),
    (["demo", "--frames", "-1"], r"argument --frames"),
    (["demo", "--particles", "1"], r"argument --particles: must be between 2 and"),
    (["demo", "--particles", "1000000000"], r"argument --particles"),
    (["demo", "--substeps", "0"], r"argument --substeps: must be between 1 and"),
    (["demo", "--frames", "x"], r"argument --frames: expected an integer"),
    (["bench", "--json", "{t}/no/such/folder/b.json"], r"--json .* does not exist"),
    (["bench", "--markdown", "{t}/folder"], r"--markdown .*is a folder"),
    (["bench", "--plot", "{t}/no/such/folder/b.png"], r"--plot .* does not exist"),
    ([], r"the following arguments are required: command"),
    (["nope"], r"invalid choice: 'nope'"),
]


def _npy_with_header(path, header: str, body: bytes) -> None:
    """A .npy file (format 1.0) with exactly ``header`` as its header dict text and ``body`` after it."""
    text = header + " " * (117 - len(header)) + "\n"
    path.write_bytes(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(text)) + text.encode("latin1") + body)


def _files(t, graph) -> None:
    """The files the mistakes name."""
    np.save(t / "x_ok.npy", np.zeros(ck.N, np.float32))
    np.save(t / "x_f64.npy", np.zeros(ck.N, np.float64))
    np.save(t / "x_column.npy", np.zeros((ck.N, 1), np.float32))
    np.save(t / "x_big_endian.npy", np.zeros(ck.N, ">f4"))
    np.save(t / "objects.npy", np.array([1, "a"], dtype=object), allow_pickle=True)
    np.savez(t / "archive.npz", x=np.zeros(ck.N, np.float32))
    (t / "text.npy").write_text("not numpy")
    (t / "empty.npy").write_bytes(b"")
    (t / "folder").mkdir()
    (t / "folder.wrp").mkdir()
    os.mkfifo(t / "fifo.npy")
    os.mkfifo(t / "fifo.wrp")
    os.symlink("/dev/zero", t / "zero.npy")
    os.symlink("/dev/zero", t / "zero.wrp")
    f4 = "{'descr': '<f4', 'fortran_order': False, 'shape': (%s,), }"
    _npy_with_header(t / "claims_1e12.npy", f4 % "1000000000000", bytes(16))
    _npy_with_header(t / "truncated.npy", f4 % ck.N, bytes(4 * ck.N - 4))
    _npy_with_header(t / "trailing.npy", f4 % ck.N, bytes(4 * ck.N + 8))
    _npy_with_header(t / "bad_descr.npy", "{'descr': 5, 'fortran_order': False, 'shape': (8,), }", bytes(32))
    _npy_with_header(t / "code_header.npy", "__import__('os').system('false')", bytes(32))
    (t / "garbage.wrp").write_bytes(b"this is not a graph file at all, just text" * 4)
    (t / "truncated.wrp").write_bytes(open(graph, "rb").read()[:-10])


@pytest.fixture(scope="module")
def graph(tmp_path_factory):
    return ck.save(str(tmp_path_factory.mktemp("cli_errors") / "g"))


def _error_lines(stderr: str) -> list[str]:
    # Warp's native library prints its own CUDA warnings on a machine without a driver: not the CLI's
    return [line for line in stderr.splitlines() if not line.startswith("Warp CUDA")]


def _commands(tmp_path, graph) -> list[list[str]]:
    return [[a.format(g=graph, t=tmp_path) for a in args] for args, _ in MISTAKES]


def test_every_user_mistake_is_one_error_line(graph, tmp_path):
    _files(tmp_path, graph)
    commands = _commands(tmp_path, graph)
    halves = [commands[: len(commands) // 2], commands[len(commands) // 2:]]
    with ThreadPoolExecutor(2) as pool:  # two children, side by side
        results = [r for half in pool.map(lambda cs: run_cli_each(cs, cwd=tmp_path), halves) for r in half]
    failures = []
    for (args, pattern), (status, stdout, stderr) in zip(MISTAKES, results):
        lines = _error_lines(stderr)
        ok = (status == 2 and "Traceback" not in stderr and len(lines) == 1
              and lines[0].startswith("error: ") and re.search(pattern, lines[0]) and not stdout)
        if not ok:
            failures.append(f"{' '.join(args)[:120]}\n  exit {status}, stdout {stdout[-300:]!r}\n"
                            f"  stderr {stderr[-1500:]!r}")
    assert not failures, f"{len(failures)} of {len(MISTAKES)} mistakes:\n" + "\n".join(failures)


SAMPLE = 7  # every 7th mistake (12 of them, of every kind of value) also as a process of its own


def test_a_mistake_ends_a_process_of_its_own_as_it_ends_among_others(graph, tmp_path):
    """``python -m apic`` (the entry point, a fresh interpreter per mistake) ends as the shared child did."""
    _files(tmp_path, graph)
    commands = _commands(tmp_path, graph)[::SAMPLE]
    shared = run_cli_each(commands, cwd=tmp_path)
    with ThreadPoolExecutor(2) as pool:
        own = list(pool.map(lambda c: run_cli(c, cwd=tmp_path, timeout=120), commands))
    for command, shared_result, done in zip(commands, shared, own):
        assert _seen(done.returncode, done.stdout, done.stderr) == _seen(*shared_result), " ".join(command)[:120]


def _seen(status: int, stdout: str, stderr: str) -> tuple:
    """How a mistake ended, as the user sees it (an object's address in a message differs between processes)."""
    return status, stdout, [re.sub(r"0x[0-9a-f]+", "0x...", line) for line in _error_lines(stderr)]


def test_input_files_are_read_as_saved_and_outputs_written_where_named(graph, tmp_path):
    """What the checks must still let through: a Fortran-ordered .npy, an output path without ``.npy``."""
    v = np.arange(ck.N * 3, dtype=np.float32).reshape(ck.N, 3)
    np.save(tmp_path / "v.npy", np.asfortranarray(v))
    done = run_cli(["replay", graph, "--iters", "0", "--input", f"v={tmp_path / 'v.npy'}",
                    "--output", f"v={tmp_path / 'v_out'}"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert not (tmp_path / "v_out.npy").exists()
    assert np.array_equal(np.load(tmp_path / "v_out"), v)
