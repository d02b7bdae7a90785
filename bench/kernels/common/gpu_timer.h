#pragma once
// Event-based timing for the kernel benchmarks: warm-up, many timed runs, median; and the copy-bandwidth ceiling.
#include <cuda_runtime.h>

#include <algorithm>
#include <functional>
#include <vector>

#include "kernels/cuda/cuda_check.h"

namespace fathom::bench {

// Median milliseconds of `body` over `runs` timed runs after `warmup` untimed ones; each run is its own event pair.
inline double median_ms(const std::function<void(int run)>& body, int warmup = 5, int runs = 50,
                        cudaStream_t stream = nullptr) {
  for (int i = 0; i < warmup; ++i) body(i);
  cudaEvent_t start, stop;
  FATHOM_CUDA_CHECK(cudaEventCreate(&start));
  FATHOM_CUDA_CHECK(cudaEventCreate(&stop));
  std::vector<float> times;
  for (int i = 0; i < runs; ++i) {
    FATHOM_CUDA_CHECK(cudaEventRecord(start, stream));
    body(warmup + i);
    FATHOM_CUDA_CHECK(cudaEventRecord(stop, stream));
    FATHOM_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    FATHOM_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    times.push_back(ms);
  }
  FATHOM_CUDA_CHECK(cudaEventDestroy(start));
  FATHOM_CUDA_CHECK(cudaEventDestroy(stop));
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

// Device-to-device copy bandwidth in GB/s, counting bytes read plus bytes written (the HBM ceiling we compare to).
inline double copy_bandwidth_gbps(size_t bytes = size_t{1} << 30) {
  void *a = nullptr, *b = nullptr;
  FATHOM_CUDA_CHECK(cudaMalloc(&a, bytes));
  FATHOM_CUDA_CHECK(cudaMalloc(&b, bytes));
  FATHOM_CUDA_CHECK(cudaMemset(a, 1, bytes));
  const double ms = median_ms([&](int) { FATHOM_CUDA_CHECK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice)); }, 3, 20);
  FATHOM_CUDA_CHECK(cudaFree(a));
  FATHOM_CUDA_CHECK(cudaFree(b));
  return 2.0 * static_cast<double>(bytes) / (ms * 1e-3) / 1e9;
}

}  // namespace fathom::bench
