// The MTP (NextN) module on the GPU, SGLang's DeepSeek NextN semantics (as model::MtpModule on the CPU):
//   u = eh_proj([enorm(embed(token p+1)) ; hnorm(h_p)]), one decoder layer over u (cache layer L, its own KV rows at
//   the main model's slots, RoPE position p), shared_head.norm, the main lm_head.
// h_p is a final hidden row of the previous forward (main model after its norm, or this module after
// shared_head.norm for a chained draft). Pure-decode steps run padded, from a CUDA graph per decode shape when
// graphs are captured, like the main model's. Part of CudaModelImpl (cuda_model_impl.h).
#include <algorithm>

#include "core/error.h"
#include "kernels/cuda/embedding/embedding.h"
#include "kernels/cuda/norm/rms_norm.h"
#include "model/cuda/cuda_model_impl.h"

namespace fathom::model::cuda {

CudaModelImpl::MtpInputs CudaModelImpl::graph_mtp_inputs() const {
  const int64_t rows = graph_max_batch_, hidden = config_.hidden_size;
  bf16* base = graph_mtp_inputs_.data();
  return {base, base + rows * hidden, base + 2 * rows * hidden};
}

void CudaModelImpl::run_mtp_layers(const BatchLayout& layout, const int32_t* hidden_rows, const MtpInputs& inputs) {
  const DeviceMtp& mtp = *weights_.mtp;
  const int64_t n = layout.num_tokens, hidden = config_.hidden_size, vocab = config_.vocab_size;
  const float eps = static_cast<float>(config_.rms_norm_eps);
  const size_t input_span = begin_span("mtp.input", 0);
  // The previous forward's rows first: everything after this overwrites normed_.
  const int64_t normed_rows = static_cast<int64_t>(normed_.buffer.size()) / hidden;  // rows are checked on the host
  bf16* previous = inputs.previous;
  kc::embedding_gather_bf16(normed_.buffer.data(), normed_rows, hidden, hidden_rows, n, previous, nullptr, stream_);
  bf16* embedded = inputs.embedded;
  kc::embedding_gather_bf16(weights_.embed_tokens.data(), vocab, hidden, layout.token_ids, n, embedded,
                            embedding_error_.data(), stream_);
  bf16* concatenated = inputs.concatenated;
  kc::rms_norm_bf16(embedded, hidden, n, hidden, mtp.enorm.data(), eps, concatenated, 2 * hidden, stream_);
  kc::rms_norm_bf16(previous, hidden, n, hidden, mtp.hnorm.data(), eps, concatenated + hidden, 2 * hidden, stream_);
  bf16* residual = residual_.ensure(static_cast<size_t>(n * hidden), stream_);  // [n, H] = u
  cublas_rows_gemm(*eh_proj_gemm_, concatenated, n, mtp.eh_proj.data(), residual);
  bf16* normed = normed_.ensure(static_cast<size_t>(n * hidden), stream_);
  kc::Fp8RowsOut fp8_storage;
  kc::rms_norm_bf16(residual, hidden, n, hidden, mtp.layer.input_layernorm.data(), eps, normed, hidden,
                    fused_input_fp8(n, hidden, fp8_storage), stream_);
  end_span(input_span);
  run_decoder_layer(num_cache_layers() - 1, layout, mtp.shared_head_norm.data(), /*last=*/true, "mtp.layer");
}

ForwardResult CudaModelImpl::forward_mtp(const ForwardBatch& batch, const std::vector<int64_t>& hidden_rows,
                                         const std::vector<int64_t>& logit_rows, const std::vector<int64_t>& sample_rows,
                                         const std::vector<sampling::DeviceSamplingRow>& sampling) {
  FATHOM_CHECK(weights_.mtp, "CUDA backend: no MTP module loaded (load it with --mtp from a checkpoint that has model.layers."
                                 << config_.num_hidden_layers << ".eh_proj)");
  const int64_t n = batch.num_tokens();
  FATHOM_CHECK(static_cast<int64_t>(hidden_rows.size()) == n,
               "CUDA backend: MTP forward of " << n << " tokens with " << hidden_rows.size() << " hidden rows");
  std::vector<int32_t> hidden_row_ids;
  for (int64_t row : hidden_rows) {
    FATHOM_CHECK(row >= 0 && row < last_forward_rows_,
                 "CUDA backend: MTP hidden row " << row << " of the previous forward's " << last_forward_rows_);
    hidden_row_ids.push_back(static_cast<int32_t>(row));
  }
  last_forward_rows_ = 0;  // no input survives a forward, failed or not, but its own rows
  FATHOM_CHECK(sample_rows.size() == sampling.size(),
               "CUDA backend: " << sample_rows.size() << " sampled rows with " << sampling.size() << " sampling entries");
  for (const std::vector<int64_t>* rows : {&logit_rows, &sample_rows}) {
    for (int64_t row : *rows) FATHOM_CHECK(row >= 0 && row < n, "CUDA backend: MTP logit row " << row << " of " << n << " tokens");
  }
  if (const DecodeShape* shape = padded_decode_shape(batch)) {
    return forward_padded_mtp_decode(batch, hidden_row_ids, logit_rows, sample_rows, sampling, *shape);
  }
  const BatchLayout layout = upload_batch(batch);  // validates ids, slots and sizes
  const int32_t* hidden_rows_device = upload_ints(mtp_hidden_rows_, hidden_row_ids);
  ++stats_.eager_forwards;
  const int64_t forward_start_us = begin_forward_trace();
  MtpInputs inputs;
  inputs.previous = mtp_previous_hidden_.ensure(static_cast<size_t>(n * config_.hidden_size), stream_);
  inputs.embedded = mtp_embedded_.ensure(static_cast<size_t>(n * config_.hidden_size), stream_);
  inputs.concatenated = mtp_concat_.ensure(static_cast<size_t>(n * 2 * config_.hidden_size), stream_);
  run_mtp_layers(layout, hidden_rows_device, inputs);
  ForwardResult result = results_for_rows(n, logit_rows, sample_rows, sampling, {});
  last_forward_rows_ = n;
  if (trace_) flush_spans(forward_start_us);
  return result;
}

ForwardResult CudaModelImpl::forward_padded_mtp_decode(const ForwardBatch& batch, const std::vector<int32_t>& hidden_rows,
                                                       const std::vector<int64_t>& logit_rows,
                                                       const std::vector<int64_t>& sample_rows,
                                                       const std::vector<sampling::DeviceSamplingRow>& sampling,
                                                       const DecodeShape& shape) {
  const int32_t actual = upload_padded_decode(batch, logit_rows, sample_rows, shape, &hidden_rows);
  return finish_padded_decode(
      shape, shape.mtp_exec,
      [&] { run_mtp_layers(static_decode_layout(shape), graph_input(kGraphHiddenRows), graph_mtp_inputs()); }, actual,
      logit_rows, sample_rows, sampling, {});
}

}  // namespace fathom::model::cuda
