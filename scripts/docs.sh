#!/usr/bin/env bash
# Build the documentation (docs/: the markdown pages and the API reference from apic's docstrings) with Sphinx,
# every warning an error. Usage: bash scripts/docs.sh [OUT]   (default OUT: docs/_build/html)
# It makes its own venv, .venv-docs (apic editable with warp-lang 1.19.0 and the pinned `docs` extra of
# pyproject.toml); PYTHON=/path/to/python builds with that interpreter instead, installing the docs extra
# into it (apic must import there).
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-docs/_build/html}"
python="${PYTHON:-}"
if [ -z "$python" ]; then
    [ -x .venv-docs/bin/python ] || python3 -m venv .venv-docs
    python=".venv-docs/bin/python"
    spec=(-e ".[docs]" "warp-lang==1.19.0")
else
    spec=(-e ".[docs]")
fi
# Into .venv-docs, installed once per pyproject.toml: a stamp there names the file's hash, so a second build
# skips pip (about 20 s) until the pins change. A given PYTHON is installed into every time.
stamp=".venv-docs/.apic-docs-$(sha256sum pyproject.toml | cut -c1-16)"
if [ -n "${PYTHON:-}" ] || [ ! -e "$stamp" ]; then
    log="$(mktemp)"
    trap 'rm -f "$log"' EXIT
    # installation chatter goes to a log that is shown only if the install fails
    "$python" -m pip install "${spec[@]}" >"$log" 2>&1 \
        || { cat "$log"; echo "error: installing the docs tools failed" >&2; exit 1; }
    [ -n "${PYTHON:-}" ] || touch "$stamp"
fi
# -W: a warning (a docstring Sphinx cannot parse, a broken cross-reference, a page no index lists) fails the
# build; --keep-going reports all of them first. -E: read every page again, so a warm build still checks all.
"$python" -m sphinx -W --keep-going -E -q -c docs -b html . "$out"
echo "docs built: $out/docs/index.html"
