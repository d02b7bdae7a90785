#pragma once
// Knobs of the continuous-batching scheduler (no model or threading here).
#include <cstdint>
#include <string>
#include <vector>

namespace fathom::scheduler {

// Order in which waiting requests are admitted: arrival order, or longest cached prefix first (ties: arrival).
enum class SchedulePolicy { kFcfs, kLpm };
SchedulePolicy parse_schedule_policy(const std::string& name);  // "fcfs" | "lpm"; throws fathom::Error otherwise

struct SchedulerConfig {
  int64_t max_total_tokens = 8192;      // KV pool capacity in tokens
  int64_t page_size = 1;                // KV allocation granularity in tokens
  int64_t chunked_prefill_size = 2048;  // prefill tokens per step (all sequences together); <= 0: unlimited
  // Keys the prefill sequences of one step attend to together (each its cached prefix plus its new tokens; CUDA
  // expands them all through kv_b); <= 0: unlimited. A step's first prefill is always taken, alone if need be.
  int64_t max_prefill_keys = 0;
  int64_t max_running_requests = 64;    // requests holding KV (prefilling or decoding) at once
  // Prompt rows scored for prompt logprobs per step (each a logits row to the host; the CUDA engine lifts it); >= 1.
  int64_t max_scored_rows_per_step = 256;
  SchedulePolicy schedule_policy = SchedulePolicy::kFcfs;
  bool disable_radix_cache = false;
  // --enable-deterministic-inference: the prefix cache shares prompt positions only (KvSharingPolicy).
  bool deterministic = false;

  // Model facts.
  int64_t max_position_embeddings = 0;  // longest sequence the model supports; 0 = unbounded
  int64_t vocab_size = 0;               // valid token ids are [0, vocab_size)
  std::vector<int32_t> eos_token_ids;   // end generation unless ignore_eos

  uint64_t random_seed = 0;             // seeds requests that bring no seed

  // Admission keeps KV in reserve for the running requests' future tokens: remaining max_new_tokens (at most
  // reserve_max_new_tokens) times a ratio that decays from init to min by `decay` per step and goes back to init
  // after a retraction. All zero: admit whenever the prefill fits (retraction resolves shortages).
  double init_new_token_ratio = 0.7;
  double min_new_token_ratio = 0.1;
  double new_token_ratio_decay = 0.001;
  int64_t reserve_max_new_tokens = 4096;

  bool check_invariants_every_step = false;  // KV accounting checked after every step (tests); else when idle
};

}  // namespace fathom::scheduler
