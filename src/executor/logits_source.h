#pragma once
// What the step executor needs from a model: run sequence chunks over the KV cache, return next-token logits.
#include <cstdint>
#include <span>
#include <vector>

namespace fathom::executor {

struct ForwardChunk {
  std::span<const int32_t> new_tokens;  // [num_new] at positions [num_cached, num_cached + num_new)
  int64_t num_cached = 0;               // positions whose KV is already in the cache
  std::span<const int32_t> kv_slots;    // [>= num_cached + num_new] cache slot of every position
  bool needs_logits = false;            // return the logits of the chunk's last token
};

class LogitsSource {
 public:
  virtual ~LogitsSource() = default;
  virtual int64_t vocab_size() const = 0;
  // Writes the chunks' KV and returns logits [num chunks with needs_logits, vocab], in chunk order.
  // Called from one thread at a time.
  virtual std::vector<float> forward(const std::vector<ForwardChunk>& chunks) = 0;
};

}  // namespace fathom::executor
