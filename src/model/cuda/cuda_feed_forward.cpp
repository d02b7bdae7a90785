// The feed-forward half of a layer on the GPU: dense SwiGLU MLP, or DeepSeekMoE (routing, permutation, grouped
// expert GEMMs, shared expert, weighted combine).
#include <algorithm>

#include "core/error.h"
#include "kernels/cuda/fp8_gemm/fp8_grouped_gemm.h"
#include "kernels/cuda/moe/moe_combine.h"
#include "kernels/cuda/moe/moe_gather.h"
#include "kernels/cuda/moe/moe_route_permute.h"
#include "kernels/cuda/moe/moe_router_gemm.h"
#include "kernels/cuda/moe/moe_router_planes.h"
#include "kernels/cuda/moe/swiglu.h"
#include "kernels/cuda/norm/bf16x3_split.cuh"
#include "model/cuda/cuda_model_impl.h"

namespace fathom::model::cuda {

kc::SplitKPartials CudaModelImpl::feed_forward(int64_t layer, const BatchLayout& layout) {
  const DeviceLayer& weights = layer_weights(layer);
  const Quantized x = quantized_input(layout.num_tokens, config_.hidden_size);
  if (weights.moe) {
    moe(*weights.moe, x, delta_.buffer.data());
    return {};
  }
  return mlp(*weights.dense_mlp, x, delta_.buffer.data());
}

void CudaModelImpl::compute_router_logits(const DeviceMoe& moe, int64_t n, float* logits) {
  const int64_t hidden = config_.hidden_size, experts = moe.num_experts;
  // Up to 32 rows our kernel beats cuBLASLt's fp32 SGEMM (H200, warm: 3.8 vs 6.7 us at 1 row, 14.8 vs 16.9 at 32; at
  // 64 27 vs 18 us). The tensor-core form takes one call from 8 rows (H100 warm: 6.8 vs 10.9 us at 8, 7.1 vs 14.3 at
  // 32, 6.7 vs 4.0 at 1), but decode steps at batch 4-32 did not move with the switch at 2, 8 or 32 rows, so decode
  // sizes keep the kernel. A logit's bits depend on its own row only, so calls of at most 64 rows.
  if (router_on_kernel(n)) {
    const float* rows = normed_f32_.buffer.data();  // [n, H]
    for (int64_t begin = 0; begin < n; begin += kRouterKernelCallTokens) {
      const int64_t count = std::min(kRouterKernelCallTokens, n - begin);
      if (moe.router_bf16.size() == 0) {
        kc::moe_router_logits_fp32(rows + begin * hidden, count, hidden, moe.router.data(), experts, logits + begin * experts,
                                   stream_);
      } else {
        kc::moe_router_logits_fp32(rows + begin * hidden, count, hidden, moe.router_bf16.data(), experts, logits + begin * experts,
                                   stream_);
      }
    }
    return;
  }
  if (moe.router_bf16.size() == 0) {
    cublas_rows_gemm(*router_gemm_, normed_f32_.buffer.data(), n, moe.router.data(), logits);
    return;
  }
  // [3n, H] plane rows . [E, H]^T -> [3n, E] partial logits (every product exact), summed per token.
  const int64_t plane_rows = kc::kBf16SplitPlanes * n;
  float* plane_logits = router_plane_logits_.ensure(static_cast<size_t>(plane_rows * experts), stream_);
  cublas_rows_gemm(*router_planes_gemm_, normed_planes_.buffer.data(), plane_rows, moe.router_bf16.data(), plane_logits);
  kc::moe_router_sum_planes(plane_logits, n, experts, logits, stream_);
}

kc::SplitKPartials CudaModelImpl::mlp(const DeviceMlp& weights, const Quantized& x, bf16* out) {
  const int64_t n = x.activations.tokens, padded = weights.padded_intermediate, groups = padded / 128;
  bf16* gate_up = gate_up_.ensure(static_cast<size_t>(n * 2 * padded), stream_);  // [n, 2 * Ip]
  const kc::SplitKPartials gate_up_partials = gemm_deferred(x, weights.gate_up.view(), gate_up);
  // silu(gate) * up, quantized per 128 columns into the layout the down GEMM's path reads.
  Quantized act;
  uint8_t* values = scratch_q_.values.ensure(static_cast<size_t>(n * padded), stream_);  // [n, Ip] e4m3
  float* scales = scratch_q_.scales.ensure(static_cast<size_t>(n * groups), stream_);    // [n, Ip / 128]
  auto* codes = reinterpret_cast<__nv_fp8_e4m3*>(values);
  act.activations = {values, scales, n, padded};
  if (!gate_up_partials.empty()) {  // gate_up still in split-K partials: summed by the SwiGLU kernel (same bits)
    FATHOM_CHECK(cublas_rows(n) == 0, "CUDA backend: split-K partials for a " << n << "-token MLP with cuBLASLt rows");
    kc::swiglu_quant_fp8(gate_up_partials, n, padded, codes, scales, groups, 1, stream_);
  } else {
    // The rows cuBLASLt takes also need their scales block-major ([Ip / 128, cublas rows]), as quantize() writes them.
    act.cublas_tokens = cublas_rows(n);
    float* block_major = act.cublas_tokens > 0 ? scratch_q_.scales_block_major.ensure(
                                                     static_cast<size_t>(act.cublas_tokens * groups), stream_)
                                               : nullptr;
    act.scales_block_major = block_major;
    kc::swiglu_quant_fp8(gate_up, n, padded, nullptr, codes, scales, groups, 1, stream_,
                         kc::SwigluBlockMajorScales{block_major, act.cublas_tokens});
  }
  return gemm_deferred(act, weights.down.view(), out);
}

void CudaModelImpl::moe(const DeviceMoe& weights, const Quantized& x, bf16* out) {
  const int64_t n = x.activations.tokens, hidden = config_.hidden_size;
  const int32_t experts = routing_.num_experts, top_k = routing_.top_k;
  const int64_t padded = weights.experts.padded_intermediate, hidden_groups = kc::ceil_div(hidden, 128);
  // The shared expert depends only on x: it runs on the side stream, overlapping the latency-bound routing,
  // permutation and gathers (and the grouped GEMMs) of the routed experts; joined before the combine.
  bf16* shared_out = nullptr;
  kc::SplitKPartials shared_partials;  // the shared expert's down GEMM partials, summed by the combine (decode)
  if (weights.shared) {
    shared_out = shared_out_.ensure(static_cast<size_t>(n * hidden), stream_);  // [n, H]
    FATHOM_CUDA_CHECK(cudaEventRecord(shared_fork_, stream_));
    FATHOM_CUDA_CHECK(cudaStreamWaitEvent(side_stream_, shared_fork_, 0));
    {
      const OnStream side(*this, side_stream_);
      shared_partials = mlp(*weights.shared, x, shared_out);
    }
    FATHOM_CUDA_CHECK(cudaEventRecord(shared_join_, side_stream_));
  }
  // Routing: fp32 router logits [n, E] -> expert ids / weights [n, k].
  float* router_logits = router_logits_.ensure(static_cast<size_t>(n * experts), stream_);
  compute_router_logits(weights, n, router_logits);
  int32_t* expert_ids = expert_ids_.ensure(static_cast<size_t>(n * top_k), stream_);
  float* expert_weights = expert_weights_.ensure(static_cast<size_t>(n * top_k), stream_);
  // Routing, then the rows grouped by expert (one launch for decode-sized batches).
  const kc::MoePermutationShape shape{n, top_k, experts, 1};
  const int64_t max_rows = kc::moe_max_permuted_rows(shape);
  kc::MoePermutation permutation;
  permutation.expert_offsets = expert_offsets_.ensure(static_cast<size_t>(experts + 1), stream_);
  permutation.expert_counts = expert_counts_.ensure(static_cast<size_t>(experts), stream_);
  permutation.row_token_slot = row_token_slot_.ensure(static_cast<size_t>(max_rows), stream_);
  permutation.row_expert = row_expert_.ensure(static_cast<size_t>(max_rows), stream_);
  permutation.token_slot_row = token_slot_row_.ensure(static_cast<size_t>(n * top_k), stream_);
  permutation.active_experts = active_experts_.ensure(static_cast<size_t>(experts), stream_);
  const size_t permutation_bytes = kc::moe_permutation_workspace_bytes(shape);
  uint8_t* permutation_workspace = permutation_workspace_.ensure(std::max<size_t>(permutation_bytes, 16), stream_);
  kc::moe_route_and_permute(router_logits, weights.correction_bias.size() ? weights.correction_bias.data() : nullptr,
                            routing_, shape, expert_ids, expert_weights, permutation_workspace, permutation_bytes,
                            permutation, stream_);
  // Expert gate/up -> SwiGLU (quantized) -> expert down, each only over the selected experts' rows.
  bf16* expert_gate_up = expert_gate_up_.ensure(static_cast<size_t>(max_rows * 2 * padded), stream_);  // [rows, 2 * Ip]
  kc::Fp8GroupedGemmArgs gate_up_args;
  gate_up_args.expert_offsets = permutation.expert_offsets;
  gate_up_args.expert_counts = permutation.expert_counts;
  gate_up_args.w_values = weights.experts.gate_up.values.data();
  gate_up_args.w_scales = weights.experts.gate_up.scales.data();
  gate_up_args.num_experts = experts;
  gate_up_args.rows = 2 * padded;
  gate_up_args.cols = hidden;
  gate_up_args.max_rows_per_expert = static_cast<int32_t>(n);  // a token picks an expert at most once
  // Prefill-sized batches share each expert's weight tile among many rows: warpgroup-MMA tiles where the shapes
  // allow. Batch-invariant inference needs one arithmetic for every row count: the warpgroup-MMA kernel at every
  // batch size (a token's bits do not depend on its tile's other tokens, the tile size or the MMA width) where it
  // takes both expert shapes, else the mma.sync family (small-M for decode, tiled for prefill: the same bits).
  const bool wgmma_every_size = options_.deterministic && kc::fp8_grouped_wgmma_supports(2 * padded, experts) &&
                                kc::fp8_grouped_wgmma_supports(hidden, experts);
  const bool tile_kernels = n > kc::Fp8Gemm::kSmallMMaxTokens || wgmma_every_size;
  auto prefill_kernel = [&](int64_t rows) {
    if (options_.deterministic) return wgmma_every_size ? kc::Fp8GroupedKernel::kWgmma : kc::Fp8GroupedKernel::kTiled;
    return kc::fp8_grouped_wgmma_supports(rows, experts) ? kc::Fp8GroupedKernel::kWgmma : kc::Fp8GroupedKernel::kTiled;
  };
  gate_up_args.kernel = tile_kernels ? prefill_kernel(gate_up_args.rows) : kc::Fp8GroupedKernel::kSmallM;
  gate_up_args.x_rows = max_rows;
  if (!tile_kernels) {
    // Decode: a grid over the (at most n * top_k) experts with rows, not over all E, reading each row's token from x
    // through the permutation (no gather launches).
    gate_up_args.active_experts = permutation.active_experts;
    gate_up_args.max_active_experts = static_cast<int32_t>(std::min<int64_t>(experts, n * top_k));
    gate_up_args.x_values = x.activations.values;
    gate_up_args.x_scales = x.activations.scales;
    gate_up_args.x_row_source = permutation.row_token_slot;
    gate_up_args.x_row_divisor = top_k;
    gate_up_args.x_source_rows = n;
  } else {
    uint8_t* permuted_values = permuted_values_.ensure(static_cast<size_t>(max_rows * hidden), stream_);   // [rows, H]
    float* permuted_scales = permuted_scales_.ensure(static_cast<size_t>(max_rows * hidden_groups), stream_);  // [rows, H/128]
    kc::moe_gather_rows(x.activations.values, n, top_k, hidden, permutation.token_slot_row, permuted_values, stream_);
    kc::moe_gather_rows(x.activations.scales, n, top_k, hidden_groups * static_cast<int64_t>(sizeof(float)),
                        permutation.token_slot_row, permuted_scales, stream_);
    gate_up_args.x_values = permuted_values;
    gate_up_args.x_scales = permuted_scales;
  }
  kc::fp8_grouped_gemm(gate_up_args, expert_gate_up, stream_);
  uint8_t* act_values = expert_act_values_.ensure(static_cast<size_t>(max_rows * padded), stream_);     // [rows, Ip]
  float* act_scales = expert_act_scales_.ensure(static_cast<size_t>(max_rows * (padded / 128)), stream_);  // [rows, Ip/128]
  kc::swiglu_quant_fp8(expert_gate_up, max_rows, padded, permutation.row_expert,
                       reinterpret_cast<__nv_fp8_e4m3*>(act_values), act_scales, padded / 128, 1, stream_);
  bf16* expert_out = expert_out_.ensure(static_cast<size_t>(max_rows * hidden), stream_);  // [rows, H]
  kc::Fp8GroupedGemmArgs down_args = gate_up_args;
  down_args.x_values = act_values;  // permuted rows: read directly
  down_args.x_scales = act_scales;
  down_args.x_row_source = nullptr;
  // The routing ran two launches back (gate/up GEMM and SwiGLU since): the down GEMM streams its experts' weights
  // while SwiGLU finishes.
  down_args.experts_settled = !tile_kernels;
  down_args.w_values = weights.experts.down.values.data();
  down_args.w_scales = weights.experts.down.scales.data();
  down_args.rows = hidden;
  down_args.cols = padded;
  if (tile_kernels) down_args.kernel = prefill_kernel(hidden);
  kc::fp8_grouped_gemm(down_args, expert_out, stream_);
  if (weights.shared) FATHOM_CUDA_CHECK(cudaStreamWaitEvent(stream_, shared_join_, 0));
  if (shared_partials.empty()) {
    kc::moe_combine(expert_out, expert_weights, permutation.token_slot_row, shared_out, n, top_k, hidden, out, stream_);
  } else {
    kc::moe_combine(expert_out, expert_weights, permutation.token_slot_row, shared_partials, n, top_k, hidden, out,
                    stream_);
  }
}

}  // namespace fathom::model::cuda
