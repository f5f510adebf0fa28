"""examples/c/ as its README runs it: the script captures, saves and exports the demo scene, CMake builds the C
program against the export's package config (and pkg-config against its .pc), and what it prints is what the
Python replay of the same file gives."""

from __future__ import annotations

import shutil
import subprocess
import sys

import numpy as np
import pytest

import apic
import fork_server
from apic.c_library.from_graph import python_replay
from export_helpers import bare_env
from persist_helpers import REPO, child_env

pytestmark = [pytest.mark.warp_version, pytest.mark.interpreter, pytest.mark.install]

EXAMPLE = f"{REPO}/examples/c"


def _expected(stem) -> str:
    graph, lines = apic.capture_load(f"{stem}.wrp"), []
    for frame in range(1, 121):
        x = np.frombuffer(python_replay(graph, {}, {}, 1)["x"], np.float32).reshape(-1, 3)
        if frame % 20 == 0:
            lines.append(f"frame {frame:3d}: free end at height {x[-1, 1]:.4f}")
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    folder = tmp_path_factory.mktemp("example")
    done = fork_server.run([sys.executable, f"{EXAMPLE}/save_chain.py", str(folder / "chain")], env=child_env(),
                           capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    return folder


def test_cmake_project_builds_and_runs_as_python_replays(exported):
    if shutil.which("cmake") is None:
        pytest.skip("no cmake on this machine")
    build = exported / "c"
    for command in (["cmake", "-S", EXAMPLE, "-B", str(build), f"-Dchain_DIR={exported / 'chain'}"],
                    ["cmake", "--build", str(build)]):
        done = subprocess.run(command, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stdout + done.stderr
    done = subprocess.run([str(build / "chain_demo")], env=bare_env(), capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout == _expected(exported / "chain")


def test_pkg_config_file_builds_the_program(exported):
    if shutil.which("pkg-config") is None:
        pytest.skip("no pkg-config on this machine")
    flags = subprocess.run(["pkg-config", "--cflags", "--libs", str(exported / "chain" / "chain.pc")],
                           capture_output=True, text=True, timeout=60)
    assert flags.returncode == 0, flags.stderr
    done = subprocess.run(["cc", f"{EXAMPLE}/main.c", *flags.stdout.split(), "-o", str(exported / "pc_demo")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    run = subprocess.run([str(exported / "pc_demo")], env=bare_env(), capture_output=True, text=True, timeout=60)
    assert run.returncode == 0 and run.stdout == _expected(exported / "chain")
