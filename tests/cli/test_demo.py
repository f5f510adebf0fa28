"""The demo runs end to end and finds eager and replay identical."""

import sys

import fork_server
import pytest

pytestmark = [pytest.mark.warp_version, pytest.mark.interpreter, pytest.mark.install]


def test_demo_runs_and_matches():
    result = fork_server.run(
        [sys.executable, "-m", "apic", "demo", "--frames", "3"], capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr
    assert "final state identical (bit for bit): yes" in result.stdout
