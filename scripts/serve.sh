#!/usr/bin/env bash
# One command: install dependencies, build, and serve an OpenAI-compatible API on http://127.0.0.1:30000 (CPU).
# Default model: models/fathom-nano, the small trained DeepSeek-V3-architecture model in the repository (Python code
# completion, chat, tool calls; models/fathom-nano/README.md), with DeepSeek-V3 tool-call and R1 reasoning parsing.
# Pass fathom serve flags to override, e.g. scripts/serve.sh --model DIR --port 8000.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh >/dev/null
defaults=(--model models/fathom-nano --max-total-tokens 65536 --tool-call-parser deepseekv3 --reasoning-parser deepseek-r1)
for arg in "$@"; do
  case "$arg" in --model|--model=*|--model-path|--model-path=*) defaults=() ;; esac
done
exec build/fathom serve "${defaults[@]}" "$@"
