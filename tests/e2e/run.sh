#!/usr/bin/env bash
# Runs the end-to-end tests of `fathom serve` with the official openai npm client (node's test runner).
# Needs: a built fathom binary (FATHOM_BINARY, default build/fathom), `npm ci` at the repo root (openai), and
# the DeepSeek tokenizer directory (FATHOM_TOKENIZER_DIR, default ../shared/data/deepseek-v3).
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ ! -f node_modules/openai/package.json ]; then
  echo "tests/e2e: the openai npm package is missing; run 'npm ci' at the repository root" >&2
  exit 1
fi
export FATHOM_BINARY="${FATHOM_BINARY:-$PWD/build/fathom}"
exec node --test --test-concurrency=1 tests/e2e/openai_client.test.mjs tests/e2e/shutdown.test.mjs tests/e2e/tool_calling.test.mjs
