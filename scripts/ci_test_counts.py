"""How many tests each of CI's test runs selects (.ci/run's steps, by their marker expressions), counted by
pytest's collection, so that a change to the suite or to its markers can show that no run checks less.

Usage: python scripts/ci_test_counts.py [PYTHON]   (default: this Python; one with apic's test extras)
Collection happens in the given Python's warp-lang, so counts of a run on another warp-lang are what that
run would select, before any test of it skips there.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# each run of .ci/run that selects tests, and the marker expression it selects them with (scripts/test.sh,
# scripts/pytest_passes.sh, scripts/test_wheel.sh; tests/README.md's table)
RUNS = {
    "warp-lang 1.19.0 (whole suite)": "",
    "reference interpreter": "interpreter",
    "warp-lang 1.12.1 (the installed wheel)": "warp_version or install",
    "warp-lang 1.19.0 (the installed wheel)": "install",
    "serial pass (of the whole suite)": "serial",
}


def count(python: str, expression: str) -> int:
    """The number of tests pytest collects from tests/ for ``expression`` (all of them when empty)."""
    command = [python, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "tests"]
    if expression:
        command += ["-m", expression]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    found = re.search(r"(\d+)(?:/\d+)? tests? (?:collected|selected)", result.stdout)
    if result.returncode not in (0, 5) or not found:
        sys.exit(f"error: collecting {expression or 'all'} failed:\n{result.stdout[-2000:]}{result.stderr[-2000:]}")
    return int(found.group(1))


def main() -> None:
    python = sys.argv[1] if len(sys.argv) > 1 else sys.executable
    for run, expression in RUNS.items():
        print(f"{count(python, expression):6d}  {run}  ({expression or 'every test'})")


if __name__ == "__main__":
    main()
