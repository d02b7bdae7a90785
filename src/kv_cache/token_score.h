#pragma once
// A prompt position's score kept beside its KV in the prefix cache (prompt logprobs): the log-probability of the
// position's token given the tokens before it, its rank, and the top_n most likely tokens there. A later request
// scoring the same prefix takes it from the cache instead of running the position again.
#include <cstdint>
#include <utility>
#include <vector>

namespace fathom::kv_cache {

struct TokenScore {
  float logprob = 0.0f;
  int64_t rank = 0;                            // 0: not computed
  int32_t top_n = 0;                           // alternatives computed (top holds min(top_n, vocab) of them)
  std::vector<std::pair<int32_t, float>> top;  // best first
};

}  // namespace fathom::kv_cache
