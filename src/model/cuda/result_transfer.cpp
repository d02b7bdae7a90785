#include "model/cuda/result_transfer.h"

#include <algorithm>

#include "core/error.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/sampling/greedy_tokens.h"
#include "kernels/cuda/sampling/sampling.h"

namespace fathom::model::cuda {

namespace {

size_t align8(size_t bytes) { return (bytes + 7) / 8 * 8; }

// Byte offsets of the scoring requests and results in one buffer (the same layout on the host and the device).
struct ScoreLayout {
  size_t rows = 0, top = 0;  // requests, alternatives per request (max top_n); the requests start at 0
  size_t rank = 0, logprob = 0, top_ids = 0, top_logprobs = 0, end = 0;
  ScoreLayout(size_t num_rows, size_t max_top) : rows(num_rows), top(max_top) {
    rank = align8(rows * sizeof(kc::ScoreRow));
    logprob = rank + rows * sizeof(int64_t);
    top_ids = align8(logprob + rows * sizeof(float));
    top_logprobs = top_ids + rows * top * sizeof(int32_t);
    end = align8(top_logprobs + rows * top * sizeof(float));
  }
  kc::ScoreOutputs outputs(uint8_t* base, size_t first) const {
    return {reinterpret_cast<float*>(base + logprob) + first, reinterpret_cast<int64_t*>(base + rank) + first,
            reinterpret_cast<int32_t*>(base + top_ids) + first * top,
            reinterpret_cast<float*>(base + top_logprobs) + first * top};
  }
};

}  // namespace

void ResultTransfer::enqueue_direct(const float* logits, int64_t num_rows, int64_t vocab,
                                    const std::vector<int64_t>& host_rows, const std::vector<int64_t>& sample_rows,
                                    const std::vector<sampling::DeviceSamplingRow>& sampling, size_t num_scored,
                                    int32_t max_scored_top_n, cudaStream_t stream) {
  if (in_flight_) (void)cudaStreamSynchronize(stream);  // its error, if any, was the previous forward's to report
  in_flight_ = true;
  for (const std::vector<int64_t>* rows : {&host_rows, &sample_rows}) {
    for (int64_t row : *rows)
      FATHOM_CHECK(row >= 0 && row < num_rows, "CUDA backend: logits row " << row << " of " << num_rows);
  }
  vocab_ = vocab;
  num_host_ = host_rows.size();
  sample_rows_ = sample_rows;
  sample_extent_ = 0;
  for (int64_t row : sample_rows) sample_extent_ = std::max(sample_extent_, row + 1);
  const int64_t num_host = static_cast<int64_t>(num_host_);
  float* pinned_logits = host_logits_.ensure(static_cast<size_t>(std::max<int64_t>(1, num_host * vocab)));
  // Consecutive rows go back in one copy.
  for (int64_t i = 0; i < num_host;) {
    int64_t run = 1;
    while (i + run < num_host && host_rows[static_cast<size_t>(i + run)] == host_rows[static_cast<size_t>(i)] + run)
      ++run;
    FATHOM_CUDA_CHECK(cudaMemcpyAsync(pinned_logits + i * vocab, logits + host_rows[static_cast<size_t>(i)] * vocab,
                                      static_cast<size_t>(run * vocab) * sizeof(float), cudaMemcpyDeviceToHost,
                                      stream));
    i += run;
  }
  int32_t* sampled_tokens_device = nullptr;  // [sample_extent_] once sampled
  if (!sample_rows.empty()) {
    // Rows [0, sample_extent_) are sampled (rows not asked for greedily, a few microseconds): contiguous rows.
    const size_t rows = static_cast<size_t>(sample_extent_);
    sampled_tokens_device = sampled_tokens_.ensure(rows, stream);
    float* logprobs = sampled_logprobs_.ensure(rows, stream);
    const bool all_greedy = std::all_of(sampling.begin(), sampling.end(), [](const sampling::DeviceSamplingRow& row) {
      return !(row.temperature > 0.0f) || row.top_k == 1;  // sample_tokens' greedy rows, known before the logits
    });
    uint8_t* host = nullptr;
    if (all_greedy) {
      host = host_sampling_.ensure(rows * (sizeof(int32_t) + sizeof(float)));
      kc::greedy_tokens(logits, sample_extent_, vocab, sampled_tokens_device, logprobs, stream);
    } else {
      const size_t bytes = rows * (2 * sizeof(uint64_t) + 3 * sizeof(float) + sizeof(int32_t));
      host = host_sampling_.ensure(std::max(bytes, rows * (sizeof(int32_t) + sizeof(float))));
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
      for (size_t i = 0; i < sample_rows.size(); ++i) {
        const size_t row = static_cast<size_t>(sample_rows[i]);
        seed[row] = sampling[i].seed;
        step[row] = sampling[i].step;
        temperature[row] = sampling[i].temperature;
        top_p[row] = sampling[i].top_p;
        min_p[row] = sampling[i].min_p;
        top_k[row] = sampling[i].top_k;
      }
      uint8_t* device = sampling_params_.ensure(bytes, stream);
      FATHOM_CUDA_CHECK(cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, stream));
      kc::SamplingParams params;
      params.seed = reinterpret_cast<const uint64_t*>(device);
      params.step = params.seed + rows;
      params.temperature = reinterpret_cast<const float*>(params.step + rows);
      params.top_p = params.temperature + rows;
      params.min_p = params.top_p + rows;
      params.top_k = reinterpret_cast<const int32_t*>(params.min_p + rows);
      kc::sample_tokens(logits, sample_extent_, vocab, params, sampled_tokens_device, logprobs, stream);
    }
    // Sampled steps uploaded their parameters from `host` asynchronously; the results reuse it after the kernel ran.
    FATHOM_CUDA_CHECK(
        cudaMemcpyAsync(host, sampled_tokens_device, rows * sizeof(int32_t), cudaMemcpyDeviceToHost, stream));
    FATHOM_CUDA_CHECK(
        cudaMemcpyAsync(host + rows * sizeof(int32_t), logprobs, rows * sizeof(float), cudaMemcpyDeviceToHost, stream));
  }
  // Scoring: the sampled rows that want alternatives (their drawn token) first, then the scored rows (later calls).
  std::vector<kc::ScoreRow> sampled_requests;
  sample_of_request_.clear();
  max_top_ = max_scored_top_n;
  for (size_t i = 0; i < sampling.size(); ++i) {
    if (sampling[i].top_logprobs <= 0) continue;
    sampled_requests.push_back(
        {static_cast<int32_t>(sample_rows[i]), kc::kScoreSampledToken, sampling[i].top_logprobs});
    sample_of_request_.push_back(i);
    max_top_ = std::max(max_top_, sampling[i].top_logprobs);
  }
  num_sampled_scores_ = sampled_requests.size();
  num_requests_ = num_sampled_scores_ + num_scored;
  requests_enqueued_ = 0;
  scores_pinned_ = scores_device_ = nullptr;
  if (num_requests_ == 0) return;
  const ScoreLayout layout(num_requests_, static_cast<size_t>(max_top_));
  scores_pinned_ = host_scores_.ensure(layout.end);
  scores_device_ = score_buffer_.ensure(layout.end, stream);
  if (!sampled_requests.empty()) {
    uint8_t* pinned = scores_pinned_;
    uint8_t* device = scores_device_;
    std::copy(sampled_requests.begin(), sampled_requests.end(), reinterpret_cast<kc::ScoreRow*>(pinned));
    const size_t bytes = sampled_requests.size() * sizeof(kc::ScoreRow);
    FATHOM_CUDA_CHECK(cudaMemcpyAsync(device, pinned, bytes, cudaMemcpyHostToDevice, stream));
    kc::score_tokens(logits, vocab, reinterpret_cast<const kc::ScoreRow*>(device),
                     static_cast<int64_t>(sampled_requests.size()), sampled_tokens_device, max_top_,
                     layout.outputs(device, 0), stream);
    requests_enqueued_ = sampled_requests.size();
  }
}

