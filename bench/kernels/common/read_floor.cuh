#pragma once
// Size-matched read floors: the fastest ways we know to merely read `bytes` of a decode weight, launched in the same
// programmatic chain as the GEMMs (weights are read-only, so they may be requested before the predecessor ends).
// A GEMM of that weight cannot beat them; their gap to the copy bandwidth is what any kernel of that size loses to
// DRAM latency and the grid's ramp-up and tail.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/programmatic_launch.cuh"
#include "kernels/cuda/sm90/tma_pipeline.cuh"

namespace fathom::bench {

// Every thread keeps kUnroll 16-byte loads in flight; `sink` is written only if the data xors to a magic value
// (never, for random data), so the loads cannot be dropped. grid-stride over [bytes / 16] vectors.
template <int kUnroll>
__global__ void __launch_bounds__(256) read_floor_ldg_kernel(const uint4* __restrict__ data,  // [vectors]
                                                             size_t vectors, uint32_t* __restrict__ sink) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  uint32_t folded = 0;
  bool waited = false;
  for (; i < vectors; i += stride * kUnroll) {
    uint4 v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const size_t j = i + u * stride;
      v[u] = j < vectors ? __ldg(data + j) : make_uint4(0, 0, 0, 0);
    }
    if (!waited) kernels::cuda::begin_dependent_kernel(), waited = true;
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) folded ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  if (!waited) kernels::cuda::begin_dependent_kernel();
  if (folded == 0x9e3779b9u) sink[0] = folded;
}

// One thread per CTA streams the CTA's contiguous share of [bytes] through a ring of kStages shared-memory chunks
// with bulk asynchronous copies (no registers per byte in flight; up to kStages * chunk_bytes per CTA).
template <int kStages>
__global__ void __launch_bounds__(32) read_floor_bulk_kernel(const uint8_t* __restrict__ data,  // [bytes]
                                                             size_t bytes, int chunk_bytes,
                                                             uint32_t* __restrict__ sink) {
  namespace hw = kernels::cuda::hopper;
  extern __shared__ __align__(128) uint8_t read_floor_smem[];  // [kStages, chunk_bytes]
  __shared__ __align__(8) uint64_t full[kStages];
  const size_t share = (bytes / gridDim.x + 15) / 16 * 16;
  const size_t begin = min(bytes, share * blockIdx.x), end = min(bytes, begin + share);
  const int chunks = static_cast<int>((end - begin + chunk_bytes - 1) / chunk_bytes);
  if (threadIdx.x != 0) {
    kernels::cuda::begin_dependent_kernel();
    return;
  }
  for (int s = 0; s < kStages; ++s) hw::mbarrier_init(&full[s], 1);
  hw::fence_barrier_init();
  auto issue = [&](int c) {
    const int s = c % kStages;
    const size_t offset = begin + static_cast<size_t>(c) * chunk_bytes;
    const uint32_t size = static_cast<uint32_t>(min(static_cast<size_t>(chunk_bytes), end - offset));
    hw::mbarrier_arrive_expect_tx(&full[s], size);
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                     hw::shared_address(read_floor_smem + s * chunk_bytes)),
                 "l"(data + offset), "r"(size), "r"(hw::shared_address(&full[s]))
                 : "memory");
  };
  for (int c = 0; c < min(chunks, kStages); ++c) issue(c);
  kernels::cuda::begin_dependent_kernel();
  uint32_t folded = 0;
  for (int c = 0; c < chunks; ++c) {
    hw::mbarrier_wait(&full[c % kStages], (c / kStages) & 1);
    folded ^= reinterpret_cast<const uint32_t*>(read_floor_smem + (c % kStages) * chunk_bytes)[0];
    if (c + kStages < chunks) issue(c + kStages);
  }
  if (folded == 0x9e3779b9u) sink[0] = folded;
}

}  // namespace fathom::bench
