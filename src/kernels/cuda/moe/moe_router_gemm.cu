#include "kernels/cuda/moe/moe_router_gemm.h"

#include <cooperative_groups.h>
#include <cuda_pipeline.h>

#include <climits>
#include <cstdint>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/programmatic_launch.cuh"

namespace fathom::kernels::cuda {
namespace {

namespace cg = cooperative_groups;

constexpr int kWarpSize = 32;
constexpr int kThreads = 256;
constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kMaxTokens = 64;
constexpr int kSlices = 128;                           // the header's fixed partition of the float4 columns
constexpr int kClusterSize = 8;                        // a cluster's CTAs split the slices (tree levels 4..6)
constexpr int kCtaSlices = kSlices / kClusterSize;     // 16 per CTA: two 8-lane slice groups (tree level 3)
constexpr int kLaneSlices = 8;                         // slice bits 0..2 are lane bits 0..2 (tree levels 0..2)
constexpr int kLaneGroups = kWarpSize / kLaneSlices;   // 4 expert lanes per warp
constexpr int kExpertLanes = kLaneGroups * (kThreads / kWarpSize / 2);  // 16 per CTA (4 groups x 4 warp pairs)

constexpr int at_least_one(int n) { return n > 1 ? n : 1; }

// One column (4 consecutive k) of a weight row, as fp32 (kBf16Weight: stored as 4 bf16, widened exactly).
// W is streamed once: no L1 allocation. Volatile so the compiler neither sinks the load below the x staging barrier to
// its (conditional) use nor reorders the batch: all of a thread's loads are in flight while its CTA waits for x.
// Predicated off (returns zeros) past the end of the thread's slice.
template <bool kBf16Weight>
__device__ __forceinline__ float4 load_weight(const char* pointer, bool predicate) {
  if constexpr (kBf16Weight) {
    uint32_t low = 0u, high = 0u;  // bf16 pairs (k, k + 1), (k + 2, k + 3), k in the low half
    asm volatile(
        "{\n"
        "  .reg .pred p;\n"
        "  setp.ne.b32 p, %3, 0;\n"
        "  @p ld.global.nc.L1::no_allocate.v2.b32 {%0, %1}, [%2];\n"
        "}\n"
        : "+r"(low), "+r"(high)
        : "l"(pointer), "r"(static_cast<int>(predicate)));
    return make_float4(__uint_as_float(low << 16), __uint_as_float(low & 0xffff0000u), __uint_as_float(high << 16),
                       __uint_as_float(high & 0xffff0000u));
  } else {
    float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    asm volatile(
        "{\n"
        "  .reg .pred p;\n"
        "  setp.ne.b32 p, %5, 0;\n"
        "  @p ld.global.nc.L1::no_allocate.v4.f32 {%0, %1, %2, %3}, [%4];\n"
        "}\n"
        : "+f"(v.x), "+f"(v.y), "+f"(v.z), "+f"(v.w)
        : "l"(pointer), "r"(static_cast<int>(predicate)));
    return v;
  }
}

template <bool kBf16Weight>
constexpr int kWeightColumnBytes = kBf16Weight ? 8 : 16;

// One tree level across lanes `offset` apart. With several values per lane it is a reduce-scatter: each lane keeps
// half of them and adds its partner's copies (half the shuffles of an all-reduce). fp32 addition is commutative, so
// every kept value is bitwise the header's pairwise block sum. `first`: accumulator index of v[0] after the level;
// `owner`: whether this lane is the one that stores its (duplicated, all-reduced) values.
template <int kCount, int kSize>
__device__ __forceinline__ void slice_tree_level(float (&v)[kSize], int lane, int offset, int& first, bool& owner) {
  if constexpr (kCount == 1) {
    v[0] = __fadd_rn(v[0], __shfl_xor_sync(kFullMask, v[0], offset));
    owner = owner && (lane & offset) == 0;
  } else {
    constexpr int kHalf = kCount / 2;
    const bool upper = (lane & offset) != 0;
#pragma unroll
    for (int i = 0; i < kHalf; ++i) {
      const float send = upper ? v[i] : v[i + kHalf];
      const float keep = upper ? v[i + kHalf] : v[i];
      v[i] = __fadd_rn(keep, __shfl_xor_sync(kFullMask, send, offset));
    }
    if (upper) first += kHalf;
  }
}

// A cluster of 8 CTAs computes logits for kTokens tokens x (16 * kExpertsPerLane) experts; CTA rank r owns slices
// [16 r, 16 r + 16). Thread (warp, lane) owns slice 16 r + 8 (warp & 1) + (lane & 7) and the kExpertsPerLane
// consecutive experts of expert lane 4 (warp >> 1) + (lane >> 3), for all kTokens tokens. So a warp's W load reads
// 128 contiguous bytes from each of 4 rows, and its x read (shared memory) is the same 8 float4 for all 4 lane groups.
// Per stage: each thread issues its W loads (all in flight), the CTA copies its slices of the x rows to shared memory
// (cp.async), then FMAs. The slice sums go up the tree: lane shuffles (levels 0..2), shared memory (level 3),
// distributed shared memory across the cluster (levels 4..6); each rank finishes 1/8 of the cluster's logits.
// kStageColumns: float4 columns per slice per pipeline stage (kStageColumns * kExpertsPerLane W loads in flight per
// thread); kMinBlocks: CTAs per SM the register budget must allow. kBf16Weight: W in bf16 (same products, half the
// bytes), else fp32.
template <int kTokens, int kExpertsPerLane, int kStageColumns, int kMinBlocks, bool kBf16Weight>
__global__ void __cluster_dims__(kClusterSize, 1, 1) __launch_bounds__(kThreads, kMinBlocks)
    moe_router_gemm_kernel(const float4* __restrict__ x,       // [tokens, columns]
                           int tokens,
                           int columns,                        // hidden / 4
                           const char* __restrict__ weight,    // [experts, columns] of kWeightColumnBytes each
                           int experts,
                           float* __restrict__ logits) {       // [tokens, experts]
  constexpr int kCtaExperts = kExpertLanes * kExpertsPerLane;
  constexpr int kAccumulators = kTokens * kExpertsPerLane;  // index t * kExpertsPerLane + j
  constexpr int kCtaOutputs = kTokens * kCtaExperts;        // index t * kCtaExperts + expert
  constexpr int kStageVectors = kTokens * kStageColumns * kCtaSlices;
  constexpr int kRankOutputs = kCtaOutputs / kClusterSize;
  static_assert(kRankOutputs <= kThreads, "one thread per finished logit");
  static_assert(kStageVectors * sizeof(float4) <= 32 * 1024, "x stage at most 32 KB (static shared memory)");

  __shared__ float4 x_stage[kTokens][kStageColumns][kCtaSlices];  // this CTA's slices of the token rows
  __shared__ float half_sums[2][kCtaOutputs];                     // [slice bit 3][token][expert]: level 3 input
  __shared__ float cta_sums[kCtaOutputs];                         // [token][expert]: level 4 input, cluster-read

  const cg::cluster_group cluster = cg::this_cluster();
  const int rank = static_cast<int>(cluster.block_rank());
  const int warp = threadIdx.x / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  const int slice_bit3 = warp & 1;
  const int cta_slice = slice_bit3 * kLaneSlices + (lane & (kLaneSlices - 1));
  const int slice = rank * kCtaSlices + cta_slice;
  const int lane_expert0 = ((warp >> 1) * kLaneGroups + lane / kLaneSlices) * kExpertsPerLane;  // in the CTA's experts
  const int64_t expert_base = static_cast<int64_t>(blockIdx.x / kClusterSize) * kCtaExperts;
  const int token_base = static_cast<int>(blockIdx.y) * kTokens;

  // Experts past the end read the last row (valid memory); their logits are never stored.
  constexpr int kColumnBytes = kWeightColumnBytes<kBf16Weight>;
  const char* rows[kExpertsPerLane];  // this thread's slice of each expert row: [slice_columns] at stride kSlices
#pragma unroll
  for (int j = 0; j < kExpertsPerLane; ++j) {
    const int64_t expert = expert_base + lane_expert0 + j;
    rows[j] = weight + ((expert < experts ? expert : experts - 1) * columns + slice) * kColumnBytes;
  }
  // Launched programmatically: the first two stages of this thread's weights are requested into L2 before waiting
  // for the previous kernel (whose output is x).
  {
    const int prefetch_columns = min(2 * kStageColumns, slice < columns ? (columns - slice + kSlices - 1) / kSlices : 0);
    for (int i = 0; i < prefetch_columns; ++i) {
#pragma unroll
      for (int j = 0; j < kExpertsPerLane; ++j) {
        asm volatile("prefetch.global.L2 [%0];" ::"l"(rows[j] + i * kSlices * kColumnBytes));
      }
    }
  }
  begin_dependent_kernel();
  // Token slots past the batch copy the last row (valid memory); their logits are never stored.
  const float4* x_rows = x + static_cast<int64_t>(token_base) * columns + rank * kCtaSlices;  // [kTokens][columns]
  const int last_row_slot = tokens - 1 - token_base;

  float acc[kAccumulators];
#pragma unroll
  for (int a = 0; a < kAccumulators; ++a) acc[a] = 0.0f;

  const int slice0_columns = (columns + kSlices - 1) / kSlices;  // slice 0 has the most columns
  const int slice_columns = slice < columns ? (columns - slice + kSlices - 1) / kSlices : 0;
  for (int stage = 0; stage < slice0_columns; stage += kStageColumns) {
    if (stage > 0) __syncthreads();  // every warp has read the previous stage's x
    const int valid = slice_columns - stage;  // this thread's columns in the stage: i < valid

    float4 w[kExpertsPerLane][kStageColumns];
#pragma unroll
    for (int i = 0; i < kStageColumns; ++i) {
#pragma unroll
      for (int j = 0; j < kExpertsPerLane; ++j) {
        w[j][i] = load_weight<kBf16Weight>(rows[j] + (stage + i) * kSlices * kColumnBytes, i < valid);
      }
    }

#pragma unroll
    for (int k = 0; k < (kStageVectors + kThreads - 1) / kThreads; ++k) {
      const int v = k * kThreads + static_cast<int>(threadIdx.x);
      const int t = v / (kStageColumns * kCtaSlices);
      const int i = (v / kCtaSlices) % kStageColumns;
      const int u = v % kCtaSlices;
      if (v < kStageVectors && (stage + i) * kSlices + rank * kCtaSlices + u < columns) {
        const int64_t slot = t < last_row_slot ? t : last_row_slot;
        __pipeline_memcpy_async(&x_stage[t][i][u], x_rows + slot * columns + (stage + i) * kSlices + u,
                                sizeof(float4));
      }
    }
    __pipeline_commit();
    __pipeline_wait_prior(0);
    __syncthreads();

#pragma unroll
    for (int i = 0; i < kStageColumns; ++i) {
      if (i < valid) {
#pragma unroll
        for (int t = 0; t < kTokens; ++t) {
          const float4 xv = x_stage[t][i][cta_slice];
#pragma unroll
          for (int j = 0; j < kExpertsPerLane; ++j) {
            float& sum = acc[t * kExpertsPerLane + j];
            sum = __fmaf_rn(xv.x, w[j][i].x, sum);
            sum = __fmaf_rn(xv.y, w[j][i].y, sum);
            sum = __fmaf_rn(xv.z, w[j][i].z, sum);
            sum = __fmaf_rn(xv.w, w[j][i].w, sum);
          }
        }
      }
    }
  }

  int first = 0;
  bool owner = true;
  slice_tree_level<kAccumulators>(acc, lane, 1, first, owner);
  slice_tree_level<at_least_one(kAccumulators / 2)>(acc, lane, 2, first, owner);
  slice_tree_level<at_least_one(kAccumulators / 4)>(acc, lane, 4, first, owner);
  if (owner) {
#pragma unroll
    for (int i = 0; i < at_least_one(kAccumulators / 8); ++i) {
      const int a = first + i;
      half_sums[slice_bit3][(a / kExpertsPerLane) * kCtaExperts + lane_expert0 + a % kExpertsPerLane] = acc[i];
    }
  }
  __syncthreads();
  for (int o = threadIdx.x; o < kCtaOutputs; o += kThreads) cta_sums[o] = __fadd_rn(half_sums[0][o], half_sums[1][o]);
  cluster.sync();  // every rank's level-3 sums are visible cluster-wide

  if (threadIdx.x < kRankOutputs) {
    const int o = rank * kRankOutputs + static_cast<int>(threadIdx.x);
    float p[kClusterSize];
#pragma unroll
    for (int r = 0; r < kClusterSize; ++r) p[r] = *cluster.map_shared_rank(&cta_sums[o], r);
    const float sum = __fadd_rn(__fadd_rn(__fadd_rn(p[0], p[1]), __fadd_rn(p[2], p[3])),
                                __fadd_rn(__fadd_rn(p[4], p[5]), __fadd_rn(p[6], p[7])));
    const int token = token_base + o / kCtaExperts;
    const int64_t expert = expert_base + o % kCtaExperts;
    if (token < tokens && expert < experts) logits[static_cast<int64_t>(token) * experts + expert] = sum;
  }
  cluster.sync();  // no CTA leaves while another rank may still read its cta_sums
}

template <int kTokens, int kExpertsPerLane, int kStageColumns, int kMinBlocks, bool kBf16Weight>
void launch(const float* x, int tokens, int64_t hidden, const char* weight, int experts, float* logits,
            cudaStream_t stream) {
  constexpr int64_t kCtaExperts = kExpertLanes * kExpertsPerLane;
  const dim3 grid(static_cast<unsigned>(kClusterSize * ((experts + kCtaExperts - 1) / kCtaExperts)),
                  static_cast<unsigned>((tokens + kTokens - 1) / kTokens));
  launch_programmatic(moe_router_gemm_kernel<kTokens, kExpertsPerLane, kStageColumns, kMinBlocks, kBf16Weight>, grid,
                      dim3(kThreads), 0, stream, reinterpret_cast<const float4*>(x), tokens,
                      static_cast<int>(hidden / 4), weight, experts, logits);
}

bool aligned(const void* pointer, uintptr_t bytes) { return reinterpret_cast<uintptr_t>(pointer) % bytes == 0; }

template <bool kBf16Weight>
void router_logits(const float* x, int64_t tokens, int64_t hidden, const void* weight_pointer, int64_t experts,
                   float* logits, cudaStream_t stream) {
  const char* weight = static_cast<const char*>(weight_pointer);
  FATHOM_CHECK(tokens >= 1 && tokens <= kMaxTokens,
               "moe_router_logits_fp32: tokens " << tokens << " outside [1, " << kMaxTokens << "] (hidden " << hidden
                                                 << ", experts " << experts << ")");
  FATHOM_CHECK(hidden > 0 && hidden % 4 == 0 && hidden <= INT_MAX,
               "moe_router_logits_fp32: hidden " << hidden << " must be a positive multiple of 4 (float4 loads) of at "
                                                 << "most " << INT_MAX << " (tokens " << tokens << ", experts "
                                                 << experts << ")");
  FATHOM_CHECK(experts >= 1 && experts <= INT_MAX,
               "moe_router_logits_fp32: experts " << experts << " outside [1, " << INT_MAX << "] (tokens " << tokens
                                                  << ", hidden " << hidden << ")");
  FATHOM_CHECK(x != nullptr && weight != nullptr && logits != nullptr,
               "moe_router_logits_fp32: null pointer (x " << x << ", weight " << static_cast<const void*>(weight)
                                                          << ", logits " << logits << ")");
  FATHOM_CHECK(aligned(x, 16) && aligned(weight, kWeightColumnBytes<kBf16Weight>),
               "moe_router_logits_fp32: x [" << tokens << ", " << hidden << "] at " << x << " and weight [" << experts
                                             << ", " << hidden << "] at " << static_cast<const void*>(weight)
                                             << " must be 16-byte (x) and column-aligned (weight)");
  FATHOM_CHECK(aligned(logits, sizeof(float)),
               "moe_router_logits_fp32: logits [" << tokens << ", " << experts << "] at " << logits
                                                  << " is not float-aligned");
  const int n = static_cast<int>(tokens);
  const int e = static_cast<int>(experts);
  // Up to 16 tokens: one token tile, 16 experts per CTA (V3: 128 CTAs, one per SM), 16 W loads in flight per thread
  // (8 at 16 tokens, where the x stage would pass 32 KB); ptxas then needs ~100-190 registers, spill-free at one CTA
  // per SM. Past 16 tokens: 2 experts per lane double the FMAs per shared-memory x read and halve how often x is
  // re-read from L2; 4-column stages keep it within 128 registers so two CTAs share an SM (V3 at 64 tokens: 256 CTAs).
  if (n == 1) {
    launch<1, 1, 16, 1, kBf16Weight>(x, n, hidden, weight, e, logits, stream);
  } else if (n <= 2) {
    launch<2, 1, 16, 1, kBf16Weight>(x, n, hidden, weight, e, logits, stream);
  } else if (n <= 4) {
    launch<4, 1, 16, 1, kBf16Weight>(x, n, hidden, weight, e, logits, stream);
  } else if (n <= 8) {
    launch<8, 1, 16, 1, kBf16Weight>(x, n, hidden, weight, e, logits, stream);
  } else if (n <= 16) {
    launch<16, 1, 8, 1, kBf16Weight>(x, n, hidden, weight, e, logits, stream);
  } else {
    launch<16, 2, 4, 2, kBf16Weight>(x, n, hidden, weight, e, logits, stream);
  }
}

}  // namespace

void moe_router_logits_fp32(const float* x, int64_t tokens, int64_t hidden, const float* weight, int64_t experts,
                            float* logits, cudaStream_t stream) {
  router_logits<false>(x, tokens, hidden, weight, experts, logits, stream);
}

void moe_router_logits_fp32(const float* x, int64_t tokens, int64_t hidden, const __nv_bfloat16* weight,
                            int64_t experts, float* logits, cudaStream_t stream) {
  router_logits<true>(x, tokens, hidden, weight, experts, logits, stream);
}

}  // namespace fathom::kernels::cuda
