"""A value of the wrong size is refused before it is converted, not after (issue 22, "checks before work").

``set_param`` / ``get_param`` (array bindings and named scalar parameters), ``apic.param`` and the CLI's
``--input`` each get a 100-million-element value of the wrong shape: a NumPy array (a zero-stride view,
so the test itself allocates nothing) and a nested Python list (one inner list repeated, likewise). Each
must be refused with ``BindingError`` quickly and without a large allocation: ``tracemalloc``'s peak
(NumPy's buffers included) stays under a few MB, where converting would take 400 MB to gigabytes. The
CLI is measured from outside: the peak resident size of the ``python -m apic`` process refusing a
``.npy`` file of 10^8 float32 (a sparse file: it takes no disk) against one refusing a tiny file.
The library's attempts run in a child process under an address-space limit, so that a regression fails
the test rather than exhausting the machine's memory.
"""

from __future__ import annotations

import json
import os
import resource
import struct
import subprocess
import sys
import time
import tracemalloc

import numpy as np
import pytest
import warp as wp

import apic
import cli_kernels as ck
from apic._compat import quiet_warp
from persist_helpers import TESTS, child_env

pytestmark = [pytest.mark.warp_version, pytest.mark.interpreter, pytest.mark.serial]

HUGE = 100_000_000
PEAK_LIMIT = 8 << 20  # bytes; converting any of the values below would allocate at least 400 MB
TIME_LIMIT = 5.0  # seconds, generous for a loaded 2-core machine; converting takes tens of seconds


def huge_array(*inner):
    """10^8 elements (times ``inner``) of float32 that take no memory: a zero-stride view of one value."""
    return np.broadcast_to(np.float32(0.5), (HUGE, *inner))


def huge_list(*inner):
    """A nested list of shape ``(10^4, 10^4, *inner)``, 10^8 floats or more, made of one repeated row: it
    takes a few hundred KB."""
    leaf = 0.5
    for n in reversed(inner):
        leaf = [leaf] * n
    return [[leaf] * 10_000] * 10_000


def attempt_all(path: str) -> list[str]:
    """Each wrong-size value against the graph saved at ``path``: what went wrong (empty: every one was
    refused with ``BindingError``, quickly, with a small peak allocation and a short message). Run in a child
    process under an address-space limit: a regression then fails with ``MemoryError`` instead of taking
    the machine's memory (converting a nested list of 10^8 floats to an object array takes 12 GB)."""
    quiet_warp()
    graph = wp.capture_load(path, device="cpu")
    destination = np.empty(HUGE, dtype=np.float32)  # never written: refused first (allocated lazily by the OS)
    with open("/proc/self/status") as f:
        size = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))
    resource.setrlimit(resource.RLIMIT_AS, (size + (2 << 30), resource.RLIM_INFINITY))
    attempts = {
        "set_param array <- NumPy": lambda: graph.set_param("x", huge_array()),
        "set_param array <- list": lambda: graph.set_param("x", huge_list()),
        "set_param vec3 array <- NumPy": lambda: graph.set_param("v", huge_array(3)),
        "set_param vec3 array <- list": lambda: graph.set_param("v", huge_list(3)),
        "set_param vec3 scalar <- NumPy": lambda: graph.set_param("g", huge_array()),
        "set_param vec3 scalar <- list": lambda: graph.set_param("g", huge_list()),
        "set_param mat22 scalar <- list": lambda: graph.set_param("m", huge_list(2)),
        "set_param float scalar <- list": lambda: graph.set_param("dt", huge_list()),
        "set_param int scalar <- huge int": lambda: graph.set_param("n", 10**50_000),
        "get_param array -> NumPy": lambda: graph.get_param("x", destination),
        "apic.param vec3 <- NumPy": lambda: apic.param("p", wp.vec3, huge_array()),
        "apic.param vec3 <- list": lambda: apic.param("p", wp.vec3, huge_list()),
    }
    problems = []
    for what, attempt in attempts.items():
        tracemalloc.start()
        start = time.perf_counter()
        try:
            attempt()
        except apic.BindingError as error:
            message = str(error)
        except Exception as error:  # noqa: BLE001  (any other failure is a finding, reported with the rest)
            message = f"not a BindingError: {type(error).__name__}: {str(error)[:200]}"
            problems.append(f"{what}: {message}")
        else:
            message = None
        elapsed = time.perf_counter() - start
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        if message is None or peak > PEAK_LIMIT or elapsed > TIME_LIMIT or len(message) > 1000:
            problems.append(f"{what}: {'accepted' if message is None else 'refused'} in {elapsed:.2f} s, peak "
                            f"{peak / 1e6:.1f} MB, message of {len(message or '')} characters: {(message or '')[:200]}")
    return problems


_ATTEMPTS = """
import json, os, sys
sys.path[:0] = sys.argv[2].split(os.pathsep)
import test_checks_before_work
print(json.dumps(test_checks_before_work.attempt_all(sys.argv[1])))
"""


def test_wrong_size_values_are_refused_before_conversion(tmp_path):
    path = ck.save(str(tmp_path / "g"))
    done = subprocess.run([sys.executable, "-c", _ATTEMPTS, path,
                           os.pathsep.join([os.path.dirname(os.path.abspath(__file__)), TESTS])],
                          env=child_env(), capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stderr[-3000:]
    problems = json.loads(done.stdout.strip().splitlines()[-1])
    assert not problems, "\n".join(problems)

    # the CLI's --input reads a .npy file's header first: its size against the parameter, before the data
    rss = {name: _cli_peak_rss(path, tmp_path, name, shape) for name, shape in (("small", 3), ("huge", HUGE))}
    assert rss["huge"]["error"] and rss["small"]["error"]
    assert rss["huge"]["seconds"] < TIME_LIMIT + rss["small"]["seconds"]
    assert rss["huge"]["peak_kb"] < rss["small"]["peak_kb"] + 100_000, rss  # reading it would add 400 MB


# A parent of one child: its RUSAGE_CHILDREN peak is that child's peak resident size.
_MEASURE = """
import json, resource, subprocess, sys, time
start = time.perf_counter()
done = subprocess.run(sys.argv[1:], capture_output=True, text=True)
print(json.dumps({"peak_kb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, "rc": done.returncode,
                  "seconds": time.perf_counter() - start, "stderr": done.stderr}))
"""


def _cli_peak_rss(graph: str, tmp_path, name: str, length: int) -> dict:
    """``python -m apic replay --input x=<a .npy of ``length`` float32>`` (sparse), refused: peak RSS and time."""
    header = "{'descr': '<f4', 'fortran_order': False, 'shape': (%d,), }" % length
    header += " " * (117 - len(header)) + "\n"
    path = tmp_path / f"{name}.npy"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode())
        f.truncate(f.tell() + 4 * length)  # a hole: the file has its full size and uses no disk
    command = [sys.executable, "-m", "apic", "replay", graph, "--input", f"x={path}"]
    done = subprocess.run([sys.executable, "-c", _MEASURE, *command], env=child_env(), capture_output=True,
                          text=True, timeout=300)
    result = json.loads(done.stdout)
    result["error"] = result["rc"] == 2 and f"holds float32 ({length},)" in result["stderr"]
    return result
