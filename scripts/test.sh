#!/usr/bin/env bash
# Set up a virtual environment with apic and its test extras, then run the linter and the whole test suite
# (on two cores: scripts/pytest_passes.sh runs it in parallel, then the tests that must run alone).
# Usage: bash scripts/test.sh [WARP_VERSION] [pytest args...]   (default warp-lang 1.19.0)
# APIC_TEST_MARKERS=EXPR runs only the tests that marker expression chooses (.ci/run; tests/README.md).
# A first argument is taken as the version only when it looks like one (1.19.0, 1.12.1, 1.20.0rc1), so
# `bash scripts/test.sh -q` runs the default version with pytest's -q.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/pins.sh
warp_version="1.19.0"
if [ "$#" -gt 0 ] && [[ "$1" =~ ^[0-9]+\.[0-9]+(\.[0-9]+)?([a-z]+[0-9]*)?$ ]]; then
    warp_version="$1"
    shift
fi
if [ -n "${APIC_TEST_DRY_RUN:-}" ]; then  # say what would run, install nothing (tests/project/test_scripts.py)
    echo "warp-lang ${warp_version}; pytest arguments: $*"
    exit 0
fi
venv=".venv-warp-${warp_version}"
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
# installation chatter goes to a log that is shown only if the install fails
if ! { "$venv/bin/python" -m pip install --upgrade pip && "$venv/bin/python" -m pip install -e ".[test,plot]" "warp-lang==${warp_version}"; } >"$log" 2>&1; then
    cat "$log"; echo "error: installing apic with warp-lang ${warp_version} failed" >&2; exit 1
fi
# torch (CPU) is optional: the tests that pass torch tensors skip, saying so, without it.
"$venv/bin/python" -m pip install -q "$TORCH_PIN" >/dev/null 2>&1 || echo "note: torch not installed; torch tests will skip"
# Ray (apic's 'ray' extra) is optional too: with it, tests/distributed/test_ray.py runs apic.ray on a local Ray cluster
# (loopback only); without it those tests skip, saying so. Installed for the default version's run only.
if [ "$warp_version" = "1.19.0" ]; then
    "$venv/bin/python" -m pip install -q -e ".[ray]" >/dev/null 2>&1 || echo "note: ray not installed; the Ray tests will skip"
fi
# cuda-python (apic's 'cuda' extra, ~50 MB of wheels, no GPU needed) is optional too: with it,
# tests/cuda/test_cuda_python_offline.py checks every driver call apic makes against the real bindings.
"$venv/bin/python" -m pip install -q -e ".[cuda]" >/dev/null 2>&1 || echo "note: cuda-python not installed; its offline checks will skip"
# The client tier (tests/clients: mujoco-warp and newton, current releases) runs on warp-lang 1.19.0
# only, in a venv of its own so that the clients' dependencies never change the main suite's.
# Best effort: if they cannot be installed, it says so and the tier's tests skip, saying why. Installed in the
# background while the suite runs (the downloads wait on the network; pip's CPU at a low priority).
client_python=""
clients_install=""
if [ "$warp_version" = "1.19.0" ] && [ "${APIC_CLIENT_TIER:-1}" != "0" ]; then
    clients=".venv-clients"
    clients_log="$(mktemp)"
    trap 'rm -f "$log" "$clients_log"' EXIT
    { { [ -x "$clients/bin/python" ] || python3 -m venv "$clients"; } &&
        nice -n 10 "$clients/bin/python" -m pip install -e ".[test]" "warp-lang==${warp_version}" \
            mujoco-warp newton; } >"$clients_log" 2>&1 &
    clients_install=$!
fi
status=0
# The linter first (configured in pyproject.toml): a style or pyflakes error fails the run, after the tests.
"$venv/bin/python" -m ruff check . || { echo "error: ruff check found the problems above" >&2; status=1; }
bash scripts/pytest_passes.sh "$venv/bin/python" "$@" || status=$?
if [ -n "$clients_install" ]; then
    if wait "$clients_install"; then
        client_python="$clients/bin/python"
    else
        echo "note: mujoco-warp / newton could not be installed; the client tier (tests/clients) skips"
    fi
fi
if [ -n "$client_python" ]; then
    echo "=== client tier (mujoco-warp, newton) on warp-lang ${warp_version} ==="
    # one worker per client (each file in one worker): mujoco-warp and newton compile and run side by side
    "$client_python" -m pytest tests/clients -q -ra -n 2 --dist loadfile || status=$?
fi
exit "$status"
