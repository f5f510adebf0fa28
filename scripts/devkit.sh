#!/usr/bin/env bash
# Build the kit that brings warp-lang (and the client packages) onto a GPU machine that has Python 3.12 but no
# warp-lang and no network, in as few uploads as its 64 MiB per command allows.
#
# Each site is the wheels for CPython 3.12 on manylinux x86-64, unpacked into one folder (Warp's bundled
# examples and tests left out), packed as one tar.xz and split into parts of at most 57 MiB. Each part goes
# into a folder of its own, so that a part plus the working tree fits into one upload:
#   site119: warp-lang 1.19.0 + mujoco, mujoco-core, mujoco-studio, mujoco-warp, glfw, pyopengl and newton
#            (119 MB: 2 parts);
#   site112: warp-lang 1.12.1 only (87 MB: 2 parts), for the check's second-warp job.
# The image's own numpy, numba, absl-py and etils serve both sites. Building takes a few minutes here (xz -9).
#
# usage (from the project's root): bash scripts/devkit.sh [--no-second]
# makes:  .devkit/a1 .devkit/a2 (site119), .devkit/b1 .devkit/b2 (site112), .devkit/bin (install_site.sh and
#         the SHA-256 of each site), and adds /.devkit/ to the repository's info/exclude.
#
# On the GPU machine, one command per part folder, back to back (the parts wait in /tmp between them):
#   1. with .devkit/a1:  mkdir -p /tmp/apic-kit && cp .devkit/a1/* /tmp/apic-kit/ && nvidia-smi -L
#   2. with .devkit/a2:  cp .devkit/a2/* /tmp/apic-kit/
#   3. with .devkit/b1:  cp .devkit/b1/* /tmp/apic-kit/
#   4. with .devkit/b2 and .devkit/bin:
#        cp .devkit/b2/* /tmp/apic-kit/ && bash .devkit/bin/install_site.sh site119 /tmp/apic-site &&
#        bash .devkit/bin/install_site.sh site112 /tmp/apic-site-1.12 &&
#        printf '#!/bin/sh\nPYTHONPATH=/tmp/apic-site-1.12:$PWD exec python3 "$@"\n' > /tmp/py112 && chmod +x /tmp/py112 &&
#        PYTHONPATH=/tmp/apic-site:$PWD APIC_SECOND_PYTHON=/tmp/py112 bash scripts/gpu_check.sh --out /tmp/gres ...
#   (without the second site: steps 1, 2, then the last with .devkit/bin, installing site119 only.)
set -euo pipefail
second=1
[[ "${1:-}" == "--no-second" ]] && second=0
root="$(git rev-parse --show-toplevel)"
cd "$root"
excl=$(git rev-parse --git-path info/exclude)
mkdir -p "$(dirname "$excl")"
grep -qxF "/.devkit/" "$excl" 2>/dev/null || echo "/.devkit/" >> "$excl"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
rm -rf .devkit && mkdir -p .devkit/bin

site() {  # site NAME FOLDER_A FOLDER_B PACKAGE==VERSION...
    local name="$1" a="$2" b="$3"
    shift 3
    mkdir -p "$work/$name/whl" "$work/$name/site"
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_34_x86_64 --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
        --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d "$work/$name/whl" "$@"
    for wheel in "$work/$name/whl"/*.whl; do
        python3 -m zipfile -e "$wheel" "$work/$name/site"
    done
    rm -rf "$work/$name/site/warp/examples" "$work/$name/site/warp/tests"
    tar -C "$work/$name/site" -cf - . | xz -9 -T0 > "$work/$name.tar.xz"
    (cd "$work" && sha256sum "$name.tar.xz") > ".devkit/bin/$name.sha256"
    split -n 2 -d -a 1 "$work/$name.tar.xz" "$work/$name.part"
    mkdir -p ".devkit/$a" ".devkit/$b"
    mv "$work/$name.part0" ".devkit/$a/" && mv "$work/$name.part1" ".devkit/$b/"
}

site site119 a1 a2 warp-lang==1.19.0 mujoco==4.0.0 mujoco-core==4.0.0 mujoco-studio==4.0.0 mujoco-warp==4.0.0 \
    glfw==2.11.0 pyopengl==3.1.10 newton==1.8.0
[[ $second == 1 ]] && site site112 b1 b2 warp-lang==1.12.1

cat > .devkit/bin/install_site.sh <<'EOF'
#!/usr/bin/env bash
# usage: install_site.sh NAME DEST: join /tmp/apic-kit/NAME.part*, check its SHA-256, unpack the tar.xz into DEST
set -euo pipefail
name="$1"; dest="$2"; bin="$(cd "$(dirname "$0")" && pwd)"
cat /tmp/apic-kit/"$name".part* > /tmp/"$name".tar.xz
(cd /tmp && sha256sum -c "$bin/$name.sha256")
rm -rf "$dest" && mkdir -p "$dest"
python3 - "$name" "$dest" <<'PY'
import sys, tarfile, time
t = time.time()
with tarfile.open(f"/tmp/{sys.argv[1]}.tar.xz", "r:xz") as tar:
    tar.extractall(sys.argv[2], filter="tar")
print(f"unpacked {sys.argv[1]} into {sys.argv[2]} in {time.time() - t:.1f} s")
PY
rm -f /tmp/"$name".tar.xz
EOF
du -sh .devkit/*
