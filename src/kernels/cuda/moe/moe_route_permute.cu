#include "kernels/cuda/moe/moe_route_permute.h"

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/moe/moe_permutation_block.cuh"
#include "kernels/cuda/moe/moe_routing_warp.cuh"
#include "kernels/cuda/programmatic_launch.cuh"

namespace fathom::kernels::cuda {
namespace {

using moe_permute_detail::BlockScan;
using moe_permute_detail::kBlockThreads;
using moe_permute_detail::kWarpsPerBlock;

constexpr int64_t kMaxFusedEntries = 1024;  // the block's shared copy of the expert ids stays small
constexpr int64_t kMaxFusedRows = moe_permute_detail::kRowsPerFillBlock;  // one block fills every unrouted row

// Dynamic shared memory: the permutation's ints, then [kWarpsPerBlock][E] routing scratch, then [T * k] expert ids.
size_t fused_shared_bytes(int num_experts, int64_t entries) {
  return sizeof(int) * moe_permute_detail::permute_small_shared_ints(num_experts) +
         sizeof(float) * static_cast<size_t>(kWarpsPerBlock) * num_experts + sizeof(int32_t) * static_cast<size_t>(entries);
}

// One block: warp w routes tokens w, w + 16, ... (moe_routing_warp.cuh), keeping the expert ids in shared memory,
// then the block builds the permutation from them (moe_permutation_block.cuh).
template <int kPerLane>
__global__ void __launch_bounds__(kBlockThreads)
    route_permute_kernel(const float* __restrict__ router_logits,    // [T, E]
                         int64_t num_tokens,
                         const float* __restrict__ correction_bias,  // [E] or null
                         int num_experts, int num_groups, int top_groups, int top_k, int lanes_per_group,
                         bool normalize, float routed_scaling_factor,
                         int32_t* __restrict__ expert_ids,           // [T, k]
                         float* __restrict__ expert_weights,         // [T, k]
                         int row_alignment, int64_t max_rows, MoePermutation out) {
  begin_dependent_kernel();  // launched programmatically (programmatic_launch.cuh)
  __shared__ typename BlockScan::TempStorage scan_storage;
  extern __shared__ int shared[];
  int* permute_shared = shared;
  float* choice = reinterpret_cast<float*>(shared + moe_permute_detail::permute_small_shared_ints(num_experts));
  int32_t* entries = reinterpret_cast<int32_t*>(choice + kWarpsPerBlock * num_experts);  // [T * k]
  const int warp = threadIdx.x / 32;
  for (int64_t token = warp; token < num_tokens; token += kWarpsPerBlock) {
    moe_routing_detail::route_token_in_warp<kPerLane>(
        router_logits + token * num_experts, correction_bias, num_experts, num_groups, top_groups, top_k,
        lanes_per_group, normalize, routed_scaling_factor, choice + warp * num_experts, expert_ids + token * top_k,
        expert_weights + token * top_k, entries + token * top_k);
    __syncwarp();  // this token's reads of the warp's scratch row before the next token's writes
  }
  __syncthreads();  // every token's expert ids are in `entries`
  moe_permute_detail::permute_small_block(entries, num_tokens * top_k, num_experts, row_alignment, max_rows, max_rows,
                                          out, permute_shared, scan_storage);
}

template <int kPerLane>
void launch_fused(const float* router_logits, const float* correction_bias, const MoeRoutingConfig& config,
                  const MoePermutationShape& shape, int32_t* expert_ids, float* expert_weights,
                  const MoePermutation& out, cudaStream_t stream) {
  auto kernel = route_permute_kernel<kPerLane>;
  const size_t shared_bytes = fused_shared_bytes(config.num_experts, shape.num_tokens * shape.top_k);
  // Past the 48 KB default only for E > 256 (V3's 256 experts need ~39 KB): a per-function attribute, not a stream
  // operation (graph-capture safe), set only when needed so the decode path makes no extra driver call.
  constexpr size_t kDefaultDynamicSharedBytes = 48 * 1024;
  if (shared_bytes > kDefaultDynamicSharedBytes) {
    FATHOM_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(shared_bytes)));
  }
  launch_programmatic(kernel, dim3(1), dim3(kBlockThreads), shared_bytes, stream, router_logits, shape.num_tokens,
                      correction_bias, config.num_experts, config.num_groups, config.top_groups, config.top_k,
                      moe_routing_detail::routing_lanes_per_group(config.num_groups), config.normalize,
                      config.routed_scaling_factor, expert_ids, expert_weights, shape.row_alignment,
                      moe_max_permuted_rows(shape), out);
}

}  // namespace

bool moe_route_permute_fuses(const MoePermutationShape& shape) {
  const int64_t entries = shape.num_tokens * shape.top_k;
  return entries <= kMaxFusedEntries && moe_max_permuted_rows(shape) <= kMaxFusedRows &&
         shape.num_experts <= moe_permute_detail::kMaxExperts;
}

void moe_route_and_permute(const float* router_logits, const float* correction_bias, const MoeRoutingConfig& config,
                           const MoePermutationShape& shape, int32_t* expert_ids, float* expert_weights,
                           void* workspace, size_t workspace_bytes, const MoePermutation& out, cudaStream_t stream) {
  validate_moe_routing_config(config);
  FATHOM_CHECK(shape.top_k == config.top_k && shape.num_experts == config.num_experts,
               "moe route+permute: permutation shape (k " << shape.top_k << ", E " << shape.num_experts
                                                          << ") differs from the routing config (k " << config.top_k
                                                          << ", E " << config.num_experts << ")");
  FATHOM_CHECK(shape.num_tokens >= 0 && shape.row_alignment >= 1,
               "moe route+permute: num_tokens " << shape.num_tokens << ", row_alignment " << shape.row_alignment);
  if (shape.num_tokens == 0 || !moe_route_permute_fuses(shape)) {
    moe_route(router_logits, shape.num_tokens, correction_bias, config, expert_ids, expert_weights, stream);
    moe_build_permutation(expert_ids, shape, workspace, workspace_bytes, out, stream);
    return;
  }
  const int per_lane = (config.num_experts + 31) / 32;
  if (per_lane <= 1) launch_fused<1>(router_logits, correction_bias, config, shape, expert_ids, expert_weights, out, stream);
  else if (per_lane <= 2) launch_fused<2>(router_logits, correction_bias, config, shape, expert_ids, expert_weights, out, stream);
  else if (per_lane <= 4) launch_fused<4>(router_logits, correction_bias, config, shape, expert_ids, expert_weights, out, stream);
  else if (per_lane <= 8) launch_fused<8>(router_logits, correction_bias, config, shape, expert_ids, expert_weights, out, stream);
  else launch_fused<16>(router_logits, correction_bias, config, shape, expert_ids, expert_weights, out, stream);
}

}  // namespace fathom::kernels::cuda
