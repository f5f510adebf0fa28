"""The GPU check: probe the card, run the tests that need a CUDA device and the CUDA replay benchmark, write results.

    python3 scripts/gpu_check.py [--out DIR] [--budget SECONDS] [--jobs NAME,...] [--list]

``scripts/gpu_check.sh`` runs it (its header has the commands that bring warp-lang onto the GPU machine).
It writes, under ``--out`` (default ``$OUT`` if set, else ``./gpu-results``):

* ``gpu-check.json``: the card (``nvidia-smi -L``, cuda-python, Warp), every job's status and time, every
  test's outcome (from pytest's JUnit XML; a skip keeps its reason and never counts as a pass) and the
  benchmark's figures. Written even when a job fails or the check itself breaks;
* ``gpu-check.log``: everything the jobs printed; ``junit-*.xml`` and ``cuda_replay.json``.

Exit status: 0 every job passed (skips are listed, not counted as passes); 1 a job or a test failed or
timed out; 3 no GPU here (the JSON says so); 4 a GPU is there but Warp cannot use it (the JSON says why,
e.g. a driver older than Warp's CUDA toolkit); 2 a bad command line or a failure of the check itself.
Nothing here needs a network.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCHEMA = "apic-gpu-check/1"
EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_NO_GPU, EXIT_GPU_UNUSABLE = 0, 1, 2, 3, 4
DEFAULT_BUDGET = 540  # seconds for all jobs together: 9 minutes, under the 10 a device command may run
SECOND_PYTHON_ENV = "APIC_SECOND_PYTHON"  # an interpreter with the other supported warp-lang (1.12.1)

# Tests that need a CUDA device besides tests/cuda/test_cuda_gpu.py (they skip, saying so, without one), and the
# offline CUDA suites, which compile with the same NVRTC and run their device-dependent parts there.
DEVICE_TESTS = (
    "tests/cuda/test_cuda_offline.py",
    "tests/cuda/test_cuda_source_fallback.py",
    "tests/record/test_fail_closed.py::test_copy_between_cpu_and_cuda_is_refused",
    "tests/persistence/test_persist_roundtrip.py::test_load_onto_non_cpu_device_is_refused",
    "tests/export/test_export_cuda_gpu.py",  # an exported CUDA library against the real driver
)


@dataclass(frozen=True)
class Job:
    """One step of the check: a command, its time limit, and how to read its outcome."""

    name: str
    argv: tuple[str, ...]
    timeout: int  # seconds (less if the budget has less left)
    junit: str | None = None  # the JUnit XML the command writes (pytest jobs)
    optional: bool = False  # skipped, saying why, where ``requires`` is not importable; never fails the check
    requires: str | None = None  # a module the job needs
    python: str | None = None  # the interpreter ``requires`` is checked in (default: the check's)
    unavailable: str | None = None  # why the job cannot run here (it is then skipped, saying so)


GPU_TESTS = ("tests/cuda/test_cuda_gpu.py",)
CONDITIONAL_TESTS = ("tests/cuda/test_cuda_conditional_gpu.py", "tests/cuda/test_cuda_conditional_offline.py")


def build_jobs(out: str, python: str = sys.executable, second_python: str | None = None) -> list[Job]:
    """The jobs, in the order they run (the most important first). ``second_python`` (default
    ``$APIC_SECOND_PYTHON``): an interpreter with the other supported warp-lang, which runs the GPU tests again."""
    if second_python is None:
        second_python = os.environ.get(SECOND_PYTHON_ENV) or None

    def pytest(name: str, paths, timeout: int, interpreter: str = python) -> Job:
        junit = os.path.join(out, f"junit-{name}.xml")
        return Job(name, (interpreter, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", "-o",
                          "junit_family=xunit2", f"--junitxml={junit}", *paths), timeout, junit)

    def optional(job: Job, requires: str, interpreter: str = python, unavailable: str | None = None) -> Job:
        return Job(f"{job.name} (optional)", job.argv, job.timeout, job.junit, optional=True, requires=requires,
                   python=interpreter, unavailable=unavailable)

    second = pytest("second-warp", [*GPU_TESTS, *CONDITIONAL_TESTS], 240, second_python or "python3")
    return [
        pytest("cuda-gpu-tests", list(GPU_TESTS), 200),
        pytest("cuda-conditional-tests", list(CONDITIONAL_TESTS), 150),
        Job("benchmark", (python, "-m", "benchmarks.cuda_replay", "--json", os.path.join(out, "cuda_replay.json")),
            90),
        # the clients on the GPU: their modules compile with NVRTC once (Warp's kernel cache is shared by the jobs)
        optional(pytest("mujoco-warp", ["tests/clients/test_mujoco_warp_gpu.py"], 200), "mujoco_warp"),
        Job("mujoco-warp benchmark (optional)",
            (python, "-m", "benchmarks.cuda_mujoco", "--json", os.path.join(out, "cuda_mujoco.json")), 200,
            optional=True, requires="mujoco_warp"),
        optional(pytest("newton", ["tests/clients/test_newton_gpu.py"], 150), "newton"),
        optional(second, "warp", second_python or "python3", None if second_python else (
            f"no second warp-lang interpreter given (--second-python or ${SECOND_PYTHON_ENV})")),
                pytest("cuda-device-tests", list(DEVICE_TESTS), 150),
        # no GPU needed: the machine's CPU cores give parallel CPU replay's scaling curve (docs/PARALLEL.md)
        Job("cpu-scaling (optional)", (python, "-m", "benchmarks.parallel_scaling", "--worlds", "1024", "--json",
                                       os.path.join(out, "parallel_scaling.json")), 300,
            optional=True, requires="mujoco_warp"),
        # the same for newton's Featherstone step, split by footprint
        Job("featherstone-scaling (optional)", (python, "-m", "benchmarks.parallel_featherstone", "--worlds", "1024",
                                                "--threads", "2", "4", "8", "16", "--json",
                                                os.path.join(out, "parallel_featherstone.json")), 300,
            optional=True, requires="newton"),
    ]


# --- the card -----------------------------------------------------------------------------------------------
PROBE = r"""
import json, sys
info = {"warp": None, "cuda_python": None}
try:
    from apic._compat import quiet_warp
    quiet_warp()
    import warp as wp
    from apic import _compat
    wp.init()
    rt = _compat.runtime()
    devices = []
    for i in range(wp.get_cuda_device_count()):
        d = wp.get_device(f"cuda:{i}")
        devices.append({"name": d.name, "arch": d.arch, "mempool": bool(wp.is_mempool_enabled(d))})
    info["warp"] = {"version": wp.config.version, "cuda_devices": devices,
                    "toolkit": list(getattr(rt, "toolkit_version", None) or ()) or None,
                    "driver": list(getattr(rt, "driver_version", None) or ()) or None,
                    "conditional_nodes": bool(devices) and bool(wp.is_conditional_graph_supported())}
