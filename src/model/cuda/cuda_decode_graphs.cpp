// Padded pure-decode forwards: buffer warm-up and freezing, one shape per (padded batch size, context bucket) over
// static input buffers, captured as a CUDA graph (or run eagerly over the same buffers when graphs are off, so both
// give the same bits). Part of CudaModelImpl (cuda_model_impl.h).
#include <algorithm>
#include <chrono>
#include <span>

#include "core/error.h"
#include "kv_cache/decode_page_table.h"
#include "model/cuda/cuda_model_impl.h"

namespace fathom::model::cuda {

std::vector<const DeviceLinear*> CudaModelImpl::dense_linears() const {
  std::vector<const DeviceLinear*> linears;
  for (int64_t index = 0; index < num_cache_layers(); ++index) {
    const DeviceLayer& layer = layer_weights(index);
    const DeviceAttention& attention = layer.attention;
    for (const std::optional<DeviceLinear>* linear : {&attention.q_b_proj, &attention.q_proj}) {
      if (*linear) linears.push_back(&**linear);
    }
    for (const DeviceLinear* linear : {&attention.qkv_a, &attention.kv_b_proj, &attention.o_proj}) {
      linears.push_back(linear);
    }
    for (const DeviceMlp* mlp : {layer.dense_mlp ? &*layer.dense_mlp : nullptr,
                                 layer.moe && layer.moe->shared ? &*layer.moe->shared : nullptr}) {
      if (mlp) {
        linears.push_back(&mlp->gate_up);
        linears.push_back(&mlp->down);
      }
    }
  }
  return linears;
}

const CudaModelImpl::DecodeShape* CudaModelImpl::find_decode_shape(int32_t batch, int32_t max_context) const {
  const DecodeShape* best = nullptr;
  for (const DecodeShape& shape : decode_shapes_) {
    if (shape.batch < batch || shape.max_context < max_context) continue;
    if (!best || shape.batch < best->batch || (shape.batch == best->batch && shape.max_context < best->max_context)) best = &shape;
  }
  return best;
}

BatchLayout CudaModelImpl::static_decode_layout(const DecodeShape& shape) const {
  BatchLayout layout;
  layout.token_ids = graph_input(kGraphTokenIds);
  layout.positions = graph_input(kGraphPositions);
  layout.slots = graph_input(kGraphSlots);
  layout.page_table = decode_page_size_ > 1 ? nullptr : graph_page_table_.data();  // the decode reads decode_pages
  layout.seq_lens = graph_input(kGraphSeqLens);
  layout.num_tokens = shape.batch;
  layout.num_sequences = shape.batch;
  layout.decode = true;
  layout.max_pages = graph_page_stride_;
  layout.decode_pages = decode_page_size_ > 1 ? graph_decode_pages_.data() : graph_page_table_.data();
  layout.decode_max_pages = decode_page_size_ > 1 ? graph_decode_page_stride_ : graph_page_stride_;
  layout.max_q_len = 1;
  layout.decode_plan = decode_plan(shape.batch, shape.max_context);
  layout.mla_workspace = mla_workspace_.data();
  layout.mla_workspace_bytes = mla_workspace_.bytes();
  return layout;
}

const CudaModelImpl::DecodeShape* CudaModelImpl::padded_decode_shape(const ForwardBatch& batch) const {
  const bool decode = batch.attention_form == AttentionForm::kAbsorbed ||
                      (batch.attention_form == AttentionForm::kAuto && batch.is_pure_decode());
  if (!decode || decode_shapes_.empty() || !batch.is_pure_decode()) return nullptr;
  int32_t max_context = 0;
  for (const SequenceChunk& chunk : batch.sequences) {
    max_context = std::max<int32_t>(max_context, static_cast<int32_t>(chunk.num_cached + chunk.num_tokens));
  }
  return find_decode_shape(static_cast<int32_t>(batch.sequences.size()), max_context);
}

int32_t CudaModelImpl::upload_padded_decode(const ForwardBatch& batch, const std::vector<int64_t>& logit_rows,
                                            const std::vector<int64_t>& sample_rows, const DecodeShape& shape,
                                            const std::vector<int32_t>* hidden_rows) {
  validate_batch(batch, true);
  const int32_t actual = static_cast<int32_t>(batch.sequences.size());
  for (const std::vector<int64_t>* rows : {&logit_rows, &sample_rows}) {
    for (int64_t row : *rows) FATHOM_CHECK(row >= 0 && row < actual, "CUDA backend: logit row " << row << " of " << actual << " tokens");
  }
  // Both stagings are pinned, so their copies are DMAs the host does not wait for (pageable sources would be staged
  // by the host, and a 2 MB table at 32 x 16384 positions of one-token pages costs it); the previous step's copies
  // from them completed once the event has (every forward ends in a stream sync; the wait covers one that threw).
  FATHOM_CUDA_CHECK(cudaEventSynchronize(graph_inputs_copied_));
  const size_t stride = static_cast<size_t>(graph_max_batch_);
  int32_t* inputs = graph_inputs_host_.ensure(kGraphInputCount * stride);  // [kGraphInputCount, graph_max_batch]
  int32_t* token_ids = inputs + kGraphTokenIds * stride;
  int32_t* positions = inputs + kGraphPositions * stride;
  int32_t* slots = inputs + kGraphSlots * stride;
  int32_t* seq_lens = inputs + kGraphSeqLens * stride;
  int32_t* padded_hidden_rows = inputs + kGraphHiddenRows * stride;
  // Padded entries decode token 0 at position 0 into the padding slot (their results are discarded; MTP ones read
  // hidden row 0).
  std::fill_n(token_ids, shape.batch, 0);
  std::fill_n(positions, shape.batch, 0);
  std::fill_n(slots, shape.batch, padding_slot_);
  std::fill_n(seq_lens, shape.batch, 1);
  std::fill_n(padded_hidden_rows, shape.batch, 0);
  int32_t width = 1;
  std::vector<const int32_t*> sequence_slots;
  for (int32_t s = 0; s < actual; ++s) {
    const SequenceChunk& chunk = batch.sequences[static_cast<size_t>(s)];
    token_ids[s] = batch.token_ids[static_cast<size_t>(chunk.token_begin)];
    positions[s] = batch.positions[static_cast<size_t>(chunk.token_begin)];
    slots[s] = chunk.kv_slots[chunk.num_cached];
    seq_lens[s] = static_cast<int32_t>(chunk.num_cached + 1);
    if (hidden_rows) padded_hidden_rows[s] = (*hidden_rows)[static_cast<size_t>(chunk.token_begin)];
    width = std::max(width, seq_lens[s]);
    sequence_slots.push_back(chunk.kv_slots);
  }
  // Rows of graph_max_batch entries, of which the first shape.batch are this step's.
  FATHOM_CUDA_CHECK(cudaMemcpy2DAsync(graph_inputs_.data(), stride * sizeof(int32_t), inputs, stride * sizeof(int32_t),
                                      static_cast<size_t>(shape.batch) * sizeof(int32_t), kGraphInputCount,
                                      cudaMemcpyHostToDevice, stream_));
  // The table the decode reads: the slot of every position on pages of one token, else a page's first slot / page.
  const int32_t page = decode_page_size_, page_width = (width + page - 1) / page;
  const size_t table_entries = static_cast<size_t>(shape.batch) * static_cast<size_t>(page_width);
  int32_t* staged = graph_table_host_.ensure(table_entries);  // [batch, page_width]
  kv_cache::fill_decode_page_table(sequence_slots, std::span<const int32_t>(seq_lens, static_cast<size_t>(shape.batch)),
                                   page, padding_slot_ / page, static_cast<size_t>(shape.batch), page_width,
                                   std::span<int32_t>(staged, table_entries));
  int32_t* table = page > 1 ? graph_decode_pages_.data() : graph_page_table_.data();
  const int32_t table_stride = page > 1 ? graph_decode_page_stride_ : graph_page_stride_;
  FATHOM_CUDA_CHECK(cudaMemcpy2DAsync(table, static_cast<size_t>(table_stride) * sizeof(int32_t), staged,
                                      static_cast<size_t>(page_width) * sizeof(int32_t),
                                      static_cast<size_t>(page_width) * sizeof(int32_t), static_cast<size_t>(shape.batch),
                                      cudaMemcpyHostToDevice, stream_));
  FATHOM_CUDA_CHECK(cudaEventRecord(graph_inputs_copied_, stream_));
  return actual;
}

ForwardResult CudaModelImpl::forward_padded_decode(const ForwardBatch& batch, const std::vector<int64_t>& logit_rows,
                                                   const std::vector<int64_t>& sample_rows,
                                                   const std::vector<sampling::DeviceSamplingRow>& sampling,
                                                   const std::vector<sampling::DeviceScoredRow>& scored_rows,
                                                   const DecodeShape& shape) {
  const int32_t actual = upload_padded_decode(batch, logit_rows, sample_rows, shape);
  return finish_padded_decode(shape, shape.exec, [&] { run_layers(static_decode_layout(shape)); }, actual, logit_rows,
                              sample_rows, sampling, scored_rows);
}

ForwardResult CudaModelImpl::finish_padded_decode(const DecodeShape& shape, cudaGraphExec_t exec,
                                                  const std::function<void()>& layers, int32_t actual,
                                                  const std::vector<int64_t>& logit_rows,
                                                  const std::vector<int64_t>& sample_rows,
                                                  const std::vector<sampling::DeviceSamplingRow>& sampling,
                                                  const std::vector<sampling::DeviceScoredRow>& scored_rows) {
  const int64_t forward_start_us = begin_forward_trace();
  if (exec && !trace_) {
    FATHOM_CUDA_CHECK(cudaGraphLaunch(exec, stream_));
    ++stats_.graph_forwards;
  } else {
    // The same kernels with the same arguments as the captured graph (--disable-cuda-graph, or --profile spans).
    layers();
    const size_t lm_head_span = begin_span("lm_head", 0);
    cublas_rows_gemm(*lm_head_gemm_, normed_.buffer.data(), shape.batch, weights_.lm_head.data(), graph_logits_.data());
    end_span(lm_head_span);
    ++stats_.eager_forwards;
  }
  // A decode sequence's token row is its row of graph_logits_.
  ForwardResult result = collect_results(graph_logits_.data(), actual, logit_rows, sample_rows, sampling, scored_rows);
  last_forward_rows_ = actual;
  if (trace_) flush_spans(forward_start_us);
  return result;
}

void CudaModelImpl::warm_up_buffers() {
  // Grows every activation buffer to its largest size (a prefill of max_batch_tokens, a decode of max_decode_batch)
  // before any graph is captured, so none of them is reallocated under a graph later. Writes only the padding slot.
  // Sequences of at most 4096 tokens (the longest prefill the benchmarks run; the buffers scale with total tokens).
  const int64_t context = std::max<int64_t>(1, std::min({max_context_tokens_, options_.max_batch_tokens, int64_t{4096}}));
  // The small-M split-K workspace depends on the weight, not on the tokens: size it for every FP8 linear (kv_b_proj
  // runs only in prefill and needs the most; the warm-up's row counts may never take the small-M path).
  size_t split_bytes = 0;
  for (const DeviceLinear* linear : dense_linears()) {
    split_bytes = std::max(split_bytes, fp8_gemm_->small_m_workspace_bytes(linear->rows, linear->cols));
  }
  if (split_bytes) split_partials_.ensure(split_bytes / sizeof(float), stream_);
  // The router kernel's fp32 rows serve decode sizes; the warm-up's batches may all take the bf16-plane form.
  if (config_.n_routed_experts > 0) {
    normed_f32_.ensure(static_cast<size_t>(options_.max_decode_batch * config_.hidden_size), stream_);
  }
  // A prefill pass expands up to prefill_window_keys_ keys (more than the warm-up's prefill) and a windowed forward
  // merges its passes: those buffers at full size now, so the first long prompt finds them (a shortfall shows at
  // startup, not mid-serving).
  const int64_t window_keys = prefill_window_keys_, heads = config_.num_attention_heads, lora = config_.kv_lora_rank;
  latent_rows_.ensure(static_cast<size_t>(window_keys * lora), stream_);
  kv_expanded_.ensure(static_cast<size_t>(window_keys * heads * (config_.qk_nope_head_dim + config_.v_head_dim)), stream_);
  expand_q_.values.ensure(static_cast<size_t>(window_keys * lora), stream_);
  expand_q_.scales.ensure(static_cast<size_t>(window_keys * kc::ceil_div(lora, 128)), stream_);
  expand_q_.scales_block_major.ensure(static_cast<size_t>(cublas_rows(window_keys) * kc::ceil_div(lora, 128)), stream_);
  attn_window_.ensure(static_cast<size_t>(options_.max_batch_tokens * heads * config_.v_head_dim), stream_);
  attn_lse_.ensure(static_cast<size_t>(2 * options_.max_batch_tokens * heads), stream_);
  // The eager lm_head's rows (results_for_rows), budgeted by logits_bytes(): the first prompt-logprobs request finds
  // them allocated.
  const int64_t logits_rows = max_logits_rows();
  logits_.ensure(static_cast<size_t>(logits_rows * config_.vocab_size), stream_);
  selected_hidden_.ensure(static_cast<size_t>(logits_rows * config_.hidden_size), stream_);
  logit_rows_.ensure(static_cast<size_t>(logits_rows), stream_);
  std::vector<int32_t> padding_slots(static_cast<size_t>(context), padding_slot_);
  ForwardBatch prefill;
  prefill.attention_form = AttentionForm::kExpanded;
  for (int64_t remaining = options_.max_batch_tokens; remaining > 0; remaining -= context) {
    prefill.add_sequence(std::vector<int32_t>(static_cast<size_t>(std::min(remaining, context)), 0), 0, padding_slots.data());
  }
  ForwardBatch decode;
  decode.attention_form = AttentionForm::kAbsorbed;
  for (int64_t s = 0; s < options_.max_decode_batch; ++s) decode.add_sequence({0}, 0, padding_slots.data());
  for (const ForwardBatch* batch : {&prefill, &decode}) {
    BatchLayout layout;
    // upload_batch validates slots against num_kv_slots_; the padding slot lies past it, so build the layout here.
    const int64_t n = batch->num_tokens();
    std::vector<int32_t> zeros(static_cast<size_t>(n), 0), slots(static_cast<size_t>(n), padding_slot_);
    std::vector<int32_t> positions = batch->positions, seq_lens, pages;
    int32_t width = 0;
    for (const SequenceChunk& chunk : batch->sequences) width = std::max<int32_t>(width, static_cast<int32_t>(chunk.num_tokens));
    for (const SequenceChunk& chunk : batch->sequences) {
      seq_lens.push_back(static_cast<int32_t>(chunk.num_tokens));
    }
    pages.assign(static_cast<size_t>(batch->sequences.size()) * width, padding_slot_);
    layout.num_tokens = n;
    layout.num_sequences = static_cast<int32_t>(batch->sequences.size());
    layout.decode = batch == &decode;
    layout.max_pages = width;
    layout.max_q_len = width;
    layout.total_kv = n;
    layout.token_ids = upload_ints(token_ids_, zeros);
    layout.positions = upload_ints(positions_, positions);
    layout.slots = upload_ints(slots_, slots);
    layout.page_table = upload_ints(page_table_, pages);
    layout.seq_lens = upload_ints(seq_lens_, seq_lens);
    if (layout.decode) {
      set_decode_pages(layout, std::vector<const int32_t*>(batch->sequences.size(), padding_slots.data()), seq_lens,
                       decode_pages_);
      plan_decode(layout, 1);
    } else {
      set_prefill_passes(layout, std::vector<const int32_t*>(batch->sequences.size(), padding_slots.data()), seq_lens,
                         seq_lens);
    }
    run_layers(layout);
    if (weights_.mtp) {  // its layer may differ from every main layer (e.g. MoE behind dense layers only)
      MtpInputs inputs;
      inputs.previous = mtp_previous_hidden_.ensure(static_cast<size_t>(n * config_.hidden_size), stream_);
      inputs.embedded = mtp_embedded_.ensure(static_cast<size_t>(n * config_.hidden_size), stream_);
      inputs.concatenated = mtp_concat_.ensure(static_cast<size_t>(n * 2 * config_.hidden_size), stream_);
      run_mtp_layers(layout, upload_ints(mtp_hidden_rows_, zeros), inputs);
    }
    FATHOM_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
}

void CudaModelImpl::freeze_graph_buffers() {
  // Every buffer a decode graph body touches (run_layers or run_mtp_layers, + lm_head); prefill-only and eager-only
  // ones stay growable.
  for (GrowableBuffer<bf16>* buffer : {&residual_, &normed_, &delta_, &q_a_, &q_, &qkv_a_, &attn_, &q_latent_, &out_latent_,
                                       &gate_up_, &expert_gate_up_, &expert_out_, &shared_out_, &normed_planes_}) {
    buffer->frozen = true;
  }
  for (GrowableBuffer<float>* buffer : {&normed_f32_, &split_partials_, &router_logits_, &router_plane_logits_,
                                        &expert_weights_, &permuted_scales_, &expert_act_scales_}) {
    buffer->frozen = true;
  }
  for (GrowableBuffer<int32_t>* buffer : {&expert_ids_, &expert_offsets_, &expert_counts_, &row_token_slot_, &row_expert_,
                                          &token_slot_row_, &active_experts_}) {
    buffer->frozen = true;
  }
  for (GrowableBuffer<uint8_t>* buffer : {&permutation_workspace_, &permuted_values_, &expert_act_values_}) buffer->frozen = true;
  for (QuantizedActivations* quantized : {&input_q_, &scratch_q_}) {
    quantized->values.frozen = true;
    quantized->scales.frozen = true;
    quantized->scales_block_major.frozen = true;
  }
}

template <typename Body>
cudaGraphExec_t CudaModelImpl::capture_graph(const Body& body) {
  body();  // eager once: cuBLASLt plans for this size are made outside the capture
  FATHOM_CUDA_CHECK(cudaStreamSynchronize(stream_));
  if (!options_.capture_cuda_graphs) return nullptr;
  cudaGraph_t captured = nullptr;
  FATHOM_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
  try {
    body();
  } catch (...) {
    cudaStreamEndCapture(stream_, &captured);
    if (captured) cudaGraphDestroy(captured);
    throw;
  }
  FATHOM_CUDA_CHECK(cudaStreamEndCapture(stream_, &captured));
  cudaGraphExec_t exec = nullptr;
  const cudaError_t instantiated = cudaGraphInstantiate(&exec, captured, 0);
  cudaGraphDestroy(captured);
  FATHOM_CUDA_CHECK(instantiated);
  return exec;
}

void CudaModelImpl::prepare_decode_shapes() {
  std::vector<int32_t> sizes;
  for (int32_t size : options_.cuda_graph_batch_sizes) {
    if (size >= 1 && size <= options_.max_decode_batch && std::find(sizes.begin(), sizes.end(), size) == sizes.end()) {
      sizes.push_back(size);
    }
  }
  if (sizes.empty()) return;
  std::sort(sizes.begin(), sizes.end());
  const auto start = std::chrono::steady_clock::now();
  size_t free_before = 0, free_after = 0, total = 0;
  FATHOM_CUDA_CHECK(cudaMemGetInfo(&free_before, &total));
  warm_up_buffers();
  // Context buckets: the MLA split plan is made for the bucket's bound, so short contexts do not pay long ones' splits.
  // Deterministic inference pads only up to 4096 tokens (its fixed-size splits would need a workspace of batch x
  // the longest context's splits); longer decode batches run eagerly with the same plan, so the bits are the same.
  std::vector<int32_t> buckets;
  // The 1024 bucket: a short chat's decode would otherwise run the 4096 plan's many mostly empty splits.
  const std::vector<int64_t> bounds = options_.deterministic ? std::vector<int64_t>{4096}
                                                             : std::vector<int64_t>{1024, 4096, max_context_tokens_};
  for (int64_t bound : bounds) {
    const int32_t bucket = static_cast<int32_t>(std::min(bound, max_context_tokens_));
    if (std::find(buckets.begin(), buckets.end(), bucket) == buckets.end()) buckets.push_back(bucket);
  }
  graph_max_batch_ = sizes.back();
  graph_page_stride_ = buckets.back();
  const int64_t heads = config_.num_attention_heads, vocab = config_.vocab_size;
  graph_inputs_ = kc::DeviceBuffer<int32_t>(static_cast<size_t>(kGraphInputCount) * graph_max_batch_);
  // One slot table, as the decode reads it: per position on pages of one token, per page on larger ones.
  if (decode_page_size_ == 1) {
    graph_page_table_ = kc::DeviceBuffer<int32_t>(static_cast<size_t>(graph_max_batch_) * graph_page_stride_);
  } else {
    graph_decode_page_stride_ = (graph_page_stride_ + decode_page_size_ - 1) / decode_page_size_;
    graph_decode_pages_ = kc::DeviceBuffer<int32_t>(static_cast<size_t>(graph_max_batch_) * graph_decode_page_stride_);
  }
  graph_logits_ = kc::DeviceBuffer<float>(static_cast<size_t>(graph_max_batch_ * vocab));
  if (weights_.mtp) graph_mtp_inputs_ = kc::DeviceBuffer<bf16>(static_cast<size_t>(graph_max_batch_ * 4 * config_.hidden_size));
  for (int32_t bucket : buckets) {  // mla_workspace_ covers every plan the replays take (decode_workspace_bound)
    const size_t bucket_bytes = kc::mla_decode_workspace_bytes(decode_plan(graph_max_batch_, bucket), graph_max_batch_,
                                                               static_cast<int32_t>(heads),
                                                               static_cast<int32_t>(config_.kv_lora_rank));
    FATHOM_CHECK(bucket_bytes <= mla_workspace_.bytes(),
                 "CUDA backend: decode graphs of " << graph_max_batch_ << " sequences up to " << bucket << " tokens need "
                                                   << bucket_bytes << " MLA workspace bytes, more than the "
                                                   << mla_workspace_.bytes() << " planned");
  }
  // Padded contents for the captures (and a valid state for any replay): every entry decodes into the padding slot.
  std::vector<int32_t> inputs(graph_inputs_.size(), 0);  // tokens, positions and hidden rows 0
  std::fill_n(inputs.begin() + kGraphSlots * graph_max_batch_, graph_max_batch_, padding_slot_);
  std::fill_n(inputs.begin() + kGraphSeqLens * graph_max_batch_, graph_max_batch_, 1);
  graph_inputs_.upload(inputs);
  if (decode_page_size_ == 1) graph_page_table_.upload(std::vector<int32_t>(graph_page_table_.size(), padding_slot_));
  if (decode_page_size_ > 1)
    graph_decode_pages_.upload(std::vector<int32_t>(graph_decode_pages_.size(), padding_slot_ / decode_page_size_));
  FATHOM_CUDA_CHECK(cudaDeviceSynchronize());  // the uploads above ran on the legacy default stream
  for (int32_t bucket : buckets) {
    for (auto size = sizes.rbegin(); size != sizes.rend(); ++size) {
      DecodeShape graph;
      graph.batch = *size;
      graph.max_context = bucket;
      const BatchLayout layout = static_decode_layout(graph);
      auto body = [&] {
        run_layers(layout);
        cublas_rows_gemm(*lm_head_gemm_, normed_.buffer.data(), graph.batch, weights_.lm_head.data(), graph_logits_.data());
      };
      auto mtp_body = [&] {
        run_mtp_layers(layout, graph_input(kGraphHiddenRows), graph_mtp_inputs());
        cublas_rows_gemm(*lm_head_gemm_, normed_.buffer.data(), graph.batch, weights_.lm_head.data(), graph_logits_.data());
      };
      graph.exec = capture_graph(body);
      if (weights_.mtp) graph.mtp_exec = capture_graph(mtp_body);
      decode_shapes_.push_back(graph);
    }
  }
  FATHOM_CUDA_CHECK(cudaStreamSynchronize(stream_));
  if (options_.capture_cuda_graphs) freeze_graph_buffers();
  FATHOM_CUDA_CHECK(cudaMemGetInfo(&free_after, &total));
  stats_.num_cuda_graphs = 0;
  for (const DecodeShape& shape : decode_shapes_) stats_.num_cuda_graphs += (shape.exec ? 1 : 0) + (shape.mtp_exec ? 1 : 0);
  stats_.graph_capture_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  stats_.graph_memory_bytes = free_before > free_after ? free_before - free_after : 0;
}

}  // namespace fathom::model::cuda
