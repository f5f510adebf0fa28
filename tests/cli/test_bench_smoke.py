"""``python -m apic bench --quick`` runs end to end and reports every method on every workload.

A smoke test only: it checks the shape of the JSON and that the bit-for-bit checks ran, never a
timing (the machine running the tests may be slow or shared).
"""

import json
import math
import os
import shutil
import subprocess
import sys

import apic

import pytest

pytestmark = [pytest.mark.warp_version, pytest.mark.interpreter, pytest.mark.install]

PACKAGE = os.path.dirname(os.path.abspath(apic.__file__))  # the checkout's apic, or the installed wheel's
METHODS = ("warp_launch", "launch_objects", "apic_live", "apic_parallel", "apic_loaded", "warp_native", "floor")
ALWAYS_AVAILABLE = ("warp_launch", "launch_objects", "apic_live", "apic_parallel", "floor")


def _number(value) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value) and value > 0


def test_bench_quick_smoke(tmp_path):
    """Run as from an installed package: only the ``apic`` package is importable, away from the checkout."""
    site = tmp_path / "site"
    shutil.copytree(PACKAGE, site / "apic", ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp_path / "bench.json"
    env = dict(os.environ, PYTHONPATH=str(site))
    result = subprocess.run(
        [sys.executable, "-m", "apic", "bench", "--quick", "--no-progress", "--json", str(out)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "The bar" in result.stdout
    data = json.loads(out.read_text())

    assert [wl["key"] for wl in data["workloads"]] == ["W1-dim1", "W1-dim16", "W2", "W3", "W4"]
    assert data["ladder"], "the ladder of graph sizes is empty"
    for wl in data["workloads"] + data["ladder"]:
        assert set(wl["methods"]) == set(METHODS), wl["key"]
        for key, entry in wl["methods"].items():
            where = f"{wl['key']}/{key}"
            if key in ALWAYS_AVAILABLE:
                assert entry["available"], f"{where}: {entry['reason']}"
            if entry["available"]:
                assert entry["verified"] is True, where  # checked bit for bit against eager
                stats = entry["us_per_op"]
                assert _number(stats["min"]) and _number(stats["median"]), where
                assert stats["min"] <= stats["median"], where
            else:
                assert isinstance(entry["reason"], str) and entry["reason"], where
    assert data["checks"]["all_available_verified"] is True

    capture = data["capture"]
    for key in ("eager_launch", "apic_record", "apic_end", "apic_total"):
        assert _number(capture[key]["min"]), key
    assert (capture["warp_native_total"] is None) == ("warp_native_reason" in capture)

    for key in ("persistence", "persistence_distinct"):
        persistence = data[key]
        if persistence["available"]:
            assert persistence["verified"] is True, key  # the loaded graph replayed bit for bit
            assert _number(persistence["load_ms"]["min"]) and _number(persistence["save_ms"]["min"]), key
            assert _number(persistence["bytes_per_op"]), key
        else:
            assert persistence["reason"], key

    assert {item["key"].split(":")[0] for item in data["bar"]} >= {
        "tiny_vs_floor", "tiny_vs_warp_native", "compute_vs_floor", "capture_vs_eager", "load_10k"
    }
    for item in data["bar"]:
        assert item["pass"] in (True, False, None) and item["measured"]
