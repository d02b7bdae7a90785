#include "fake_engine.h"

#include <algorithm>
#include <stdexcept>

namespace fathom::testing {

using scheduler::FinishReason;
using scheduler::GenerationEvent;

FakeEngine::FakeEngine(FakeEngineOptions options) : options_(options) {
  stats_.kv_total_tokens = options_.kv_total_tokens;
  thread_ = std::thread([this] { run(); });
}

FakeEngine::~FakeEngine() {
  shutdown();
}

int32_t FakeEngine::token_at(const scheduler::GenerateRequest& request, int64_t step) {
  uint64_t base = 0;
  for (int32_t id : request.input_ids) base = base * 31 + static_cast<uint64_t>(id);
  if (request.sampling.temperature > 0.0f) base += request.sampling.seed.value_or(0x9e3779b9ull + static_cast<uint64_t>(step) * 7919);
  return static_cast<int32_t>(10 + (base + static_cast<uint64_t>(step) * 7) % 90);
}

void FakeEngine::submit(scheduler::GenerateRequest request, scheduler::EventCallback on_event) {
  bool queue_full = options_.queue_full;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const size_t call = ++submit_calls_;
    if (std::find(options_.throwing_submits.begin(), options_.throwing_submits.end(), call) !=
        options_.throwing_submits.end()) {
      throw std::runtime_error("fake engine: submit " + std::to_string(call) + " throws");
    }
    submitted_.push_back(request);
    if (options_.queue_full_at > 0 && incoming_.size() + active_.size() >= options_.queue_full_at) queue_full = true;
    if (accepting_ && !queue_full) {
      Active active;
      active.request = std::move(request);
      active.on_event = std::move(on_event);
      incoming_.push_back(std::move(active));
      wake_.notify_all();
      return;
    }
  }
  GenerationEvent refused;
  refused.request_id = request.request_id;
  refused.finished = true;
  refused.finish_reason = FinishReason::kError;
  refused.error_message = queue_full ? "the request queue is full" : "engine is shut down";
  refused.queue_full = queue_full;
  on_event(refused);
}

void FakeEngine::abort(const std::string& request_id) {
  std::lock_guard<std::mutex> lock(mutex_);
  pending_aborts_.insert(request_id);
  wake_.notify_all();
}

bool FakeEngine::flush_cache() { return flush_result_; }

scheduler::EngineStats FakeEngine::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

std::vector<std::string> FakeEngine::aborted_ids() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return aborted_;
}

std::vector<scheduler::GenerateRequest> FakeEngine::submitted() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return submitted_;
}

size_t FakeEngine::submitted_count() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return submitted_.size();
}

int64_t FakeEngine::running() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return static_cast<int64_t>(active_.size() + incoming_.size());
}

void FakeEngine::shutdown() {
  shutdown_called_ = true;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    accepting_ = false;
    stopping_ = true;
    wake_.notify_all();
  }
  if (thread_.joinable()) thread_.join();
}

void FakeEngine::step(Active& active, GenerationEvent& event) {
  const auto& sampling = active.request.sampling;
  event.request_id = active.request.request_id;
  event.prompt_tokens = static_cast<int64_t>(active.request.input_ids.size());
  if (active.abort_requested) {
    event.finished = true;
    event.finish_reason = FinishReason::kAbort;
    event.completion_tokens = active.generated;
    return;
  }
  const int64_t refused_from =
      options_.refuse_prompt_tokens > 0 ? options_.refuse_prompt_tokens : options_.max_context_tokens;
  if (event.prompt_tokens >= refused_from) {
    event.finished = true;
    event.finish_reason = FinishReason::kError;
    event.error_message = "request " + active.request.request_id + ": the prompt has " + std::to_string(event.prompt_tokens) +
                          " tokens, but the context holds " + std::to_string(options_.max_context_tokens);
    return;
  }
  event.cached_prompt_tokens = event.prompt_tokens / 2;
  for (int i = 0; i < options_.tokens_per_event && !event.finished; ++i) {
    const int32_t token = token_at(active.request, active.generated);
    ++active.generated;
    event.new_token_ids.push_back(token);
    if (sampling.logprobs) {
      scheduler::TokenLogprob logprob;
      logprob.token_id = token;
      logprob.logprob = -0.25f;
      for (int32_t k = 0; k < sampling.top_logprobs; ++k) logprob.top.emplace_back(token + k, -0.25f - static_cast<float>(k));
      event.logprobs.push_back(logprob);
    }
    std::string piece = token_text(token);
    std::string combined = active.text + piece;
    for (const std::string& stop : sampling.stop) {
      size_t found = combined.find(stop);
      if (found != std::string::npos && found + stop.size() > active.text.size()) {
        piece = found >= active.text.size() ? combined.substr(active.text.size(), found - active.text.size()) : "";
        event.finished = true;
        event.finish_reason = FinishReason::kStop;
        event.matched_stop = stop;
        break;
      }
    }
    active.text += piece;
    event.text_delta += piece;
    if (event.finished) break;
    if (std::find(sampling.stop_token_ids.begin(), sampling.stop_token_ids.end(), token) != sampling.stop_token_ids.end()) {
      event.finished = true;
      event.finish_reason = FinishReason::kStop;
      event.matched_stop_token = token;
    } else if (active.generated >= sampling.max_new_tokens) {
      event.finished = true;
      event.finish_reason = FinishReason::kLength;
    }
  }
  event.completion_tokens = active.generated;
}

void FakeEngine::run() {
  if (options_.hold_until_requests > 0) {
    std::unique_lock<std::mutex> lock(mutex_);
    wake_.wait_for(lock, options_.hold_timeout, [this] { return stopping_ || submitted_.size() >= options_.hold_until_requests; });
  }
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [this] { return stopping_ || !incoming_.empty() || !active_.empty(); });
      if (stopping_ && incoming_.empty() && active_.empty()) return;
      while (!incoming_.empty() && (options_.max_running == 0 || active_.size() < options_.max_running)) {
        active_.push_back(std::move(incoming_.front()));
        incoming_.pop_front();
      }
      auto mark_aborts = [this](auto& requests) {
        for (Active& active : requests) {
          if (pending_aborts_.erase(active.request.request_id)) {
            active.abort_requested = true;
            aborted_.push_back(active.request.request_id);
          }
        }
      };
      mark_aborts(active_);
      mark_aborts(incoming_);  // waiting ones (max_running) end when they run
      pending_aborts_.clear();  // unknown ids are ignored
    }
    std::vector<GenerationEvent> events(active_.size());
    for (size_t i = 0; i < active_.size(); ++i) {
      step(active_[i], events[i]);
      active_[i].on_event(events[i]);
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      std::vector<Active> still_running;
      for (size_t i = 0; i < active_.size(); ++i) {
        if (!events[i].finished) still_running.push_back(std::move(active_[i]));
      }
      active_ = std::move(still_running);
      stats_.running_requests = static_cast<int64_t>(active_.size());
      stats_.waiting_requests = 0;
      int64_t used = 0;
      for (const Active& active : active_) used += static_cast<int64_t>(active.request.input_ids.size()) + active.generated;
      stats_.kv_used_tokens = used;
      for (const GenerationEvent& event : events) {
        stats_.generated_tokens_total += static_cast<int64_t>(event.new_token_ids.size());
      }
    }
    if (options_.token_delay.count() > 0) std::this_thread::sleep_for(options_.token_delay);
  }
}

}  // namespace fathom::testing
