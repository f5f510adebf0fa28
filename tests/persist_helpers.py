"""Helpers for the save/load tests: fresh child processes that load and replay a saved graph.

The child runs with the test folder off ``sys.path`` and never imports ``persist_kernels``, the
module that defines the graph's kernels; it checks that at the end.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np

from apic.format import writer
import fork_server
from host_cpus import PRELUDE

TESTS = os.path.dirname(os.path.abspath(__file__))  # the support modules, data/, the child scripts
REPO = os.path.dirname(TESTS)

# Run in a fresh interpreter: load a graph (from its files or from bytes), set inputs, replay,
# read outputs. Arguments arrive as one JSON document in argv[1].
CHILD = PRELUDE + textwrap.dedent(
    """
    import json, os, sys
    import numpy as np
    import warp as wp
    if hasattr(wp, "LOG_WARNING"):
        wp.config.log_level = wp.LOG_WARNING
    wp.config.quiet = True
    import apic
    from warp._src import context as wp_context

    job = json.loads(sys.argv[1])
    before_init = wp_context.runtime is None
    path = job["path"]
    if job["mode"] == "file":
        graph = wp.capture_load(path, device=job.get("device"))
    else:
        with open(path + ".wrp", "rb") as f:
            data = f.read()
        folder = path + "_modules"
        modules = {}
        for name in os.listdir(folder):
            with open(os.path.join(folder, name), "rb") as f:
                modules[name] = f.read()
        kind = job["mode"]
        if kind == "bytearray":
            data, modules = bytearray(data), {k: bytearray(v) for k, v in modules.items()}
        elif kind == "memoryview":
            data, modules = memoryview(data), {k: memoryview(v) for k, v in modules.items()}
        elif kind == "numpy":
            data = np.frombuffer(data, dtype=np.uint8).copy()
            modules = {k: np.frombuffer(v, dtype=np.uint8) for k, v in modules.items()}
        graph = wp.capture_load_from_bytes(data, modules, device="cpu")
    assert graph.is_loaded

    def warp_array(name, values):
        p = graph.params[name]
        dtype = getattr(wp, p["dtype"])
        return wp.array(values, dtype=dtype, shape=p["shape"], device="cpu")

    for name, file in job.get("set", {}).items():
        graph.set_param(name, warp_array(name, np.load(file)))
    for _ in range(job["iters"]):
        wp.capture_launch(graph)
    for name, file in job.get("get", {}).items():
        p = graph.params[name]
        out = wp.empty(shape=p["shape"], dtype=getattr(wp, p["dtype"]), device="cpu")
        graph.get_param(name, out)
        np.save(file, out.numpy())
    assert "persist_kernels" not in sys.modules, "the child imported the kernels' module"
    print(json.dumps({"before_init": before_init, "params": sorted(graph.params)}))
    """
)


def kept_in(cache, kind: str) -> list[str]:
    """The files apic keeps as ``kind`` (``apic-range``, ``apic-footprint``) under a Warp kernel cache folder
    ``cache``, temporaries included (Warp puts its cache in a folder per version)."""
    import glob

    return sorted(glob.glob(os.path.join(cache, "**", kind, "*"), recursive=True)
                  + glob.glob(os.path.join(cache, "**", kind, ".*"), recursive=True))


_seed_folder: list = []  # this process's folder of the Warp modules its children compiled (seed_kernel_cache)


def _warp_module_folders(cache: str) -> list[str]:
    """The folders of compiled Warp modules (``wp_<module>_<hash>``) in a Warp kernel cache folder, relative to it
    (Warp may put them in a folder per version)."""
    import glob

    return [os.path.relpath(path, cache) for depth in ("", "*")
            for path in glob.glob(os.path.join(cache, depth, "wp_*")) if os.path.isdir(path)]


def seed_kernel_cache(cache):
    """``cache`` made a Warp kernel cache folder holding the Warp modules that earlier children of this process
    compiled in theirs (``keep_kernel_modules``), so that a child with a cache folder of its own loads the kernels
    every child compiles alike instead of compiling them again (the most of a child's time). Only Warp's
    compiled modules travel: nothing that apic keeps in the folder (``apic-range``, ``apic-footprint``)."""
    import shutil

    os.makedirs(cache, exist_ok=True)
    if _seed_folder:
        for relative in _warp_module_folders(_seed_folder[0]):
            shutil.copytree(os.path.join(_seed_folder[0], relative), os.path.join(cache, relative), dirs_exist_ok=True)
    return cache


def keep_kernel_modules(cache) -> None:
    """Keep the Warp modules a child compiled in its cache folder ``cache``, for ``seed_kernel_cache``."""
    import atexit
    import shutil
    import tempfile

    if not _seed_folder:
        _seed_folder.append(tempfile.mkdtemp(prefix="apic-test-kernels-"))
        atexit.register(shutil.rmtree, _seed_folder[0], True)
    for relative in _warp_module_folders(str(cache)):
        target = os.path.join(_seed_folder[0], relative)
        if not os.path.exists(target):
            shutil.copytree(os.path.join(cache, relative), target)


def child_env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (REPO, env.get("PYTHONPATH", "")) if p)
    return env


def run_child(job: dict, cwd, python: str = sys.executable) -> dict:
    """Run ``CHILD`` with ``job`` in a fresh interpreter in ``cwd``; return its JSON report."""
    result = fork_server.run(
        [python, "-c", CHILD, json.dumps(job)], cwd=cwd, env=child_env(), capture_output=True, text=True,
        timeout=600,
    )
    assert result.returncode == 0, f"child failed ({result.returncode}):\n{result.stdout}\n{result.stderr}"
    return json.loads(result.stdout.strip().splitlines()[-1])


def run_cli(args: list[str], cwd, python: str = sys.executable, timeout: float = 600) -> subprocess.CompletedProcess:
    """``python -m apic ARGS`` in a fresh interpreter."""
    return fork_server.run(
        [python, "-m", "apic", *args], cwd=cwd, env=child_env(), capture_output=True, text=True, timeout=timeout
    )


# Python that runs ``python -m apic ARGS`` for each ARGS of the JSON list in argv[1] in one process, each with
# its own stdout and stderr, taken at the file descriptors (so that what native code prints is caught too, as
# in a process of its own; an exception that escapes prints its traceback there, as Python would), and prints
# one JSON list: per command, [exit status, stdout, stderr].
CLI_EACH = """
import json, os, sys, tempfile, traceback
from apic.cli import main
results = []
real = os.dup(1), os.dup(2)
for args in json.loads(sys.argv[1]):
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        sys.stdout.flush(); sys.stderr.flush()
        os.dup2(out.fileno(), 1); os.dup2(err.fileno(), 2)
        try:
            status = main(args)
        except SystemExit as exit:
            status = exit.code
        except BaseException:
            traceback.print_exc()
            status = 1
        finally:
            sys.stdout.flush(); sys.stderr.flush()
            os.dup2(real[0], 1); os.dup2(real[1], 2)
        texts = []
        for f in (out, err):
            f.seek(0)
            texts.append(f.read().decode("utf-8", "replace"))
    results.append([status or 0, *texts])
print(json.dumps(results))
"""


def run_cli_each(commands: list[list[str]], cwd, prelude: str = "", env: dict | None = None) -> list[list]:
    """``python -m apic ARGS`` for each of ``commands``, in one fresh interpreter (one Python start for many
    commands that only read files, or whose files do not meet): per command ``[exit status, stdout, stderr]``.
    ``prelude``: Python the child runs first."""
    done = fork_server.run([sys.executable, "-c", prelude + CLI_EACH, json.dumps(commands)], cwd=cwd,
                           env=env or child_env(), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def same_bits(a, b) -> bool:
    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and np.array_equal(a.view(np.uint8), b.view(np.uint8))


def wrp_body(stem: str) -> dict:
    """The decoded body of the saved graph ``<stem>.wrp`` (its header skipped)."""
    from wrp_helpers import body_of

    return body_of(stem)


def rewrite_wrp(stem: str, body: dict) -> None:
    """Write ``body`` as ``<stem>.wrp`` again, with a header that matches it (a hand-edited file)."""
    with open(stem + ".wrp", "wb") as f:
        f.write(writer.encode(body))
