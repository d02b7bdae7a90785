// Host side of the MLA decode: argument checks, kernel instantiation choice, launches (decode + combine).
#include "kernels/cuda/mla/mla_decode.h"

#include <bit>
#include <cmath>
#include <limits>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/mla/sm90/mla_decode_combine.cuh"
#include "kernels/cuda/mla/sm90/mla_decode_kernel.cuh"
#include "kernels/cuda/mla/sm90/mla_decode_seesaw_kernel.cuh"
#include "kernels/cuda/mla/sm90/mla_decode_warp_specialized_kernel.cuh"
#include "kernels/cuda/sm90/tma_tensor_map.h"

namespace fathom::kernels::cuda {

namespace {

using mla_detail::DecodeKernelParams;

static_assert(kMlaDecodeMaxKvLora <= mla_detail::kCombineMaxLatent, "the combine covers every latent column");

bool aligned16(const void* pointer) { return (reinterpret_cast<uintptr_t>(pointer) & 15u) == 0; }

template <int kLatentPad, int kRopePad, int kHeadGroup, bool kScoreWgmma, bool kValueWgmma>
void launch_decode(const DecodeKernelParams& params, int batch, int num_splits, cudaStream_t stream) {
  using L = mla_detail::DecodeLayout<kLatentPad, kRopePad, kHeadGroup>;
  auto kernel = mla_detail::mla_decode_kernel<kLatentPad, kRopePad, kHeadGroup, kScoreWgmma, kValueWgmma>;
  // A function attribute, not a stream operation: allowed while a stream is being captured.
  FATHOM_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, L::kSmemBytes));
  const dim3 grid(static_cast<unsigned>((params.num_heads + kHeadGroup - 1) / kHeadGroup),
                  static_cast<unsigned>(num_splits), static_cast<unsigned>(batch));
  launch_programmatic(kernel, grid, dim3(mla_detail::kDecodeThreads), L::kSmemBytes, stream, params);
}

void launch_decode_warp_specialized(const DecodeKernelParams& params, int batch, int num_splits, cudaStream_t stream) {
  constexpr int kSmemBytes = mla_detail::DecodeWarpSpecializedLayout::kSmemBytes;
  auto kernel = mla_detail::mla_decode_warp_specialized_kernel;
  FATHOM_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
  const dim3 grid(static_cast<unsigned>((params.num_heads + 63) / 64), static_cast<unsigned>(num_splits),
                  static_cast<unsigned>(batch));
  launch_programmatic(kernel, grid, dim3(mla_detail::kDecodeThreads), kSmemBytes, stream, params);
}

// The cache as [num_slots][576 bf16] rows read in TMA boxes of 64 rows x 128 bytes (one k-block of a 64-token tile).
void launch_decode_seesaw(const DecodeKernelParams& params, const LatentCacheView& cache, int batch, int num_splits,
                          cudaStream_t stream) {
  constexpr int kSmemBytes = mla_detail::DecodeSeesawLayout::kSmemBytes;
  const uint64_t row_bytes = static_cast<uint64_t>(cache.row_elems()) * sizeof(__nv_bfloat16);
  const CUtensorMap kv_map = make_tensor_map_2d_bytes_sw128(cache.pool, row_bytes, static_cast<uint64_t>(cache.num_slots()),
                                                            row_bytes, mla_detail::kDecodeTileTokens);
  auto kernel = mla_detail::mla_decode_seesaw_kernel;
  FATHOM_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
  const dim3 grid(static_cast<unsigned>((params.num_heads + 63) / 64), static_cast<unsigned>(num_splits),
                  static_cast<unsigned>(batch));
  launch_programmatic(kernel, grid, dim3(mla_detail::kDecodeThreads), kSmemBytes, stream, params, kv_map);
}

// The seesaw kernel's conditions beyond the warp-specialized kernel's: whole 64-token tiles per page, and cache rows
// a TMA coordinate (int32) can name.
bool seesaw_applies(const MlaDecodePlan& plan, const LatentCacheView& cache) {
  return plan.seesaw && cache.page_size_tokens % mla_detail::kDecodeTileTokens == 0 &&
         cache.num_slots() <= std::numeric_limits<int32_t>::max();
}

template <int kLatentPad, int kRopePad>
void dispatch_head_group(const DecodeKernelParams& params, const MlaDecodePlan& plan, const LatentCacheView& cache,
                         int batch, cudaStream_t stream) {
  const int num_splits = plan.num_splits;
  switch (plan.head_group) {
    case 16: return launch_decode<kLatentPad, kRopePad, 16, false, false>(params, batch, num_splits, stream);
    case 32: return launch_decode<kLatentPad, kRopePad, 32, false, false>(params, batch, num_splits, stream);
    case 64:
      if constexpr (kLatentPad == 512) {  // wgmma values: two warpgroups x 256 latent columns
        // Their outputs leave by bulk copies of whole rows (mla_decode_output.cuh): 16-byte-aligned rows.
        if (plan.score_wgmma && plan.value_wgmma && plan.warp_specialized && params.vector_loads &&
            aligned16(params.out_latent)) {
          if (seesaw_applies(plan, cache)) return launch_decode_seesaw(params, cache, batch, num_splits, stream);
          return launch_decode_warp_specialized(params, batch, num_splits, stream);
        }
        if (plan.score_wgmma && plan.value_wgmma)
          return launch_decode<kLatentPad, kRopePad, 64, true, true>(params, batch, num_splits, stream);
      }
      if (plan.score_wgmma) return launch_decode<kLatentPad, kRopePad, 64, true, false>(params, batch, num_splits, stream);
      return launch_decode<kLatentPad, kRopePad, 64, false, false>(params, batch, num_splits, stream);
    default: FATHOM_FAIL("mla_decode: head_group " << plan.head_group << " (supported: 16, 32, 64)");
  }
}

