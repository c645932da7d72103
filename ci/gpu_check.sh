#!/usr/bin/env bash
# `python -m benchmarks.gpu_check` from the repository root, offline, with its venv where there is one:
#   bash ci/gpu_check.sh [--device cpu --size tiny] [--sections parity,throughput,methods,notebooks,multi_gpu,loop]
#     [--loop-compile off,default,graphs] [--notebook-compile off|preset]
cd "$(dirname "$0")/.." && exec env TQDM_DISABLE=1 HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 MPLBACKEND=Agg PYTHONUNBUFFERED=1 "${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}" -m benchmarks.gpu_check "$@"
