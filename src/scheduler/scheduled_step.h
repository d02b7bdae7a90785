#pragma once
// A step the scheduler built: the executor's batch plus, per sequence, which request (and which admission of
// it) the result belongs to.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "executor/step_batch.h"
#include "scheduler/request_state.h"

namespace fathom::scheduler {

struct ScheduledEntry {
  std::shared_ptr<RequestState> request;
  uint64_t admission = 0;  // request->admissions when scheduled; a retraction in between makes the entry stale
  int64_t kv_end = 0;      // request's KV length once this step has run
  bool samples = false;
  int64_t first_scored_row = 0;  // prompt row of the sequence's first scored row (its scored_targets)
};

struct ScheduledStep {
  uint64_t index = 0;                    // step number
  executor::StepBatch batch;
  std::vector<ScheduledEntry> entries;   // [batch.sequences]
};

// What one step scheduled for one request (for tests, logging and the expected-state tables).
struct StepRecord {
  std::string request_id;
  int64_t num_new_tokens = 0;
  int64_t num_cached = 0;   // positions already in the KV cache before the step
  bool samples = false;
  bool operator==(const StepRecord&) const = default;
};

}  // namespace fathom::scheduler
