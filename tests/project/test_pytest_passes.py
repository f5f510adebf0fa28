"""scripts/pytest_passes.sh runs each selected test exactly once: the parallel pass all but the tests marked
``serial``, the serial pass those alone, in the calling process rather than an xdist worker."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.install]

PASSES = Path(__file__).resolve().parents[2] / "scripts" / "pytest_passes.sh"
HAS_XDIST = importlib.util.find_spec("xdist") is not None

# Each test notes its name and where it ran (an xdist worker's id, or "main") in the file $LOG names.
SUITE = '''
import os
import pytest


def note(name):
    with open(os.environ["LOG"], "a") as f:
        f.write(f"{name} {os.environ.get('PYTEST_XDIST_WORKER', 'main')}\\n")


def test_plain():
    note("plain")


@pytest.mark.serial
def test_alone():
    note("alone")


@pytest.mark.picked
def test_picked():
    note("picked")


@pytest.mark.picked
@pytest.mark.serial
def test_picked_alone():
    note("picked_alone")
'''


def _run(tmp_path, **env) -> dict:
    """Run the small suite through the script; return {test name: [where it ran, ...]}."""
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    serial: alone\n    picked: chosen\n")
    (tmp_path / "test_suite.py").write_text(SUITE)
    log = tmp_path / "log"
    # not this process's pytest variables: run inside an xdist worker, PYTEST_XDIST_WORKER would reach the
    # inner tests and make them all look like workers' tests; nor the script's own (a CI step that selects its
    # tests with APIC_TEST_MARKERS would select none of the small suite's)
    parent_env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "APIC_TEST_"))}
    done = subprocess.run(["bash", str(PASSES), sys.executable, "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
                           "-c", str(tmp_path / "pytest.ini"), "--rootdir", str(tmp_path), str(tmp_path)],
                          env={**parent_env, "LOG": str(log), **env}, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    ran = {}
    for line in log.read_text().splitlines():
        name, where = line.split()
        ran.setdefault(name, []).append(where)
    return ran


def test_every_test_once_the_serial_ones_outside_the_workers(tmp_path):
    ran = _run(tmp_path)
    assert sorted(ran) == ["alone", "picked", "picked_alone", "plain"] and all(len(w) == 1 for w in ran.values()), ran
    assert ran["alone"] == ["main"] and ran["picked_alone"] == ["main"], ran
    if HAS_XDIST:  # the others ran in the parallel pass's workers
        assert ran["plain"][0].startswith("gw") and ran["picked"][0].startswith("gw"), ran


def test_a_marker_expression_chooses_the_tests_of_both_passes(tmp_path):
    ran = _run(tmp_path, APIC_TEST_MARKERS="picked")
    assert sorted(ran) == ["picked", "picked_alone"] and ran["picked_alone"] == ["main"], ran


def test_one_job_is_one_ordinary_pass(tmp_path):
    ran = _run(tmp_path, APIC_TEST_JOBS="1")
    assert ran == {"plain": ["main"], "alone": ["main"], "picked": ["main"], "picked_alone": ["main"]}, ran