except Exception as error:
    info["warp"] = {"error": f"{type(error).__name__}: {error}"}
try:
    from apic import _compat
    cu = _compat.cuda_driver()
    import cuda.bindings as cb
    found = {"version": getattr(cb, "__version__", None)}
    err, = cu.cuInit(0)[:1]
    if int(err) == 0:
        found["driver"] = int(cu.cuDriverGetVersion()[1])
        cards = []
        for i in range(int(cu.cuDeviceGetCount()[1])):
            dev = cu.cuDeviceGet(i)[1]
            name = cu.cuDeviceGetName(256, dev)[1]
            cards.append(name.split(b"\0", 1)[0].decode(errors="replace") if isinstance(name, bytes) else str(name))
        found["devices"] = cards
    else:
        found["error"] = f"cuInit: {err}"
    info["cuda_python"] = found
except Exception as error:
    info["cuda_python"] = {"error": f"{type(error).__name__}: {error}"}
print(json.dumps(info))
"""


def nvidia_smi() -> list[str] | None:
    """``nvidia-smi -L``'s lines, or None where there is no ``nvidia-smi`` (or it fails)."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        done = subprocess.run([exe, "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return [line for line in done.stdout.splitlines() if line.strip()] if done.returncode == 0 else None


def probe(python: str = sys.executable) -> dict:
    """What this machine has: ``nvidia-smi -L``, and what Warp and cuda-python see (in a child process)."""
    found = {"nvidia_smi": nvidia_smi()}
    try:
        done = subprocess.run([python, "-c", PROBE], capture_output=True, text=True, timeout=180, cwd=REPO,
                              env=child_env())
        found.update(json.loads(done.stdout.strip().splitlines()[-1]))
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError) as error:
        found["probe_error"] = f"{type(error).__name__}: {error}"
    found["card"] = card_name(found)
    return found


