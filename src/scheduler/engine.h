#pragma once
// What the serving front end needs from an inference engine (implemented by the scheduler's engine; faked in tests).
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "scheduler/generation_request.h"

namespace fathom::scheduler {

using EventCallback = std::function<void(const GenerationEvent&)>;

struct EngineStats {
  int64_t waiting_requests = 0;
  int64_t running_requests = 0;
  int64_t kv_total_tokens = 0;
  int64_t kv_used_tokens = 0;
  int64_t prompt_tokens_total = 0;
  int64_t cached_prompt_tokens_total = 0;
  int64_t generated_tokens_total = 0;
  std::string internal_error;  // non-empty: the engine refuses every request (its idle invariant check failed)
};

class Engine {
 public:
  virtual ~Engine() = default;
  // Queues a request. Invalid requests (e.g. prompt longer than the context) are answered by a single
  // finished event with kError, never by an exception. `on_event` is called from the engine's thread and must not block.
  virtual void submit(GenerateRequest request, EventCallback on_event) = 0;
  // Aborts a queued or running request and frees its KV; its callback gets a final kAbort event. Unknown ids are ignored.
  virtual void abort(const std::string& request_id) = 0;
  // Drops every unlocked prefix-cache entry; false when requests are running.
  virtual bool flush_cache() = 0;
  virtual EngineStats stats() const = 0;
  virtual int64_t max_context_tokens() const = 0;
  // Stops accepting requests, finishes (drains) the admitted ones, then returns.
  virtual void shutdown() = 0;
};

}  // namespace fathom::scheduler
