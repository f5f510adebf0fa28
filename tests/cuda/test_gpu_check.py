"""The GPU check (``scripts/gpu_check.sh``, ``scripts/gpu_check.py``) and the CUDA replay benchmark
(``benchmarks/cuda_replay.py``), checked where they can be: without a GPU.

Here the check must say "no GPU", exit 3 and still write its JSON; its job list must name tests that exist;
its JUnit reader must keep every outcome (a skip with its reason, never as a pass); a job past its time
limit must be killed with its whole process group; the benchmark must handle its arguments, print its
plan with ``--dry-run`` and refuse to run without a GPU, saying so.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
import warp as wp
from persist_helpers import REPO

pytestmark = [pytest.mark.once]

sys.path.insert(0, os.path.join(REPO, "scripts"))

import gpu_check as check  # noqa: E402
from benchmarks import cuda_replay as bench  # noqa: E402


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (REPO, env.get("PYTHONPATH", "")) if p)
    return env


def _no_gpu_here() -> None:
    if wp.get_cuda_device_count():
        pytest.skip("a CUDA device is here: the check would run every job (scripts/gpu_check.sh is for that)")


# --- the whole script, here -----------------------------------------------------------------------------------
def test_without_a_gpu_the_check_says_so_exits_3_and_writes_its_json(tmp_path):
    _no_gpu_here()
    out = tmp_path / "results"
    done = subprocess.run(["bash", os.path.join(REPO, "scripts", "gpu_check.sh")], capture_output=True, text=True,
                          timeout=300, env={**_env(), "OUT": str(out), "PYTHON": sys.executable}, cwd=tmp_path)
    assert done.returncode == check.EXIT_NO_GPU, done.stdout + done.stderr
    assert "apic GPU check: NO-GPU" in done.stdout and "no GPU on this machine" in done.stdout
    results = json.loads((out / "gpu-check.json").read_text())
    assert results["schema"] == check.SCHEMA and results["status"] == "no-gpu" and results["exit_code"] == 3
    assert results["jobs"] == [] and results["gpu"]["warp"]["cuda_devices"] == []
    assert (out / "gpu-check.log").exists()


def test_the_check_lists_its_jobs(tmp_path):
    done = subprocess.run([sys.executable, os.path.join(REPO, "scripts", "gpu_check.py"), "--list", "--out",
                           str(tmp_path)], capture_output=True, text=True, timeout=60, env=_env())
    assert done.returncode == 0
    names = [line.split(":", 1)[0] for line in done.stdout.splitlines()]
    assert names == [job.name for job in check.build_jobs(str(tmp_path))]
    assert not os.listdir(tmp_path)  # --list writes nothing


def test_an_unknown_job_is_refused_and_the_json_says_so(tmp_path, monkeypatch):
    monkeypatch.setattr(check, "probe", lambda: {"warp": {"cuda_devices": [{"name": "GPU", "arch": 90}]}})
    code = check.main(["--out", str(tmp_path), "--jobs", "cuda-gpu-tests,nope"])
    results = json.loads((tmp_path / "gpu-check.json").read_text())
    assert code == check.EXIT_USAGE and results["status"] == "error" and "unknown job(s): nope" in results["reason"]


def test_jobs_run_in_the_order_asked_for(tmp_path):
    """--jobs picks and orders (a short GPU run does what matters most first); a name twice runs once."""
    args = check.parse_args(["--out", str(tmp_path), "--jobs", "benchmark,cuda-gpu-tests,benchmark"])
    assert [job.name for job in check.selected_jobs(args)] == ["benchmark", "cuda-gpu-tests"]


# --- the job list ---------------------------------------------------------------------------------------------
def test_every_job_names_what_exists(tmp_path, monkeypatch):
    monkeypatch.delenv(check.SECOND_PYTHON_ENV, raising=False)
    jobs = {job.name: job for job in check.build_jobs(str(tmp_path), python="PY")}
    assert list(jobs) == ["cuda-gpu-tests", "cuda-conditional-tests", "benchmark", "mujoco-warp (optional)",
                          "mujoco-warp benchmark (optional)", "newton (optional)", "second-warp (optional)",
                          "cuda-device-tests", "cpu-scaling (optional)", "featherstone-scaling (optional)"]
    assert jobs["cuda-gpu-tests"].argv[-1] == "tests/cuda/test_cuda_gpu.py"
    assert jobs["cuda-conditional-tests"].argv[-2:] == check.CONDITIONAL_TESTS
    assert jobs["benchmark"].argv[:3] == ("PY", "-m", "benchmarks.cuda_replay")
    assert jobs["mujoco-warp (optional)"].optional and jobs["mujoco-warp (optional)"].requires == "mujoco_warp"
    assert jobs["newton (optional)"].requires == "newton"
    assert jobs["newton (optional)"].argv[-1] == "tests/clients/test_newton_gpu.py"
    assert "APIC_SECOND_PYTHON" in jobs["second-warp (optional)"].unavailable
    scaling = jobs["cpu-scaling (optional)"]
    assert scaling.argv[:3] == ("PY", "-m", "benchmarks.parallel_scaling") and scaling.requires == "mujoco_warp"
    newton_scaling = jobs["featherstone-scaling (optional)"]
    assert newton_scaling.argv[:3] == ("PY", "-m", "benchmarks.parallel_featherstone")
    assert newton_scaling.requires == "newton" and newton_scaling.optional
    # a budget under the 10 minutes one device command may run, and no job longer than it
    assert check.DEFAULT_BUDGET <= 9 * 60 and all(job.timeout <= check.DEFAULT_BUDGET for job in jobs.values())
    for job in jobs.values():
        if job.junit:
            assert job.junit.startswith(str(tmp_path)) and f"--junitxml={job.junit}" in job.argv
            for path in job.argv[job.argv.index(f"--junitxml={job.junit}") + 1 :]:
                assert os.path.exists(os.path.join(REPO, path.split("::", 1)[0])), path


def test_a_second_warp_runs_the_gpu_tests_again_in_its_interpreter(tmp_path, monkeypatch):
    """--second-python (or $APIC_SECOND_PYTHON): the GPU and conditional tests again under that interpreter;
    without one the job is skipped, saying how to give one, and never fails the check."""
    monkeypatch.setenv(check.SECOND_PYTHON_ENV, "/opt/warp-1.12.1/bin/python")
    (job,) = [j for j in check.build_jobs(str(tmp_path), python="PY") if j.name.startswith("second-warp")]
    assert job.argv[0] == job.python == "/opt/warp-1.12.1/bin/python" and job.unavailable is None
    assert job.argv[-3:] == (*check.GPU_TESTS, *check.CONDITIONAL_TESTS) and job.optional
    monkeypatch.delenv(check.SECOND_PYTHON_ENV)
    (job,) = [j for j in check.build_jobs(str(tmp_path)) if j.name.startswith("second-warp")]
    record = check.run_job(job, 10, open(os.devnull, "w"))
    assert record["status"] == "skipped" and "--second-python" in record["reason"]
    assert check.warp_version(sys.executable) == wp.config.version
    assert "cannot" in check.warp_version("/nonexistent/python")


def test_the_device_tests_named_by_node_id_are_collected():
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                           *check.DEVICE_TESTS[2:]], capture_output=True, text=True, timeout=300, cwd=REPO, env=_env())
    assert done.returncode == 0, done.stdout + done.stderr
    for node in check.DEVICE_TESTS[2:]:
        assert node in done.stdout, node


# --- reading pytest's report ------------------------------------------------------------------------------------
TINY = '''
import pytest

@pytest.fixture
def broken():
    raise RuntimeError("set-up broke")

def test_passes():
    pass

def test_fails():
    assert 1 == 2, "one is not two"

@pytest.mark.skip(reason="no CUDA device on this machine")
def test_skips():
    pass

def test_errors(broken):
    pass
'''


def test_the_junit_reader_keeps_every_outcome_and_reason(tmp_path):
    (tmp_path / "test_tiny.py").write_text(TINY)
    junit = tmp_path / "junit.xml"
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "junit_family=xunit2",
                    f"--junitxml={junit}", "test_tiny.py"], capture_output=True, cwd=tmp_path, timeout=120)
    found = check.parse_junit(str(junit))
    assert (found["passed"], found["failed"], found["errors"], found["skipped"]) == (1, 1, 1, 1)
    cases = {case["id"].split("::")[1]: case for case in found["cases"]}
    assert cases["test_skips"]["outcome"] == "skipped"
    assert "no CUDA device on this machine" in cases["test_skips"]["message"]
    assert cases["test_fails"]["outcome"] == "failed" and "one is not two" in cases["test_fails"]["message"]
    assert cases["test_errors"]["outcome"] == "error" and "set-up broke" in cases["test_errors"]["message"]
    assert cases["test_passes"] == {"id": "test_tiny.py::test_passes", "outcome": "passed",
                                    "seconds": cases["test_passes"]["seconds"]}
    assert "error" in check.parse_junit(str(tmp_path / "missing.xml"))


def _tests(passed=0, failed=0, errors=0, skipped=0) -> dict:
    return {"passed": passed, "failed": failed, "errors": errors, "skipped": skipped, "cases": []}


def test_a_skip_is_never_a_pass():
    assert check.job_status(0, _tests(passed=3)) == "passed"
    assert check.job_status(0, _tests(passed=3, skipped=1)) == "passed-with-skips"
    assert check.job_status(0, _tests(skipped=5)) == "failed"  # nothing ran: not a pass
    assert check.job_status(0, {**_tests(), "error": "no test report"}) == "failed"
    assert check.job_status(1, _tests(passed=3, failed=1)) == "failed"
    assert check.job_status(0, None) == "passed" and check.job_status(2, None) == "failed"


def test_the_verdict_follows_the_required_jobs():
    def verdict(*statuses, optional="skipped"):
        jobs = [{"name": f"j{i}", "status": s} for i, s in enumerate(statuses)]
        return check.overall({"jobs": [*jobs, {"name": "opt", "status": optional, "optional": True}]})

    assert verdict("passed", "passed") == ("passed", 0)
    assert verdict("passed", "passed-with-skips") == ("passed-with-skips", 0)
    assert verdict("passed", "timeout") == ("failed", 1)
    assert verdict("passed", "not run") == ("failed", 1)
    assert verdict("passed", "passed", optional="failed") == ("passed", 0)  # an optional job never fails it


def test_the_summary_lists_skips_and_failures_with_their_reasons():
    tests = _tests(passed=1, skipped=1, failed=1)
    tests["cases"] = [{"id": "tests/t.py::a", "outcome": "passed", "seconds": 0.1},
                      {"id": "tests/t.py::b", "outcome": "skipped", "seconds": 0, "message": "needs CUDA 12.4"},
                      {"id": "tests/t.py::c", "outcome": "failed", "seconds": 0, "message": "bits differ"}]
    results = {"status": "failed", "gpu": {"card": "NVIDIA H100 80GB HBM3", "warp": {"version": "1.19.0"}},
               "jobs": [{"name": "cuda-gpu-tests", "status": "failed", "seconds": 12.5, "tests": tests},
                        {"name": "mujoco-warp (optional)", "status": "skipped", "reason": "not importable"}],
               "json": "r.json", "log": "r.log"}
    text = check.summary(results)
    assert text.startswith("apic GPU check: FAILED (card: NVIDIA H100 80GB HBM3; warp-lang 1.19.0")
    assert "cuda-gpu-tests: failed: passed 1, failed 1, errors 0, skipped 1 (12.5 s)" in text
    assert "skipped: tests/t.py::b: needs CUDA 12.4" in text and "failed: tests/t.py::c: bits differ" in text
    assert "tests/t.py::a" not in text and "mujoco-warp (optional): skipped (not importable)" in text


# --- the card --------------------------------------------------------------------------------------------------
def test_the_card_and_what_stops_the_jobs():
    h100 = ["GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0123)"]
    assert check.card_name({"nvidia_smi": h100}) == "NVIDIA H100 80GB HBM3"
    assert check.card_name({"nvidia_smi": None, "cuda_python": {"devices": ["NVIDIA H200"]}}) == "NVIDIA H200"
    assert check.card_name({"warp": {"cuda_devices": [{"name": "NVIDIA H200", "arch": 90}]}}) == "NVIDIA H200"
    assert check.card_name({}) is None
    assert check.gpu_problem({"warp": {"cuda_devices": [{"name": "H100", "arch": 90}]}}) is None
    code, why = check.gpu_problem({"nvidia_smi": None, "warp": {"cuda_devices": [], "toolkit": [13, 0]}})
    assert code == check.EXIT_NO_GPU and why.startswith("no GPU on this machine (nvidia-smi not found")
    old_driver = {"cuda_devices": [], "driver": [12, 4], "toolkit": [13, 0]}
    code, why = check.gpu_problem({"nvidia_smi": h100, "warp": old_driver})
    assert code == check.EXIT_GPU_UNUSABLE and "NVIDIA H100 80GB HBM3" in why and "driver [12, 4]" in why


def test_the_probe_reports_warp_here():
    found = check.probe()
    assert found["warp"]["version"] == wp.config.version
    assert found["warp"]["cuda_devices"] == [] or wp.get_cuda_device_count()


# --- running jobs ------------------------------------------------------------------------------------------------
def test_a_job_past_its_limit_is_killed_with_its_children(tmp_path):
    marker = tmp_path / "child-still-ran"
    child = f"import time, pathlib; time.sleep(4); pathlib.Path({str(marker)!r}).write_text('x')"
    code = f"import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', {child!r}]); time.sleep(60)"
    job = check.Job("slow", (sys.executable, "-c", code), timeout=60)
    with open(tmp_path / "log", "w") as log:
        start = time.monotonic()
        record = check.run_job(job, 1.5, log)
    assert record["status"] == "timeout" and time.monotonic() - start < 20
    time.sleep(5)
    assert not marker.exists()  # the grandchild went with the group


def test_a_job_that_prints_and_fails_is_logged(tmp_path):
    job = check.Job("loud", (sys.executable, "-c", "print('hello from the job'); raise SystemExit(5)"), timeout=60)
    with open(tmp_path / "log", "w") as log:
        record = check.run_job(job, 30, log)
    assert record["status"] == "failed" and record["returncode"] == 5 and "hello from the job" in record["tail"]
    assert "hello from the job" in (tmp_path / "log").read_text()


def test_an_optional_job_whose_module_is_missing_is_skipped_saying_why(tmp_path):
    job = check.Job("opt", (sys.executable, "-c", "raise SystemExit(1)"), 60, optional=True,
                 requires="no_such_module_for_apic")
    with open(tmp_path / "log", "w") as log:
        record = check.run_job(job, 30, log)
    assert record["status"] == "skipped" and "no_such_module_for_apic is not importable" in record["reason"]


def test_the_json_is_written_whole(tmp_path):
    path = str(tmp_path / "r.json")
    check.write_json(path, {"a": 1})
    check.write_json(path, {"b": [1, 2]})
    assert json.loads(open(path).read()) == {"b": [1, 2]} and os.listdir(tmp_path) == ["r.json"]


# --- the benchmark's command line ----------------------------------------------------------------------------
def test_the_benchmark_dry_run_prints_its_plan(capsys):
    assert bench.main(["--dry-run", "--launches", "10", "--rounds", "2"]) == 0
    out = capsys.readouterr().out
    assert "a graph of 10 launches" in out and "2 rounds of 100 replays" in out
    for name in bench.METHODS:
        assert f"  - {name}" in out


@pytest.mark.parametrize("args", [["--replays", "0"], ["--launches", "-3"], ["--rounds", "x"], ["--nope"]])
def test_the_benchmark_refuses_bad_arguments(args):
    with pytest.raises(SystemExit) as info:
        bench.parse_args(args)
    assert info.value.code == 2


def test_the_benchmark_needs_a_gpu(tmp_path):
    _no_gpu_here()
    path = tmp_path / "b.json"
    done = subprocess.run([sys.executable, "-m", "benchmarks.cuda_replay", "--json", str(path)], capture_output=True,
                          text=True, timeout=120, cwd=REPO, env=_env())
    assert done.returncode == bench.NO_GPU_EXIT
    assert "cuda_replay needs a GPU: no CUDA device" in done.stdout
    assert json.loads(path.read_text())["status"] == "no-gpu"


def test_the_benchmarks_kernel_builds_and_counts_without_a_gpu():
    """Found on an H100: the kernel's annotation was a string Warp could not resolve (NameError), so the
    benchmark stopped before its first launch. Its launches now count on the CPU too."""
    kernel = bench._kernel()
    x = wp.zeros(1, dtype=wp.int32, device="cpu")
    bench._launches(kernel, x, "cpu", 3)
    assert int(x.numpy()[0]) == 3


def test_the_client_benchmark_reads_the_client_tests_scene_and_needs_a_gpu(tmp_path):
    from benchmarks import cuda_mujoco

    assert cuda_mujoco.scene_xml().lstrip().startswith("<mujoco>")
    done = subprocess.run([sys.executable, "-m", "benchmarks.cuda_mujoco", "--json", str(tmp_path / "m.json")],
                          capture_output=True, text=True, timeout=300, env=_env(), cwd=REPO)
    if wp.get_cuda_device_count():
        pytest.skip("a CUDA device is present: scripts/gpu_check.sh runs the client benchmark")
    assert done.returncode == cuda_mujoco.NO_GPU_EXIT, done.stderr
    assert json.loads((tmp_path / "m.json").read_text())["status"] == "no-gpu"


def test_the_benchmark_table_and_summary():
    total = bench.summarise([2e-3, 1e-3, 3e-3], 1000)
    assert total == {"per_replay_us": {"min": 1000.0, "median": 2000.0}, "per_node_us": {"min": 1.0, "median": 2.0}}
    results = {"launches": 1000, "replays": 100, "rounds": 3, "device": "NVIDIA H100", "warp": "1.19.0", "methods": {
        "warp graph": {"total": total, "issue": bench.summarise([1e-4], 1000),
                       "issue_idle": bench.summarise([3e-6], 1000), "correct": True},
        "warp APIC loaded": {"error": "RuntimeError: no"},
        "apic loaded, graph": {"total": bench.summarise([4e-3], 1000), "issue": total,
                               "issue_idle": bench.summarise([5e-6], 1000), "correct": False}}}
    text = bench.table(results)
    assert "1,000 launches per replay on NVIDIA H100" in text
    assert "| warp graph | 1000.0 / 2000.0 | 1.000 / 2.000 | 100.0 | 3.0 | 1.00x | yes |" in text
    assert "| warp APIC loaded | not run: RuntimeError: no |" in text
    assert "| apic loaded, graph | 4000.0 / 4000.0 | 4.000 / 4.000 | 2000.0 | 5.0 | 2.00x | NO |" in text


def test_the_benchmark_reports_the_two_targets_as_ratios():
    """launch_vs_floor (apic's op-by-op replay per node over the C floor's) and issue_vs_warp_graph (issue time of
    apic's loaded graph over Warp's own graph's), from the medians, where both methods of each ran."""
    def method(total, issue, idle=None):
        return {"total": bench.summarise([total], 1000), "issue": bench.summarise([issue], 1000),
                "issue_idle": bench.summarise([idle or issue], 1000), "correct": True}

    methods = {"warp graph": method(2e-3, 5e-6, 4e-6), "apic loaded, graph": method(2e-3, 4e-6, 6e-6),
               "apic loaded, launch": method(1.3e-3, 1e-3), "C floor": method(1e-3, 1e-3)}
    found = bench.ratios(methods)
    assert found == pytest.approx({"launch_vs_floor": 1.3, "issue_vs_warp_graph": 0.8,
                                   "issue_idle_vs_warp_graph": 1.5})
    text = bench.table({"launches": 1000, "replays": 100, "rounds": 1, "methods": methods, **found})
    assert "launch_vs_floor: 1.300 (target at most 1.2: NOT met)" in text
    assert "issue_vs_warp_graph: 0.800 (target at most 1.0: met)" in text
    assert "issue_idle_vs_warp_graph: 1.500 (target at most 1.0: NOT met)" in text
    without_floor = {**methods, "C floor": {"error": "no C compiler"}}
    assert bench.ratios(without_floor) == pytest.approx({"issue_vs_warp_graph": 0.8, "issue_idle_vs_warp_graph": 1.5})


def test_the_client_benchmark_runs_both_settings_at_both_sizes_and_compares_them():
    from benchmarks import cuda_mujoco

    args = cuda_mujoco.parse_args([])
    assert cuda_mujoco.settings(args) == [(64, True), (64, False), (1024, True), (1024, False)]
    assert cuda_mujoco.settings(cuda_mujoco.parse_args(["--worlds", "8", "--conditional", "off"])) == [(8, False)]
    with pytest.raises(SystemExit):
        cuda_mujoco.parse_args(["--worlds", "0"])
    step = {"total": {"per_replay_us": {"min": 2400.0, "median": 2430.0}}, "issue": {"per_replay_us": {"median": 9.0}},
            "qpos_vs_warp_graph": "bit for bit"}
    slow = {**step, "total": {"per_replay_us": {"min": 9900.0, "median": 9930.0}}}
    results = {"device": "NVIDIA H100", "warp": "1.19.0", "rounds": 5, "replays": 20, "runs": [
        {"worlds": 1024, "graph_conditional": True, "methods": {"apic loaded, graph": step}},
        {"worlds": 1024, "graph_conditional": False, "methods": {"apic loaded, graph": slow}},
        {"worlds": 64, "graph_conditional": True, "error": "RuntimeError: no"}]}
    text = cuda_mujoco.table(results)
    assert "1024 worlds, graph_conditional" in text and "1024 worlds, unrolled solver" in text
    assert "| apic loaded, graph | 2400.0 / 2430.0 | 9.0 | bit for bit |" in text
    assert "| apic loaded, graph | 1024 | 2430.0 | 9930.0 | 0.24x |" in text
    assert "not run: RuntimeError: no" in text


# --- the kit ---------------------------------------------------------------------------------------------------
def test_the_kit_folder_is_ignored_by_git():
    done = subprocess.run(["git", "check-ignore", "-q", ".devkit/p1/part.0"], cwd=REPO, capture_output=True)
    if done.returncode == 128:
        pytest.skip("not a git checkout")
    assert done.returncode == 0, ".devkit/ must be git-ignored: it holds the warp-lang wheel in parts"


def test_the_script_header_has_the_three_device_commands():
    with open(os.path.join(REPO, "scripts", "gpu_check.sh")) as f:
        header = f.read()
    for line in ("mkdir -p /tmp/apic-kit && cp .devkit/p1/part.* /tmp/apic-kit/ && nvidia-smi -L",
                 "cp .devkit/p2/part.* /tmp/apic-kit/",
                 "cp .devkit/p3/part.* /tmp/apic-kit/ && bash .devkit/bin/install_on_device.sh && "
                 "export PYTHONPATH=/tmp/apic-site:$PWD && bash scripts/gpu_check.sh"):
        assert line in header, line


def test_the_gpu_tests_job_runs_and_its_skips_are_not_passes(tmp_path, monkeypatch):
    """The real job on the real test file, here: every test skips (no device), so the job fails, listing why."""
    _no_gpu_here()
    monkeypatch.setattr(check, "probe", lambda: {"card": "pretend", "warp": {"cuda_devices": [{"name": "pretend"}]}})
    code = check.main(["--out", str(tmp_path), "--jobs", "cuda-gpu-tests"])
    results = json.loads((tmp_path / "gpu-check.json").read_text())
    (job,) = results["jobs"]
    tests = job["tests"]
    assert code == check.EXIT_FAILED and results["status"] == "failed" and job["status"] == "failed"
    assert tests["passed"] == 0 and tests["skipped"] == len(tests["cases"]) >= 30
    assert all(case["message"].endswith("no CUDA device on this machine") for case in tests["cases"])
    assert (tmp_path / "junit-cuda-gpu-tests.xml").exists()
    assert f"{tests['skipped']} skipped" in (tmp_path / "gpu-check.log").read_text()
