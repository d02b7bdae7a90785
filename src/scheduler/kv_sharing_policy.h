#pragma once
// Which KV positions of a request the prefix cache shares, and how long a prefill chunk may be.
//
// kAllPositions (default): every computed position, prompt and generated, is shared and matched.
// kPromptPositions (--enable-deterministic-inference): the backend computes prompt positions in prefill form and
// generated ones in decode form (executor/model_runner.cpp), whose bits differ. A request that reused another's
// generated positions (a multi-turn prompt holding an earlier answer) would then depend on what the cache held.
// So only prompt positions are published, a request matches the cache only inside its own prompt, and a request
// recomputing its generated positions (after a retraction) runs them one token per step: in decode form again, with
// the bits it had.
#include <algorithm>
#include <cstdint>
#include <limits>

#include "scheduler/request_state.h"

namespace fathom::scheduler {

class KvSharingPolicy {
 public:
  enum class Shared { kAllPositions, kPromptPositions };

  explicit KvSharingPolicy(Shared shared) : shared_(shared) {}

  // Positions of `request` at or past this are never published in the prefix cache nor matched from it.
  int64_t position_limit(const RequestState& request) const {
    return shared_ == Shared::kAllPositions ? std::numeric_limits<int64_t>::max() : request.prompt_len;
  }
  // Positions [0, result) of `request` that may be published in the prefix cache (at most its cacheable_len).
  int64_t publishable_len(const RequestState& request) const {
    return std::min(request.cacheable_len(), position_limit(request));
  }
  // Tokens of `request` that a prefix match may cover: all but the last known one, within the position limit and
  // before the prompt rows it still has to score (prompt logprobs) but for the next `cached_score_rows` of them,
  // whose scores the prefix cache holds.
  int64_t matchable_len(const RequestState& request, int64_t cached_score_rows = 0) const {
    return std::min({static_cast<int64_t>(request.tokens.size()) - 1, position_limit(request),
                     request.scoring_match_limit(cached_score_rows)});
  }
  // Most new tokens of one prefill chunk starting at position kv_len (>= 1).
  int64_t max_chunk(const RequestState& request, int64_t kv_len) const {
    if (shared_ == Shared::kAllPositions) return std::numeric_limits<int64_t>::max();
    return kv_len < request.prompt_len ? request.prompt_len - kv_len : 1;
  }

 private:
  Shared shared_;
};

}  // namespace fathom::scheduler
