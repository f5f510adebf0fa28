#!/usr/bin/env bash
# The emulated AArch64 tier: apic on an AArch64 Python, Warp and Numba, run under QEMU's user-mode emulator
# (qemu-aarch64 -L <root>) on an x86-64 host. Everything comes from registries through their own clients:
#   * the emulator: Debian's qemu-user (apt-get install);
#   * an AArch64 userland: Debian's arm64 python3.11 and the libraries it and the wheels need
#     (dpkg --add-architecture arm64; apt-get download; dpkg -x into a root folder);
#   * the Python packages: PyPI's aarch64 wheels (pip download --platform manylinux_2_34_aarch64), installed
#     into a site folder with `pip install --target` run by the host's pip.
# Kept under a cache folder ($APIC_AARCH64_CACHE, default $XDG_CACHE_HOME or ~/.cache, then apic-aarch64), keyed
# by what is installed, with Warp's kernel cache for the tier (the first compile of a module under emulation
# takes about 70 s on 2 cores).
#
# No binfmt_misc registration: that is a change to the whole host (every process on it would run AArch64
# binaries through this QEMU) and needs a privileged mount a CI container may not have. Each step below is
# its own emulated process started from this script, so "a fresh process" is a real one; the checks inside
# a process (tests/aarch64/) never start children.
#
# Usage: scripts/aarch64_tier.sh [setup|run|all|golden]   (default all: setup, then run)
set -euo pipefail
cd "$(dirname "$0")/.."
REPO="$PWD"
# The whole tier on WARP_VERSION, and on OTHER_VERSION (the other end of the supported range) what depends on
# the warp-lang version: capture, save, load in a fresh process, threads, CPU levels, the CLI, the demo
# (launches go through that version's launch-bounds ABI); OTHER_VERSION="" leaves it out. See run().
WARP_VERSION="${APIC_AARCH64_WARP:-1.19.0}"
OTHER_VERSION="${APIC_AARCH64_OTHER-1.12.1}"
PYV=3.11
CACHE="${APIC_AARCH64_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/apic-aarch64}"
# the wheels besides warp-lang, as pip resolves them for cp311 aarch64 (pytest: to debug inside the emulator;
# the tier's checks do not use it)
OTHER_WHEELS=(numpy numba llvmlite "msgpack>=1.0" pytest)
# the arm64 packages whose dependency closure makes the root: Python, and the C++ runtime Warp and LLVM use
ROOT_PACKAGES=(python3.11 libstdc++6 libgcc-s1)
# a change to what is installed is a new cache folder: the root is shared by the legs, the rest is per version
ROOT_KEY="bookworm-py${PYV}-$(echo "${ROOT_PACKAGES[*]}" | sha256sum | cut -c1-8)"
ROOT="$CACHE/$ROOT_KEY/root"
DEBS="$CACHE/$ROOT_KEY/debs"
WORK="${APIC_AARCH64_WORK:-$(mktemp -d)}"

use_version() {  # VERSION: the leg's wheels and folders (site, Warp's kernel cache, HOME)
    VERSION="$1"
    WHEELS=("warp-lang==${VERSION}" "${OTHER_WHEELS[@]}")
    LEG="$CACHE/${ROOT_KEY}-warp${VERSION}-$(echo "${WHEELS[*]}" | sha256sum | cut -c1-8)"
    SITE="$LEG/site"
    KERNELS="$LEG/warp-kernels"
    # the x86-64 half (saving the files AArch64 loads, loading AArch64's): a Python with apic and warp-lang
    HOST_PYTHON="${APIC_AARCH64_HOST_PYTHON:-$REPO/.venv-warp-${VERSION}/bin/python}"
}

log() { echo "[aarch64 ${VERSION:-} $(date +%H:%M:%S)] $*"; }

host_tools() {
    command -v qemu-aarch64 >/dev/null && return 0
    log "installing qemu-user (apt)"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq qemu-user >/dev/null
}

