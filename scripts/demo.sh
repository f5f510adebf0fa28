#!/usr/bin/env bash
# Set up a virtual environment with apic, then run the built-in demo (eager vs captured simulation).
set -euo pipefail
cd "$(dirname "$0")/.."
venv=".venv-warp-1.19.0"
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/python" -m pip install -q -e . "warp-lang==1.19.0"
"$venv/bin/python" -m apic demo "$@"
