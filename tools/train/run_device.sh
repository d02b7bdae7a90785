#!/usr/bin/env bash
# The device command for tools/train/train_nano.py: run from the repository root on the GPU machine, with the
# DeepSeek-V3 tokenizer.json carried in .carry/nano/ (see README.md). Writes into $OUT.
set -uo pipefail
cd "$(dirname "$0")/../.."
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
timeout 590 python3 tools/train/train_nano.py --out "$OUT" "$@" 2>&1 | tee "$OUT/stdout.txt"
exit "${PIPESTATUS[0]}"
