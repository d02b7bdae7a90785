#pragma once
// The MoE router's prefill form on tensor cores: the fp32 router input split exactly into three bf16 planes
// (kernels/cuda/norm/bf16x3_split.cuh, written by the post-attention norm), one bf16 GEMM of the [3T, H] plane rows
// against the bf16-exact [E, H] gate weight with fp32 accumulation (every product exact), then this sum of each
// token's three partial logits. Accumulation order differs from an fp32 SGEMM's as any two GEMMs' do; the products
// are those of the fp32 router.
#include <cuda_runtime.h>

#include <cstdint>

namespace fathom::kernels::cuda {

// plane_logits: [tokens, 3, experts] fp32 (device): row 3t + p holds plane p's (hi, mid, lo) partial logits of token t
// logits:       [tokens, experts] fp32 (device): logits[t, e] = (plane_logits[3t, e] + plane_logits[3t + 1, e])
//               + plane_logits[3t + 2, e], round to nearest; may not alias plane_logits
// No allocation, no host synchronization (graph-capturable); launched programmatically. Throws fathom::Error naming
// the sizes on bad arguments.
void moe_router_sum_planes(const float* plane_logits, int64_t tokens, int64_t experts, float* logits,
                           cudaStream_t stream);

}  // namespace fathom::kernels::cuda
