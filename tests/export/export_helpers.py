"""What the export tests share: build the C programs in this folder against an exported library, run them
as processes with no Python, and read what they wrote."""

from __future__ import annotations

import os
import subprocess

import numpy as np
import warp as wp

import apic
from apic.demo import Chain

HERE = os.path.dirname(os.path.abspath(__file__))
CC = os.environ.get("CC", "cc")


def build(program: str, outdir, name: str, binary, libraries=()) -> str:
    """Compile ``program`` (a .c file here) against the export ``name`` in ``outdir``; the binary's path."""
    command = [CC, "-O1", "-std=gnu11", f"-DGRAPH={name}", f'-DGRAPH_HEADER="{name}.h"', f"-I{outdir}", "-o",
               str(binary), os.path.join(HERE, program), f"-L{outdir}", f"-l{name}", f"-Wl,-rpath,{outdir}", "-pthread",
               *libraries]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return str(binary)


def bare_env() -> dict:
    """An environment with nothing of Python in it (no PYTHONPATH, PYTHONHOME, virtual environment)."""
    return {"PATH": "/usr/bin:/bin", "LANG": "C"}


def run(binary: str, steps: list[str], cwd) -> subprocess.CompletedProcess:
    """Run ``binary`` with ``steps`` (runner.c's) in a process with no Python."""
    return subprocess.run([binary, *map(str, steps)], cwd=cwd, env=bare_env(), capture_output=True, text=True,
                          timeout=300)


def dumped(folder, names) -> dict[str, bytes]:
    """The bytes runner.c's ``d:`` step wrote for each binding in ``names``."""
    return {name: (folder / f"{name}.bin").read_bytes() for name in names}


def saved_demo(path, particles: int = 16, substeps: int = 2) -> Chain:
    """The demo scene's step, captured and saved at ``path`` (x and v inputs, x_prev an output); the chain (its
    state as saved)."""
    chain = Chain(particles=particles, substeps=substeps)
    with wp.ScopedCapture(device="cpu", apic=True) as capture:
        chain.step()
    apic.capture_save(capture.graph, path, inputs={"x": chain.x, "v": chain.v}, outputs={"x_prev": chain.x_prev})
    return chain


def exported(path, outdir, name: str) -> dict:
    """The export as users call it: ``apic.export`` (``apic.c_library.library.export`` behind it)."""
    return apic.export(path, outdir, name=name)


def as_bytes(array) -> bytes:
    return np.ascontiguousarray(array.numpy() if hasattr(array, "numpy") else array).tobytes()
