#include "model/forward_batch.h"

#include "core/error.h"

namespace fathom::model {

void ForwardBatch::add_sequence(const std::vector<int32_t>& new_tokens, int64_t num_cached, const int32_t* kv_slots) {
  FATHOM_CHECK(!new_tokens.empty(), "forward batch: a sequence chunk needs at least one new token");
  FATHOM_CHECK(kv_slots != nullptr, "forward batch: a sequence chunk needs its KV slots");
  SequenceChunk chunk;
  chunk.token_begin = num_tokens();
  chunk.num_tokens = static_cast<int64_t>(new_tokens.size());
  chunk.num_cached = num_cached;
  chunk.kv_slots = kv_slots;
  for (size_t i = 0; i < new_tokens.size(); ++i) {
    token_ids.push_back(new_tokens[i]);
    positions.push_back(static_cast<int32_t>(num_cached + static_cast<int64_t>(i)));
  }
  sequences.push_back(chunk);
}

bool ForwardBatch::is_pure_decode() const {
  for (const SequenceChunk& chunk : sequences) {
    if (chunk.num_tokens != 1) return false;
  }
  return true;
}

}  // namespace fathom::model
