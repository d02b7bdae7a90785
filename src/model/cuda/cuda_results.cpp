// What a forward returns to the host from its device logits: the host rows' logits, the tokens sampled on the device
// (with their top_logprobs alternatives) and the rows scored on the device (prompt logprobs): only the logits the
// host sampler needs cross the bus. Part of CudaModelImpl (cuda_model_impl.h).
#include <algorithm>

#include "core/error.h"
#include "kernels/cuda/embedding/embedding.h"
#include "kernels/cuda/sampling/sampling.h"
#include "kernels/cuda/sampling/score_tokens.h"
#include "model/cuda/cuda_model_impl.h"

namespace fathom::model::cuda {

namespace {

size_t align8(size_t bytes) { return (bytes + 7) / 8 * 8; }

// Byte offsets of the scoring requests and results in one buffer (the same layout on the host and the device).
struct ScoreLayout {
  size_t rows = 0, top = 0;  // scored rows, alternatives per row (max top_n)
  size_t requests = 0, rank = 0, logprob = 0, top_ids = 0, top_logprobs = 0, end = 0;
  ScoreLayout(size_t num_rows, size_t max_top) : rows(num_rows), top(max_top) {
    rank = align8(rows * sizeof(kc::ScoreRow));
    logprob = rank + rows * sizeof(int64_t);
    top_ids = align8(logprob + rows * sizeof(float));
    top_logprobs = top_ids + rows * top * sizeof(int32_t);
    end = align8(top_logprobs + rows * top * sizeof(float));
  }
};

}  // namespace

void CudaModelImpl::check_row_requests(int64_t num_rows, const std::vector<int64_t>& sample_rows,
                                       const std::vector<sampling::DeviceSamplingRow>& sampling,
                                       const std::vector<sampling::DeviceScoredRow>& scored_rows) const {
  const int64_t vocab = config_.vocab_size;
  FATHOM_CHECK(sampling.size() == sample_rows.size(),
               "CUDA backend: " << sample_rows.size() << " sampled rows with " << sampling.size() << " sampling entries");
  for (size_t i = 0; i < sample_rows.size(); ++i) {
    FATHOM_CHECK(sample_rows[i] >= 0 && sample_rows[i] < num_rows,
                 "CUDA backend: sampled row " << sample_rows[i] << " of " << num_rows);
    FATHOM_CHECK(sampling[i].top_logprobs >= 0 && sampling[i].top_logprobs <= kc::kMaxScoreTopN,
                 "CUDA backend: " << sampling[i].top_logprobs << " top_logprobs asked for, at most " << kc::kMaxScoreTopN);
  }
  for (const sampling::DeviceScoredRow& scored : scored_rows) {
    FATHOM_CHECK(scored.row >= 0 && scored.row < num_rows, "CUDA backend: scored row " << scored.row << " of " << num_rows);
    FATHOM_CHECK(scored.target >= 0 && scored.target < vocab,
                 "CUDA backend: scored token " << scored.target << " outside the vocabulary [0, " << vocab << ")");
    FATHOM_CHECK(scored.top_n >= 0 && scored.top_n <= kc::kMaxScoreTopN,
                 "CUDA backend: " << scored.top_n << " alternatives asked for, at most " << kc::kMaxScoreTopN);
  }
}

ForwardResult CudaModelImpl::results_for_rows(int64_t n, const std::vector<int64_t>& logit_rows,
                                              const std::vector<int64_t>& sample_rows,
                                              const std::vector<sampling::DeviceSamplingRow>& sampling,
                                              const std::vector<sampling::DeviceScoredRow>& scored_rows) {
  const int64_t hidden = config_.hidden_size, vocab = config_.vocab_size;
  // The sampled rows first (the sampler runs over logits rows [0, last sampled row]), the host rows, then the scored.
  std::vector<int32_t> row_ids;
  for (const std::vector<int64_t>* rows : {&sample_rows, &logit_rows}) {
    for (int64_t row : *rows) row_ids.push_back(static_cast<int32_t>(row));
  }
  std::vector<sampling::DeviceScoredRow> scored_logits_rows = scored_rows;  // rows re-indexed into the logits
  for (sampling::DeviceScoredRow& scored : scored_logits_rows) {
    row_ids.push_back(static_cast<int32_t>(scored.row));
    scored.row = static_cast<int64_t>(row_ids.size()) - 1;
  }
  const int64_t rows = static_cast<int64_t>(row_ids.size());
  float* logits = nullptr;
  if (rows > 0) {
    const int32_t* row_ids_device = upload_ints(logit_rows_, row_ids);
    bf16* selected = selected_hidden_.ensure(static_cast<size_t>(rows * hidden), stream_);  // [rows, H]
    kc::embedding_gather_bf16(normed_.buffer.data(), n, hidden, row_ids_device, rows, selected, nullptr, stream_);
    logits = logits_.ensure(static_cast<size_t>(rows * vocab), stream_);  // [rows, V]
    const size_t lm_head_span = begin_span("lm_head", 0);
    cublas_rows_gemm(*lm_head_gemm_, selected, rows, weights_.lm_head.data(), logits);
    end_span(lm_head_span);
  }
  std::vector<int64_t> host_rows(logit_rows.size()), device_rows(sample_rows.size());
  for (size_t i = 0; i < device_rows.size(); ++i) device_rows[i] = static_cast<int64_t>(i);
  for (size_t i = 0; i < host_rows.size(); ++i) host_rows[i] = static_cast<int64_t>(sample_rows.size() + i);
  return collect_results(logits, rows, host_rows, device_rows, sampling, scored_logits_rows);
}

ForwardResult CudaModelImpl::collect_results(const float* logits, int64_t num_rows, const std::vector<int64_t>& host_rows,
                                             const std::vector<int64_t>& sample_rows,
                                             const std::vector<sampling::DeviceSamplingRow>& sampling,
                                             const std::vector<sampling::DeviceScoredRow>& scored_rows) {
  const int64_t vocab = config_.vocab_size;
  ForwardResult result;
  const int64_t num_host = static_cast<int64_t>(host_rows.size()), num_samples = static_cast<int64_t>(sample_rows.size());
  // Every check before the first asynchronous copy: a throw must not leave copies into the pinned buffers in flight.
  check_row_requests(num_rows, sample_rows, sampling, scored_rows);
  int64_t sample_extent = 0;  // rows [0, sample_extent) are sampled
  for (int64_t row : sample_rows) sample_extent = std::max(sample_extent, row + 1);
  for (int64_t row : host_rows) {
    FATHOM_CHECK(row >= 0 && row < num_rows, "CUDA backend: logits row " << row << " of " << num_rows);
  }
  float* pinned_logits = host_logits_.ensure(static_cast<size_t>(std::max<int64_t>(1, num_host * vocab)));
  // Consecutive rows go back in one copy.
  for (int64_t i = 0; i < num_host;) {
    int64_t run = 1;
    while (i + run < num_host && host_rows[static_cast<size_t>(i + run)] == host_rows[static_cast<size_t>(i)] + run) ++run;
    FATHOM_CUDA_CHECK(cudaMemcpyAsync(pinned_logits + i * vocab, logits + host_rows[static_cast<size_t>(i)] * vocab,
                                      static_cast<size_t>(run * vocab) * sizeof(float), cudaMemcpyDeviceToHost, stream_));
    i += run;
  }
  uint8_t* pinned_samples = nullptr;
  // Rows [0, sample_extent) are sampled (rows not asked for greedily, a few microseconds) so the kernel sees
  // contiguous rows; rows past the last sampled one are not.
  int32_t* tokens = nullptr;
  if (num_samples > 0) {
    const size_t rows = static_cast<size_t>(sample_extent);
    const size_t bytes = rows * (2 * sizeof(uint64_t) + 3 * sizeof(float) + sizeof(int32_t));
    uint8_t* host = host_sampling_.ensure(std::max(bytes, rows * (sizeof(int32_t) + sizeof(float))));
    uint64_t* seed = reinterpret_cast<uint64_t*>(host);
    uint64_t* step = seed + rows;
    float* temperature = reinterpret_cast<float*>(step + rows);
    float* top_p = temperature + rows;
    float* min_p = top_p + rows;
    int32_t* top_k = reinterpret_cast<int32_t*>(min_p + rows);
    std::fill_n(seed, rows, 0);
    std::fill_n(step, rows, 0);
    std::fill_n(temperature, rows, 0.0f);
    std::fill_n(top_p, rows, 1.0f);
    std::fill_n(min_p, rows, 0.0f);
    std::fill_n(top_k, rows, 0);
    for (int64_t i = 0; i < num_samples; ++i) {
      const int64_t row = sample_rows[static_cast<size_t>(i)];
      const sampling::DeviceSamplingRow& params = sampling[static_cast<size_t>(i)];
      seed[row] = params.seed;
      step[row] = params.step;
      temperature[row] = params.temperature;
      top_p[row] = params.top_p;
      min_p[row] = params.min_p;
      top_k[row] = params.top_k;
    }
    uint8_t* device = sampling_params_.ensure(bytes, stream_);
    FATHOM_CUDA_CHECK(cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, stream_));
    kc::SamplingParams params;
    params.seed = reinterpret_cast<const uint64_t*>(device);
    params.step = params.seed + rows;
    params.temperature = reinterpret_cast<const float*>(params.step + rows);
    params.top_p = params.temperature + rows;
    params.min_p = params.top_p + rows;
    params.top_k = reinterpret_cast<const int32_t*>(params.min_p + rows);
    tokens = sampled_tokens_.ensure(rows, stream_);
    float* logprobs = sampled_logprobs_.ensure(rows, stream_);
    kc::sample_tokens(logits, sample_extent, vocab, params, tokens, logprobs, stream_);
    // The parameter upload above read `host` asynchronously; the results reuse it only after the kernel ran.
    pinned_samples = host;
    FATHOM_CUDA_CHECK(cudaMemcpyAsync(pinned_samples, tokens, rows * sizeof(int32_t), cudaMemcpyDeviceToHost, stream_));
    FATHOM_CUDA_CHECK(cudaMemcpyAsync(pinned_samples + rows * sizeof(int32_t), logprobs, rows * sizeof(float),
                                      cudaMemcpyDeviceToHost, stream_));
  }
  // Scoring: the sampled rows that want alternatives (their drawn token), then the scored rows.
  std::vector<kc::ScoreRow> requests;
  std::vector<size_t> sample_of_request;  // [the sampled rows' requests]: index into sample_rows
  int32_t max_top = 0;
  for (size_t i = 0; i < sampling.size(); ++i) {
    if (sampling[i].top_logprobs <= 0) continue;
    requests.push_back({static_cast<int32_t>(sample_rows[i]), kc::kScoreSampledToken, sampling[i].top_logprobs});
    sample_of_request.push_back(i);
  }
  for (const sampling::DeviceScoredRow& scored : scored_rows) {
    requests.push_back({static_cast<int32_t>(scored.row), scored.target, scored.top_n});
  }
  for (const kc::ScoreRow& request : requests) max_top = std::max(max_top, request.top_n);
  const ScoreLayout score(requests.size(), static_cast<size_t>(max_top));
  uint8_t* pinned_scores = nullptr;
  if (!requests.empty()) {
    pinned_scores = host_scores_.ensure(score.end);
    std::copy(requests.begin(), requests.end(), reinterpret_cast<kc::ScoreRow*>(pinned_scores));
    uint8_t* device = score_buffer_.ensure(score.end, stream_);
    FATHOM_CUDA_CHECK(cudaMemcpyAsync(device, pinned_scores, requests.size() * sizeof(kc::ScoreRow),
                                      cudaMemcpyHostToDevice, stream_));
    const kc::ScoreOutputs outputs{reinterpret_cast<float*>(device + score.logprob),
                                   reinterpret_cast<int64_t*>(device + score.rank),
                                   reinterpret_cast<int32_t*>(device + score.top_ids),
                                   reinterpret_cast<float*>(device + score.top_logprobs)};
    kc::score_tokens(logits, vocab, reinterpret_cast<const kc::ScoreRow*>(device), static_cast<int64_t>(requests.size()),
                     tokens, max_top, outputs, stream_);
    FATHOM_CUDA_CHECK(cudaMemcpyAsync(pinned_scores + score.rank, device + score.rank, score.end - score.rank,
                                      cudaMemcpyDeviceToHost, stream_));
  }
  FATHOM_CUDA_CHECK(cudaStreamSynchronize(stream_));
  result.logits.assign(pinned_logits, pinned_logits + num_host * vocab);
  if (num_samples > 0) {
    const int32_t* sampled = reinterpret_cast<const int32_t*>(pinned_samples);
    const float* logprobs = reinterpret_cast<const float*>(pinned_samples + static_cast<size_t>(sample_extent) * sizeof(int32_t));
    for (int64_t row : sample_rows) {
      result.tokens.push_back(sampled[row]);
      result.logprobs.push_back(logprobs[row]);
    }
  }
  for (size_t r = 0; r < requests.size(); ++r) {
    sampling::SampledToken token;
    token.token_id = requests[r].target == kc::kScoreSampledToken ? result.tokens[sample_of_request[r]] : requests[r].target;
    token.logprob = reinterpret_cast<const float*>(pinned_scores + score.logprob)[r];
    token.rank = reinterpret_cast<const int64_t*>(pinned_scores + score.rank)[r];
    const int64_t keep = std::min<int64_t>(requests[r].top_n, vocab);
    const int32_t* ids = reinterpret_cast<const int32_t*>(pinned_scores + score.top_ids) + r * score.top;
    const float* values = reinterpret_cast<const float*>(pinned_scores + score.top_logprobs) + r * score.top;
    for (int64_t k = 0; k < keep; ++k) token.top.emplace_back(ids[k], values[k]);
    if (r < sample_of_request.size()) result.sample_scores.emplace_back(sample_of_request[r], std::move(token));
    else result.scored.push_back(std::move(token));
  }
  return result;
}

}  // namespace fathom::model::cuda
