#pragma once
// The in-process inference engine: a model runner, a tokenizer (optional), the scheduler and its step loop
// (overlapped unless disabled), running on the engine's own thread.
#include <cstdint>
#include <memory>
#include <string>

#include "core/log.h"
#include "executor/model_backend.h"
#include "kernels/weight_matrix.h"
#include "model/config.h"
#include "model/weight_loader.h"
#include "scheduler/engine.h"
#include "scheduler/scheduler_config.h"

namespace fathom::scheduler {

struct EngineConfig {
  model::LoadOptions load;
  kernels::NumericMode mode = kernels::NumericMode::kExact;
  int num_threads = 0;                  // compute threads; 0 = all cores
  executor::Device device = executor::Device::kCpu;
  double mem_fraction_static = 0.88;    // CUDA: GPU memory share for weights + KV cache when max_total_tokens is 0
  std::vector<int32_t> cuda_graph_batch_sizes;  // CUDA: padded decode batch sizes (graphs); empty = unpadded eager
  bool capture_cuda_graphs = true;              // CUDA: false = padded sizes run eagerly (--disable-cuda-graph)
  bool deterministic = false;                   // --enable-deterministic-inference: batch-invariant kernels (CUDA),
                                                // prompt positions only in the prefix cache (KvSharingPolicy)
  std::string tokenizer_dir;            // empty: no text (text deltas stay empty; stop strings never match)

  int64_t max_total_tokens = 8192;      // KV pool size in tokens; 0 (CUDA only): sized from mem_fraction_static
  int64_t page_size = 1;
  int64_t chunked_prefill_size = 2048;  // prefill tokens per step; <= 0: unlimited
  int64_t max_running_requests = 64;
  int64_t max_queued_requests = 0;      // waiting requests past which submit() refuses (queue_full); 0: no limit
  int64_t context_length = 0;           // longest prompt + output accepted; 0 = the model's max_position_embeddings
  SchedulePolicy schedule_policy = SchedulePolicy::kFcfs;
  bool disable_radix_cache = false;
  bool disable_overlap = false;
  uint64_t random_seed = 0;
  bool check_invariants_every_step = false;  // tests; the invariant is always checked when the engine goes idle
  std::shared_ptr<const Logger> logger;      // the engine's lines (setup, step failures); null: info on stderr
};

// The most new tokens one forward of the model runner carries (CUDA sizes its activation workspace for them): the
// step's prefill budget or the decode batch, whichever is larger; an unlimited budget (<= 0) counts as 32768.
int64_t runner_max_batch_tokens(const EngineConfig& config);

// The scheduler's prefill budget per step: the configured one, except that an unlimited one (<= 0) on CUDA becomes
// the runner's bound, so no step asks the runner for a forward it rejects (which would fail every request in it).
int64_t scheduler_chunked_prefill_size(const EngineConfig& config);

// The scheduler's key budget per step (SchedulerConfig::max_prefill_keys): on CUDA, where every prefill key (cached
// prefix or new) is expanded through kv_b into [heads, nope + v] bf16 for the forward, as many keys as 2 GiB of those
// rows hold, and at least a whole forward of new tokens (the runner keeps their memory free beside the KV cache);
// elsewhere unlimited (0).
int64_t scheduler_max_prefill_keys(const EngineConfig& config, const model::ModelConfig& model_config);

// That rule on its own (what bench-one-batch gives its CUDA runner): as many keys as 2 GiB of [heads, nope + v] bf16
// rows hold, and at least max_batch_tokens.
int64_t expanded_key_budget(const model::ModelConfig& model_config, int64_t max_batch_tokens);

// Loads the model (and tokenizer) and starts the engine thread; throws fathom::Error on a bad config or checkpoint.
std::unique_ptr<Engine> make_local_engine(const EngineConfig& config);

}  // namespace fathom::scheduler
