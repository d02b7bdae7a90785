#!/usr/bin/env bash
# Builds the CUDA tests and benchmarks here (nvcc, no GPU needed) and stages the binaries in .carry/gpu/ for the
# GPU machine, which has the CUDA runtime but none of our build dependencies. Then, on the GPU machine:
#   bash tools/gpu/run_all.sh        (device tool: carry [".carry/gpu"]; logs land in $OUT)
set -euo pipefail
cd "$(dirname "$0")/../.."
export CUDACXX=${CUDACXX:-/usr/local/cuda/bin/nvcc}
cmake -G Ninja -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
targets=$(ninja -C build -t targets all | sed -n 's/^\(cuda_[a-z0-9_]*_test\|bench_[a-z0-9_]*\|mla_bench\): .*/\1/p' | sort -u)
ninja -C build fathom $targets
rm -rf .carry/gpu && mkdir -p .carry/gpu
for target in $targets; do
  find build -type f -name "$target" -perm -u+x -exec cp {} .carry/gpu/ \;
done
cp build/fathom .carry/gpu/
rm -f .carry/gpu/bench_tokenizer  # a CPU benchmark
# The device tool carries at most 64 MiB with the working tree: drop symbol tables (line info for sanitizer
# reports stays in .debug_line only when not stripped; rebuild unstripped for a memcheck investigation).
strip --strip-unneeded .carry/gpu/cuda_* .carry/gpu/bench_* .carry/gpu/mla_bench .carry/gpu/fathom 2>/dev/null || true
# One solid archive (tools/gpu/unpack_staged.sh unpacks it there): the binaries are ~195 MB stripped and share most
# of their code, ~8 MB together against ~38 MB compressed one by one; the device tool carries 64 MiB with the working
# tree (~28 MB).
(cd .carry/gpu && tar cf - cuda_* bench_* mla_bench fathom | xz -T1 -9e --lzma2=dict=192MiB > binaries.tar.xz &&
  rm -f cuda_* bench_* mla_bench fathom)
echo "$(git rev-parse HEAD)$(git diff --quiet HEAD -- src tests bench || echo -dirty)" > .carry/gpu/COMMIT
# The official DeepSeek-V3 config (not committed; shared/ sits beside the checkout) for the model benchmarks.
if [ -f ../shared/data/deepseek-v3/config.json ]; then
  mkdir -p .carry/gpu/v3-config && cp ../shared/data/deepseek-v3/config.json .carry/gpu/v3-config/
fi
# The tokenizer links libonig dynamically; the GPU machine does not have it.
cp -L /usr/lib/x86_64-linux-gnu/libonig.so.5 .carry/gpu/ 2>/dev/null || true
du -sh .carry/gpu
ls .carry/gpu
