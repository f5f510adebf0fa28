"""scripts/test.sh reads its arguments as the README says: an optional warp-lang version, then pytest's."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

pytestmark = [pytest.mark.install]

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "test.sh"


def _dry_run(*args: str) -> str:
    env = {**os.environ, "APIC_TEST_DRY_RUN": "1"}
    done = subprocess.run(["bash", str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.mark.parametrize(
    "args, expected",
    [
        ((), "warp-lang 1.19.0; pytest arguments: "),
        (("-q",), "warp-lang 1.19.0; pytest arguments: -q"),
        (("1.12.1", "-q", "-x"), "warp-lang 1.12.1; pytest arguments: -q -x"),
        (("1.20.0rc1",), "warp-lang 1.20.0rc1; pytest arguments: "),
        (("tests/cli/test_cli.py", "-k", "1.2"), "warp-lang 1.19.0; pytest arguments: tests/cli/test_cli.py -k 1.2"),
        (("-k", "1.12.1"), "warp-lang 1.19.0; pytest arguments: -k 1.12.1"),
    ],
)
def test_a_version_is_recognised_by_its_form(args, expected):
    assert _dry_run(*args) == expected.strip()