def card_name(found: dict) -> str | None:
    """The first GPU's name: from ``nvidia-smi -L`` ("GPU 0: NAME (UUID: ...)"), else cuda-python, else Warp."""
    for line in found.get("nvidia_smi") or ():
        if line.startswith("GPU ") and ": " in line:
            return line.split(": ", 1)[1].split(" (UUID", 1)[0].strip()
    for source, key in (("cuda_python", "devices"), ("warp", "cuda_devices")):
        entries = (found.get(source) or {}).get(key) or ()
        if entries:
            first = entries[0]
            return first["name"] if isinstance(first, dict) else first
    return None


def gpu_problem(found: dict) -> tuple[int, str] | None:
    """``(exit status, why)`` where the jobs cannot run on a GPU here, or None where Warp sees one."""
    warp = found.get("warp") or {}
    if warp.get("cuda_devices"):
        return None
    listed = found.get("nvidia_smi")
    cuda_python = found.get("cuda_python") or {}
    warp_said = warp.get("error") or (f"Warp sees no CUDA device (driver {warp.get('driver')}, "
                                      f"toolkit {warp.get('toolkit')})")
    if not listed and not cuda_python.get("devices"):
        smi = "not found or failed" if listed is None else "lists no GPU"
        return EXIT_NO_GPU, f"no GPU on this machine (nvidia-smi {smi}; {warp_said})"
    return EXIT_GPU_UNUSABLE, (f"a GPU is there ({card_name(found)}) but Warp cannot use it: {warp_said}; a "
                               "driver older than the CUDA toolkit Warp was built with is the usual cause")


# --- running the jobs -----------------------------------------------------------------------------------------
def child_env() -> dict:
    """The environment of every job: the repository importable, Warp's kernel cache in a folder of its own."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (REPO, env.get("PYTHONPATH", "")) if p)
    env.setdefault("WARP_CACHE_PATH", os.path.join(tempfile.gettempdir(), "apic-gpu-check-warp-cache"))
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def warp_version(python: str) -> str:
    """The warp-lang version ``python`` imports, or why it cannot say."""
    try:
        done = subprocess.run([python, "-c", "import warp; print(warp.config.version)"], capture_output=True,
                              text=True, timeout=120, cwd=REPO, env=child_env())
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"cannot run {python}: {type(error).__name__}: {error}"
    lines = done.stdout.strip().splitlines()
    return lines[-1] if done.returncode == 0 and lines else f"{python} cannot import warp: {done.stderr.strip()[-200:]}"


def importable(module: str, python: str = sys.executable) -> bool:
    """Whether ``module`` imports in the jobs' interpreter."""
    try:
        return subprocess.run([python, "-c", f"import {module}"], capture_output=True, timeout=120, cwd=REPO,
                              env=child_env()).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def run_job(job: Job, timeout: float, log) -> dict:
    """Run ``job`` (in a process group of its own, killed whole at ``timeout``); its record for the JSON."""
    record = {"name": job.name, "command": " ".join(job.argv), "optional": job.optional}
    if job.unavailable:
        record.update(status="skipped", reason=job.unavailable)
        return record
    if job.requires and not importable(job.requires, job.python or sys.executable):
        record.update(status="skipped", reason=f"{job.requires} is not importable here")
        return record
    log.write(f"\n===== {job.name}: {record['command']} (limit {timeout:.0f} s)\n")
    log.flush()
    start = time.monotonic()
    proc = subprocess.Popen(job.argv, cwd=REPO, env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, errors="replace", start_new_session=True)
    try:
        output, _ = proc.communicate(timeout=timeout)
        timed_out = False
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
        timed_out = True
    record["seconds"] = round(time.monotonic() - start, 1)
    log.write(output or "")
    log.flush()
    record["returncode"] = proc.returncode
    record["tail"] = "\n".join((output or "").splitlines()[-25:])
    if job.junit:
        record["tests"] = parse_junit(job.junit)
    record["status"] = "timeout" if timed_out else job_status(proc.returncode, record.get("tests"))
    return record


