#include "kernels/cuda/rope/rope.h"

#include <algorithm>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/norm/bf16x8.cuh"
#include "kernels/cuda/rope/rope_cos_sin.cuh"

namespace fathom::kernels::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kMaxRopeDim = 256;
constexpr int kMaxTargets = 2;
constexpr int kTableThreads = 256;
constexpr int64_t kMaxTableBlocks = 4096;  // grid-stride beyond: a V3 table (163840 x 32 entries) is 20480 blocks

struct RopeTargets {
  RopeTarget target[kMaxTargets];
  bool vectorized[kMaxTargets];  // 16-byte accesses allowed for this target
  int count;
};

// One block per token: cos/sin of the token's position into shared memory, then every vector of every target.
__global__ void __launch_bounds__(kThreads)
    rope_kernel(RopeTargets targets,
                const int32_t* __restrict__ positions,  // [T]
                RopeParams params) {
  __shared__ float cos_shared[kMaxRopeDim / 2];
  __shared__ float sin_shared[kMaxRopeDim / 2];
  const int64_t token = blockIdx.x;
  const int rope_dim = params.rope_dim;
  const bool interleaved = params.interleaved;
  const int half = rope_dim / 2;
  const int32_t position = positions[token];
  for (int i = threadIdx.x; i < half; i += blockDim.x) rope_cos_sin(params, position, i, cos_shared[i], sin_shared[i]);

  __syncthreads();
  for (int t = 0; t < targets.count; ++t) {
    const RopeTarget target = targets.target[t];
    __nv_bfloat16* token_base = target.data + token * target.vectors_per_token * target.vector_stride;
    if (targets.vectorized[t]) {
      // Item = (vector h, 8-value chunk c). Interleaved: chunk holds pairs 4c..4c+3. Split halves: chunk c of the
      // first half pairs with chunk c of the second half (pairs 8c..8c+7).
      const int chunks = interleaved ? rope_dim / 8 : half / 8;
      const int items = static_cast<int>(target.vectors_per_token * chunks);  // checked < 2^31 on the host
      for (int item = threadIdx.x; item < items; item += blockDim.x) {
        __nv_bfloat16* vec = token_base + static_cast<int64_t>(item / chunks) * target.vector_stride;
        const int c = item % chunks;
        if (interleaved) {
          float v[8];
          load_bf16x8(vec + 8 * c, v);
#pragma unroll
          for (int j = 0; j < 4; ++j) rope_rotate(v[2 * j], v[2 * j + 1], cos_shared[4 * c + j], sin_shared[4 * c + j]);
          store_bf16x8(vec + 8 * c, v);
        } else {
          float a[8], b[8];
          load_bf16x8(vec + 8 * c, a);
          load_bf16x8(vec + half + 8 * c, b);
#pragma unroll
          for (int j = 0; j < 8; ++j) rope_rotate(a[j], b[j], cos_shared[8 * c + j], sin_shared[8 * c + j]);
          store_bf16x8(vec + 8 * c, a);
          store_bf16x8(vec + half + 8 * c, b);
        }
      }
    } else {
      const int items = static_cast<int>(target.vectors_per_token * half);
      for (int item = threadIdx.x; item < items; item += blockDim.x) {
        __nv_bfloat16* vec = token_base + static_cast<int64_t>(item / half) * target.vector_stride;
        const int i = item % half;
        __nv_bfloat16* pa = interleaved ? vec + 2 * i : vec + i;
        __nv_bfloat16* pb = interleaved ? vec + 2 * i + 1 : vec + i + half;
        float a = __bfloat162float(*pa), b = __bfloat162float(*pb);
        rope_rotate(a, b, cos_shared[i], sin_shared[i]);
        *pa = __float2bfloat16_rn(a);
        *pb = __float2bfloat16_rn(b);
      }
    }
  }
}

// One thread per (position, frequency) entry of the table, grid-strided.
__global__ void __launch_bounds__(kTableThreads)
    rope_table_kernel(RopeParams params, int32_t max_positions,
                      float* __restrict__ cos_sin) {  // [max_positions, rope_dim]
  const int half = params.rope_dim / 2;
  const int64_t entries = static_cast<int64_t>(max_positions) * half;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < entries;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int32_t position = static_cast<int32_t>(e / half);
    const int i = static_cast<int>(e % half);
    float* row = cos_sin + static_cast<int64_t>(position) * params.rope_dim;
    rope_compute_cos_sin(position, params.inv_freq[i], params.attention_factor, row[i], row[half + i]);
  }
}

void validate_frequencies(const RopeParams& params, const char* op) {
  FATHOM_CHECK(params.rope_dim > 0 && params.rope_dim % 2 == 0 && params.rope_dim <= kMaxRopeDim,
               op << ": rope_dim " << params.rope_dim << " must be even and at most " << kMaxRopeDim);
  FATHOM_CHECK(params.inv_freq != nullptr, op << ": null inv_freq");
}

}  // namespace

void apply_rope_bf16(const RopeTarget* targets, int num_targets, int64_t num_tokens, const int32_t* positions,
                     const RopeParams& params, cudaStream_t stream) {
  FATHOM_CHECK(num_targets >= 1 && num_targets <= kMaxTargets, "rope: " << num_targets << " targets, expected 1 or 2");
  validate_frequencies(params, "rope");
  FATHOM_CHECK(params.cos_sin == nullptr || params.max_positions > 0,
               "rope: cos/sin table with max_positions " << params.max_positions);
  FATHOM_CHECK(num_tokens >= 0 && num_tokens < (int64_t{1} << 31), "rope: num_tokens " << num_tokens);
  if (num_tokens == 0) return;
  RopeTargets packed{};
  packed.count = num_targets;
  const int half = params.rope_dim / 2;
  for (int t = 0; t < num_targets; ++t) {
    const RopeTarget& target = targets[t];
    FATHOM_CHECK(target.data != nullptr && target.vectors_per_token >= 1 && target.vector_stride >= params.rope_dim &&
                     target.vectors_per_token * half < (int64_t{1} << 31),
                 "rope: target " << t << " has vectors_per_token " << target.vectors_per_token << ", stride "
                                 << target.vector_stride << " (rope_dim " << params.rope_dim << ")");
    packed.target[t] = target;
    const bool shape_ok = params.interleaved ? params.rope_dim % 8 == 0 : half % 8 == 0;
    packed.vectorized[t] = shape_ok && target.vector_stride % 8 == 0 && is_aligned_16(target.data);
  }
  rope_kernel<<<static_cast<unsigned>(num_tokens), kThreads, 0, stream>>>(packed, positions, params);
  FATHOM_CUDA_CHECK_LAUNCH();
}

void rope_build_cos_sin_table(const RopeParams& params, int32_t max_positions, float* cos_sin, cudaStream_t stream) {
  validate_frequencies(params, "rope_build_cos_sin_table");
  FATHOM_CHECK(max_positions > 0 && cos_sin != nullptr,
               "rope_build_cos_sin_table: max_positions " << max_positions << ", table " << cos_sin);
  const int64_t entries = static_cast<int64_t>(max_positions) * (params.rope_dim / 2);
  const int64_t blocks = std::min<int64_t>((entries + kTableThreads - 1) / kTableThreads, kMaxTableBlocks);
  rope_table_kernel<<<static_cast<unsigned>(blocks), kTableThreads, 0, stream>>>(params, max_positions, cos_sin);
  FATHOM_CUDA_CHECK_LAUNCH();
}

}  // namespace fathom::kernels::cuda
