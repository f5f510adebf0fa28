"""Every output option refuses a file that opens but cannot be written, before any work.

``/dev/full`` opens for writing and fails every write (ENOSPC): ``bench`` used to accept it, run its whole
suite, print the report, and only then fail on ``--json``. Each output option of each subcommand
(``bench --json/--markdown/--plot``, ``replay --output/--profile-plot``, ``inspect --dot/--png``) is given
``/dev/full`` and must end in one ``error:`` line naming the option and "No space left on device", with
nothing on stdout (no report: nothing ran). A path that can be written (``/dev/null``, a new file) is
still taken, and the check leaves no file behind.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import pytest

import cli_kernels as ck
from persist_helpers import run_cli

pytestmark = [pytest.mark.install]

FULL = "/dev/full"

CASES = [
    ["bench", "--quick", "--no-progress", "--json", FULL],
    ["bench", "--quick", "--no-progress", "--markdown", FULL],
    ["bench", "--quick", "--no-progress", "--plot", FULL],
    ["replay", "{g}", "--output", f"v={FULL}"],
    ["replay", "{g}", "--profile", "--profile-plot", FULL],
    ["inspect", "{g}", "--dot", FULL],
    ["inspect", "{g}", "--png", FULL],
]


@pytest.fixture(scope="module")
def graph(tmp_path_factory):
    return ck.save(str(tmp_path_factory.mktemp("probe") / "g"))


@pytest.mark.skipif(not os.path.exists(FULL), reason="this system has no /dev/full")
def test_an_output_that_refuses_writes_is_refused_before_any_work(graph, tmp_path):
    def attempt(args):
        return run_cli([a.format(g=graph) for a in args], cwd=tmp_path, timeout=300)

    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(attempt, CASES))
    failures = []
    for args, done in zip(CASES, results):
        lines = [line for line in done.stderr.splitlines() if not line.startswith("Warp CUDA")]
        option = next(a for a in args if a.startswith("--") and a not in ("--quick", "--no-progress", "--profile"))
        matplotlib_missing = option in ("--plot", "--profile-plot") and "needs matplotlib" in done.stderr
        ok = (done.returncode == 2 and len(lines) == 1 and not done.stdout and "Traceback" not in done.stderr
              and (matplotlib_missing or (lines[0].startswith(f"error: {option} ")
                                          and "cannot write the file: No space left on device" in lines[0])))
        if not ok:
            failures.append(f"{' '.join(args)}: exit {done.returncode}, stdout {done.stdout[-300:]!r}, "
                            f"stderr {done.stderr[-800:]!r}")
    assert not failures, "\n".join(failures)


def test_writable_outputs_are_still_taken_and_the_probe_leaves_nothing(graph, tmp_path):
    done = run_cli(["inspect", graph, "--dot", os.devnull], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    out = tmp_path / "v.npy"
    done = run_cli(["replay", graph, "--iters", "0", "--output", f"v={out}"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert out.stat().st_size > 0
    before = set(os.listdir(tmp_path))
    # refused for another reason after the probe (no such parameter): the probe's file is gone
    done = run_cli(["replay", graph, "--output", f"nope={tmp_path / 'probe.npy'}"], cwd=tmp_path)
    assert done.returncode == 2 and "no parameter named 'nope'" in done.stderr
    assert set(os.listdir(tmp_path)) == before
