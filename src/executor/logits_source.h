#pragma once
// What the step executor needs from a model: run sequence chunks over the KV cache, return next-token logits.
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "core/error.h"
#include "sampling/sampling_options.h"

namespace fathom::executor {

struct ForwardChunk {
  std::span<const int32_t> new_tokens;  // [num_new] at positions [num_cached, num_cached + num_new)
  int64_t num_cached = 0;               // positions whose KV is already in the cache
  std::span<const int32_t> kv_slots;    // [>= num_cached + num_new] cache slot of every position
  bool needs_logits = false;            // return the logits of the chunk's last token
  bool extends_prompt = false;          // the new tokens are prompt tokens (deterministic inference: prefill form)
  // With needs_logits: sample that token on the device instead (LogitsSource::samples_on_device()), with its
  // top_logprobs alternatives.
  std::optional<sampling::DeviceSamplingRow> device_sampling;
  // Prompt logprobs: new-token row scored_row_begin + i scores scored_targets[i] (sampling::score_token with
  // scored_top_n alternatives).
  int64_t scored_row_begin = 0;
  std::span<const int32_t> scored_targets;
  int32_t scored_top_n = 0;
  int64_t num_scored_rows() const { return static_cast<int64_t>(scored_targets.size()); }
};

struct ForwardOutput {
  std::vector<float> logits;                    // [chunks with needs_logits and no device_sampling, V], chunk order
  std::vector<sampling::SampledToken> samples;  // [chunks with device_sampling], chunk order
  std::vector<sampling::SampledToken> scored;   // [sum of num_scored_rows()], chunk order then row order
};

class LogitsSource {
 public:
  virtual ~LogitsSource() = default;
  virtual int64_t vocab_size() const = 0;
  // Writes the chunks' KV and returns logits [num chunks with needs_logits, vocab], in chunk order.
  // Called from one thread at a time.
  virtual std::vector<float> forward(const std::vector<ForwardChunk>& chunks) = 0;
  // Whether chunks may carry device_sampling.
  virtual bool samples_on_device() const { return false; }
  // forward, with the device_sampling chunks' tokens sampled on the device and the scored rows scored.
  virtual ForwardOutput forward_sampled(const std::vector<ForwardChunk>& chunks) {
    for (const ForwardChunk& chunk : chunks) {
      FATHOM_CHECK(!chunk.device_sampling, "this model does not sample on the device");
      FATHOM_CHECK(chunk.scored_targets.empty(), "this model does not score prompt rows");
    }
    return ForwardOutput{forward(chunks), {}, {}};
  }
};

}  // namespace fathom::executor