void ResultTransfer::enqueue_scored(const float* logits, std::span<const sampling::DeviceScoredRow> rows, size_t first,
                                    cudaStream_t stream) {
  if (rows.empty()) return;
  const size_t begin = num_sampled_scores_ + first;
  FATHOM_CHECK(begin == requests_enqueued_ && begin + rows.size() <= num_requests_,
               "CUDA backend: scored rows [" << first << ", " << first + rows.size() << ") out of order or beyond the "
                                             << num_requests_ - num_sampled_scores_ << " planned");
  const ScoreLayout layout(num_requests_, static_cast<size_t>(max_top_));
  uint8_t* pinned = scores_pinned_;
  uint8_t* device = scores_device_;
  kc::ScoreRow* requests = reinterpret_cast<kc::ScoreRow*>(pinned) + begin;  // this pass's own slice: never reused
  for (size_t i = 0; i < rows.size(); ++i) {
    requests[i] = {static_cast<int32_t>(rows[i].row), rows[i].target, rows[i].top_n};
  }
  kc::ScoreRow* device_requests = reinterpret_cast<kc::ScoreRow*>(device) + begin;
  FATHOM_CUDA_CHECK(
      cudaMemcpyAsync(device_requests, requests, rows.size() * sizeof(kc::ScoreRow), cudaMemcpyHostToDevice, stream));
  kc::score_tokens(logits, vocab_, device_requests, static_cast<int64_t>(rows.size()), nullptr, max_top_,
                   layout.outputs(device, begin), stream);
  requests_enqueued_ += rows.size();
}

