#pragma once
// Executes a StepBatch: fills in tokens sampled by the previous step (overlap scheduling), runs the forward
// through a LogitsSource and samples every sequence that asks for a token.
#include <cstdint>
#include <unordered_map>

#include "core/thread_pool.h"
#include "executor/logits_source.h"
#include "executor/step_batch.h"

namespace fathom::executor {

class StepExecutor {
 public:
  // `sampling_pool` (may be null: sequential) parallelizes sampling over sequences; both must outlive this.
  StepExecutor(LogitsSource& source, ThreadPool* sampling_pool);

  // Called by one thread at a time, steps in scheduling order. Throws fathom::Error naming the sequence when a
  // placeholder has no token from the previous step; model errors propagate.
  StepOutput execute(StepBatch& batch);

  int64_t vocab_size() const { return source_.vocab_size(); }

 private:
  LogitsSource& source_;
  ThreadPool* sampling_pool_;
  std::unordered_map<uint64_t, int32_t> previous_tokens_;  // sequence id -> token sampled by the last executed step
};

}  // namespace fathom::executor
