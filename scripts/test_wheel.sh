#!/usr/bin/env bash
# The package as users get it. Build the wheel and the sdist once (python -m build); for each warp-lang
# version, install the wheel (not editable) into a fresh venv, make that venv read-only, and from folders
# outside the checkout run the README's first five minutes (scripts/first_five_minutes.py: demo, a capture
# of one's own, save, inspect, replay, profile, picture). Then the test suite from a copy of tests/ (and of
# the files the tests read, apic/ left out), so that `import apic` is the installed package
# (APIC_TEST_INSTALLED=1: tests/conftest.py stops unless apic comes from site-packages; the suite includes
# `bench --quick`): the files that can behave differently installed than from a checkout (marked `install`,
# tests/README.md) on every version, in two passes (scripts/pytest_passes.sh).
# Usage: bash scripts/test_wheel.sh [--prepare] [VERSION[=MARKERS]...]   (default: 1.19.0 1.12.1)
#   --prepare  only build, install and warm (below), into APIC_WHEEL_DIR, for a later run to use: .ci/run starts
#              it in the background while the earlier steps run (downloads and installs wait on the network and
#              the disk; the warming uses a core those steps leave idle).
#   APIC_WHEEL_DIR=DIR  work in DIR and leave it there (default: a temporary folder, removed at the end); what a
#              --prepare left there (the wheel, the suite's copy, a venv per version) is used as it is.
#   VERSION=MARKERS runs the tests that marker expression chooses there instead of those marked `install`:
#   .ci/run gives "1.12.1=warp_version or install", so that the other end of the range runs its version checks
#   and its install checks in one run, against the installed wheel (a test marked `warp_version` and not
#   `install` behaves the same installed as from a checkout: the marker rules say so).
#
# Read-only: root ignores file permissions, so as root every command runs in a private mount namespace
# (unshare --mount) where the venv is bind-mounted read-only; as another user, `chmod -R a-w` on the venv
# does it. Either way a write into the installed package is tried first and must fail. The first five
# minutes run with an empty HOME and no cache variables, as a new user's: Warp's and Numba's caches must
# land in that HOME's ~/.cache.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/pins.sh
prepare_only=""
[ "${1:-}" != "--prepare" ] || { prepare_only=1; shift; }
versions=("$@")
[ "${#versions[@]}" -gt 0 ] || versions=(1.19.0 1.12.1)
if [ -n "${APIC_WHEEL_DIR:-}" ]; then
    work="$APIC_WHEEL_DIR"
    mkdir -p "$work"
else
    work="$(mktemp -d "${TMPDIR:-/tmp}/apic-wheel.XXXXXX")"
    trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT
fi
log="$work/log${prepare_only:+-prepare}"  # a --prepare in the background and a run may overlap
quietly() {  # run "$@" with its chatter in the log, shown only if it fails
    "$@" >"$log" 2>&1 || { cat "$log"; echo "error: $*" >&2; return 1; }
}
took() { echo "    ($(( SECONDS - $1 )) s)"; }
copy_tree() {  # DEST PATH...: the checkout's PATHs into DEST, less Python's caches and built docs. A test run in the
    # checkout may be writing there (.ci/run prepares beside one): a file that vanishes or changes while copied is
    # tar's status 1, not an error.
    mkdir -p "$1"
    local dest="$1"
    shift
    { tar -c --warning=no-file-changed --warning=no-file-removed --exclude=__pycache__ --exclude='*.py[co]' \
        --exclude=docs/_build "$@" || [ $? = 1 ]; } | tar -x -C "$dest"
}

readonly_run() {  # VENV COMMAND...: run COMMAND with VENV read-only to it
    local venv="$1"
    shift
    if [ "$(id -u)" != 0 ]; then
        "$@"
    else
        unshare --mount --propagation private bash -c \
            'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" && exec "$@"' "$venv" "$@"
    fi
}

if [ ! -e "$work/dist/.built" ]; then  # else a --prepare built it
    start=$SECONDS
    echo "=== build: wheel and sdist ==="
    quietly python3 -m venv "$work/build"
    quietly "$work/build/bin/python" -m pip install build
    # from a copy of what the sdist holds (MANIFEST.in): setuptools writes apic_warp.egg-info where it builds, and
    # .ci/run runs this beside scripts/test.sh's installs from the checkout
    copy_tree "$work/source" apic tests docs scripts examples benchmarks CHANGELOG.md README.md LICENSE MANIFEST.in \
        pyproject.toml
    quietly "$work/build/bin/python" -m build --outdir "$work/dist" "$work/source"
    touch "$work/dist/.built"
    took $start
fi
wheel="$(ls "$work"/dist/apic_warp-*-py3-none-any.whl)"
ls "$work/dist"

# The suite's copy: everything the tests read except the package itself.
outside="$work/outside"
if [ ! -e "$outside/.copied" ]; then
    rm -rf "$outside"
    copy_tree "$outside" tests scripts examples benchmarks docs README.md CHANGELOG.md LICENSE pyproject.toml
    touch "$outside/.copied"
