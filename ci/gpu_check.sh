#!/usr/bin/env bash
# The GPU check (course_lib/bench/gpu_check.py): parity with Hugging Face under bf16, training throughput, every
# method and every notebook's paper preset for a few steps, two GPUs when there are two. One report file.
#   bash ci/gpu_check.sh                                  # on a GPU machine: bert-base shape, about 5 minutes
#   bash ci/gpu_check.sh --device cpu --size tiny         # anywhere: the same checks on a tiny model
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}"
export TQDM_DISABLE=1 HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 MPLBACKEND=Agg PYTHONUNBUFFERED=1
exec "$PY" -m course_lib.bench.gpu_check "$@"
