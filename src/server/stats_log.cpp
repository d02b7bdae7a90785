#include "server/stats_log.h"

#include <cstdio>

namespace fathom::server {

std::optional<std::string> format_stats_line(const scheduler::EngineStats& before, const scheduler::EngineStats& after,
                                             double interval_s) {
  const int64_t prompt_tokens = after.prompt_tokens_total - before.prompt_tokens_total;
  const int64_t cached_tokens = after.cached_prompt_tokens_total - before.cached_prompt_tokens_total;
  const int64_t generated_tokens = after.generated_tokens_total - before.generated_tokens_total;
  const bool busy = before.running_requests + before.waiting_requests + after.running_requests +
                        after.waiting_requests > 0;
  if (!busy && prompt_tokens == 0 && generated_tokens == 0) return std::nullopt;
  const double seconds = interval_s > 0.0 ? interval_s : 1.0;
  const double kv_percent =
      after.kv_total_tokens > 0 ? 100.0 * static_cast<double>(after.kv_used_tokens) / after.kv_total_tokens : 0.0;
  char line[320];
  std::snprintf(line, sizeof(line),
                "engine: %lld running, %lld queued, KV %lld / %lld tokens (%.1f%%), prompts in %.1f tok/s, "
                "prefix cache hits %.1f tok/s, generated %.1f tok/s",
                static_cast<long long>(after.running_requests), static_cast<long long>(after.waiting_requests),
                static_cast<long long>(after.kv_used_tokens), static_cast<long long>(after.kv_total_tokens), kv_percent,
                static_cast<double>(prompt_tokens) / seconds, static_cast<double>(cached_tokens) / seconds,
                static_cast<double>(generated_tokens) / seconds);
  return std::string(line);
}

EngineStatsLog::EngineStatsLog(const scheduler::Engine& engine, const Logger& logger,
                               std::chrono::milliseconds interval)
    : engine_(engine), logger_(logger), interval_(interval) {
  thread_ = std::thread([this] { run(); });
}

EngineStatsLog::~EngineStatsLog() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void EngineStatsLog::run() {
  using Clock = std::chrono::steady_clock;
  scheduler::EngineStats before = engine_.stats();
  Clock::time_point before_at = Clock::now();
  std::unique_lock<std::mutex> lock(mutex_);
  while (!wake_.wait_for(lock, interval_, [this] { return stopping_; })) {
    const scheduler::EngineStats after = engine_.stats();
    const Clock::time_point after_at = Clock::now();
    const double seconds = std::chrono::duration<double>(after_at - before_at).count();
    if (std::optional<std::string> line = format_stats_line(before, after, seconds)) logger_.info(*line);
    before = after;
    before_at = after_at;
  }
}

}  // namespace fathom::server