// Whether the plan's combine carries the value projection (partial_out: the workspace's partial rows).
bool fuses_value_projection(const MlaDecodeArgs& args, const MlaDecodePlan& plan, const __nv_bfloat16* partial_out) {
  return args.value_weights != nullptr && plan.num_splits > 1 && plan.fused_value_projection &&
         args.value_weights->num_heads == args.num_heads && args.value_weights->kv_lora_dim == args.cache.kv_lora_dim &&
         mla_project_split_values_fits(args.batch.batch, *args.value_weights, partial_out, args.values_out);
}

}  // namespace

void mla_decode(const MlaDecodeArgs& args, const MlaDecodePlan& plan, void* workspace, size_t workspace_bytes,
                cudaStream_t stream) {
  const LatentCacheView& cache = args.cache;
  const PagedBatchView& batch = args.batch;
  FATHOM_CHECK(args.q_latent && args.q_pe && args.out_latent && cache.pool && batch.page_table && batch.seq_lens,
               "mla_decode: null tensor pointer");
  FATHOM_CHECK(batch.batch >= 0 && batch.batch <= 65535 && args.num_heads > 0,
               "mla_decode: batch " << batch.batch << " (at most 65535 sequences, a grid dimension), heads "
                                    << args.num_heads);
  FATHOM_CHECK(cache.kv_lora_dim > 0 && cache.kv_lora_dim <= kMlaDecodeMaxKvLora && cache.rope_dim >= 0 &&
                   cache.rope_dim <= kMlaDecodeMaxRope,
               "mla_decode: kv_lora " << cache.kv_lora_dim << ", rope " << cache.rope_dim << " (max 512, 64)");
  FATHOM_CHECK(cache.page_size_tokens >= 1 && batch.max_pages_per_seq >= 1,
               "mla_decode: page_size " << cache.page_size_tokens << ", max_pages " << batch.max_pages_per_seq);
  FATHOM_CHECK(args.q_pe_head_stride >= cache.rope_dim, "mla_decode: q_pe head stride " << args.q_pe_head_stride);
  FATHOM_CHECK(args.softmax_scale > 0.0f && std::isfinite(args.softmax_scale),
               "mla_decode: softmax_scale " << args.softmax_scale << " (positive: the kernels take maxima of raw scores)");
  FATHOM_CHECK(plan.num_splits >= 1 && plan.num_splits <= mla_detail::kCombineMaxSplits && plan.tiles_per_split >= 0 &&
                   plan.min_tiles_per_split >= 1,
               "mla_decode: num_splits " << plan.num_splits << ", tiles_per_split " << plan.tiles_per_split
                                         << ", min_tiles_per_split " << plan.min_tiles_per_split);
  FATHOM_CHECK((args.value_weights == nullptr) == (args.values_out == nullptr),
               "mla_decode: value_weights and values_out go together");
  FATHOM_CHECK(!args.value_weights || (args.value_weights->num_heads == args.num_heads &&
                                       args.value_weights->kv_lora_dim == cache.kv_lora_dim),
               "mla_decode: value weights of " << args.value_weights->num_heads << " heads, kv_lora "
                                               << args.value_weights->kv_lora_dim);
  if (batch.batch == 0) return;
  const size_t needed = mla_decode_workspace_bytes(plan, batch.batch, args.num_heads, cache.kv_lora_dim);
  FATHOM_CHECK(workspace_bytes >= needed && (needed == 0 || (workspace != nullptr && aligned16(workspace))),
               "mla_decode: workspace of " << workspace_bytes << " bytes, " << needed << " needed (16-byte aligned)");

  const int latent_pad = cache.kv_lora_dim <= 128 ? 128 : 512;
  const int rope_pad = 64;
  DecodeKernelParams params{};
  params.q_latent = args.q_latent;
  params.q_pe = args.q_pe;
  params.q_pe_head_stride = args.q_pe_head_stride;
  params.cache = cache.pool;
  params.page_table = batch.page_table;
  params.seq_lens = batch.seq_lens;
  params.out_latent = args.out_latent;
  const MlaDecodeWorkspaceLayout layout =
      mla_decode_workspace_layout(plan, batch.batch, args.num_heads, cache.kv_lora_dim);
  params.partial_out = plan.num_splits > 1 ? static_cast<__nv_bfloat16*>(workspace) : nullptr;
  params.partial_lse = plan.num_splits > 1
                           ? reinterpret_cast<float*>(static_cast<uint8_t*>(workspace) + layout.lse_offset_bytes)
                           : nullptr;
  params.num_heads = args.num_heads;
  params.kv_lora = cache.kv_lora_dim;
  params.rope = cache.rope_dim;
  params.page_size = cache.page_size_tokens;
  const auto page_size = static_cast<uint32_t>(cache.page_size_tokens);
  params.page_shift = std::has_single_bit(page_size) ? std::countr_zero(page_size) : -1;
  params.max_pages_per_seq = batch.max_pages_per_seq;
  params.num_splits = plan.num_splits;
  params.tiles_per_split = plan.tiles_per_split;
  params.min_tiles_per_split = plan.min_tiles_per_split;
  params.scale_log2 = args.softmax_scale * static_cast<float>(M_LOG2E);
  params.late_successor_launch = plan.num_splits > 1 && plan.late_combine_launch;
  params.kv_loads_before_wait = plan.kv_loads_before_wait;
  params.vector_loads = cache.kv_lora_dim == latent_pad && cache.rope_dim == rope_pad && aligned16(args.q_latent) &&
                        aligned16(args.q_pe) && args.q_pe_head_stride % 8 == 0 && aligned16(cache.pool);

  if (latent_pad == 128) {
    dispatch_head_group<128, 64>(params, plan, cache, batch.batch, stream);
  } else {
    dispatch_head_group<512, 64>(params, plan, cache, batch.batch, stream);
  }
  if (fuses_value_projection(args, plan, params.partial_out)) {
    MlaSplitPartials partials;
    partials.partial_out = params.partial_out;
    partials.partial_lse = params.partial_lse;
    partials.seq_lens = batch.seq_lens;
    partials.num_splits = plan.num_splits;
    partials.tiles_per_split = plan.tiles_per_split;
    partials.min_tiles_per_split = plan.min_tiles_per_split;
    mla_project_split_values(partials, batch.batch, *args.value_weights, args.values_out, stream);
    return;
  }
  if (plan.num_splits > 1) {
    mla_decode_combine(params.partial_out, params.partial_lse, args.out_latent, batch.seq_lens, batch.batch,
                       args.num_heads, cache.kv_lora_dim, plan, stream);
  }
  if (args.value_weights) {
    mla_project_values(args.out_latent, batch.batch, *args.value_weights, args.values_out, stream);
  }
}

