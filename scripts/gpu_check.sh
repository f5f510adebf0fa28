#!/usr/bin/env bash
# The GPU check: on a machine with a CUDA GPU, run every test that needs one and the CUDA replay benchmark
# (benchmarks/cuda_replay.py: Warp's own replays next to apic's), in about 6 minutes at most, writing
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
# On the GPU machine (whose image has no warp-lang and no network), after `bash ../shared/device/prepare.sh`
# here has made .devkit/ (the warp-lang 1.19.0 wheel in 3 parts, git-ignored), three commands back to back,
# each uploading the folders named (`carry`), each one sent at once after the previous one returns:
#   1. carry .devkit/p1:
#        mkdir -p /tmp/apic-kit && cp .devkit/p1/part.* /tmp/apic-kit/ && nvidia-smi -L
#   2. carry .devkit/p2:
#        cp .devkit/p2/part.* /tmp/apic-kit/
#   3. carry .devkit/p3 and .devkit/bin:
#        cp .devkit/p3/part.* /tmp/apic-kit/ && bash .devkit/bin/install_on_device.sh && export PYTHONPATH=/tmp/apic-site:$PWD && bash scripts/gpu_check.sh
# If the machine was released in between (the installer says a part is missing or its SHA-256 does not
# match), start again at 1. While it is still up, a rerun needs only
#        export PYTHONPATH=/tmp/apic-site:$PWD && bash scripts/gpu_check.sh [--jobs cuda-gpu-tests]
set -uo pipefail
cd "$(dirname "$0")/.."
py="${PYTHON:-python3}"
exec "$py" scripts/gpu_check.py "$@"
