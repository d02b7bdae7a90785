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

namespace fathom::bench {

// How a weight's bytes are laid out for read_floor_gemv_pattern_kernel: kRowMajor is the checkpoint's [rows][cols]
// (a warp's K block is 16 rows x 128 B, cols bytes apart); kTileMajor stores each (16-row tile, K block) as 2 KB
// contiguous, [row_tiles][k_blocks][16][128 B] (a warp's whole K range is one contiguous run).
enum class WeightLayout { kRowMajor, kTileMajor };

// Reads a weight exactly as the decode gemv kernels decompose it, without the arithmetic: one CTA per 16-row tile,
// one warp per K split (splits of k_blocks_per_split blocks), each thread the same 4 x 16 bytes of a K block
// (rows group and group + 8, bytes lane_in_group * 32 + {0, 16}), kDepth K blocks in flight in a rolling ring;
// the first ring is requested before the wait for the previous kernel. Isolates what the access pattern and the
// decomposition cost, apart from the MMAs, the activations and the output. Requires rows % 16 == 0, cols % 128 == 0.
template <WeightLayout kLayout, int kDepth>
__global__ void __launch_bounds__(512) read_floor_gemv_pattern_kernel(const uint8_t* __restrict__ w,  // see kLayout
                                                                      int64_t cols, int k_blocks,
                                                                      int k_blocks_per_split, int splits,
                                                                      uint32_t* __restrict__ sink) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, group = lane / 4, lane_in_group = lane % 4;
  const int64_t row_tile = blockIdx.x;
  uint32_t folded = 0;
  bool waited = false;
  for (int split = warp; split < splits; split += blockDim.x / 32) {
    const int kb_begin = split * k_blocks_per_split;
    const int n = min(k_blocks, kb_begin + k_blocks_per_split) - kb_begin;
    auto address = [&](int kb, int half) -> const uint4* {  // half 0: row group, 1: row group + 8
      if constexpr (kLayout == WeightLayout::kRowMajor) {
        return reinterpret_cast<const uint4*>(w + (row_tile * 16 + group + 8 * half) * cols + kb * 128 +
                                              lane_in_group * 32);
      } else {
        return reinterpret_cast<const uint4*>(w + (row_tile * k_blocks + kb) * 2048 + (group + 8 * half) * 128 +
                                              lane_in_group * 32);
      }
    };
    uint4 ring[kDepth][4];
#pragma unroll
    for (int i = 0; i < kDepth; ++i) {
      if (i < n) {
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          ring[i][2 * half] = __ldg(address(kb_begin + i, half));
          ring[i][2 * half + 1] = __ldg(address(kb_begin + i, half) + 1);
        }
      }
    }
    if (!waited) kernels::cuda::begin_dependent_kernel(), waited = true;
#pragma unroll 1
    for (int base = 0; base < n; base += kDepth) {
#pragma unroll
      for (int i = 0; i < kDepth; ++i) {
        if (base + i < n) {
#pragma unroll
          for (int j = 0; j < 4; ++j) folded ^= ring[i][j].x ^ ring[i][j].y ^ ring[i][j].z ^ ring[i][j].w;
          const int next = base + i + kDepth;
          if (next < n) {
#pragma unroll
            for (int half = 0; half < 2; ++half) {
              ring[i][2 * half] = __ldg(address(kb_begin + next, half));
              ring[i][2 * half + 1] = __ldg(address(kb_begin + next, half) + 1);
            }
          }
        }
      }
    }
  }
  if (!waited) kernels::cuda::begin_dependent_kernel();
  if (folded == 0x9e3779b9u) sink[0] = folded;
}

}  // namespace fathom::bench