bool mla_decode_fuses_value_projection(const MlaDecodeArgs& args, const MlaDecodePlan& plan, const void* workspace) {
  return fuses_value_projection(args, plan, static_cast<const __nv_bfloat16*>(workspace));
}

void mla_decode_combine(const __nv_bfloat16* partial_out, const float* partial_lse, __nv_bfloat16* out_latent,
                        const int32_t* seq_lens, int32_t batch, int32_t num_heads, int32_t kv_lora,
                        const MlaDecodePlan& plan, cudaStream_t stream) {
  FATHOM_CHECK(partial_out && partial_lse && out_latent && seq_lens && aligned16(partial_out) &&
                   reinterpret_cast<uintptr_t>(partial_lse) % alignof(float) == 0,
               "mla_decode_combine: null or unaligned tensor pointer");
  FATHOM_CHECK(batch >= 0 && num_heads > 0 && kv_lora > 0 && kv_lora <= mla_detail::kCombineMaxLatent &&
                   plan.num_splits >= 1 && plan.num_splits <= mla_detail::kCombineMaxSplits,
               "mla_decode_combine: batch " << batch << ", heads " << num_heads << ", kv_lora " << kv_lora
                                            << ", splits " << plan.num_splits);
  if (batch == 0) return;
  const dim3 grid(static_cast<unsigned>(num_heads), static_cast<unsigned>(batch));
  auto launch = [&](auto kernel, int groups) {
    launch_programmatic(kernel, grid, dim3(mla_detail::kCombineColumnThreads * groups), 0, stream, partial_out,
                        partial_lse, out_latent, seq_lens, num_heads, kv_lora, plan.num_splits, plan.tiles_per_split,
                        plan.min_tiles_per_split);
  };
  const bool deep = plan.deep_combine;  // (one group has no deep form)
  switch (const int32_t groups = mla_decode_combine_split_groups(plan.num_splits)) {
    case 1: launch(mla_detail::mla_decode_combine_kernel<1, false>, groups); break;
    case 2:
      launch(deep ? mla_detail::mla_decode_combine_kernel<2, true> : mla_detail::mla_decode_combine_kernel<2, false>,
             groups);
      break;
    case 4:
      launch(deep ? mla_detail::mla_decode_combine_kernel<4, true> : mla_detail::mla_decode_combine_kernel<4, false>,
             groups);
      break;
    default: FATHOM_FAIL("mla_decode_combine: " << groups << " thread groups");
  }
}

}  // namespace fathom::kernels::cuda