ForwardResult ResultTransfer::finish(cudaStream_t stream) {
  FATHOM_CHECK(requests_enqueued_ == num_requests_,
               "CUDA backend: " << requests_enqueued_ << " of " << num_requests_ << " scorings enqueued");
  const ScoreLayout layout(num_requests_, static_cast<size_t>(max_top_));
  uint8_t* pinned_scores = scores_pinned_;
  if (num_requests_ > 0) {
    FATHOM_CUDA_CHECK(cudaMemcpyAsync(pinned_scores + layout.rank, scores_device_ + layout.rank,
                                      layout.end - layout.rank, cudaMemcpyDeviceToHost, stream));
  }
  FATHOM_CUDA_CHECK(cudaStreamSynchronize(stream));
  in_flight_ = false;
  ForwardResult result;
  const float* pinned_logits = host_logits_.ensure(1);
  result.logits.assign(pinned_logits, pinned_logits + num_host_ * static_cast<size_t>(vocab_));
  if (!sample_rows_.empty()) {
    const uint8_t* pinned_samples = host_sampling_.ensure(1);
    const int32_t* sampled = reinterpret_cast<const int32_t*>(pinned_samples);
    const float* logprobs =
        reinterpret_cast<const float*>(pinned_samples + static_cast<size_t>(sample_extent_) * sizeof(int32_t));
    for (int64_t row : sample_rows_) {
      result.tokens.push_back(sampled[row]);
      result.logprobs.push_back(logprobs[row]);
    }
  }
  const kc::ScoreRow* requests = reinterpret_cast<const kc::ScoreRow*>(pinned_scores);
  for (size_t r = 0; r < num_requests_; ++r) {
    sampling::SampledToken token;
    const bool sampled = r < num_sampled_scores_;
    token.token_id = sampled ? result.tokens[sample_of_request_[r]] : requests[r].target;
    token.logprob = reinterpret_cast<const float*>(pinned_scores + layout.logprob)[r];
    token.rank = reinterpret_cast<const int64_t*>(pinned_scores + layout.rank)[r];
    const int64_t keep = std::min<int64_t>(requests[r].top_n, vocab_);
    const int32_t* ids = reinterpret_cast<const int32_t*>(pinned_scores + layout.top_ids) + r * layout.top;
    const float* values = reinterpret_cast<const float*>(pinned_scores + layout.top_logprobs) + r * layout.top;
    for (int64_t k = 0; k < keep; ++k) token.top.emplace_back(ids[k], values[k]);
    if (sampled)
      result.sample_scores.emplace_back(sample_of_request_[r], std::move(token));
    else
      result.scored.push_back(std::move(token));
  }
  return result;
}

}  // namespace fathom::model::cuda
