// What a forward returns to the host from its device logits: the host rows' logits, the tokens sampled on the device
// (with their top_logprobs alternatives) and the rows scored on the device (prompt logprobs): only the logits the
// host sampler needs cross the bus. Part of CudaModelImpl (cuda_model_impl.h).
#include <algorithm>

#include "core/error.h"
#include "kernels/cuda/embedding/embedding.h"
#include "kernels/cuda/sampling/score_tokens.h"
#include "model/cuda/cuda_model_impl.h"

namespace fathom::model::cuda {

void CudaModelImpl::check_row_requests(int64_t num_rows, const std::vector<int64_t>& sample_rows,
                                       const std::vector<sampling::DeviceSamplingRow>& sampling,
                                       const std::vector<sampling::DeviceScoredRow>& scored_rows) const {
  const int64_t vocab = config_.vocab_size;
  FATHOM_CHECK(sampling.size() == sample_rows.size(), "CUDA backend: " << sample_rows.size() << " sampled rows with "
                                                                       << sampling.size() << " sampling entries");
  for (size_t i = 0; i < sample_rows.size(); ++i) {
    FATHOM_CHECK(sample_rows[i] >= 0 && sample_rows[i] < num_rows,
                 "CUDA backend: sampled row " << sample_rows[i] << " of " << num_rows);
    FATHOM_CHECK(
        sampling[i].top_logprobs >= 0 && sampling[i].top_logprobs <= kc::kMaxScoreTopN,
        "CUDA backend: " << sampling[i].top_logprobs << " top_logprobs asked for, at most " << kc::kMaxScoreTopN);
  }
  for (const sampling::DeviceScoredRow& scored : scored_rows) {
    FATHOM_CHECK(scored.row >= 0 && scored.row < num_rows,
                 "CUDA backend: scored row " << scored.row << " of " << num_rows);
    FATHOM_CHECK(scored.target >= 0 && scored.target < vocab,
                 "CUDA backend: scored token " << scored.target << " outside the vocabulary [0, " << vocab << ")");
    FATHOM_CHECK(scored.top_n >= 0 && scored.top_n <= kc::kMaxScoreTopN,
                 "CUDA backend: " << scored.top_n << " alternatives asked for, at most " << kc::kMaxScoreTopN);
  }
}

int64_t CudaModelImpl::max_logits_rows() const {
  return std::max<int64_t>(options_.max_decode_batch, static_cast<int64_t>(kScoredRowsPerPass));
}

size_t CudaModelImpl::logits_bytes() const {
  const size_t row_bytes = static_cast<size_t>(config_.vocab_size) * sizeof(float) +
                           static_cast<size_t>(config_.hidden_size) * sizeof(bf16) + sizeof(int32_t);
  return static_cast<size_t>(max_logits_rows()) * row_bytes * 5 / 4;  // GrowableBuffer's 1.25x growth
}

ForwardResult CudaModelImpl::results_for_rows(int64_t n, const std::vector<int64_t>& logit_rows,
                                              const std::vector<int64_t>& sample_rows,
                                              const std::vector<sampling::DeviceSamplingRow>& sampling,
                                              const std::vector<sampling::DeviceScoredRow>& scored_rows) {
  const int64_t hidden = config_.hidden_size, vocab = config_.vocab_size;
  check_row_requests(n, sample_rows, sampling, scored_rows);
  for (int64_t row : logit_rows) FATHOM_CHECK(row >= 0 && row < n, "CUDA backend: logits row " << row << " of " << n);
  // Logits [rows, V] of token rows `row_ids` (gathered from normed_ [n, H]) into logits_.
  auto lm_head = [&](const std::vector<int32_t>& row_ids) {
    const int64_t rows = static_cast<int64_t>(row_ids.size());
    const int32_t* row_ids_device = upload_ints(logit_rows_, row_ids);
    bf16* selected = selected_hidden_.ensure(static_cast<size_t>(rows * hidden), stream_);  // [rows, H]
    kc::embedding_gather_bf16(normed_.buffer.data(), n, hidden, row_ids_device, rows, selected, nullptr, stream_);
    float* logits = logits_.ensure(static_cast<size_t>(rows * vocab), stream_);  // [rows, V]
    const size_t lm_head_span = begin_span("lm_head", 0);
    cublas_rows_gemm(*lm_head_gemm_, selected, rows, weights_.lm_head.data(), logits);
    end_span(lm_head_span);
    return logits;
  };
  // The first pass: the sampled rows (the sampler runs over logits rows [0, last sampled row]), the host rows, then
  // scored rows up to kScoredRowsPerPass rows in all; later passes: kScoredRowsPerPass more scored rows each, in the
  // same buffer (logits_ holds max(sampled + host rows, kScoredRowsPerPass) rows).
  const size_t num_scored = scored_rows.size(), direct_rows = sample_rows.size() + logit_rows.size();
  const size_t first_pass_scored =
      std::min(num_scored, direct_rows < kScoredRowsPerPass ? kScoredRowsPerPass - direct_rows : size_t{0});
  std::vector<int32_t> row_ids;
  for (const std::vector<int64_t>* rows : {&sample_rows, &logit_rows}) {
    for (int64_t row : *rows) row_ids.push_back(static_cast<int32_t>(row));
  }
  std::vector<sampling::DeviceScoredRow> pass_rows;  // scored rows re-indexed into the pass's logits
  for (size_t i = 0; i < first_pass_scored; ++i) {
    pass_rows.push_back({static_cast<int64_t>(row_ids.size()), scored_rows[i].target, scored_rows[i].top_n});
    row_ids.push_back(static_cast<int32_t>(scored_rows[i].row));
  }
  const float* logits = row_ids.empty() ? nullptr : lm_head(row_ids);
  std::vector<int64_t> host_rows(logit_rows.size()), device_rows(sample_rows.size());
  for (size_t i = 0; i < device_rows.size(); ++i) device_rows[i] = static_cast<int64_t>(i);
  for (size_t i = 0; i < host_rows.size(); ++i) host_rows[i] = static_cast<int64_t>(sample_rows.size() + i);
  int32_t max_top = 0;
  for (const sampling::DeviceScoredRow& scored : scored_rows) max_top = std::max(max_top, scored.top_n);
  results_.enqueue_direct(logits, static_cast<int64_t>(row_ids.size()), vocab, host_rows, device_rows, sampling,
                          num_scored, max_top, stream_);
  results_.enqueue_scored(logits, pass_rows, 0, stream_);
  // Stream order keeps the first pass's copies and kernels ahead of the next pass's writes to logits_.
  for (size_t first = first_pass_scored; first < num_scored; first += kScoredRowsPerPass) {
    const size_t count = std::min(kScoredRowsPerPass, num_scored - first);
    row_ids.clear();
    pass_rows.clear();
    for (size_t i = first; i < first + count; ++i) {
      pass_rows.push_back({static_cast<int64_t>(row_ids.size()), scored_rows[i].target, scored_rows[i].top_n});
      row_ids.push_back(static_cast<int32_t>(scored_rows[i].row));
    }
    results_.enqueue_scored(lm_head(row_ids), pass_rows, first, stream_);
  }
  return results_.finish(stream_);
}

ForwardResult CudaModelImpl::collect_results(const float* logits, int64_t num_rows,
                                             const std::vector<int64_t>& host_rows,
                                             const std::vector<int64_t>& sample_rows,
                                             const std::vector<sampling::DeviceSamplingRow>& sampling,
                                             const std::vector<sampling::DeviceScoredRow>& scored_rows) {
  // Every check before the first asynchronous copy: a throw must not leave copies into the pinned buffers in flight.
  check_row_requests(num_rows, sample_rows, sampling, scored_rows);
  for (int64_t row : host_rows) {
    FATHOM_CHECK(row >= 0 && row < num_rows, "CUDA backend: logits row " << row << " of " << num_rows);
  }
  int32_t max_top = 0;
  for (const sampling::DeviceScoredRow& scored : scored_rows) max_top = std::max(max_top, scored.top_n);
  results_.enqueue_direct(logits, num_rows, config_.vocab_size, host_rows, sample_rows, sampling, scored_rows.size(),
                          max_top, stream_);
  results_.enqueue_scored(logits, scored_rows, 0, stream_);
  return results_.finish(stream_);
}

}  // namespace fathom::model::cuda