fi

write_probe='
import os, sys, sysconfig, apic
site = os.path.realpath(sysconfig.get_paths()["purelib"])
if not os.path.realpath(apic.__file__).startswith(site + os.sep):
    sys.exit(f"error: apic was imported from {apic.__file__}, not from {site}")
try:
    open(os.path.join(os.path.dirname(apic.__file__), "write-probe"), "w")
except OSError as error:
    print(f"read-only: {error}")
else:
    sys.exit("error: the installed package is writable here: the read-only check would prove nothing")
'
status=0
for choice in "${versions[@]}"; do
    version="${choice%%=*}"
    markers="install"  # the files that can behave differently installed (see below)
    [ "$choice" = "$version" ] || markers="${choice#*=}"
    echo "=== warp-lang ${version}: the installed wheel, read-only ==="
    venv="$work/venv-${version}"
    # beside the venv, written once it is read-only: .ci/run starts a run when it appears
    installed="$venv.installed"
    if [ ! -e "$installed" ]; then  # else a --prepare installed it
        start=$SECONDS
        rm -rf "$venv"
        quietly python3 -m venv "$venv"
        quietly "$venv/bin/python" -m pip install "${wheel}[test,plot]" "warp-lang==${version}"
        # cuda-python for the suite's offline driver checks, as scripts/test.sh
        "$venv/bin/python" -m pip install -q "${wheel}[cuda]" >"$log" 2>&1 || echo "note: cuda-python not installed; its offline checks will skip"
        # torch for a run wider than `install` (the version checks pass torch tensors), as scripts/test.sh installs it
        if [ "$markers" != install ]; then
            "$venv/bin/python" -m pip install -q "$TORCH_PIN" >"$log" 2>&1 || echo "note: torch not installed; torch tests will skip"
        fi
        [ "$(id -u)" = 0 ] || chmod -R a-w "$venv"
        touch "$installed"
        took $start
    fi
    echo "installed $(basename "$wheel") with warp-lang ${version}"
    if [ -n "$prepare_only" ]; then
        # Warm the caches the run below reads (scripts/warm_caches.py), as that run: read-only, from the copy,
        # with its environment, at the lowest priority: it takes only what the steps running beside it leave.
        start=$SECONDS
        (cd "$outside" && readonly_run "$venv" env -u PYTHONPATH nice -n 19 \
            "$venv/bin/python" "$outside/scripts/warm_caches.py" "$outside/tests") || echo "note: warming failed"
        took $start
        continue
    fi

    # the installed package (not a checkout: cd away from it) must refuse a write, or nothing below proves anything
    (cd "$work" && readonly_run "$venv" env -u PYTHONPATH "$venv/bin/python" -c "$write_probe")

    echo "--- first five minutes (a new user: empty HOME) ---"
    start=$SECONDS
    home="$work/home-${version}"
    mkdir "$home"
    # cd to $work: the walk and bench must never see the checkout (first_five_minutes.py walks in a folder of its own)
    if (cd "$work" && readonly_run "$venv" env -u XDG_CACHE_HOME -u NUMBA_CACHE_DIR -u WARP_CACHE_PATH -u PYTHONPATH \
            HOME="$home" "$venv/bin/python" "$outside/scripts/first_five_minutes.py" --keep "$work/walk-${version}"); then
        # Numba's compiled replay loops went to the user's cache folder (nothing could go beside apic's files)
        if ! ls "$home"/.cache/numba/*/*.nbi >/dev/null 2>&1; then
            echo "FAILED: no Numba cache in $home/.cache/numba" >&2
            status=1
        fi
    else
        status=1
    fi
    took $start

    # The files where an install differs from a checkout (caches, the CLI and its entry point, saved files,
    # first use, the package's own sources, the wheel's metadata): marked `install` in the files themselves
    # (tests/project/test_ci_markers.py checks that every file decides). scripts/test.sh ran every test from
    # the checkout already; the whole suite here again cost CI about 11 minutes (APIC_WHEEL_FULL_SUITE=1 runs it).
    [ -z "${APIC_WHEEL_FULL_SUITE:-}" ] || markers=""
    echo "--- the test suite against the installed package (from $outside): ${markers:-every test} ---"
    start=$SECONDS
    # tests/clients is the client tier, run by scripts/test.sh in a venv of its own. Nothing of the checkout on
    # the path, but for scripts/ci_cold.sh's per-file timings the copy's scripts/ (its pytest plugin; no apic there)
    plugin_path=()
    [ -z "${APIC_TEST_TIMINGS:-}" ] || plugin_path=("PYTHONPATH=$outside/scripts")
    (cd "$outside" && APIC_TEST_INSTALLED=1 APIC_TEST_MARKERS="$markers" readonly_run "$venv" env -u PYTHONPATH \
        "${plugin_path[@]}" bash "$outside/scripts/pytest_passes.sh" "$venv/bin/python" -q -p no:cacheprovider \
        --ignore=tests/clients tests) || status=1
    took $start
done
exit "$status"
