#!/usr/bin/env bash
# Run CI as a fresh machine would: a clean clone of HEAD, every cache apic, Warp and Numba use pointed at empty
# folders (XDG_CACHE_HOME, NUMBA_CACHE_DIR), CI=true; then print .ci/run's per-step times and
# the slowest test files with where their time went (scripts/ci_timings.py). Takes as long as CI (about an hour
# cold on a 2-core machine). pip's download cache is kept: it is not what CI's time is about.
# Warp's kernel cache follows XDG_CACHE_HOME, a folder per warp-lang as on a CI machine: one WARP_CACHE_PATH for
# both versions would make each Warp warn about the other's files on every process's stderr, which the CLI's
# one-error-line tests count.
# usage: bash scripts/ci_cold.sh [WORK_FOLDER]   (default: a new temporary folder, kept for the logs)
set -uo pipefail
root="$(git -C "$(dirname "$0")" rev-parse --show-toplevel)"
work="${1:-$(mktemp -d)}"
mkdir -p "$work/cache" "$work/timings"
rm -rf "$work/clone" && git clone -q "$root" "$work/clone"
[ -d "$root/../shared" ] && [ ! -e "$work/shared" ] && cp -r "$root/../shared" "$work/shared"
echo "clean clone in $work/clone; caches in $work/cache; log in $work/ci.log"
(
    cd "$work/clone" &&
    CI=true XDG_CACHE_HOME="$work/cache" NUMBA_CACHE_DIR="$work/cache/numba" \
        APIC_TEST_TIMINGS="$work/timings" PYTHONPATH="$work/clone/scripts${PYTHONPATH:+:$PYTHONPATH}" \
        PYTEST_ADDOPTS="-p ci_timings_plugin ${PYTEST_ADDOPTS:-}" bash .ci/run </dev/null
) >"$work/ci.log" 2>&1
status=$?
sed -n '/^=== summary/,$p' "$work/ci.log"
python3 "$root/scripts/ci_timings.py" "$work/timings"
exit "$status"
