#pragma once
// An Engine for server tests that "generates" scripted outputs: each submitted request gets the next script's
// text, streamed as the given pieces (one event and one token id per piece) and finished with the script's
// reason. Events come from a worker thread, as from a real engine. Records the submitted requests.
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "scheduler/engine.h"

namespace fathom::testing {

struct ScriptedOutput {
  std::vector<std::string> pieces;  // text deltas, one per generated token
  scheduler::FinishReason finish_reason = scheduler::FinishReason::kStop;
};

class ScriptedEngine : public scheduler::Engine {
 public:
  ~ScriptedEngine() override { shutdown(); }

  // Scripts are used in order; the last one is reused when they run out.
  void add_script(ScriptedOutput output) {
    std::lock_guard<std::mutex> lock(mutex_);
    scripts_.push_back(std::move(output));
  }

  void submit(scheduler::GenerateRequest request, scheduler::EventCallback on_event) override {
    std::lock_guard<std::mutex> lock(mutex_);
    submitted_.push_back(request);
    ScriptedOutput script = scripts_.empty() ? ScriptedOutput{} : scripts_.front();
    if (scripts_.size() > 1) scripts_.pop_front();
    workers_.emplace_back([request = std::move(request), on_event = std::move(on_event), script = std::move(script)] {
      const int64_t prompt_tokens = static_cast<int64_t>(request.input_ids.size());
      for (size_t i = 0; i < script.pieces.size(); ++i) {
        scheduler::GenerationEvent event;
        event.request_id = request.request_id;
        event.new_token_ids = {static_cast<int32_t>(10 + i % 90)};
        event.text_delta = script.pieces[i];
        event.prompt_tokens = prompt_tokens;
        event.completion_tokens = static_cast<int64_t>(i + 1);
        if (i + 1 == script.pieces.size()) {
          event.finished = true;
          event.finish_reason = script.finish_reason;
        }
        on_event(event);
      }
      if (script.pieces.empty()) {
        scheduler::GenerationEvent event;
        event.request_id = request.request_id;
        event.finished = true;
        event.finish_reason = script.finish_reason;
        on_event(event);
      }
    });
  }

  void abort(const std::string& request_id) override {}
  bool flush_cache() override { return true; }
  scheduler::EngineStats stats() const override { return {}; }
  int64_t max_context_tokens() const override { return 4096; }
  void shutdown() override {
    std::vector<std::thread> workers;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      workers.swap(workers_);
    }
    for (std::thread& worker : workers) worker.join();
  }

  std::vector<scheduler::GenerateRequest> submitted() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return submitted_;
  }

 private:
  mutable std::mutex mutex_;
  std::deque<ScriptedOutput> scripts_;
  std::vector<scheduler::GenerateRequest> submitted_;
  std::vector<std::thread> workers_;
};

}  // namespace fathom::testing
