#!/usr/bin/env bash
# Stages binaries of a git revision (a branch, a commit, HEAD) for an A/B run on the GPU machine:
#   tools/gpu/stage_variant.sh NAME REVISION TARGET...     e.g. stage_variant.sh base main bench_fp8_gemm_tiled
# builds TARGET... of REVISION in this checkout's build/ (the tree is checked out in place, so it must be clean;
# the original branch comes back afterwards, and only the files that differ rebuild) and stores them stripped, in one
# xz archive, in .carry/variants/NAME/. Then on the GPU machine (device tool, carry [".carry/variants"]):
#   tools/gpu/ab_bench.sh ROUNDS BINARY [ARGS...]          (every staged variant's BINARY, alternating)
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ $# -lt 3 ]; then
  echo "usage: $0 NAME REVISION TARGET..." >&2
  exit 2
fi
name=$1 revision=$2
shift 2
if ! git diff --quiet HEAD || ! git diff --cached --quiet; then
  echo "stage_variant: the working tree has changes; commit or stash them first" >&2
  exit 1
fi
original=$(git symbolic-ref --quiet --short HEAD || git rev-parse HEAD)
trap 'git checkout -q "$original"' EXIT
git checkout -q "$revision"
export CUDACXX=${CUDACXX:-/usr/local/cuda/bin/nvcc}
cmake -G Ninja -S . -B build -DCMAKE_BUILD_TYPE=Release > /dev/null
ninja -C build "$@"
out=.carry/variants/$name
rm -rf "$out" && mkdir -p "$out"
for target in "$@"; do
  found=$(find build -type f -name "$target" -perm -u+x | head -1)
  if [ -z "$found" ]; then
    echo "stage_variant: no binary named $target under build/" >&2
    exit 1
  fi
  cp "$found" "$out/"
done
strip --strip-unneeded "$out"/*
# One solid archive, as tools/gpu/stage.sh packs (tools/gpu/unpack_staged.sh unpacks it there).
(cd "$out" && tar cf - -- "$@" | xz -T1 -9e --lzma2=dict=192MiB > binaries.tar.xz && rm -f -- "$@")
git rev-parse "$revision" > "$out/COMMIT"
du -sh "$out"
