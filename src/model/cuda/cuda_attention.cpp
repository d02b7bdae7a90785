// MLA self-attention of one layer on the GPU: projections, latent KV write, absorbed decode or expanded prefill.
#include "core/error.h"
#include "kernels/cuda/mla/mla_absorb.h"
#include "kernels/cuda/mla/mla_decode.h"
#include "kernels/cuda/mla/mla_gather_latent.h"
#include "kernels/cuda/mla/mla_merge.h"
#include "kernels/cuda/mla/mla_prepare.h"
#include "kernels/cuda/mla/mla_prefill.h"
#include "kernels/cuda/norm/rms_norm.h"
#include "model/cuda/cuda_model_impl.h"

namespace fathom::model::cuda {

kc::SplitKPartials CudaModelImpl::attention(int64_t layer, const BatchLayout& layout) {
  const DeviceAttention& w = layer_weights(layer).attention;
  const int64_t n = layout.num_tokens, hidden = config_.hidden_size, heads = config_.num_attention_heads;
  const int64_t nope = config_.qk_nope_head_dim, rope = config_.qk_rope_head_dim, v_dim = config_.v_head_dim;
  const int64_t lora = config_.kv_lora_rank, qk = nope + rope;
  const float eps = static_cast<float>(config_.rms_norm_eps);
  const float softmax_scale = static_cast<float>(config_.attention_softmax_scale());

  const Quantized x = quantized_input(n, hidden);
  bf16* q = q_.ensure(static_cast<size_t>(n * heads * qk), stream_);  // [n, heads, nope + rope]
  const int64_t qkv_a_cols = w.qkv_a.rows;
  bf16* qkv_a = qkv_a_.ensure(static_cast<size_t>(n * qkv_a_cols), stream_);  // [n, kv_a_row + lora + rope]
  // Not deferred: its partials (14 splits) would be summed by the q_a norm and mla_prepare, one CTA per token, which
  // made the V3-slice decode step slower (H100, batch 1: 1.86 -> 1.89 ms) though the GEMM gains 1 us (RESULTS.md).
  gemm(x, w.qkv_a.view(), qkv_a);
  if (w.q_lora) {
    bf16* q_compressed = q_a_.ensure(static_cast<size_t>(n * w.q_lora), stream_);  // [n, q_lora]
    if (cublas_rows(n) > 0) {
      kc::rms_norm_bf16(qkv_a, qkv_a_cols, n, w.q_lora, w.q_a_layernorm.data(), eps, q_compressed, w.q_lora, stream_);
      linear(q_compressed, n, *w.q_b_proj, q, scratch_q_);
    } else {
      // Decode-sized: the norm also writes q_b_proj's e4m3 input (same bits as quantizing q_compressed after it).
      kc::Fp8RowsOut fp8{scratch_q_.values.ensure(static_cast<size_t>(n * w.q_lora), stream_),
                         scratch_q_.scales.ensure(static_cast<size_t>(n * kc::ceil_div(w.q_lora, 128)), stream_)};
      kc::rms_norm_bf16(qkv_a, qkv_a_cols, n, w.q_lora, w.q_a_layernorm.data(), eps, q_compressed, w.q_lora, &fp8, stream_);
      Quantized q_input;
      q_input.activations = {fp8.values, fp8.scales, n, w.q_lora};
      gemm(q_input, w.q_b_proj->view(), q);
    }
  } else {
    gemm(x, w.q_proj->view(), q);
  }
  bf16* kv_a = qkv_a + w.kv_a_row;  // [n, lora + rope] = [latent ; k_pe] at row stride qkv_a_cols
  const int64_t latent_row = qkv_a_cols;
  // Latent norm, RoPE of q_pe and k_pe (cos/sin from the table built at load), latent-cache write: one launch.
  const kc::LatentCacheView cache = cache_view(layer);
  kc::MlaPrepareArgs prepare;
  prepare.q_pe = {q + nope, heads, qk};
  prepare.kv_a = kv_a;
  prepare.kv_a_token_stride = latent_row;
  prepare.latent_norm_weight = w.kv_a_layernorm.data();
  prepare.eps = eps;
  prepare.positions = layout.positions;
  prepare.slots = layout.slots;
  prepare.num_tokens = static_cast<int32_t>(n);
  kc::mla_prepare_qkv(prepare, rope_params(), cache, stream_);

  bf16* attn = attn_.ensure(static_cast<size_t>(n * heads * v_dim), stream_);  // [n, heads, v]
  if (layout.decode) {
    const kc::MlaKvBWeights kv_b = kv_b_absorb_view(config_, w);
    bf16* q_latent = q_latent_.ensure(static_cast<size_t>(n * heads * lora), stream_);      // [n, heads, lora]
    bf16* out_latent = out_latent_.ensure(static_cast<size_t>(n * heads * lora), stream_);  // [n, heads, lora]
    // q_nope settled: written by the q_b (or q) GEMM, with mla_prepare launched between.
    kc::mla_absorb_query(q, qk, static_cast<int32_t>(n), kv_b, q_latent, stream_, /*q_nope_settled=*/true);
    kc::MlaDecodeArgs args;
    args.q_latent = q_latent;
    args.q_pe = q + nope;
    args.q_pe_head_stride = qk;
    args.cache = decode_cache_view(layer);
    args.batch = {layout.decode_pages, layout.seq_lens, layout.num_sequences, layout.decode_max_pages};
    args.out_latent = out_latent;
    args.num_heads = static_cast<int32_t>(heads);
    args.softmax_scale = softmax_scale;
    args.value_weights = &kv_b;  // attn = W_UV · out_latent, fused with the split combine where the plan says so
    args.values_out = attn;
    kc::mla_decode(args, layout.decode_plan, layout.mla_workspace, layout.mla_workspace_bytes, stream_);
  } else {
    // Keys and values of every position (cached prefix + new) expanded through kv_b_proj, a pass over windows of at
    // most prefill_window_keys_ keys at a time: the later passes' rows merged into the first's by log-sum-exp.
    const bool windowed = layout.prefill_passes.size() > 1;
    float* lse = windowed ? attn_lse_.ensure(static_cast<size_t>(2 * n * heads), stream_) : nullptr;  // [2, n, heads]
    bf16* window_attn =
        windowed ? attn_window_.ensure(static_cast<size_t>(n * heads * v_dim), stream_) : nullptr;  // [n, heads, v]
    for (size_t pass_index = 0; pass_index < layout.prefill_passes.size(); ++pass_index) {
      const PrefillPassView& pass = layout.prefill_passes[pass_index];
      const int64_t keys = pass.num_keys;
      bf16* latents = latent_rows_.ensure(static_cast<size_t>(keys * lora), stream_);                      // [keys, lora]
      kc::mla_gather_latent(cache, layout.kv_slots_flat + pass.first_row, keys, latents, stream_);
      bf16* expanded = kv_expanded_.ensure(static_cast<size_t>(keys * heads * (nope + v_dim)), stream_);  // [keys, heads, nope + v]
      linear(latents, keys, w.kv_b_proj, expanded, expand_q_);
      kc::MlaPrefillArgs args;  // k_nope and v read in place from the expanded rows (head stride nope + v)
      args.q = q;
      args.q_head_stride = qk;
      args.k_nope = expanded;
      args.v = expanded + nope;
      args.k_head_stride = nope + v_dim;
      args.v_head_stride = nope + v_dim;
      args.cache = cache;
      args.page_table = layout.page_table;
      args.max_pages_per_seq = layout.max_pages;
      args.cu_q_lens = layout.cu_q_lens;
      args.cu_kv_lens = pass.cu_kv_lens;
      args.key_positions = pass.key_positions;
      args.query_positions = layout.query_positions;
      args.total_kv_rows = keys;
      args.batch = layout.num_sequences;
      args.max_q_len = layout.max_q_len;
      args.out = pass_index == 0 ? attn : window_attn;
      args.lse_log2 = windowed ? lse + (pass_index == 0 ? 0 : n * heads) : nullptr;
      args.num_heads = static_cast<int32_t>(heads);
      args.nope_dim = static_cast<int32_t>(nope);
      args.v_dim = static_cast<int32_t>(v_dim);
      args.softmax_scale = softmax_scale;
      kc::mla_prefill(args, stream_);
      if (pass_index > 0) {
        kc::mla_merge_attention(attn, lse, window_attn, lse + n * heads, n, static_cast<int32_t>(heads),
                                static_cast<int32_t>(v_dim), stream_);
      }
    }
  }
  // o_proj's split-K partials (decode) are summed by the add+RMSNorm that follows.
  return gemm_deferred(quantize(attn, n, w.o_proj.cols, scratch_q_), w.o_proj.view(), delta_.buffer.data());
}

}  // namespace fathom::model::cuda
