#!/usr/bin/env bash
# A separate virtual environment for benchmarks/peers.py only (never for users):
# Cockpit needs pkg_resources (setuptools < 81) and BackPACK, which needs torchvision, which does not import beside the project's torch 2.13.0
# CPU wheel; torch 2.14.1 + torchvision 0.29.1 (on this machine's disk) do. Everything in it, gradsight
# included, runs on that torch, so the comparison stays within one process.
#   bash benchmarks/peers-venv.sh [.venv-peers]  then  .venv-peers/bin/python benchmarks/peers.py
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${1:-.venv-peers}
python3 -m venv "$VENV"
"$VENV/bin/pip" install -q "torch==2.14.1" "torchvision==0.29.1" 2>&1 | { grep -v "WARNING: Location" || true; }
"$VENV/bin/pip" install -q "setuptools<81" "cockpit-for-pytorch==1.0.2" "backpack-for-pytorch==1.7.1" "wandb==0.31.0" "transformers>=5,<6" -e . \
  2>&1 | { grep -v "WARNING: Location" || true; }
"$VENV/bin/python" -c "import torch, cockpit, wandb; print('peers venv ready: torch', torch.__version__, 'wandb', wandb.__version__)"
