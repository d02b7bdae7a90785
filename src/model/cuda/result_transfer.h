#pragma once
// A forward's results on their way from the device logits to the host: the host rows' logits, the tokens sampled on
// the device (with the top_logprobs alternatives of those that ask), and the rows scored on the device (prompt
// logprobs, kernels/cuda/sampling/score_tokens.h). Everything is enqueued on the forward's stream; finish() copies
// the scores back and synchronizes once. The scored rows may come in passes over a reused logits buffer.
#include <cuda_runtime.h>

#include <cstdint>
#include <span>
#include <vector>

#include "kernels/cuda/sampling/score_tokens.h"
#include "model/cuda/cuda_model.h"
#include "model/cuda/growable_buffers.h"
#include "sampling/sampling_options.h"

namespace fathom::model::cuda {

class ResultTransfer {
 public:
  // Enqueues the copy of `host_rows` and the sampling of `sample_rows` (rows of `logits` [num_rows, vocab]; the
  // sampler runs over rows [0, last sampled row]) and the scoring of the sampled rows with top_logprobs; sizes the
  // score buffers for them and `num_scored` more rows of at most `max_scored_top_n` alternatives. Rows are checked
  // by the caller (CudaModelImpl::check_row_requests). A previous forward that threw before finish() is waited for
  // first: its copies may still target the pinned buffers.
  void enqueue_direct(const float* logits, int64_t num_rows, int64_t vocab, const std::vector<int64_t>& host_rows,
                      const std::vector<int64_t>& sample_rows, const std::vector<sampling::DeviceSamplingRow>& sampling,
                      size_t num_scored, int32_t max_scored_top_n, cudaStream_t stream);
  // Enqueues the scoring of the forward's scored rows [first, first + rows.size()), whose `row` index `logits`.
  void enqueue_scored(const float* logits, std::span<const sampling::DeviceScoredRow> rows, size_t first,
                      cudaStream_t stream);
  // Copies the scores back, synchronizes the stream and returns the results (scored: in the forward's order).
  ForwardResult finish(cudaStream_t stream);

 private:
  int64_t vocab_ = 0;
  size_t num_host_ = 0;
  std::vector<int64_t> sample_rows_;
  int64_t sample_extent_ = 0;      // rows [0, sample_extent_) were sampled
  size_t num_sampled_scores_ = 0;  // requests [0, this): sampled rows with alternatives
  std::vector<size_t> sample_of_request_;
  size_t num_requests_ = 0, requests_enqueued_ = 0;
  int32_t max_top_ = 0;
  bool in_flight_ = false;            // enqueue_direct ran and finish() has not synchronized yet
  uint8_t* scores_device_ = nullptr;  // the score buffers as sized by enqueue_direct (never grown after it)
  uint8_t* scores_pinned_ = nullptr;

  PinnedHostBuffer<float> host_logits_;  // [host rows, vocab]
  // Device sampling: per-row parameters packed [seed u64, step u64, temperature f32, top_p f32, min_p f32, top_k i32]
  // x rows, and the sampled tokens / log-probabilities.
  GrowableBuffer<uint8_t> sampling_params_;
  GrowableBuffer<int32_t> sampled_tokens_;
  GrowableBuffer<float> sampled_logprobs_;
  PinnedHostBuffer<uint8_t> host_sampling_;
  // Device scoring: the requests (kc::ScoreRow), then rank, logprob, top ids and top logprobs (ScoreLayout).
  GrowableBuffer<uint8_t> score_buffer_;
  PinnedHostBuffer<uint8_t> host_scores_;
};

}  // namespace fathom::model::cuda