def job_status(returncode: int, tests: dict | None) -> str:
    """``passed``, ``passed-with-skips`` or ``failed`` (a pytest job that ran no test at all has failed)."""
    if returncode != 0:
        return "failed"
    if tests is None:
        return "passed"
    if tests.get("error") or tests["failed"] or tests["errors"] or not tests["passed"]:
        return "failed"
    return "passed-with-skips" if tests["skipped"] else "passed"


def parse_junit(path: str) -> dict:
    """Counts and every case of a pytest JUnit XML file: ``{"passed", "failed", "errors", "skipped", "cases"}``;
    a skip or failure keeps its message (a skip is never a pass)."""
    found = {"passed": 0, "failed": 0, "errors": 0, "skipped": 0, "cases": []}
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError) as error:
        return {**found, "error": f"no test report ({type(error).__name__}: {error})"}
    for case in root.iter("testcase"):
        outcome, message = "passed", None
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                outcome = {"failure": "failed", "error": "errors", "skipped": "skipped"}[child.tag]
                message = (child.get("message") or child.text or "").strip()[:500]
                break
        found[outcome] += 1
        module = (case.get("classname") or "").replace(".", "/")
        entry = {"id": f"{module}.py::{case.get('name')}", "outcome": "error" if outcome == "errors" else outcome,
                 "seconds": float(case.get("time") or 0)}
        if message:
            entry["message"] = message
        found["cases"].append(entry)
    return found


def overall(results: dict) -> tuple[str, int]:
    """The check's status and exit status from its job records (an optional job never fails it)."""
    jobs = [j for j in results["jobs"] if not j.get("optional")]
    if any(j["status"] in ("failed", "timeout", "not run") for j in jobs):
        return "failed", EXIT_FAILED
    if any(j["status"] == "passed-with-skips" for j in jobs):
        return "passed-with-skips", EXIT_OK
    return "passed", EXIT_OK


def write_json(path: str, results: dict) -> None:
    """Write ``results`` to ``path`` atomically (a reader never sees half a file)."""
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        json.dump(results, f, indent=2, sort_keys=True)
    os.replace(tmp, path)


def summary(results: dict) -> str:
    """A few lines: the verdict and the card, each job, the skips with their reasons, the benchmark's table."""
    probe_ = results.get("gpu") or {}
    warp = probe_.get("warp") or {}
    second = f"; second warp-lang {results['second_warp']}" if results.get("second_warp") else ""
    lines = [f"apic GPU check: {results['status'].upper()} (card: {probe_.get('card') or 'none'}; "
             f"warp-lang {warp.get('version')}{second}; driver {(probe_.get('cuda_python') or {}).get('driver')})"]
    if results.get("reason"):
        lines.append(f"  {results['reason']}")
    for job in results.get("jobs", []):
        tests = job.get("tests")
        counts = (f": passed {tests['passed']}, failed {tests['failed']}, errors {tests['errors']}, "
                  f"skipped {tests['skipped']}" if tests else "")
        extra = f" ({job['seconds']} s)" if "seconds" in job else f" ({job.get('reason', '')})"
        lines.append(f"  {job['name']}: {job['status']}{counts}{extra}")
        for case in (tests or {}).get("cases", []):
            if case["outcome"] != "passed":
                lines.append(f"    {case['outcome']}: {case['id']}: {case.get('message', '')[:160]}")
    bench = results.get("benchmark")
    if bench and bench.get("methods"):
        sys.path.insert(0, REPO)
        from benchmarks.cuda_replay import table

        lines += ["", table(bench)]
    client = results.get("client_benchmark")
    if client and client.get("runs"):
        from benchmarks.cuda_mujoco import table as client_table

        lines += ["", client_table(client)]
    lines.append(f"results: {results.get('json')}  log: {results.get('log')}")
    return "\n".join(lines)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="scripts/gpu_check.py", description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.environ.get("OUT") or os.path.join(os.getcwd(), "gpu-results"),
                        help="where the results go (default $OUT, else ./gpu-results)")
    parser.add_argument("--budget", type=int, default=DEFAULT_BUDGET,
                        help=f"seconds for all jobs (default {DEFAULT_BUDGET})")
    parser.add_argument("--jobs", help="only these jobs, in this order (comma-separated names; --list shows them)")
    parser.add_argument("--list", action="store_true", help="print the jobs and exit")
    parser.add_argument("--second-python", default=os.environ.get(SECOND_PYTHON_ENV) or None,
                        help=f"an interpreter with the other warp-lang (1.12.1): the GPU tests run again there "
                             f"(default ${SECOND_PYTHON_ENV})")
    return parser.parse_args(argv)


