"""The command line's last edges (issue 33, class 7): every error is one ``error:`` line with exit status 2.

* a CUDA graph given to ``replay`` on a machine without a GPU (a ``ValueError`` of the loader, before);
* an exception no apic code words (Python's, Warp's, a library's): one line naming its type, the traceback
  only with ``APIC_TRACEBACK=1``;
* output paths the system will not open for writing (here: a name too long) refused before the work,
  ``bench``'s included (it ran its whole suite first);
* an I/O error while writing an output (a file-size limit, as a full disk) names the option and the file.

Real processes (``python -m apic``), real files; the CUDA file is written by apic's writer from a
hand-made recording (no GPU or compiler needed).
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import time

import pytest

import cli_kernels as ck
from persist_helpers import child_env, run_cli

pytestmark = [pytest.mark.warp_version, pytest.mark.install]

LONG = "n" * 300  # a file name longer than any file system takes (255 bytes): ENAMETOOLONG on open


@pytest.fixture(scope="module")
def graph(tmp_path_factory):
    return ck.save(str(tmp_path_factory.mktemp("cli_edges") / "g"))


def _one_error_line(done, pattern: str) -> str:
    import re

    lines = [line for line in done.stderr.splitlines() if not line.startswith("Warp CUDA")]
    assert done.returncode == 2, (done.returncode, done.stdout[-500:], done.stderr[-2000:])
    assert "Traceback" not in done.stderr and len(lines) == 1 and lines[0].startswith("error: "), done.stderr[-2000:]
    assert re.search(pattern, lines[0]), lines[0]
    assert not done.stdout, done.stdout[-500:]
    return lines[0]


def test_a_cuda_graph_replayed_here_is_one_error_line(tmp_path):
    from apic.format import writer
    from test_cuda_offline import _document

    doc, images = _document("// PTX text: not read, the load stops before the modules\n")
    (tmp_path / "c.wrp").write_bytes(writer.encode(doc))
    (tmp_path / "c_modules").mkdir()
    for name, data in images.items():
        (tmp_path / "c_modules" / name).write_bytes(data)
    done = run_cli(["replay", str(tmp_path / "c.wrp")], cwd=tmp_path, timeout=300)
    _one_error_line(done, r"error: cannot load .*c\.wrp: this is a CUDA graph and replays on a CUDA device")


def test_an_error_apic_does_not_word_is_one_line_naming_its_type(graph, tmp_path, monkeypatch):
    # A live graph's backend is chosen at its first replay (the demo's), a loaded graph's at load: an unknown
    # APIC_REPLAY is a ValueError apic does not word in the first case and a failed load in the second.
    monkeypatch.setenv("APIC_REPLAY", "bogus")
    done = run_cli(["demo"], cwd=tmp_path, timeout=300)
    _one_error_line(done, r"error: ValueError: APIC_REPLAY='bogus': expected .* \(run with APIC_TRACEBACK=1 for a "
                          r"traceback\)")
    done = run_cli(["replay", graph], cwd=tmp_path, timeout=300)
    _one_error_line(done, r"error: cannot load .*g\.wrp: APIC_REPLAY='bogus': expected ")
    monkeypatch.setenv("APIC_TRACEBACK", "1")
    done = run_cli(["demo"], cwd=tmp_path, timeout=300)
    assert done.returncode == 1 and "Traceback" in done.stderr and "ValueError: APIC_REPLAY" in done.stderr


@pytest.mark.parametrize("args", [
    ["bench", "--quick", "--no-progress", "--json", "{t}/" + LONG],
    ["bench", "--quick", "--no-progress", "--markdown", "{t}/" + LONG + ".md"],
    ["replay", "{g}", "--output", "x={t}/" + LONG + ".npy"],
    ["replay", "{g}", "--profile-plot", "{t}/" + LONG + ".png"],
    ["inspect", "{g}", "--dot", "{t}/" + LONG + ".dot"],
])
def test_an_output_the_system_will_not_open_is_refused_before_the_work(graph, tmp_path, args):
    if "--profile-plot" in args:
        pytest.importorskip("matplotlib")
    start = time.perf_counter()
    done = run_cli([a.format(g=graph, t=tmp_path) for a in args], cwd=tmp_path, timeout=600)
    option = next(a for a in args if a.startswith("--") and a != "--quick" and a != "--no-progress")
    _one_error_line(done, rf"error: {option} .*: cannot write the file: File name too long")
    assert sorted(p.name for p in tmp_path.iterdir()) == [], "the probe left a file behind"
    assert time.perf_counter() - start < 60, "refused only after the work"


def test_a_write_to_a_full_device_names_the_file(graph, tmp_path):
    """``--output`` to ``/dev/full``, where every write fails with ENOSPC, as on a full disk."""
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full here")
    done = run_cli(["replay", graph, "--output", "x=/dev/full"], cwd=tmp_path, timeout=300)
    _one_error_line(done, r"error: --output x=/dev/full: cannot write the file: No space left on device")


def test_a_write_cut_short_by_a_file_size_limit_names_the_file(graph, tmp_path):
    """Under a file-size limit smaller than the .npy, the output is not left cut short with exit status 0
    (a buffered write let it be); on warp-lang 1.12, which loads module objects from files, the load
    stages the object first, and that write is the one refused, named as such."""
    out = tmp_path / "x_out.npy"

    def limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (150, 150))  # the .npy of 8 float32 is 160 bytes

    done = subprocess.run([sys.executable, "-m", "apic", "replay", graph, "--output", f"x={out}"], cwd=tmp_path,
                          env=child_env(), capture_output=True, text=True, timeout=300, preexec_fn=limit)
    _one_error_line(done, rf"error: (--output x={out}: cannot write the file|\[Errno 27\] cannot stage the module "
                          rf"object '\w+' in the temporary folder .* for Warp's loader .*): File too large")
