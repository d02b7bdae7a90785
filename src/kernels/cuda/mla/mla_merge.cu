#include "kernels/cuda/mla/mla_merge.h"

#include "kernels/cuda/cuda_check.h"

namespace fathom::kernels::cuda {

namespace {

constexpr int kMergeThreads = 256;

// A group of kGroup lanes (a power of two <= 32, so a group never straddles warps) per (row, head): lane c of the
// group merges elements [8c, 8c + 8). Every lane reads both log-sum-exps before the warp syncs; only then does the
// group's first lane write the merged one, so no lane reads a value already merged.
__global__ void __launch_bounds__(kMergeThreads) merge_attention_kernel(
    __nv_bfloat16* __restrict__ acc,         // [num_pairs, v_dim]
    float* __restrict__ acc_lse,             // [num_pairs]
    const __nv_bfloat16* __restrict__ part,  // [num_pairs, v_dim]
    const float* __restrict__ part_lse,      // [num_pairs]
    int64_t num_pairs, int v_dim, int group, bool vectorized) {
  const int64_t thread = static_cast<int64_t>(blockIdx.x) * kMergeThreads + threadIdx.x;
  const int64_t pair = thread / group;
  const int chunk = static_cast<int>(thread % group);
  const bool active = pair < num_pairs && chunk * 8 < v_dim;
  float lse_a = -INFINITY, lse_b = -INFINITY;
  if (pair < num_pairs) {
    lse_a = acc_lse[pair];
    lse_b = part_lse[pair];
  }
  const float max_lse = fmaxf(lse_a, lse_b);
  const bool empty = max_lse == -INFINITY;
  const float w_a = empty ? 0.0f : exp2f(lse_a - max_lse), w_b = empty ? 0.0f : exp2f(lse_b - max_lse);
  const float sum = w_a + w_b;
  if (active) {
    __nv_bfloat16* out = acc + pair * v_dim + chunk * 8;
    const __nv_bfloat16* other = part + pair * v_dim + chunk * 8;
    auto merged = [&](__nv_bfloat16 a, __nv_bfloat16 b) {
      return empty ? 0.0f : (__bfloat162float(a) * w_a + __bfloat162float(b) * w_b) / sum;
    };
    if (vectorized) {
      uint4 a_raw = *reinterpret_cast<const uint4*>(out);
      const uint4 b_raw = *reinterpret_cast<const uint4*>(other);
      __nv_bfloat162* a2 = reinterpret_cast<__nv_bfloat162*>(&a_raw);
      const __nv_bfloat162* b2 = reinterpret_cast<const __nv_bfloat162*>(&b_raw);
#pragma unroll
      for (int i = 0; i < 4; ++i) a2[i] = __floats2bfloat162_rn(merged(a2[i].x, b2[i].x), merged(a2[i].y, b2[i].y));
      *reinterpret_cast<uint4*>(out) = a_raw;
    } else {
      const int count = min(8, v_dim - chunk * 8);
      for (int i = 0; i < count; ++i) out[i] = __float2bfloat16(merged(out[i], other[i]));
    }
  }
  __syncwarp();
  if (pair < num_pairs && chunk == 0) acc_lse[pair] = empty ? -INFINITY : max_lse + log2f(sum);
}

}  // namespace

void mla_merge_attention(__nv_bfloat16* acc, float* acc_lse, const __nv_bfloat16* part, const float* part_lse,
                         int64_t num_rows, int32_t num_heads, int32_t v_dim, cudaStream_t stream) {
  FATHOM_CHECK(num_rows >= 0 && num_heads > 0 && v_dim > 0 && v_dim <= 256,
               "mla_merge_attention: rows " << num_rows << ", heads " << num_heads << ", v_dim " << v_dim
                                            << " (at most 256)");
  if (num_rows == 0) return;
  FATHOM_CHECK(acc && acc_lse && part && part_lse, "mla_merge_attention: null pointer argument");
  const int chunks = (v_dim + 7) / 8;
  int group = 1;
  while (group < chunks) group *= 2;
  const bool vectorized = v_dim % 8 == 0 && (reinterpret_cast<uintptr_t>(acc) & 15u) == 0 &&
                          (reinterpret_cast<uintptr_t>(part) & 15u) == 0;
  const int64_t num_pairs = num_rows * num_heads;
  const int64_t blocks = (num_pairs * group + kMergeThreads - 1) / kMergeThreads;
  FATHOM_CHECK(blocks <= 0x7fffffff, "mla_merge_attention: " << num_pairs << " (row, head) pairs");
  merge_attention_kernel<<<static_cast<unsigned>(blocks), kMergeThreads, 0, stream>>>(acc, acc_lse, part, part_lse,
                                                                                       num_pairs, v_dim, group,
                                                                                       vectorized);
  FATHOM_CUDA_CHECK_LAUNCH();
}

}  // namespace fathom::kernels::cuda
