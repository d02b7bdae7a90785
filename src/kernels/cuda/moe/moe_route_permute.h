#pragma once
// Decode-sized MoE routing and token permutation in one launch: the outputs of moe_route followed by
// moe_build_permutation, bit for bit, without the launch (and the wait for it) between the two.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/moe/moe_permutation.h"
#include "kernels/cuda/moe/moe_routing.h"

namespace fathom::kernels::cuda {

// Whether moe_route_and_permute runs as one kernel for this shape (one block: T*k <= 1024 entries and at most 4096
// permuted rows); otherwise it launches moe_route and moe_build_permutation.
bool moe_route_permute_fuses(const MoePermutationShape& shape);

// router_logits: [T, E] fp32 (device); correction_bias, config, expert_ids, expert_weights: as moe_route;
// shape (top_k and num_experts equal to config's), workspace, out: as moe_build_permutation.
void moe_route_and_permute(const float* router_logits, const float* correction_bias, const MoeRoutingConfig& config,
                           const MoePermutationShape& shape, int32_t* expert_ids, float* expert_weights,
                           void* workspace, size_t workspace_bytes, const MoePermutation& out, cudaStream_t stream);

}  // namespace fathom::kernels::cuda