def check(args: argparse.Namespace, results: dict, log) -> None:
    """Probe, then run the jobs within the budget, filling ``results`` as it goes."""
    results["gpu"] = found = probe()
    log.write(json.dumps(found, indent=2) + "\n")
    problem = gpu_problem(found)
    if problem is not None:
        results["exit_code"], results["reason"] = problem
        results["status"] = "no-gpu" if problem[0] == EXIT_NO_GPU else "gpu-unusable"
        return
    if getattr(args, "second_python", None):
        results["second_warp"] = warp_version(args.second_python)
    deadline = time.monotonic() + args.budget
    for job in selected_jobs(args):
        left = deadline - time.monotonic()
        if left < 10:
            results["jobs"].append({"name": job.name, "optional": job.optional, "status": "not run",
                                    "reason": f"the {args.budget} s budget was spent"})
            continue
        results["jobs"].append(run_job(job, min(job.timeout, left), log))
        for name, file, key in (("benchmark", "cuda_replay.json", "benchmark"),
                                ("mujoco-warp benchmark (optional)", "cuda_mujoco.json", "client_benchmark"),
                                ("cpu-scaling (optional)", "parallel_scaling.json", "cpu_scaling"),
                                ("featherstone-scaling (optional)", "parallel_featherstone.json",
                                 "featherstone_scaling")):
            path = os.path.join(args.out, file)
            if job.name == name and os.path.exists(path):
                with open(path) as f:
                    results[key] = json.load(f)
    results["status"], results["exit_code"] = overall(results)


def selected_jobs(args: argparse.Namespace) -> list[Job]:
    jobs = build_jobs(args.out, second_python=getattr(args, "second_python", None))
    if not args.jobs:
        return jobs
    wanted = [w.strip() for w in args.jobs.split(",") if w.strip()]
    unknown = sorted(set(wanted) - {j.name for j in jobs})
    if unknown:
        raise SystemExit(f"unknown job(s): {', '.join(unknown)} (known: {', '.join(j.name for j in jobs)})")
    by_name = {j.name: j for j in jobs}
    return [by_name[name] for name in dict.fromkeys(wanted)]  # in the order asked for (what matters most first)


def main(argv=None) -> int:
    args = parse_args(argv)
    args.out = os.path.abspath(args.out)
    if args.list:
        for job in build_jobs(args.out, second_python=args.second_python):
            print(f"{job.name}: {' '.join(job.argv)} (limit {job.timeout} s{', optional' if job.optional else ''})")
        return EXIT_OK
    os.makedirs(args.out, exist_ok=True)
    json_path, log_path = os.path.join(args.out, "gpu-check.json"), os.path.join(args.out, "gpu-check.log")
    results = {"schema": SCHEMA, "status": "error", "exit_code": EXIT_USAGE, "jobs": [], "json": json_path,
               "log": log_path, "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
               "host": {"python": platform.python_version(), "platform": platform.platform()}}
    start = time.monotonic()
    try:
        with open(log_path, "w") as log:
            check(args, results, log)
    except SystemExit as error:
        results["reason"] = str(error)
    except Exception as error:  # noqa: BLE001  (the JSON must still say what happened)
        results["reason"] = f"the check itself failed: {type(error).__name__}: {error}"
    finally:
        results["seconds"] = round(time.monotonic() - start, 1)
        write_json(json_path, results)
    print(summary(results))
    return results["exit_code"]


if __name__ == "__main__":
    sys.exit(main())