make_root() {
    [ -f "$ROOT/.done" ] && return 0
    log "arm64 userland into $ROOT"
    dpkg --print-foreign-architectures | grep -qx arm64 || dpkg --add-architecture arm64
    apt-get update -qq
    mkdir -p "$DEBS"
    local pkgs=()
    # the recursive dependency closure, arm64 packages only (arch: all ones such as tzdata are not needed)
    mapfile -t pkgs < <(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks \
        --no-replaces --no-enhances "${ROOT_PACKAGES[@]/%/:arm64}" \
        | grep -E '^[a-z0-9][^ <>]*:arm64$' | sort -u)
    log "${#pkgs[@]} arm64 packages"
    (cd "$DEBS" && apt-get download -qq "${pkgs[@]}" >/dev/null)
    rm -rf "$ROOT" && mkdir -p "$ROOT"
    for deb in "$DEBS"/*.deb; do dpkg -x "$deb" "$ROOT"; done
    # Debian's usrmerge: /lib -> usr/lib, so that the dynamic loader's path (/lib/ld-linux-aarch64.so.1) resolves
    [ -e "$ROOT/lib" ] || ln -s usr/lib "$ROOT/lib"
    [ -x "$ROOT/usr/bin/python$PYV" ] && [ -e "$ROOT/lib/ld-linux-aarch64.so.1" ]
    touch "$ROOT/.done"
}

make_site() {
    [ -f "$SITE/.done" ] && return 0
    log "aarch64 wheels into $SITE"
    rm -rf "$SITE" && mkdir -p "$SITE"
    PIP_ROOT_USER_ACTION=ignore python3 -m pip install -q --disable-pip-version-check --no-compile --target "$SITE" \
        --platform manylinux_2_34_aarch64 --platform manylinux_2_28_aarch64 --platform manylinux_2_17_aarch64 \
        --platform manylinux2014_aarch64 --only-binary=:all: --python-version "$PYV" --implementation cp \
        --abi "cp${PYV/./}" "${WHEELS[@]}"
    touch "$SITE/.done"
}

setup() {  # the emulator, the shared root, then each leg's site folder
    local version
    host_tools
    make_root
    for version in "$WARP_VERSION" ${OTHER_VERSION:+"$OTHER_VERSION"}; do
        use_version "$version"
        make_site
        mkdir -p "$KERNELS" "$LEG/home/.cache"
    done
    VERSION=""
}

# apy ARGS...: the emulated AArch64 Python, with the site folder and this checkout on its path. Its caches
# (Warp's kernels, Numba's, apic's) are the tier's own, never the host's: an x86-64 Warp and an AArch64 one
# must not share a kernel cache.
apy() {
    env -i PATH=/usr/bin:/bin HOME="$LEG/home" XDG_CACHE_HOME="$LEG/home/.cache" LANG=C.UTF-8 \
        PYTHONPATH="$REPO:$SITE:$REPO/tests" PYTHONDONTWRITEBYTECODE=1 APIC_AARCH64_KERNELS="$KERNELS" \
        WARP_CACHE_PATH="$KERNELS" NUMBA_CACHE_DIR="$LEG/numba" \
        qemu-aarch64 -L "$ROOT" "$ROOT/usr/bin/python$PYV" "$@"
}

cli() {  # DIR: `python -m apic replay` (its outputs DIR/cli_*.npy, checked by `tier.py load`) and `inspect`
    local outputs=() name
    log "AArch64: the CLI's replay and inspect"
    for name in x acc out wide counter; do outputs+=(--output "$name=$1/cli_$name.npy"); done
    apy -m apic replay "$1/graph.wrp" --iters 2 "${outputs[@]}"
    apy -m apic inspect "$1/graph.wrp" >"$1/inspect.txt"
    grep -q "loads here: yes" "$1/inspect.txt"
}

demo() {
    log "AArch64: python -m apic demo"
    mkdir -p "$WORK/demo-$VERSION"
    (cd "$WORK/demo-$VERSION" && apy -m apic demo --frames 20)
}

across_leg() {  # x86-64 <-> AArch64: each family's files loaded on the other, beside AArch64's own save and load
    local mine="$WORK/aarch64-$VERSION" theirs="$WORK/x86-64-$VERSION"
    mkdir -p "$mine" "$theirs"
    if [ ! -x "$HOST_PYTHON" ]; then
        echo "aarch64 tier: no host Python with apic at $HOST_PYTHON (APIC_AARCH64_HOST_PYTHON)" >&2; return 1
    fi
    log "x86-64: the tier's graph saved with and without source (host Python)"
    PYTHONPATH="$REPO:$REPO/tests" "$HOST_PYTHON" tests/aarch64/tier.py save-host "$theirs"
    log "AArch64: eager, capture, live replay, save (one emulated process)"
    apy tests/aarch64/tier.py save "$mine"
    cli "$mine"
    log "AArch64: load in a fresh process, replay, threads=2, the CLI's outputs, the x86-64 files"
    apy tests/aarch64/tier.py load "$mine" "$theirs"
    log "x86-64: the AArch64 files (compiled here from source; objects refused)"
    PYTHONPATH="$REPO:$REPO/tests" "$HOST_PYTHON" tests/aarch64/tier.py load-host "$mine"
}

golden_leg() {  # the x86-64 golden files on AArch64, and the demo
    log "AArch64: the x86-64 golden files (tests/data/golden)"
    apy tests/aarch64/tier.py golden
    demo
}

version_leg() {  # what depends on the warp-lang version, on AArch64 alone
    local mine="$WORK/aarch64-$VERSION"
    mkdir -p "$mine"
    log "AArch64: eager, capture, live replay, save (one emulated process)"
    apy tests/aarch64/tier.py save "$mine"
    cli "$mine"
    log "AArch64: load in a fresh process, replay, threads=2, the CLI's outputs"
    apy tests/aarch64/tier.py load "$mine"
    demo
}

# The legs: on WARP_VERSION across_leg and golden_leg, on OTHER_VERSION version_leg. Each is one emulated process
# at a time and they share nothing but the read-only root (the two on WARP_VERSION write different modules into
# its kernel cache, which Warp writes by renaming), so they run side by side: on 2 cores the tier takes about
# half its CPU time. Each leg's output is shown when all have ended.
run() {
    local start=$SECONDS status=0 leg version name i pids=() logs=()
    local legs=("$WARP_VERSION across_leg" "$WARP_VERSION golden_leg")
    [ -z "$OTHER_VERSION" ] || legs+=("$OTHER_VERSION version_leg")
    for leg in "${legs[@]}"; do
        read -r version name <<<"$leg"
        logs+=("$WORK/${name}-${version}.log")
        (use_version "$version"; t0=$SECONDS; "$name"; log "${name}: $((SECONDS - t0)) s") >"${logs[-1]}" 2>&1 &
        pids+=($!)
    done
    for i in "${!pids[@]}"; do
        wait "${pids[$i]}" || { status=1; echo "aarch64 tier: FAILED: ${legs[$i]}" >&2; }
    done
    cat "${logs[@]}"
    log "run: $((SECONDS - start)) s"
    return "$status"
}

# golden: the AArch64 file the ordinary suite loads on x86-64 (tests/aarch64/test_aarch64_golden.py), written
# once into tests/data/golden/aarch64-v3-warp<version>/ (never over a folder already there)
golden() {
    local into="$REPO/tests/data/golden/aarch64-v3-warp${WARP_VERSION}"
    [ -e "$into" ] && { echo "aarch64 tier: $into exists; golden files are never rewritten" >&2; return 1; }
    setup
    use_version "$WARP_VERSION"
    mkdir -p "$WORK/golden"
    apy tests/aarch64/tier.py save "$WORK/golden"
    mkdir -p "$into"
    cp -r "$WORK/golden/graph.wrp" "$WORK/golden/graph_modules" "$WORK/golden/objects.wrp" \
        "$WORK/golden/objects_modules" "$WORK/golden/expected.npz" "$into/"
}

[ -n "${APIC_AARCH64_WORK:-}" ] || trap 'rm -rf "$WORK"' EXIT
case "${1:-all}" in
    setup) setup ;;
    run) run ;;
    all) t0=$SECONDS; setup; log "setup: $((SECONDS - t0)) s"; run; log "tier: $((SECONDS - t0)) s" ;;
    golden) golden ;;
    *) echo "usage: $0 [setup|run|all|golden]" >&2; exit 2 ;;
esac
