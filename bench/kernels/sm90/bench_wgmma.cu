// Hopper warpgroup MMA (wgmma, bf16 -> fp32) by shape, for kernel design: how fast each shape runs back to back,
// and how long the issuing warps are held at the issue of a chain (the softmax of an attention kernel can only
// overlap MMAs that its warps have finished issuing).
//
//   throughput: every SM runs 1 or 2 warpgroups, each issuing chains of 32 MMAs (one commit, one wait per chain);
//     TFLOP/s from CUDA events, cycles per MMA per SM from clock64 against the dense peak (2048 bf16 FMA per clock
//     per SM: ideal_clk = 64 * N * 16 / 2048), at the clock the launch ran (its cycles over its event time).
//   issue: one warpgroup per SM issues one chain of 36 MMAs (the score chain of a 576-wide MLA row) on an idle tensor
//     pipe; cycles from the first issue to the commit (when its warps can do anything else) and to the wait's
//     return. The difference is how far a warpgroup's issue runs ahead of its tensor work.
// Operands are whatever shared memory holds (timing only); A from shared memory (SS) or registers (RS); B K-major,
// or N-major where marked "tn". Usage: bench_wgmma [--iters N]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "kernels/common/gpu_timer.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/mla/sm90/mma_primitives.cuh"

namespace fathom::kernels::cuda {
namespace {

using mla_detail::smem_u32;
namespace h = hopper;

// d[64 x 32] += A[64 x 16] (registers: the mma.sync m16n8k16 A fragment of each warp's 16 rows) · B[32 x 16]^T.
__device__ __forceinline__ void wgmma_m64n32k16_rs(float (&d)[16], const uint32_t (&a)[4], uint64_t desc_b) {
  asm volatile(
      "{\n.reg .pred accumulate;\nsetp.ne.b32 accumulate, %21, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {" FATHOM_WGMMA_ACC16_OPERANDS
      "}, {%16, %17, %18, %19}, %20, accumulate, 1, 1, 0;\n}\n"
      : FATHOM_WGMMA_ACC16_CONSTRAINTS(d)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(1)
      : "memory");
}
// d[64 x 64] += A[64 x 16] (registers) · B[64 x 16]^T.
__device__ __forceinline__ void wgmma_m64n64k16_rs(float (&d)[32], const uint32_t (&a)[4], uint64_t desc_b) {
  asm volatile(
      "{\n.reg .pred accumulate;\nsetp.ne.b32 accumulate, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {" FATHOM_WGMMA_ACC32_OPERANDS
      "}, {%32, %33, %34, %35}, %36, accumulate, 1, 1, 0;\n}\n"
      : FATHOM_WGMMA_ACC32_CONSTRAINTS(d)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(1)
      : "memory");
}

enum Shape { kSsN32, kRsN32, kSsN64, kRsN64, kSsN128, kRsN128Tn, kSsN256Tn, kShapeCount };
constexpr const char* kShapeNames[kShapeCount] = {"SS m64n32k16",   "RS m64n32k16",    "SS m64n64k16",
                                                  "RS m64n64k16",   "SS m64n128k16",   "RS m64n128k16 tn",
                                                  "SS m64n256k16 tn"};
constexpr int kShapeN[kShapeCount] = {32, 32, 64, 64, 128, 128, 256};
constexpr int kSmemBytes = 128 * 1024;  // A at 0, B at 64 KB: every descriptor stays inside
constexpr int kChainMmas = 32;          // throughput chains
constexpr int kIssueChainMmas = 36;     // issue probe: 576 / 16 k-steps

// MMA k of the chain: operands advance through four k-steps of a 128-byte swizzle atom (as a K loop does).
template <Shape kShape, int kN>
__device__ __forceinline__ void issue_mma(float (&acc)[kN / 2], const uint32_t (&a)[4], uint64_t desc_a,
                                          uint64_t desc_b, uint64_t desc_b_tn, int k) {
  const uint32_t step = (k & 3) * 32;
  if constexpr (kShape == kSsN32) mla_detail::wgmma_m64n32k16_bf16(acc, h::wgmma_desc_advance(desc_a, step), h::wgmma_desc_advance(desc_b, step));
  if constexpr (kShape == kRsN32) wgmma_m64n32k16_rs(acc, a, h::wgmma_desc_advance(desc_b, step));
  if constexpr (kShape == kSsN64) mla_detail::wgmma_m64n64k16_bf16(acc, h::wgmma_desc_advance(desc_a, step), h::wgmma_desc_advance(desc_b, step));
  if constexpr (kShape == kRsN64) wgmma_m64n64k16_rs(acc, a, h::wgmma_desc_advance(desc_b, step));
  if constexpr (kShape == kSsN128) mla_detail::wgmma_m64n128k16_bf16(acc, h::wgmma_desc_advance(desc_a, step), h::wgmma_desc_advance(desc_b, step));
  if constexpr (kShape == kRsN128Tn) mla_detail::wgmma_m64n128k16_bf16_rs_tn(acc, a, h::wgmma_desc_advance(desc_b_tn, (k & 3) * 2048));
  if constexpr (kShape == kSsN256Tn) mla_detail::wgmma_m64n256k16_bf16_tn(acc, h::wgmma_desc_advance(desc_a, step), h::wgmma_desc_advance(desc_b_tn, (k & 3) * 2048));
}

// chains > 0: throughput (every warpgroup issues `chains` chains of kChainMmas); chains == 0: one chain of
// kIssueChainMmas per warpgroup, cycles to the commit and to the wait's return -> cycles[2 * block] (thread 0).
template <Shape kShape>
__global__ void __launch_bounds__(256, 1) wgmma_kernel(int chains, long long* cycles, float* sink) {
  constexpr int kN = kShapeN[kShape];
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  const uint32_t base = smem_u32(smem_raw);
  const uint64_t desc_a = h::wgmma_desc_kmajor_sw128(base);
  const uint64_t desc_b = h::wgmma_desc_kmajor_sw128(base + 64 * 1024);
  const uint64_t desc_b_tn = h::wgmma_desc_sw128(base + 64 * 1024, 8192, 1024);  // N-major: 64-column blocks 8 KB apart
  float acc[kN / 2];
#pragma unroll
  for (int i = 0; i < kN / 2; ++i) acc[i] = 0.0f;
  const uint32_t a[4] = {threadIdx.x, threadIdx.x * 3u, threadIdx.x * 5u, 7u};  // bf16 pairs, values irrelevant
  long long start = clock64(), issued = 0;
  const int count = chains > 0 ? chains : 1;
  for (int chain = 0; chain < count; ++chain) {
    h::wgmma_fence();
    if (chains > 0) {
#pragma unroll
      for (int k = 0; k < kChainMmas; ++k) issue_mma<kShape, kN>(acc, a, desc_a, desc_b, desc_b_tn, k);
    } else {
#pragma unroll
      for (int k = 0; k < kIssueChainMmas; ++k) issue_mma<kShape, kN>(acc, a, desc_a, desc_b, desc_b_tn, k);
    }
    h::wgmma_commit();
    issued = clock64();
    h::wgmma_wait_all();
    h::wgmma_fence_operands(acc);
  }
  const long long done = clock64();
  if (chains == 0 && threadIdx.x == 0) {
    cycles[2 * blockIdx.x] = issued - start;
    cycles[2 * blockIdx.x + 1] = done - start;
  }
  if (chains > 0 && threadIdx.x == 0 && blockIdx.x == 0) cycles[0] = done - start;
  float sum = 0.0f;
#pragma unroll
  for (int i = 0; i < kN / 2; ++i) sum += acc[i];
  if (sum == 1.2345f) *sink = sum;  // keeps the chains live
}

template <Shape kShape>
void run_shape(int num_sms, int iters, DeviceBuffer<long long>& cycles, DeviceBuffer<float>& sink) {
  auto kernel = wgmma_kernel<kShape>;
  FATHOM_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
  constexpr int kN = kShapeN[kShape];
  kernel<<<num_sms, 128, kSmemBytes>>>(0, cycles.data(), sink.data());  // issue probe
  FATHOM_CUDA_CHECK(cudaGetLastError());
  FATHOM_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<long long> probe = cycles.download();
  std::vector<long long> issue, done;
  for (int sm = 0; sm < num_sms; ++sm) {
    issue.push_back(probe[2 * sm]);
    done.push_back(probe[2 * sm + 1]);
  }
  std::sort(issue.begin(), issue.end());
  std::sort(done.begin(), done.end());
  for (int warpgroups : {1, 2}) {
    const double ms = bench::median_ms(
        [&](int) { kernel<<<num_sms, 128 * warpgroups, kSmemBytes>>>(iters, cycles.data(), sink.data()); }, 2, 5);
    FATHOM_CUDA_CHECK(cudaGetLastError());
    const long long clk = cycles.download()[0];
    const double mmas_per_sm = static_cast<double>(iters) * kChainMmas * warpgroups;
    const double flops = 2.0 * 64 * kN * 16 * mmas_per_sm * num_sms;
    const double clock_ghz = clk / (ms * 1e6);  // cycles of the timed launch over its duration
    const double peak = 2.0 * 2048 * num_sms * clock_ghz * 1e9;  // dense bf16 FLOP/s at this clock
    std::printf("%-18s %2d %10.1f %9.1f %7.1f%% %10.1f %6.2f", kShapeNames[kShape], warpgroups,
                flops / (ms * 1e-3) / 1e12, clk / mmas_per_sm, 100.0 * flops / (ms * 1e-3) / peak,
                64.0 * kN * 16 / 2048.0, clock_ghz);
    if (warpgroups == 1) {
      std::printf(" %10lld %9lld\n", issue[issue.size() / 2], done[done.size() / 2]);
    } else {
      std::printf(" %10s %9s\n", "", "");
    }
  }
}

}  // namespace
}  // namespace fathom::kernels::cuda

