#pragma once
// Drives a Scheduler over a FakeModel one iteration at a time and records every request's events.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <optional>

#include "executor/step_executor.h"
#include "fake_model.h"
#include "scheduler/overlap_step_loop.h"
#include "scheduler/scheduler.h"
#include "scheduler/step_loop.h"

namespace fathom::testing {

using scheduler::FinishReason;
using scheduler::GenerationEvent;

// Defaults for table tests: no decode reservation (admission is as greedy as memory allows), invariants checked
// after every step, EOS = 1.
inline scheduler::SchedulerConfig table_config(int64_t max_total_tokens = 64) {
  scheduler::SchedulerConfig config;
  config.max_total_tokens = max_total_tokens;
  config.chunked_prefill_size = 2048;
  config.max_running_requests = 8;
  config.vocab_size = 300;
  config.eos_token_ids = {1};
  config.init_new_token_ratio = 0.0;
  config.min_new_token_ratio = 0.0;
  config.new_token_ratio_decay = 0.0;
  config.check_invariants_every_step = true;
  return config;
}

struct RequestLog {
  std::vector<GenerationEvent> events;
  std::vector<int32_t> tokens() const {
    std::vector<int32_t> all;
    for (const GenerationEvent& event : events) all.insert(all.end(), event.new_token_ids.begin(), event.new_token_ids.end());
    return all;
  }
  std::string text() const {
    std::string all;
    for (const GenerationEvent& event : events) all += event.text_delta;
    return all;
  }
  bool finished() const { return !events.empty() && events.back().finished; }
  const GenerationEvent& last() const { return events.back(); }
};

class SchedulerHarness {
 public:
  SchedulerHarness(const scheduler::SchedulerConfig& config, bool overlap = false, NextTokenFn next = {},
                   const tokenizer::Tokenizer* tokenizer = nullptr)
      : model_(config.vocab_size, config.max_total_tokens, std::move(next)),
        executor_(model_, nullptr),
        scheduler_(config, tokenizer) {
    if (overlap) loop_ = std::make_unique<scheduler::OverlapStepLoop>(scheduler_, executor_);
    else loop_ = std::make_unique<scheduler::SequentialStepLoop>(scheduler_, executor_);
  }

  void submit(const std::string& id, std::vector<int32_t> prompt, int64_t max_new_tokens,
              scheduler::SamplingParams params = greedy()) {
    scheduler::GenerateRequest request;
    request.request_id = id;
    request.input_ids = std::move(prompt);
    params.max_new_tokens = max_new_tokens;
    request.sampling = params;
    order_.push_back(id);
    scheduler_.submit(std::move(request), [this, id](const GenerationEvent& event) {
      EXPECT_FALSE(logs_[id].finished()) << "event after the final one for " << id;
      logs_[id].events.push_back(event);
    });
  }

  static scheduler::SamplingParams greedy() {
    scheduler::SamplingParams params;
    params.temperature = 0.0f;
    return params;
  }

  bool step() {
    const bool worked = loop_->step();
    scheduler_.check_invariants();
    return worked;
  }
  int run_until_idle(int max_steps = 10000) {
    int steps = 0;
    while (step()) {
      if (++steps > max_steps) {
        ADD_FAILURE() << "scheduler did not go idle";
        break;
      }
    }
    EXPECT_FALSE(scheduler_.has_requests());
    return steps;
  }

  std::vector<std::string> finished() const {
    std::vector<std::string> ids;
    for (const std::string& id : order_) {
      auto found = logs_.find(id);
      if (found != logs_.end() && found->second.finished()) ids.push_back(id);
    }
    return ids;
  }

  RequestLog& log(const std::string& id) { return logs_[id]; }
  scheduler::Scheduler& scheduler() { return scheduler_; }
  FakeModel& model() { return model_; }

 private:
  FakeModel model_;
  executor::StepExecutor executor_;
  scheduler::Scheduler scheduler_;
  std::unique_ptr<scheduler::StepLoop> loop_;
  std::map<std::string, RequestLog> logs_;
  std::vector<std::string> order_;
};

}  // namespace fathom::testing
