#!/usr/bin/env bash
# On the GPU machine: runs BINARY of every variant staged by tools/gpu/stage_variant.sh (.carry/variants/*/),
# alternating between them for ROUNDS rounds so drift (clocks, temperature) spreads over all of them, and prints
# each run's output lines that FILTER (an extended regex; default: all) keeps, prefixed with round and variant.
#   tools/gpu/ab_bench.sh ROUNDS BINARY [ARGS...]           FILTER=... and VARIANT_ENV_<name>="A=1 B=2" optional;
#                                                            TIMEOUT_S (default 300) bounds each run (a hang costs that)
# e.g. FILTER='^expert' tools/gpu/ab_bench.sh 3 bench_fp8_gemm_tiled --only prefill --auto-only --tokens 8192
set -uo pipefail
cd "$(dirname "$0")/../.."
if [ $# -lt 2 ]; then
  echo "usage: $0 ROUNDS BINARY [ARGS...]" >&2
  exit 2
fi
rounds=$1 binary=$2
shift 2
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
source tools/gpu/unpack_staged.sh  # (also unpacks .carry/gpu when carried)
unpack_staged_dirs .carry/variants/*/
nvidia-smi --query-gpu=name --format=csv,noheader
for variant in .carry/variants/*/; do
  echo "variant $(basename "$variant"): $(cat "$variant/COMMIT" 2>/dev/null || echo unknown)"
done
status=0
for round in $(seq 1 "$rounds"); do
  for variant in .carry/variants/*/; do
    name=$(basename "$variant")
    [ -x "$variant/$binary" ] || continue
    env_name="VARIANT_ENV_${name//-/_}"
    # shellcheck disable=SC2086  # the variable holds NAME=VALUE words
    if ! output=$(env ${!env_name:-} timeout "${TIMEOUT_S:-300}" "$variant/$binary" "$@" 2>&1); then
      echo "round $round $name: FAILED"; echo "$output" | tail -3 | sed "s/^/round $round $name:   /"; status=1
    fi
    echo "$output" | grep -E "${FILTER:-.}" | sed "s/^/round $round $name: /"
  done
done
exit $status
