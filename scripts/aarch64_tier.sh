#!/usr/bin/env bash
# The emulated AArch64 tier: apic on an AArch64 Python, Warp and Numba, run under QEMU's user-mode emulator
# (qemu-aarch64 -L <root>) on an x86-64 host. Everything comes from registries through their own clients:
#   * the emulator: Debian's qemu-user (apt-get install);
#   * an AArch64 userland: Debian's arm64 python3.11 and the libraries it and the wheels need
#     (dpkg --add-architecture arm64; apt-get download; dpkg -x into a root folder);
#   * the Python packages: PyPI's aarch64 wheels (pip download --platform manylinux_2_34_aarch64), installed
#     into a site folder with `pip install --target` run by the host's pip.
# Kept under a cache folder ($APIC_AARCH64_CACHE, default ~/.cache/apic-aarch64), keyed by the versions, with
# Warp's kernel cache for the tier (the first compile of a module under emulation takes about 70 s on 2 cores).
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
WARP_VERSION="${APIC_AARCH64_WARP:-1.19.0}"
PYV=3.11
CACHE="${APIC_AARCH64_CACHE:-$HOME/.cache/apic-aarch64}"
# the wheels, pinned where apic pins them and otherwise as pip resolves them for cp311 aarch64 (pytest: to
# debug inside the emulator; the tier's checks do not use it)
WHEELS=("warp-lang==${WARP_VERSION}" numpy numba llvmlite "msgpack>=1.0" pytest)
# the arm64 packages whose dependency closure makes the root: Python, and the C++ runtime Warp and LLVM use
ROOT_PACKAGES=(python3.11 libstdc++6 libgcc-s1)
# a change to what is installed is a new cache folder
KEY="bookworm-py${PYV}-warp${WARP_VERSION}-$(echo "${WHEELS[*]} ${ROOT_PACKAGES[*]}" | sha256sum | cut -c1-8)"
ROOT="$CACHE/$KEY/root"
SITE="$CACHE/$KEY/site"
DEBS="$CACHE/$KEY/debs"
KERNELS="$CACHE/$KEY/warp-kernels"
WORK="${APIC_AARCH64_WORK:-$(mktemp -d)}"
# the x86-64 half (saving the files AArch64 loads, loading AArch64's): a Python with apic and warp-lang
HOST_PYTHON="${APIC_AARCH64_HOST_PYTHON:-$REPO/.venv-warp-${WARP_VERSION}/bin/python}"

log() { echo "[aarch64 $(date +%H:%M:%S)] $*"; }

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

setup() {
    host_tools
    make_root
    make_site
    mkdir -p "$KERNELS" "$CACHE/$KEY/home/.cache"
}

# apy ARGS...: the emulated AArch64 Python, with the site folder and this checkout on its path. Its caches
# (Warp's kernels, Numba's, apic's) are the tier's own, never the host's: an x86-64 Warp and an AArch64 one
# must not share a kernel cache.
apy() {
    env -i PATH=/usr/bin:/bin HOME="$CACHE/$KEY/home" XDG_CACHE_HOME="$CACHE/$KEY/home/.cache" LANG=C.UTF-8 \
        PYTHONPATH="$REPO:$SITE:$REPO/tests" PYTHONDONTWRITEBYTECODE=1 APIC_AARCH64_KERNELS="$KERNELS" \
        WARP_CACHE_PATH="$KERNELS" NUMBA_CACHE_DIR="$CACHE/$KEY/numba" \
        qemu-aarch64 -L "$ROOT" "$ROOT/usr/bin/python$PYV" "$@"
}

run() {
    local start=$SECONDS
    mkdir -p "$WORK/aarch64" "$WORK/x86-64"
    if [ -x "$HOST_PYTHON" ]; then
        log "x86-64: the tier's graph saved with and without source (host Python)"
        PYTHONPATH="$REPO:$REPO/tests" "$HOST_PYTHON" tests/aarch64/tier.py save-host "$WORK/x86-64"
    else
        echo "aarch64 tier: no host Python with apic at $HOST_PYTHON (APIC_AARCH64_HOST_PYTHON)" >&2; return 1
    fi
    log "AArch64: eager, capture, live replay, save (one emulated process)"
    apy tests/aarch64/tier.py save "$WORK/aarch64"
    log "AArch64: load in a fresh process, replay, threads=2, the x86-64 files"
    apy tests/aarch64/tier.py load "$WORK/aarch64" "$WORK/x86-64"
    log "AArch64: the x86-64 golden files (tests/data/golden)"
    apy tests/aarch64/tier.py golden
    log "AArch64: the CLI's replay and inspect"
    local outputs=() name
    for name in x acc out wide counter; do outputs+=(--output "$name=$WORK/aarch64/cli_$name.npy"); done
    apy -m apic replay "$WORK/aarch64/graph.wrp" --iters 2 "${outputs[@]}"
    apy -m apic inspect "$WORK/aarch64/graph.wrp" >"$WORK/inspect.txt"
    grep -q "loads here: yes" "$WORK/inspect.txt"
    log "x86-64: the AArch64 files (compiled here from source; objects refused), the CLI's outputs"
    PYTHONPATH="$REPO:$REPO/tests" "$HOST_PYTHON" tests/aarch64/tier.py load-host "$WORK/aarch64"
    log "AArch64: python -m apic demo"
    (cd "$WORK" && apy -m apic demo --frames 20)
    log "run: $((SECONDS - start)) s"
}

# golden: the AArch64 file the ordinary suite loads on x86-64 (tests/aarch64/test_aarch64_golden.py), written
# once into tests/data/golden/aarch64-v3-warp<version>/ (never over a folder already there)
golden() {
    local into="$REPO/tests/data/golden/aarch64-v3-warp${WARP_VERSION}"
    [ -e "$into" ] && { echo "aarch64 tier: $into exists; golden files are never rewritten" >&2; return 1; }
    setup
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
