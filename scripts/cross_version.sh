#!/usr/bin/env bash
# Cross-version round trips: save a graph under one warp-lang and replay it under another, both ways,
# comparing every output with the eager run bit for bit (see tests/cross_version.py).
# Usage: bash scripts/cross_version.sh [PYTHON_A PYTHON_B]
#   defaults: the virtual environments scripts/test.sh creates for warp-lang 1.12.1 and 1.19.0.
set -euo pipefail
cd "$(dirname "$0")/.."
a="${1:-.venv-warp-1.12.1/bin/python}"
b="${2:-.venv-warp-1.19.0/bin/python}"
for python in "$a" "$b"; do
    [ -x "$python" ] || { echo "cross_version.sh: no interpreter at $python (run scripts/test.sh first)" >&2; exit 2; }
done
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
"$a" tests/cross_version.py save "$work/a_to_b"
"$b" tests/cross_version.py check "$work/a_to_b"
"$b" tests/cross_version.py save "$work/b_to_a"
"$a" tests/cross_version.py check "$work/b_to_a"