int main(int argc, char** argv) {
  using namespace fathom::kernels::cuda;
  int iters = 4000;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--iters") && i + 1 < argc) {
      iters = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: bench_wgmma [--iters N]\n");
      return 2;
    }
  }
  cudaDeviceProp prop{};
  FATHOM_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("%s, %d SMs; wgmma bf16 -> fp32, chains of %d (throughput) / %d (issue probe, one warpgroup per SM)\n",
              prop.name, prop.multiProcessorCount, kChainMmas, kIssueChainMmas);
  std::printf("%-18s %2s %10s %9s %8s %10s %6s %10s %9s\n", "shape", "wg", "TFLOP/s", "clk/mma", "%peak", "ideal_clk",
              "GHz", "issue_clk", "done_clk");
  DeviceBuffer<long long> cycles(2 * static_cast<size_t>(prop.multiProcessorCount));
  DeviceBuffer<float> sink(1);
  run_shape<kSsN32>(prop.multiProcessorCount, iters, cycles, sink);
  run_shape<kRsN32>(prop.multiProcessorCount, iters, cycles, sink);
  run_shape<kSsN64>(prop.multiProcessorCount, iters, cycles, sink);
  run_shape<kRsN64>(prop.multiProcessorCount, iters, cycles, sink);
  run_shape<kSsN128>(prop.multiProcessorCount, iters, cycles, sink);
  run_shape<kRsN128Tn>(prop.multiProcessorCount, iters, cycles, sink);
  run_shape<kSsN256Tn>(prop.multiProcessorCount, iters, cycles, sink);
  return 0;
}
