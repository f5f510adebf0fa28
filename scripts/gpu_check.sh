#!/usr/bin/env bash
# The GPU check: on a machine with a CUDA GPU, run every test that needs one (conditional nodes included:
# tests/cuda/test_cuda_conditional_gpu.py) and the CUDA replay benchmark (benchmarks/cuda_replay.py: Warp's own
# replays next to apic's; mujoco-warp's GPU test and benchmarks/cuda_mujoco.py, both graph_conditional settings at
# 64 and 1,024 worlds, where mujoco-warp is importable; newton's pendulum example where newton is; the GPU tests
# again under a second warp-lang, 1.12.1, given by --second-python or APIC_SECOND_PYTHON; and, needing no GPU,
# parallel CPU replay's scaling on this machine's cores, the humanoid at 1,024 worlds on 1, 2, 4, 8 and 16 threads:
# benchmarks/parallel_scaling.py), in 9 minutes at most, writing
# gpu-check.json (the card, each job, each test's outcome, the figures) and gpu-check.log under $OUT if
# set, else ./gpu-results. Prints a short summary. No network needed.
#
# Exit status: 0 passed (skips are listed with their reasons, never counted as passes); 1 a job or test
# failed or timed out; 3 no GPU on this machine; 4 a GPU that Warp cannot use (the JSON says why); 2 the
# check itself broke. The JSON is written in every case.
#
# usage: bash scripts/gpu_check.sh [--jobs NAME,...] [--budget SECONDS] [--list]   (scripts/gpu_check.py --help)
#        PYTHON=/path/to/python bash scripts/gpu_check.sh    (default: python3)
#
# On a GPU machine whose image has no warp-lang and no network access: with the kit prepared beforehand in
# .devkit/ (git-ignored: the warp-lang 1.19.0 wheel split into 3 parts, p1 p2 p3, and its installer, bin),
# three commands back to back, each uploading the kit folders it names with the working tree:
#   1. with .devkit/p1:
#        mkdir -p /tmp/apic-kit && cp .devkit/p1/part.* /tmp/apic-kit/ && nvidia-smi -L
#   2. with .devkit/p2:
#        cp .devkit/p2/part.* /tmp/apic-kit/
#   3. with .devkit/p3 and .devkit/bin:
#        cp .devkit/p3/part.* /tmp/apic-kit/ && bash .devkit/bin/install_on_device.sh && export PYTHONPATH=/tmp/apic-site:$PWD && bash scripts/gpu_check.sh
# For the mujoco-warp jobs, bring its wheels too (here: pip download --no-deps for Python 3.12 of mujoco, mujoco-core,
# mujoco-warp and glfw into .devkit/clients, about 12 MiB), one more command before the last:
#        python3 -m pip install -q --no-index --no-deps --target /tmp/apic-clients .devkit/clients/*.whl
#   and PYTHONPATH=/tmp/apic-site:/tmp/apic-clients:$PWD in the last. A part and the clients together pass the
#   64 MiB a command may upload: keep them in separate commands.
# For the second warp-lang (1.12.1), install its wheel into a folder of its own in one more command (a kit like the
# first, or pip install --no-index --target /tmp/apic-site-1.12 from .devkit/warp-1.12.1/) and give the check
# a wrapper that puts it first on the path, e.g.
#        printf '#!/bin/sh\nPYTHONPATH=/tmp/apic-site-1.12:$PWD exec python3 "$@"\n' > /tmp/py112 && chmod +x /tmp/py112
#        APIC_SECOND_PYTHON=/tmp/py112 bash scripts/gpu_check.sh
# Fewer uploads: scripts/devkit.sh packs warp-lang 1.19.0 with the client packages (2 parts) and 1.12.1 (2 parts) as
# xz archives; its header has the four commands, the last of which runs this check with both.
# If the machine was released in between (the installer says a part is missing or its SHA-256 does not
# match), start again at 1. While it is still up, a rerun needs only
#        export PYTHONPATH=/tmp/apic-site:$PWD && bash scripts/gpu_check.sh [--jobs cuda-gpu-tests]
set -uo pipefail
cd "$(dirname "$0")/.."
py="${PYTHON:-python3}"
exec "$py" scripts/gpu_check.py "$@"
