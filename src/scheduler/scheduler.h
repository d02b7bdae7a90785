#pragma once
// Continuous batching over a KV budget. Each step: every running request decodes one token or continues its
// chunked prefill, then waiting requests are admitted (fcfs or longest-prefix-match order) under the prefill token
// budget (chunked_prefill_size), max_running_requests and the free KV; prefix-cache hits skip cached tokens.
// When decode runs out of KV the newest running requests are retracted to the waiting queue (keeping their
// output; their KV goes to the prefix cache and is recomputed on readmission).
//
// The scheduler is single-threaded: prepare_step() builds a step, the caller executes it (possibly while the
// next one is prepared: overlap scheduling, see OverlapStepLoop), complete_step() applies the results, in order.
// Events go to the requests' callbacks from whichever of these calls produces them.
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "executor/step_batch.h"
#include "kv_cache/kv_manager.h"
#include "scheduler/kv_sharing_policy.h"
#include "scheduler/engine.h"
#include "scheduler/scheduled_step.h"
#include "scheduler/scheduler_config.h"
#include "tokenizer/tokenizer.h"

namespace fathom::scheduler {

struct SchedulerSnapshot {
  std::vector<std::string> waiting;     // admission order of the waiting queue (arrival order)
  std::vector<std::string> running;     // admission order
  std::vector<StepRecord> last_step;    // what the last prepare_step() scheduled
  int64_t kv_total = 0;
  int64_t kv_free = 0;
  int64_t kv_evictable = 0;             // prefix cache not used by any running request
  int64_t kv_used = 0;                  // locked prefixes + slots owned by running requests
  int64_t num_retractions = 0;
};

class Scheduler {
 public:
  // `tokenizer` (may be null: no text, stop strings never match) must outlive the scheduler.
  Scheduler(const SchedulerConfig& config, const tokenizer::Tokenizer* tokenizer);

  // Queues a request; an invalid one (bad ids, parameters, too long for the context, duplicate id) is answered
  // at once by a single finished kError event; max_new_tokens == 0 by a finished kLength event. When it throws
  // (e.g. std::bad_alloc, a callback whose copy fails) the request was neither queued nor answered: the caller,
  // which still holds `on_event`, answers it.
  void submit(GenerateRequest request, const EventCallback& on_event);
  // Ends a waiting or running request with a kAbort event and frees its KV; false for unknown ids.
  bool abort(const std::string& request_id);

  // Builds the next step, or nullopt when nothing can run now (no requests, or all wait for results in flight).
  std::optional<ScheduledStep> prepare_step();
  // Applies a step's results (steps in preparation order): streams tokens, checks stop conditions, finishes
  // requests (their KV goes to the prefix cache) and publishes completed prefill chunks in the prefix cache.
  void complete_step(ScheduledStep& step, const executor::StepOutput& output);
  // Ends every request with kError (e.g. after an executor failure) and frees all their KV.
  void fail_all(const std::string& message);

  bool has_requests() const { return !waiting_.empty() || !running_.empty(); }
  // Drops the unlocked prefix cache; false (nothing done) while requests are running.
  bool flush_cache();
  // Longest prompt + max_new_tokens accepted: min(max_position_embeddings, KV capacity).
  int64_t max_context_tokens() const;
  EngineStats stats() const;
  SchedulerSnapshot snapshot() const;
  // What the last prepare_step() scheduled (cheaper than snapshot()).
  const std::vector<StepRecord>& last_step() const { return last_step_; }
  int64_t num_retractions() const { return num_retractions_; }
  // Throws fathom::Error when the KV accounting is broken: free + evictable + locked + owned != total, a request's
  // slots disagree with the totals, or (with no requests) anything is locked or owned.
  void check_invariants() const;

 private:
  using RequestPtr = std::shared_ptr<RequestState>;

  std::string validate(const GenerateRequest& request) const;
  bool ensure_kv(const RequestPtr& request, int64_t num_positions, bool* retracted);
  void retract(const RequestPtr& request);
  // What one step's prefill may still take: new tokens (chunked_prefill_size) and keys (max_prefill_keys). A chunk
  // run in the expanded attention form attends to prefix + chunk keys; the key budget binds from the step's second
  // expanded chunk on. A single token outside a deterministic prompt runs in the absorbed (decode) form: no keys.
  struct PrefillBudget {
    int64_t tokens;
    int64_t keys;
    int64_t scored_rows;  // prompt rows to score (prompt logprobs)
    bool has_expanded = false;
    // Of `wanted` new tokens after `prefix` cached positions, what the keys allow (0: none).
    int64_t key_limited_chunk(int64_t prefix, int64_t wanted, bool expanded) const;
    // Of `wanted` new tokens of `request` after `prefix` positions, what the scored rows allow (0: none).
    int64_t scoring_limited_chunk(const RequestState& request, int64_t prefix, int64_t wanted) const;
    void take(const RequestState& request, int64_t prefix, int64_t chunk, bool expanded);
  };
  // Whether `chunk` new tokens of `request` after `prefix` cached positions run in the expanded (prefill) form
  // (executor::runs_in_prefill_form).
  bool runs_expanded(const RequestState& request, int64_t prefix, int64_t chunk) const;
  void admit_waiting(ScheduledStep& step, PrefillBudget* budget);
  std::vector<RequestPtr> admission_order() const;
  static std::span<const int32_t> prompt_of(const RequestState& request);
  // Prompt rows `request` still has to score whose scores the prefix cache holds (the next ones, in a run).
  int64_t cached_score_rows_of(const RequestState& request) const;
  int64_t reserved_decode_slots(const RequestState& request) const;
  void add_to_step(ScheduledStep& step, const RequestPtr& request, int64_t num_new_tokens, bool samples);
  void finalize(const RequestPtr& request, bool was_running);
  void remove_running(const RequestPtr& request);

  SchedulerConfig config_;
  const tokenizer::Tokenizer* tokenizer_;
  std::vector<int32_t> eos_token_ids_;
  kv_cache::KvManager kv_;
  KvSharingPolicy sharing_;
  std::map<uint64_t, RequestPtr> waiting_;                     // by arrival id
  std::vector<RequestPtr> running_;                            // admission order
  std::unordered_map<std::string, RequestPtr> by_request_id_;  // every waiting or running request
  uint64_t next_request_id_ = 0;
  uint64_t next_step_index_ = 0;
  double new_token_ratio_;
  std::vector<StepRecord> last_step_;
  int64_t num_retractions_ = 0;
  int64_t prompt_tokens_total_ = 0;
  int64_t cached_prompt_tokens_total_ = 0;
  int64_t generated_tokens_total_ = 0;
};

}  // namespace fathom::scheduler
