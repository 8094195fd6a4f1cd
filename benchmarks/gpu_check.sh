#!/usr/bin/env bash
# gradsight's overhead on a CUDA GPU, for a session lent one: one command, under 5 minutes.
#   bash benchmarks/gpu_check.sh [OUT_DIR]
# Checks that deferred reading records the same run on CUDA (defer_check.py), times the activation
# reductions (activation_ops.py), counts the tensor operations per step (op_counts.py), puts each mode beside its floor (floor.py), runs the interleaved overhead benchmark (plain vs gradsight
# defaults vs defaults read at once vs full detail) on the tiny
# BERT, the demo transformer and the CNN, then torch.autograd.detect_anomaly beside them (peers.py,
# the peers that are installed). Needs python3 with torch (CUDA) and transformers; no install.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-${OUT:-build/gpu-check}}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1
"$PY" - <<'PY' | tee "$OUT/device.txt"
import torch
assert torch.cuda.is_available(), "no CUDA GPU visible to torch"
print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, {torch.cuda.get_device_name()}")
PY
"$PY" benchmarks/defer_check.py --device cuda 2>&1 | tee "$OUT/defer.txt"
"$PY" benchmarks/activation_ops.py --device cuda 2>&1 | tee "$OUT/activation-ops.txt"
"$PY" benchmarks/op_counts.py --device cuda 2>&1 | tee "$OUT/op-counts.txt"
"$PY" benchmarks/floor.py --device cuda --rounds 2 --steps 100 2>&1 | tee "$OUT/floor.txt"
"$PY" benchmarks/overhead.py --device cuda --models bert,demo,cnn --rounds 5 --steps 200 --full --sync 2>&1 | tee "$OUT/overhead.txt"
"$PY" benchmarks/overhead.py --device cuda --models bert-base --rounds 3 --steps 100 --full --sync 2>&1 | tee "$OUT/overhead-bert-base.txt"
if [ -f benchmarks/peers.py ]; then
  "$PY" benchmarks/peers.py --device cuda --models bert,demo,cnn --rounds 3 --steps 100 2>&1 | tee "$OUT/peers.txt"
fi
