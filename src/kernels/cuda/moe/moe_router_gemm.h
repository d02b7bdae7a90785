#pragma once
// The MoE router GEMM at decode sizes (1..64 tokens): logits = x . W^T in fp32 with fp32 FMA accumulation (no TF32).
// cuBLASLt's fp32 GEMM takes ~4x the weight-streaming floor here; this kernel streams W once from many CTAs and keeps
// the few x rows on chip (sm_90: thread-block clusters). Batch invariant: a logit's bits depend only on its x row, its
// weight row and hidden.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace fathom::kernels::cuda {

// x:      [tokens, hidden] fp32 (device), 16-byte aligned; tokens in [1, 64], hidden a positive multiple of 4
// weight: [experts, hidden] fp32 (device), 16-byte aligned (the gate's nn.Linear layout)
// logits: [tokens, experts] fp32 (device); every element is written, nothing else is
//
// Summation order (fixed by hidden alone: never by tokens or by the other rows of the batch): the hidden dimension is
// cut into float4 columns c = k / 4, dealt to 128 slices (slice s owns columns s, s + 128, s + 256, ...). Each slice
// is one fp32 FMA chain from 0.0f over its columns in increasing c, the four k of a column in increasing k. The 128
// slice sums are then added as a perfect binary tree over the slice index: level l (l = 0..6) adds the sums of the
// adjacent aligned slice blocks [2m * 2^l, (2m + 1) * 2^l) and [(2m + 1) * 2^l, (2m + 2) * 2^l). No atomics.
//
// No allocation and no host synchronization (graph-capturable). Throws fathom::Error naming the sizes on bad arguments.
void moe_router_logits_fp32(const float* x, int64_t tokens, int64_t hidden, const float* weight, int64_t experts,
                            float* logits, cudaStream_t stream);
// Same with the weight in bf16 (8-byte aligned; a checkpoint's bf16 gate): every product, hence every logit's bits,
// equal the fp32 overload's on the same values widened to fp32; half the weight bytes streamed.
void moe_router_logits_fp32(const float* x, int64_t tokens, int64_t hidden, const __nv_bfloat16* weight,
                            int64_t experts, float* logits, cudaStream_t stream);

}  // namespace fathom::kernels::cuda
