#!/usr/bin/env bash
# Run the test suite with one Python in two passes: first every test that may share the machine, in
# parallel (pytest-xdist: APIC_TEST_JOBS workers, default 2, each test file in one worker so that its
# module fixtures are built once), then the tests marked `serial` (timing, process-wide resources,
# thread counts), one at a time. Together the two passes run each selected test exactly once.
# Usage: bash scripts/pytest_passes.sh PYTHON [pytest args...]
#   APIC_TEST_MARKERS  a marker expression choosing the tests (.ci/run: warp_version, interpreter, install);
#                      default: all of them. Pass it here rather than -m, which would replace the split.
#   APIC_TEST_JOBS=1   (or a Python without pytest-xdist) one pass, every test in one process, in order.
set -uo pipefail
python="$1"
shift
select="${APIC_TEST_MARKERS:-}"
jobs="${APIC_TEST_JOBS:-2}"
both() {  # EXPR: EXPR and the chosen tests' expression
    if [ -n "$select" ]; then echo "($1) and ($select)"; else echo "$1"; fi
}
pass() {  # LABEL MARKER_EXPRESSION PYTEST_ARGS...: run one pass, say how long it took
    local label="$1" expression="$2" start=$SECONDS rc=0
    shift 2
    "$python" -m pytest ${expression:+-m "$expression"} "$@" || rc=$?
    [ "$rc" != 5 ] || rc=0  # 5: no test selected (a pass with nothing to run is not a failure)
    echo "--- ${label}: $(( SECONDS - start )) s, exit status ${rc}"
    return "$rc"
}
if [ "$jobs" -le 1 ] || ! "$python" -c "import xdist" >/dev/null 2>&1; then
    pass "tests (one process)" "$select" "$@"
    exit $?
fi
status=0
pass "parallel pass (${jobs} workers)" "$(both "not serial")" -n "$jobs" --dist loadfile "$@" || status=$?
pass "serial pass" "$(both serial)" "$@" || status=$?
exit "$status"
