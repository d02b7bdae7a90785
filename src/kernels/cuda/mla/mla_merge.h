#pragma once
// Merging an attention result over one window of keys into the result over the windows before it (the same queries):
// the prefill of a prefix too long to expand through kv_b_proj at once runs window by window (mla_prefill's key
// windows), each pass merged here. The CPU reference is kernels::cpu::merge_attention_states.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace fathom::kernels::cuda {

// Per row and head, with M = max(acc_lse, part_lse), w_acc = 2^(acc_lse - M), w_part = 2^(part_lse - M) (the
// log-sum-exps of the log2-domain scores that mla_prefill writes):
//   acc = (acc * w_acc + part * w_part) / (w_acc + w_part),  acc_lse = M + log2(w_acc + w_part);
// both -inf: acc = 0, acc_lse = -inf. A -inf side weighs 0, so the other is kept bit for bit: merging windows a row
// does not see changes nothing. fp32 arithmetic, acc rounded to bf16.
// acc, part: [num_rows, num_heads, v_dim] bf16; acc_lse, part_lse: [num_rows, num_heads] fp32; v_dim <= 256.
// No sync, no allocation (CUDA-graph safe).
void mla_merge_attention(__nv_bfloat16* acc, float* acc_lse, const __nv_bfloat16* part, const float* part_lse,
                         int64_t num_rows, int32_t num_heads, int32_t v_dim, cudaStream_t stream);

}  // namespace fathom::kernels::cuda
