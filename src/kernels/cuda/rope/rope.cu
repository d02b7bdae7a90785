#include "kernels/cuda/rope/rope.h"

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/norm/bf16x8.cuh"

namespace fathom::kernels::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kMaxRopeDim = 256;
constexpr int kMaxTargets = 2;

struct RopeTargets {
  RopeTarget target[kMaxTargets];
  bool vectorized[kMaxTargets];  // 16-byte accesses allowed for this target
  int count;
};

__device__ __forceinline__ void rotate(float& a, float& b, float cos_value, float sin_value) {
  const float x0 = a, x1 = b;
  a = __fsub_rn(__fmul_rn(x0, cos_value), __fmul_rn(x1, sin_value));
  b = __fadd_rn(__fmul_rn(x1, cos_value), __fmul_rn(x0, sin_value));
}

// One block per token: cos/sin of the token's position into shared memory, then every vector of every target.
__global__ void __launch_bounds__(kThreads)
    rope_kernel(RopeTargets targets,
                const int32_t* __restrict__ positions,  // [T]
                const float* __restrict__ inv_freq,     // [rope_dim / 2]
                int rope_dim, float attention_factor, bool interleaved) {
  __shared__ float cos_shared[kMaxRopeDim / 2];
  __shared__ float sin_shared[kMaxRopeDim / 2];
  const int64_t token = blockIdx.x;
  const int half = rope_dim / 2;
  const int position = positions[token];
  for (int i = threadIdx.x; i < half; i += blockDim.x) {
    const float angle = __fmul_rn(static_cast<float>(position), inv_freq[i]);
    double sin_value, cos_value;
    sincos(static_cast<double>(angle), &sin_value, &cos_value);
    cos_shared[i] = __fmul_rn(static_cast<float>(cos_value), attention_factor);
    sin_shared[i] = __fmul_rn(static_cast<float>(sin_value), attention_factor);
  }

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
          for (int j = 0; j < 4; ++j) rotate(v[2 * j], v[2 * j + 1], cos_shared[4 * c + j], sin_shared[4 * c + j]);
          store_bf16x8(vec + 8 * c, v);
        } else {
          float a[8], b[8];
          load_bf16x8(vec + 8 * c, a);
          load_bf16x8(vec + half + 8 * c, b);
#pragma unroll
          for (int j = 0; j < 8; ++j) rotate(a[j], b[j], cos_shared[8 * c + j], sin_shared[8 * c + j]);
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
        rotate(a, b, cos_shared[i], sin_shared[i]);
        *pa = __float2bfloat16_rn(a);
        *pb = __float2bfloat16_rn(b);
      }
    }
  }
}

}  // namespace

void apply_rope_bf16(const RopeTarget* targets, int num_targets, int64_t num_tokens, const int32_t* positions,
                     const RopeParams& params, cudaStream_t stream) {
  FATHOM_CHECK(num_targets >= 1 && num_targets <= kMaxTargets, "rope: " << num_targets << " targets, expected 1 or 2");
  FATHOM_CHECK(params.rope_dim > 0 && params.rope_dim % 2 == 0 && params.rope_dim <= kMaxRopeDim,
               "rope: rope_dim " << params.rope_dim << " must be even and at most " << kMaxRopeDim);
  FATHOM_CHECK(params.inv_freq != nullptr, "rope: null inv_freq");
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
  rope_kernel<<<static_cast<unsigned>(num_tokens), kThreads, 0, stream>>>(packed, positions, params.inv_freq,
                                                                          params.rope_dim, params.attention_factor,
                                                                          params.interleaved);
  FATHOM_CUDA_CHECK_LAUNCH();
}

}  // namespace fathom::kernels::cuda
