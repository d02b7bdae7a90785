#pragma once
// A deterministic in-memory Engine for server tests: one token per tick per running request, token ids derived
// from the prompt (and the seed when temperature > 0), text "t<id> " per token, kError for prompts longer than
// the context (or refuse_prompt_tokens), kLength at max_new_tokens, kStop at a stop token id or at a stop string,
// kAbort on abort(). Chosen submits may throw, as an engine out of memory would.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "scheduler/engine.h"

namespace fathom::testing {

struct FakeEngineOptions {
  std::chrono::microseconds token_delay{0};  // between ticks
  int64_t max_context_tokens = 256;
  // Prompts of at least this many tokens end in kError (0: max_context_tokens): an engine-side refusal that
  // passes the server's own context check, as a full KV pool does.
  int64_t refuse_prompt_tokens = 0;
  int64_t kv_total_tokens = 1 << 20;
  int tokens_per_event = 1;
  // Generate nothing until this many requests arrived (or hold_timeout passed): makes every stream overlap.
  size_t hold_until_requests = 0;
  std::chrono::milliseconds hold_timeout{20'000};
  size_t max_running = 0;  // requests generating at once, first come first served (0: all)
  bool queue_full = false;  // refuse every request as a full queue would (GenerationEvent::queue_full)
  size_t queue_full_at = 0;  // refuse so while this many requests are in flight (0: never)
  std::vector<size_t> throwing_submits;  // these submit calls (1-based, in call order) throw std::runtime_error
};

class FakeEngine : public scheduler::Engine {
 public:
  explicit FakeEngine(FakeEngineOptions options = {});
  ~FakeEngine() override;

  void submit(scheduler::GenerateRequest request, scheduler::EventCallback on_event) override;
  void abort(const std::string& request_id) override;
  bool flush_cache() override;
  scheduler::EngineStats stats() const override;
  int64_t max_context_tokens() const override { return options_.max_context_tokens; }
  void shutdown() override;

  // The token the fake produces at position `step` of a request.
  static int32_t token_at(const scheduler::GenerateRequest& request, int64_t step);
  static std::string token_text(int32_t id) {
    std::string text = "t";
    text += std::to_string(id);
    text += ' ';
    return text;
  }

  std::vector<std::string> aborted_ids() const;
  std::vector<scheduler::GenerateRequest> submitted() const;
  size_t submitted_count() const;
  int64_t running() const;
  bool shutdown_called() const { return shutdown_called_; }
  void set_flush_result(bool result) { flush_result_ = result; }
  void set_internal_error(const std::string& error) {
    std::lock_guard<std::mutex> lock(mutex_);
    stats_.internal_error = error;
  }

 private:
  struct Active {
    scheduler::GenerateRequest request;
    scheduler::EventCallback on_event;
    int64_t generated = 0;
    bool abort_requested = false;
    std::string text;
  };
  void run();
  void step(Active& active, scheduler::GenerationEvent& event);

  FakeEngineOptions options_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Active> incoming_;
  std::vector<Active> active_;
  std::set<std::string> pending_aborts_;
  std::vector<std::string> aborted_;
  std::vector<scheduler::GenerateRequest> submitted_;
  size_t submit_calls_ = 0;
  scheduler::EngineStats stats_;
  bool accepting_ = true;
  bool stopping_ = false;
  std::atomic<bool> shutdown_called_{false};
  std::atomic<bool> flush_result_{true};
  std::thread thread_;
};

}  // namespace fathom::testing
