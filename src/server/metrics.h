#pragma once
// Serving metrics kept on the event loop's thread and rendered in the Prometheus text format for
// GET /metrics: request/token counters, TTFT / inter-token / end-to-end latency histograms, a recent
// generation throughput, and the engine's gauges (queue, running, KV usage, prefix-cache hit rate).
#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "scheduler/engine.h"

namespace fathom::server {

class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);
  void observe(double value, uint64_t times = 1);
  uint64_t count() const { return count_; }
  double sum() const { return sum_; }
  void render(const std::string& name, const std::string& help, std::string& out) const;

 private:
  std::vector<double> upper_bounds_;
  std::vector<uint64_t> bucket_counts_;  // per bucket (not cumulative); the last is +Inf
  uint64_t count_ = 0;
  double sum_ = 0.0;
};

// Tokens per second over the last `window_s` whole seconds.
class ThroughputWindow {
 public:
  using Clock = std::chrono::steady_clock;
  explicit ThroughputWindow(int window_s = 10);
  void add(Clock::time_point now, int64_t tokens);
  double tokens_per_s(Clock::time_point now) const;

 private:
  int64_t second_of(Clock::time_point now) const;
  int window_s_;
  Clock::time_point origin_;
  std::vector<std::pair<int64_t, int64_t>> buckets_;  // (second, tokens), ring indexed by second % window
};

struct ConnectionGauges {
  int64_t open_connections = 0;
  int64_t active_http_generations = 0;
};

class ServerMetrics {
 public:
  using Clock = std::chrono::steady_clock;
  ServerMetrics();

  void record_request(const std::string& endpoint);
  void record_response_status(int status);
  void record_first_token(double ttft_s) { time_to_first_token_s_.observe(ttft_s); }
  void record_inter_token(double gap_s, uint64_t tokens) { inter_token_latency_s_.observe(gap_s, tokens); }
  void record_generated_tokens(Clock::time_point now, int64_t tokens);
  // One engine request finished with `reason` ("stop", "length", "abort", "error").
  void record_finished(const std::string& reason, int64_t prompt_tokens, int64_t cached_tokens, double e2e_s);

  uint64_t requests_total() const { return requests_total_; }

  std::string render(const scheduler::EngineStats& engine, const ConnectionGauges& connections, Clock::time_point now) const;

 private:
  Histogram time_to_first_token_s_;
  Histogram inter_token_latency_s_;
  Histogram e2e_request_latency_s_;
  ThroughputWindow generation_throughput_;
  uint64_t requests_total_ = 0;
  std::map<std::string, uint64_t> requests_by_endpoint_;
  std::map<int, uint64_t> responses_by_status_;
  std::map<std::string, uint64_t> finished_by_reason_;
  uint64_t prompt_tokens_total_ = 0;
  uint64_t cached_prompt_tokens_total_ = 0;
  uint64_t generation_tokens_total_ = 0;
};

}  // namespace fathom::server
