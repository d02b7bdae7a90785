#include "model/cuda/cuda_model.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <span>

#include "core/error.h"
#include "kernels/cuda/embedding/embedding.h"
#include "kernels/cuda/fp8_gemm/act_quant.h"
#include "kernels/cuda/fp8_gemm/fp8_grouped_gemm.h"
#include "kernels/cuda/mla/mla_decode.h"
#include "kernels/cuda/mla/mla_prefill_windows.h"
#include "kernels/cuda/norm/bf16x3_split.cuh"
#include "kernels/cuda/norm/rms_norm.h"
#include "kv_cache/decode_page_table.h"
#include "kv_cache/slot_checks.h"
#include "model/cuda/cuda_model_impl.h"
#include "model/rotary_embedding.h"

namespace fathom::model::cuda {

namespace {

// Device bytes per key a prefill forward attends to (cached or new): its latent row gathered (bf16) and quantized
// (e4m3 + scales) for kv_b, and its expanded [heads, nope + v] bf16 row, with the 1.25x growth of the buffers.
size_t prefill_key_bytes(const ModelConfig& c) {
  const size_t lora = static_cast<size_t>(c.kv_lora_rank);
  const size_t expanded = static_cast<size_t>(c.num_attention_heads * (c.qk_nope_head_dim + c.v_head_dim)) * 2;
  return (lora * 2 + lora + lora / 128 * 4 + expanded) * 5 / 4;
}

// Device bytes of activations per token of a forward (upper estimate, for sizing the KV cache from the memory fraction).
size_t activation_bytes_per_token(const ModelConfig& c, bool with_mtp) {
  const size_t heads = static_cast<size_t>(c.num_attention_heads), hidden = static_cast<size_t>(c.hidden_size);
  const size_t intermediate = static_cast<size_t>(std::max(c.intermediate_size, c.moe_intermediate_size * std::max<int64_t>(1, c.n_shared_experts)));
  const size_t top_k = static_cast<size_t>(std::max<int64_t>(1, c.num_experts_per_tok));
  const size_t moe_i = static_cast<size_t>(c.moe_intermediate_size) + 128;
  size_t bytes = 5 * hidden * 2;                                                   // residual, normed, delta, out, shared
  bytes += heads * static_cast<size_t>(c.qk_head_dim() + c.v_head_dim) * 2 * 2;    // q, attn (bf16), 2x margin
  bytes += heads * static_cast<size_t>(c.qk_nope_head_dim + c.v_head_dim) * 2 * 2;  // kv_b's keys / values (bf16),
                                                                                   // 2x: a cached prefix adds keys
  bytes += (2 * intermediate + 256) * 2 + hidden * 2;                               // gate_up, quantized inputs
  bytes += top_k * (hidden * 3 + 2 * moe_i * 2 + moe_i + 64);                        // MoE permuted rows
  bytes += hidden * 3 * 2 + 3 * static_cast<size_t>(c.n_routed_experts) * 4;        // router planes, plane logits
  if (with_mtp) bytes += hidden * 4 * 2;                                             // MTP inputs [H] + [H] + [2H]
  return bytes;
}

}  // namespace

CudaModelImpl::CudaModelImpl(const ModelConfig& config, const ModelWeights& weights, const CudaModelOptions& options)
    : config_(config), options_(options), rope_(make_rope_frequencies(config)) {
  int device_count = 0;
  const cudaError_t count_status = cudaGetDeviceCount(&device_count);
  FATHOM_CHECK(count_status == cudaSuccess && device_count > options.device,
               "CUDA backend: no CUDA device " << options.device << " available ("
                                               << (count_status == cudaSuccess ? std::to_string(device_count) + " devices"
                                                                               : std::string(cudaGetErrorString(count_status)))
                                               << "); use --device cpu");
  FATHOM_CUDA_CHECK(cudaSetDevice(options.device));
  cudaDeviceProp properties{};
  FATHOM_CUDA_CHECK(cudaGetDeviceProperties(&properties, options.device));
  FATHOM_CHECK(properties.major >= 9, "CUDA backend: device " << options.device << " (" << properties.name << ") is sm_"
                                                              << properties.major << properties.minor
                                                              << "; the kernels are built for Hopper (sm_90a)");
  num_sms_ = properties.multiProcessorCount;
  FATHOM_CHECK(options.max_batch_tokens > 0 && options.max_decode_batch > 0,
               "CUDA backend: max_batch_tokens and max_decode_batch must be positive");
  FATHOM_CHECK(options.max_decode_batch <= 65535, "CUDA backend: a decode batch of " << options.max_decode_batch
                                                                                     << " sequences; the attention "
                                                                                        "kernels take at most 65535 "
                                                                                        "(--max-running-requests)");
  FATHOM_CHECK(config.kv_lora_rank <= kc::kMlaDecodeMaxKvLora && config.qk_rope_head_dim <= kc::kMlaDecodeMaxRope,
               "CUDA backend: kv_lora_rank " << config.kv_lora_rank << " / qk_rope_head_dim " << config.qk_rope_head_dim
                                             << " exceed the MLA kernels' limits (512 / 64)");
  max_context_tokens_ = options.max_context_tokens > 0 ? options.max_context_tokens : config.max_position_embeddings;
  FATHOM_CHECK(options.max_prefill_keys >= 0, "CUDA backend: max_prefill_keys " << options.max_prefill_keys);
  prefill_window_keys_ = std::max(options.max_prefill_keys, 2 * options.max_batch_tokens);
  FATHOM_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  FATHOM_CUDA_CHECK(cudaStreamCreateWithFlags(&side_stream_, cudaStreamNonBlocking));
  FATHOM_CUDA_CHECK(cudaEventCreateWithFlags(&shared_fork_, cudaEventDisableTiming));
  FATHOM_CUDA_CHECK(cudaEventCreateWithFlags(&shared_join_, cudaEventDisableTiming));
  FATHOM_CUDA_CHECK(cudaEventCreateWithFlags(&graph_inputs_copied_, cudaEventDisableTiming));

  const auto start = std::chrono::steady_clock::now();
  weights_ = upload_model_weights(config, weights);
  stats_.weight_bytes = weights_.total_bytes;
  stats_.upload_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const int32_t table_positions = static_cast<int32_t>(std::min<int64_t>(max_context_tokens_, INT32_MAX));
  rope_cos_sin_ = kc::DeviceBuffer<float>(static_cast<size_t>(table_positions) * config.qk_rope_head_dim);
  kc::RopeParams table_params = rope_params();
  table_params.cos_sin = nullptr;
  kc::rope_build_cos_sin_table(table_params, table_positions, rope_cos_sin_.data(), stream_);
  fp8_gemm_ = std::make_unique<kc::Fp8Gemm>(num_sms_);
  // Batch invariance: the mma.sync small-M kernels give a token the same bits at every batch size.
  if (options.deterministic) fp8_gemm_->set_decode_kernel(kc::DecodeKernel::kMmaSync);
  size_t counter_bytes = 0;
  for (const DeviceLinear* linear : dense_linears()) {
    counter_bytes = std::max(counter_bytes, fp8_gemm_->small_m_counter_bytes(linear->rows, linear->cols));
  }
  if (counter_bytes) {
    split_counters_ = kc::DeviceBuffer<uint32_t>(counter_bytes / sizeof(uint32_t));
    split_counters_.fill_bytes(0);  // synchronized with the device below, before any forward
  }
  lm_head_gemm_ = std::make_unique<kc::Bf16Gemm>(config.vocab_size, config.hidden_size, kc::Bf16GemmOutput::kFloat32);
  if (weights_.mtp) {
    eh_proj_gemm_ = std::make_unique<kc::Bf16Gemm>(config.hidden_size, 2 * config.hidden_size, kc::Bf16GemmOutput::kBfloat16);
  }
  if (config.n_routed_experts > 0) {
    bool bf16_router = false, fp32_router = false;  // which router forms the layers (MTP's included) need
    for (int64_t layer = 0; layer < num_cache_layers(); ++layer) {
      const std::optional<DeviceMoe>& moe = layer_weights(layer).moe;
      bf16_router = bf16_router || (moe && moe->router_bf16.size() > 0);
      fp32_router = fp32_router || (moe && moe->router.size() > 0);
    }
    if (fp32_router) {
      router_gemm_ = std::make_unique<kc::Bf16Gemm>(config.n_routed_experts, config.hidden_size, kc::Bf16GemmOutput::kFloat32,
                                                    size_t{32} << 20, kc::Bf16GemmInput::kFloat32);
    }
    if (bf16_router) {
      router_planes_gemm_ = std::make_unique<kc::Bf16Gemm>(config.n_routed_experts, config.hidden_size,
                                                           kc::Bf16GemmOutput::kFloat32);
    }
    routing_.num_experts = static_cast<int32_t>(config.n_routed_experts);
    routing_.num_groups = static_cast<int32_t>(config.n_group);
    routing_.top_groups = static_cast<int32_t>(config.topk_group);
    routing_.top_k = static_cast<int32_t>(config.num_experts_per_tok);
    routing_.normalize = config.norm_topk_prob;
    routing_.routed_scaling_factor = static_cast<float>(config.routed_scaling_factor);
    kc::validate_moe_routing_config(routing_);
  }
  if (options.deterministic) {
    // Widest operand row: the router's fp32 [H], or the MTP's eh_proj bf16 [2H] (the same bytes).
    const int64_t max_k = config.hidden_size, max_n = std::max<int64_t>(config.vocab_size, config.n_routed_experts);
    fixed_rows_in_ = kc::DeviceBuffer<uint8_t>(static_cast<size_t>(kFixedGemmRows * max_k) * sizeof(float));
    fixed_rows_out_ = kc::DeviceBuffer<float>(static_cast<size_t>(kFixedGemmRows * max_n));
  }
  embedding_error_ = kc::DeviceBuffer<int32_t>(1);
  embedding_error_.fill_bytes(0);

  const int64_t row_elems = config.kv_latent_dim();
  const size_t slot_bytes = static_cast<size_t>(num_cache_layers() * row_elems) * sizeof(bf16);
  const size_t decode_workspace_bytes = decode_workspace_bound();
  const size_t workspace_estimate = activation_bytes_per_token(config, weights_.mtp.has_value()) *
                                        static_cast<size_t>(options.max_batch_tokens) +
                                    prefill_key_bytes(config) * static_cast<size_t>(std::max<int64_t>(0, options.max_prefill_keys)) +
                                    decode_workspace_bytes + logits_bytes() +
                                    (size_t{1} << 30);  // + split-K partials, cuBLASLt, fragmentation
  stats_.workspace_bytes = workspace_estimate;
  size_t free_bytes = 0, total_bytes = 0;
  FATHOM_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  FATHOM_CHECK(options.kv_page_size >= 1, "CUDA backend: KV page size " << options.kv_page_size);
  if (options.kv_page_size % kc::kMlaDecodeTileTokens == 0) decode_page_size_ = static_cast<int32_t>(options.kv_page_size);
  if (options.num_kv_slots > 0) {
    num_kv_slots_ = options.num_kv_slots;
  } else {
    const double budget = options.mem_fraction_static * static_cast<double>(total_bytes) -
                          static_cast<double>(total_bytes - free_bytes) - static_cast<double>(workspace_estimate);
    // Less the padding page the cache adds below.
    num_kv_slots_ = static_cast<int64_t>(std::max(0.0, budget) / static_cast<double>(slot_bytes)) - decode_page_size_;
    FATHOM_CHECK(num_kv_slots_ > 0, "CUDA backend: --mem-fraction-static " << options.mem_fraction_static
                                                                         << " leaves no memory for the KV cache (weights "
                                                                         << weights_.total_bytes / (1 << 20) << " MiB, GPU "
                                                                         << total_bytes / (1 << 20) << " MiB)");
  }
  num_kv_slots_ = num_kv_slots_ / decode_page_size_ * decode_page_size_;  // whole pages (the caller's pool does too)
  FATHOM_CHECK(num_kv_slots_ > 0, "CUDA backend: the KV cache holds less than one page of " << decode_page_size_);
  FATHOM_CHECK(static_cast<size_t>(num_kv_slots_ + decode_page_size_) * slot_bytes + workspace_estimate / 2 < free_bytes,
               "CUDA backend: a KV cache of " << num_kv_slots_ << " tokens (" << num_kv_slots_ * slot_bytes / (1 << 20)
                                              << " MiB) and the activations of " << options.max_batch_tokens
                                              << "-token forwards (about " << workspace_estimate / 2 / (1 << 20)
                                              << " to " << workspace_estimate / (1 << 20)
                                              << " MiB) do not fit in the " << free_bytes / (1 << 20)
                                              << " MiB left after the weights; fewer tokens per forward "
                                                 "(--chunked-prefill-size, the batch) or a smaller KV cache fit");
  // One extra page past the caller's slots: where padded / warm-up entries write (its first slot) and read.
  padding_slot_ = static_cast<int32_t>(num_kv_slots_);
  cache_rows_ = num_kv_slots_ + decode_page_size_;
  FATHOM_CHECK(cache_rows_ <= std::numeric_limits<int32_t>::max(), "CUDA backend: " << cache_rows_ << " KV slots");
  kv_cache_ = kc::DeviceBuffer<bf16>(static_cast<size_t>(cache_rows_ * num_cache_layers() * row_elems));
  mla_workspace_ = kc::DeviceBuffer<uint8_t>(decode_workspace_bytes);
  kv_cache_.fill_bytes(0);
  // The fills ran on the legacy default stream, which stream_ (non-blocking) does not wait for.
  FATHOM_CUDA_CHECK(cudaDeviceSynchronize());
  stats_.kv_cache_bytes = kv_cache_.bytes();
  stats_.num_kv_slots = num_kv_slots_;
  prepare_decode_shapes();
}

CudaModelImpl::~CudaModelImpl() {
  for (DecodeShape& shape : decode_shapes_) {
    if (shape.exec) cudaGraphExecDestroy(shape.exec);
    if (shape.mtp_exec) cudaGraphExecDestroy(shape.mtp_exec);
  }
  if (stream_) {
    cudaStreamSynchronize(stream_);
    cudaStreamDestroy(stream_);
  }
  if (side_stream_) {
    cudaStreamSynchronize(side_stream_);
    cudaStreamDestroy(side_stream_);
  }
  if (shared_fork_) cudaEventDestroy(shared_fork_);
  if (shared_join_) cudaEventDestroy(shared_join_);
  if (graph_inputs_copied_) cudaEventDestroy(graph_inputs_copied_);
  for (GpuSpan& span : spans_) {
    cudaEventDestroy(span.begin);
    cudaEventDestroy(span.end);
  }
  if (forward_begin_) cudaEventDestroy(forward_begin_);
}

size_t CudaModelImpl::begin_span(std::string name, int depth) {
  if (!trace_) return 0;
  GpuSpan span;
  span.name = std::move(name);
  span.depth = depth;
  FATHOM_CUDA_CHECK(cudaEventCreate(&span.begin));
  FATHOM_CUDA_CHECK(cudaEventCreate(&span.end));
  FATHOM_CUDA_CHECK(cudaEventRecord(span.begin, stream_));
  spans_.push_back(span);
  return spans_.size() - 1;
}

void CudaModelImpl::end_span(size_t span) {
  if (trace_) FATHOM_CUDA_CHECK(cudaEventRecord(spans_[span].end, stream_));
}

int64_t CudaModelImpl::begin_forward_trace() {
  if (!trace_) return 0;
  if (!forward_begin_) FATHOM_CUDA_CHECK(cudaEventCreate(&forward_begin_));
  FATHOM_CUDA_CHECK(cudaEventRecord(forward_begin_, stream_));
  return trace_->now_us();
}

void CudaModelImpl::flush_spans(int64_t forward_start_us) {
  for (GpuSpan& span : spans_) {
    float begin_ms = 0, end_ms = 0;
    FATHOM_CUDA_CHECK(cudaEventElapsedTime(&begin_ms, forward_begin_, span.begin));
    FATHOM_CUDA_CHECK(cudaEventElapsedTime(&end_ms, forward_begin_, span.end));
    trace_->record(span.name, span.depth == 0 ? "layer" : "op", forward_start_us + static_cast<int64_t>(begin_ms * 1000),
                   forward_start_us + static_cast<int64_t>(end_ms * 1000), span.depth);
    cudaEventDestroy(span.begin);
    cudaEventDestroy(span.end);
  }
  spans_.clear();
}

kc::RopeParams CudaModelImpl::rope_params() const {
  kc::RopeParams params{weights_.rope_inv_freq.data(), static_cast<int32_t>(config_.qk_rope_head_dim),
                        rope_.attention_factor, rope_.interleaved};
  params.cos_sin = rope_cos_sin_.data();
  params.max_positions = static_cast<int32_t>(rope_cos_sin_.size() / static_cast<size_t>(config_.qk_rope_head_dim));
  return params;
}

kc::LatentCacheView CudaModelImpl::cache_view(int64_t layer) const {
  const int64_t row_elems = config_.kv_latent_dim();
  kc::LatentCacheView view;
  view.pool = kv_cache_.data() + layer * cache_rows_ * row_elems;
  view.num_pages = static_cast<int32_t>(cache_rows_);
  view.page_size_tokens = 1;
  view.kv_lora_dim = static_cast<int32_t>(config_.kv_lora_rank);
  view.rope_dim = static_cast<int32_t>(config_.qk_rope_head_dim);
  return view;
}

kc::LatentCacheView CudaModelImpl::decode_cache_view(int64_t layer) const {
  kc::LatentCacheView view = cache_view(layer);
  view.num_pages = static_cast<int32_t>(cache_rows_ / decode_page_size_);
  view.page_size_tokens = decode_page_size_;
  return view;
}

void CudaModelImpl::set_decode_pages(BatchLayout& layout, const std::vector<const int32_t*>& sequence_slots,
                                     const std::vector<int32_t>& kv_lens, GrowableBuffer<int32_t>& device) {
  if (decode_page_size_ == 1) {
    layout.decode_pages = layout.page_table;
    layout.decode_max_pages = layout.max_pages;
    return;
  }
  const int32_t page = decode_page_size_;
  layout.decode_max_pages = std::max<int32_t>(1, (layout.max_pages + page - 1) / page);
  layout.decode_pages =
      upload_ints(device, decode_table_rows(sequence_slots, kv_lens, sequence_slots.size(), layout.decode_max_pages));
}

std::vector<int32_t> CudaModelImpl::decode_table_rows(const std::vector<const int32_t*>& sequence_slots,
                                                      const std::vector<int32_t>& kv_lens, size_t rows,
                                                      int32_t width) const {
  std::vector<int32_t> table(rows * static_cast<size_t>(width));
  kv_cache::fill_decode_page_table(sequence_slots, kv_lens, decode_page_size_, padding_slot_ / decode_page_size_, rows,
                                   width, table);
  return table;
}

void CudaModelImpl::validate_batch(const ForwardBatch& batch, bool decode) const {
  const int64_t num_tokens = batch.num_tokens();
  FATHOM_CHECK(num_tokens > 0 && num_tokens <= options_.max_batch_tokens,
               "CUDA backend: a forward of " << num_tokens << " tokens (the limit is " << options_.max_batch_tokens
                                             << ": the larger of --chunked-prefill-size and --max-running-requests)");
  FATHOM_CHECK(!decode || batch.is_pure_decode(), "CUDA backend: absorbed attention needs one new token per sequence");
  FATHOM_CHECK(!decode || static_cast<int64_t>(batch.sequences.size()) <= options_.max_decode_batch,
               "CUDA backend: a decode batch of " << batch.sequences.size() << " sequences (the limit is "
                                                  << options_.max_decode_batch << ")");
  for (size_t t = 0; t < batch.token_ids.size(); ++t) {
    FATHOM_CHECK(batch.token_ids[t] >= 0 && batch.token_ids[t] < config_.vocab_size,
                 "token id " << batch.token_ids[t] << " (at index " << t << ") is outside the vocabulary [0, "
                             << config_.vocab_size << ")");
  }
  for (size_t s = 0; s < batch.sequences.size(); ++s) {
    const SequenceChunk& chunk = batch.sequences[s];
    const int64_t kv_len = chunk.num_cached + chunk.num_tokens;
    FATHOM_CHECK(kv_len <= max_context_tokens_, "CUDA backend: a sequence of " << kv_len << " tokens exceeds the context limit "
                                                                               << max_context_tokens_);
    // Every decode step checks the whole context (the caller passes every position's slot): one vectorized pass.
    const std::span<const int32_t> slots(chunk.kv_slots, static_cast<size_t>(kv_len));
    try {
      if (decode && decode_page_size_ > 1) {
        kv_cache::check_slots_in_pages(slots, decode_page_size_, num_kv_slots_);
      } else {
        kv_cache::check_slots_in_cache(slots, num_kv_slots_);
      }
    } catch (const Error& error) {
      FATHOM_FAIL("CUDA backend: sequence " << s << " of the batch: " << error.what());
    }
  }
}

BatchLayout CudaModelImpl::upload_batch(const ForwardBatch& batch) {
  BatchLayout layout;
  layout.num_tokens = batch.num_tokens();
  layout.num_sequences = static_cast<int32_t>(batch.sequences.size());
  layout.decode = batch.attention_form == AttentionForm::kAbsorbed ||
                  (batch.attention_form == AttentionForm::kAuto && batch.is_pure_decode());
  validate_batch(batch, layout.decode);
  std::vector<int32_t> slots(static_cast<size_t>(layout.num_tokens));
  std::vector<int32_t> seq_lens;
  for (const SequenceChunk& chunk : batch.sequences) {
    const int64_t kv_len = chunk.num_cached + chunk.num_tokens;
    for (int64_t i = 0; i < chunk.num_tokens; ++i) slots[chunk.token_begin + i] = chunk.kv_slots[chunk.num_cached + i];
    layout.max_pages = std::max<int32_t>(layout.max_pages, static_cast<int32_t>(kv_len));
    layout.max_q_len = std::max<int32_t>(layout.max_q_len, static_cast<int32_t>(chunk.num_tokens));
    seq_lens.push_back(static_cast<int32_t>(kv_len));
    layout.total_kv += kv_len;
  }
  layout.token_ids = upload_ints(token_ids_, batch.token_ids);
  layout.positions = upload_ints(positions_, batch.positions);
  layout.slots = upload_ints(slots_, slots);
  layout.seq_lens = upload_ints(seq_lens_, seq_lens);
  // The slot of every position ([sequences, longest kv length], rebuilt and uploaded each forward): the prefill reads
  // it, and a decode on pages of one token; a decode on larger pages reads only the page-granular table.
  if (!layout.decode || decode_page_size_ == 1) {
    std::vector<int32_t> page_table(static_cast<size_t>(layout.num_sequences) * layout.max_pages, 0);
    for (size_t s = 0; s < batch.sequences.size(); ++s) {
      const SequenceChunk& chunk = batch.sequences[s];
      std::copy(chunk.kv_slots, chunk.kv_slots + chunk.num_cached + chunk.num_tokens,
                page_table.begin() + static_cast<int64_t>(s) * layout.max_pages);
    }
    layout.page_table = upload_ints(page_table_, page_table);
  }
  if (layout.decode) {
    std::vector<const int32_t*> sequence_slots;
    for (const SequenceChunk& chunk : batch.sequences) sequence_slots.push_back(chunk.kv_slots);
    set_decode_pages(layout, sequence_slots, seq_lens, decode_pages_);
    plan_decode(layout, layout.max_pages);
  } else {
    std::vector<const int32_t*> sequence_slots;
    std::vector<int32_t> q_lens;
    for (const SequenceChunk& chunk : batch.sequences) {
      sequence_slots.push_back(chunk.kv_slots);
      q_lens.push_back(static_cast<int32_t>(chunk.num_tokens));
    }
    set_prefill_passes(layout, sequence_slots, q_lens, seq_lens);
  }
  return layout;
}

void CudaModelImpl::set_prefill_passes(BatchLayout& layout, const std::vector<const int32_t*>& sequence_slots,
                                       const std::vector<int32_t>& q_lens, const std::vector<int32_t>& kv_lens) {
  const size_t batch = kv_lens.size();
  std::vector<int32_t> cu_q{0};
  for (const int32_t q_len : q_lens) cu_q.push_back(cu_q.back() + q_len);
  layout.cu_q_lens = upload_ints(cu_q_lens_, cu_q);
  const kc::PrefillKeyPlan plan = kc::plan_prefill_key_passes(kv_lens, prefill_window_keys_);
  const bool windowed = plan.passes.size() > 1;
  std::vector<int32_t> slots, cu_kv_lens, key_positions, query_positions;
  slots.reserve(static_cast<size_t>(layout.total_kv));
  for (const kc::PrefillKeyPass& pass : plan.passes) {
    cu_kv_lens.insert(cu_kv_lens.end(), pass.cu_kv_lens.begin(), pass.cu_kv_lens.end());
    key_positions.insert(key_positions.end(), pass.key_positions.begin(), pass.key_positions.end());
    for (size_t b = 0; b < batch; ++b) {
      const int32_t* first = sequence_slots[b] + pass.key_positions[b];
      slots.insert(slots.end(), first, first + (pass.cu_kv_lens[b + 1] - pass.cu_kv_lens[b]));
    }
  }
  for (size_t b = 0; b < batch; ++b) query_positions.push_back(kv_lens[b] - q_lens[b]);
  layout.kv_slots_flat = upload_ints(kv_slots_flat_, slots);
  const int32_t* device_cu_kv = upload_ints(cu_kv_lens_, cu_kv_lens);
  const int32_t* device_key_positions = windowed ? upload_ints(key_positions_, key_positions) : nullptr;
  layout.query_positions = windowed ? upload_ints(query_positions_, query_positions) : nullptr;
  layout.prefill_passes.clear();
  int64_t first_row = 0;
  for (size_t p = 0; p < plan.passes.size(); ++p) {
    PrefillPassView view;
    view.first_row = first_row;
    view.num_keys = plan.passes[p].num_keys;
    view.cu_kv_lens = device_cu_kv + p * (batch + 1);
    view.key_positions = windowed ? device_key_positions + p * batch : nullptr;
    layout.prefill_passes.push_back(view);
    first_row += view.num_keys;
  }
}

const int32_t* CudaModelImpl::upload_ints(GrowableBuffer<int32_t>& device, const std::vector<int32_t>& host) {
  int32_t* target = device.ensure(std::max<size_t>(host.size(), 1), stream_);
  FATHOM_CUDA_CHECK(cudaMemcpyAsync(target, host.data(), host.size() * sizeof(int32_t), cudaMemcpyHostToDevice, stream_));
  return target;
}

kc::MlaDecodePlan CudaModelImpl::decode_plan(int32_t batch, int32_t max_context) const {
  const int32_t heads = static_cast<int32_t>(config_.num_attention_heads);
  if (options_.deterministic) {
    return kc::mla_decode_plan_batch_invariant(num_sms_, batch, heads, max_context,
                                               static_cast<int32_t>(max_context_tokens_));
  }
  return kc::mla_decode_plan(num_sms_, batch, heads, max_context);
}

template <typename T, typename Out>
void CudaModelImpl::cublas_rows_gemm(kc::Bf16Gemm& gemm, const T* a, int64_t rows, const T* w, Out* out) {
  if (!options_.deterministic) {
    gemm.run(a, rows, w, out, stream_);
    return;
  }
  const int64_t k = gemm.k(), n = gemm.n();
  for (int64_t begin = 0; begin < rows; begin += kFixedGemmRows) {
    const int64_t count = std::min(kFixedGemmRows, rows - begin);
    if (count == kFixedGemmRows) {
      gemm.run(a + begin * k, kFixedGemmRows, w, out + begin * n, stream_);
      continue;
    }
    // Rows past `count` hold whatever the last chunk left: a GEMM row's result does not depend on the others.
    FATHOM_CHECK(static_cast<size_t>(kFixedGemmRows * k) * sizeof(T) <= fixed_rows_in_.bytes() &&
                     static_cast<size_t>(kFixedGemmRows * n) * sizeof(Out) <= fixed_rows_out_.bytes(),
                 "CUDA backend: a " << n << " x " << k << " GEMM exceeds the fixed-row buffers");
    T* padded_in = reinterpret_cast<T*>(fixed_rows_in_.data());
    Out* padded_out = reinterpret_cast<Out*>(fixed_rows_out_.data());
    FATHOM_CUDA_CHECK(cudaMemcpyAsync(padded_in, a + begin * k, static_cast<size_t>(count * k) * sizeof(T),
                                      cudaMemcpyDeviceToDevice, stream_));
    gemm.run(padded_in, kFixedGemmRows, w, padded_out, stream_);
    FATHOM_CUDA_CHECK(cudaMemcpyAsync(out + begin * n, padded_out, static_cast<size_t>(count * n) * sizeof(Out),
                                      cudaMemcpyDeviceToDevice, stream_));
  }
}
template void CudaModelImpl::cublas_rows_gemm<bf16, float>(kc::Bf16Gemm&, const bf16*, int64_t, const bf16*, float*);
template void CudaModelImpl::cublas_rows_gemm<float, float>(kc::Bf16Gemm&, const float*, int64_t, const float*, float*);
template void CudaModelImpl::cublas_rows_gemm<bf16, bf16>(kc::Bf16Gemm&, const bf16*, int64_t, const bf16*, bf16*);

void CudaModelImpl::plan_decode(BatchLayout& layout, int32_t max_context) {
  const int32_t heads = static_cast<int32_t>(config_.num_attention_heads);
  layout.decode_plan = decode_plan(layout.num_sequences, max_context);
  const size_t bytes = kc::mla_decode_workspace_bytes(layout.decode_plan, layout.num_sequences, heads,
                                                     static_cast<int32_t>(config_.kv_lora_rank));
  FATHOM_CHECK(bytes <= mla_workspace_.bytes(),
               "CUDA backend: the MLA decode plan for " << layout.num_sequences << " sequences of up to " << max_context
                                                        << " tokens needs " << bytes << " workspace bytes, more than the "
                                                        << mla_workspace_.bytes() << " planned");
  layout.mla_workspace = mla_workspace_.data();
  layout.mla_workspace_bytes = mla_workspace_.bytes();
}

size_t CudaModelImpl::decode_workspace_bound() const {
  const int32_t heads = static_cast<int32_t>(config_.num_attention_heads), lora = static_cast<int32_t>(config_.kv_lora_rank);
  const int32_t batch = static_cast<int32_t>(options_.max_decode_batch), context = static_cast<int32_t>(max_context_tokens_);
  size_t bytes = 16;
  if (options_.deterministic) {  // the most splits: at the longest context, for the most sequences
    return std::max(bytes, kc::mla_decode_workspace_bytes(decode_plan(batch, context), batch, heads, lora));
  }
  // Every batch size at contexts doubling up to the longest (the plan's split choice is not monotone in either).
  for (int64_t bound = 64;; bound *= 2) {
    const int32_t at = static_cast<int32_t>(std::min<int64_t>(bound, context));
    bytes = std::max(bytes, kc::mla_decode_max_workspace_bytes(num_sms_, batch, heads, lora, at));
    if (at == context) break;
  }
  return bytes;
}

CudaModelImpl::Quantized CudaModelImpl::quantize(const bf16* x, int64_t tokens, int64_t cols, QuantizedActivations& into) {
  const int64_t groups = kc::ceil_div(cols, 128);
  Quantized q;
  uint8_t* values = into.values.ensure(static_cast<size_t>(tokens * cols), stream_);
  float* scales = into.scales.ensure(static_cast<size_t>(tokens * groups), stream_);
  float* block_major = nullptr;
  q.cublas_tokens = cublas_rows(tokens);
  if (q.cublas_tokens > 0) block_major = into.scales_block_major.ensure(static_cast<size_t>(q.cublas_tokens * groups), stream_);
  kc::quantize_activations_fp8(x, tokens, cols, values, scales, block_major, q.cublas_tokens, stream_);
  q.activations = {values, scales, tokens, cols};
  q.scales_block_major = block_major;
  return q;
}

const kc::Fp8RowsOut* CudaModelImpl::fused_input_fp8(int64_t tokens, int64_t cols, kc::Fp8RowsOut& storage) {
  if (cublas_rows(tokens) > 0) return nullptr;
  storage.values = input_q_.values.ensure(static_cast<size_t>(tokens * cols), stream_);
  storage.scales = input_q_.scales.ensure(static_cast<size_t>(tokens * kc::ceil_div(cols, 128)), stream_);
  return &storage;
}

CudaModelImpl::Quantized CudaModelImpl::quantized_input(int64_t tokens, int64_t cols) {
  if (cublas_rows(tokens) > 0) return quantize(normed_.buffer.data(), tokens, cols, input_q_);
  Quantized q;  // written by the norm that produced normed_ (fused_input_fp8)
  q.activations = {input_q_.values.buffer.data(), input_q_.scales.buffer.data(), tokens, cols};
  return q;
}

kc::Fp8GemmWorkspace CudaModelImpl::small_m_workspace(const kc::DeviceFp8Weight& w, bool with_counters) {
  kc::Fp8GemmWorkspace workspace;
  const size_t bytes = fp8_gemm_->small_m_workspace_bytes(w.rows, w.cols);
  if (bytes) {
    workspace.split_partials = split_partials_.ensure(bytes / sizeof(float), stream_);
    workspace.split_partials_bytes = bytes;
    if (with_counters) {
      workspace.split_counters = split_counters_.data();
      workspace.split_counters_bytes = split_counters_.bytes();
    }
  }
  return workspace;
}

bool CudaModelImpl::dense_gemm_on_wgmma(const kc::DeviceFp8Weight& w) const {
  return options_.deterministic && layer_prefill_form_ && kc::fp8_grouped_wgmma_supports(w.rows, 1);
}

void CudaModelImpl::gemm(const Quantized& x, const kc::DeviceFp8Weight& w, bf16* out) {
  if (dense_gemm_on_wgmma(w)) {
    kc::fp8_dense_wgmma_gemm(x.activations, w, out, stream_);
    return;
  }
  const int64_t tokens = x.activations.tokens, head = x.cublas_tokens;
  const kc::Fp8GemmWorkspace workspace = tokens > head ? small_m_workspace(w, true) : kc::Fp8GemmWorkspace{};
  if (head > 0) {
    kc::DeviceFp8Activations rows = x.activations;
    rows.tokens = head;
    fp8_gemm_->run(rows, x.scales_block_major, w, out, workspace, stream_, kc::Fp8GemmPath::kCublasLt);
  }
  // Deterministic inference past 64 rows: the tiled kernel over all rows at once, the small-M path's bits per row
  // (one weight read per 128 rows instead of one per 64-row launch).
  if (options_.deterministic && tokens > kc::Fp8Gemm::kSmallMMaxTokens) {
    fp8_gemm_->run(x.activations, nullptr, w, out, workspace, stream_, kc::Fp8GemmPath::kTiled);
    return;
  }
  // The rows past the cuBLASLt prefix (or all rows of a small batch): the small-M kernel, 64 rows at a time.
  const int64_t k_blocks = kc::ceil_div(x.activations.cols, 128);
  for (int64_t begin = head; begin < tokens; begin += kc::Fp8Gemm::kSmallMMaxTokens) {
    const int64_t count = std::min(kc::Fp8Gemm::kSmallMMaxTokens, tokens - begin);
    kc::DeviceFp8Activations part{x.activations.values + begin * x.activations.cols, x.activations.scales + begin * k_blocks,
                                  count, x.activations.cols};
    fp8_gemm_->run(part, nullptr, w, out + begin * w.rows, workspace, stream_, kc::Fp8GemmPath::kSmallM);
  }
}

kc::SplitKPartials CudaModelImpl::gemm_deferred(const Quantized& x, const kc::DeviceFp8Weight& w, bf16* out) {
  if (x.cublas_tokens > 0 || x.activations.tokens > kc::Fp8Gemm::kSmallMMaxTokens || dense_gemm_on_wgmma(w)) {
    gemm(x, w, out);
    return {};
  }
  // No split counters: the fused in-kernel reduction would leave nothing to defer.
  return fp8_gemm_->run_small_m_deferred(x.activations, w, out, small_m_workspace(w, false), stream_);
}

void CudaModelImpl::linear(const bf16* x, int64_t tokens, const DeviceLinear& w, bf16* out, QuantizedActivations& scratch) {
  gemm(quantize(x, tokens, w.cols, scratch), w.view(), out);
}

void CudaModelImpl::run_layers(const BatchLayout& layout) {
  const int64_t n = layout.num_tokens, hidden = config_.hidden_size, vocab = config_.vocab_size;
  const float eps = static_cast<float>(config_.rms_norm_eps);
  bf16* residual = residual_.ensure(static_cast<size_t>(n * hidden), stream_);
  bf16* normed = normed_.ensure(static_cast<size_t>(n * hidden), stream_);
  const size_t embed_span = begin_span("embed_tokens", 0);
  kc::embedding_gather_bf16(weights_.embed_tokens.data(), vocab, hidden, layout.token_ids, n, residual,
                            embedding_error_.data(), stream_);
  kc::Fp8RowsOut fp8_storage;
  kc::rms_norm_bf16(residual, hidden, n, hidden, weights_.layers.front().input_layernorm.data(), eps, normed, hidden,
                    fused_input_fp8(n, hidden, fp8_storage), stream_);
  end_span(embed_span);
  const int64_t num_layers = static_cast<int64_t>(weights_.layers.size());
  for (int64_t layer = 0; layer < num_layers; ++layer) {
    const bool last = layer + 1 == num_layers;
    const bf16* next_norm = last ? weights_.norm.data() : weights_.layers[static_cast<size_t>(layer + 1)].input_layernorm.data();
    run_decoder_layer(layer, layout, next_norm, last, "layer." + std::to_string(layer));
  }
}

void CudaModelImpl::run_decoder_layer(int64_t layer, const BatchLayout& layout, const bf16* next_norm, bool last,
                                      const std::string& span_name) {
  const int64_t n = layout.num_tokens, hidden = config_.hidden_size;
  const float eps = static_cast<float>(config_.rms_norm_eps);
  const DeviceLayer& weights = layer_weights(layer);
  layer_prefill_form_ = !layout.decode;
  bf16* residual = residual_.ensure(static_cast<size_t>(n * hidden), stream_);
  bf16* normed = normed_.ensure(static_cast<size_t>(n * hidden), stream_);
  bf16* delta = delta_.ensure(static_cast<size_t>(n * hidden), stream_);
  kc::Fp8RowsOut fp8_storage;
  const size_t layer_span = begin_span(span_name, 0);
  const size_t attention_span = begin_span("self_attn", 1);
  const kc::SplitKPartials attention_partials = attention(layer, layout);  // normed -> delta (or its partials)
  kc::UnroundedRowsOut router_input;  // MoE layers: the normed rows unrounded, in the form the router reads
  if (weights.moe && router_reads_planes(*weights.moe, n)) {
    router_input.bf16_planes = normed_planes_.ensure(static_cast<size_t>(kc::kBf16SplitPlanes * n * hidden), stream_);
  } else if (weights.moe) {
    router_input.f32 = normed_f32_.ensure(static_cast<size_t>(n * hidden), stream_);
  }
  kc::add_rms_norm_bf16(delta, attention_partials, residual, n, hidden, weights.post_attention_layernorm.data(), eps,
                        normed, router_input, fused_input_fp8(n, hidden, fp8_storage), stream_);
  end_span(attention_span);
  const size_t ffn_span = begin_span(weights.moe ? "moe" : "mlp", 1);
  const kc::SplitKPartials ffn_partials = feed_forward(layer, layout);  // normed -> delta (or its partials)
  kc::add_rms_norm_bf16(delta, ffn_partials, residual, n, hidden, next_norm, eps, normed, nullptr,
                        last ? nullptr : fused_input_fp8(n, hidden, fp8_storage), stream_);
  end_span(ffn_span);
  end_span(layer_span);
}

ForwardResult CudaModelImpl::forward(const ForwardBatch& batch, const std::vector<int64_t>& logit_rows,
                                     const std::vector<int64_t>& sample_rows, const std::vector<sampling::DeviceSamplingRow>& sampling,
                                     const std::vector<sampling::DeviceScoredRow>& scored_rows) {
  last_forward_rows_ = 0;  // no MTP input survives a forward, failed or not, but this one's own rows
  check_row_requests(batch.num_tokens(), sample_rows, sampling, scored_rows);
  if (const DecodeShape* shape = padded_decode_shape(batch)) {
    return forward_padded_decode(batch, logit_rows, sample_rows, sampling, scored_rows, *shape);
  }
  ++stats_.eager_forwards;
  const BatchLayout layout = upload_batch(batch);
  const int64_t forward_start_us = begin_forward_trace();
  for (const std::vector<int64_t>* rows : {&logit_rows, &sample_rows}) {
    for (int64_t row : *rows) {
      FATHOM_CHECK(row >= 0 && row < layout.num_tokens, "CUDA backend: logit row " << row << " of " << layout.num_tokens << " tokens");
    }
  }
  run_layers(layout);
  ForwardResult result = results_for_rows(layout.num_tokens, logit_rows, sample_rows, sampling, scored_rows);
  last_forward_rows_ = layout.num_tokens;
  if (trace_) flush_spans(forward_start_us);
  return result;
}

CudaDeepseekV3Model::CudaDeepseekV3Model(const ModelConfig& config, const ModelWeights& weights,
                                         const CudaModelOptions& options)
    : impl_(std::make_unique<CudaModelImpl>(config, weights, options)) {}
CudaDeepseekV3Model::~CudaDeepseekV3Model() = default;
const ModelConfig& CudaDeepseekV3Model::config() const { return impl_->config(); }
const CudaModelStats& CudaDeepseekV3Model::stats() const { return impl_->stats(); }
int64_t CudaDeepseekV3Model::num_kv_slots() const { return impl_->stats().num_kv_slots; }
std::vector<float> CudaDeepseekV3Model::forward(const ForwardBatch& batch, const std::vector<int64_t>& logit_rows) {
  return impl_->forward(batch, logit_rows, {}, {}, {}).logits;
}
ForwardResult CudaDeepseekV3Model::forward(const ForwardBatch& batch, const std::vector<int64_t>& logit_rows,
                                           const std::vector<int64_t>& sample_rows, const std::vector<sampling::DeviceSamplingRow>& sampling,
                                           const std::vector<sampling::DeviceScoredRow>& scored_rows) {
  return impl_->forward(batch, logit_rows, sample_rows, sampling, scored_rows);
}
void CudaDeepseekV3Model::set_trace(TraceRecorder* trace) { impl_->set_trace(trace); }
bool CudaDeepseekV3Model::has_mtp() const { return impl_->has_mtp(); }
std::vector<float> CudaDeepseekV3Model::forward_mtp(const ForwardBatch& batch, const std::vector<int64_t>& hidden_rows,
                                                    const std::vector<int64_t>& logit_rows) {
  return impl_->forward_mtp(batch, hidden_rows, logit_rows, {}, {}).logits;
}
ForwardResult CudaDeepseekV3Model::forward_mtp(const ForwardBatch& batch, const std::vector<int64_t>& hidden_rows,
                                               const std::vector<int64_t>& logit_rows, const std::vector<int64_t>& sample_rows,
                                               const std::vector<sampling::DeviceSamplingRow>& sampling) {
  return impl_->forward_mtp(batch, hidden_rows, logit_rows, sample_rows, sampling);
}

}  // namespace fathom::model::cuda
