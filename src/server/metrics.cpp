#include "server/metrics.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>

namespace fathom::server {

namespace {

constexpr const char* kPrefix = "fathom:";

// Integers as integers ("6680", not "7e+03"); other values as the shortest text that reads back as the same double
// ("0.06", not "0.059999999999999998").
std::string format_value(double value) {
  char buffer[64];
  if (std::isfinite(value) && value == std::floor(value) && std::fabs(value) < 1e15) {
    std::snprintf(buffer, sizeof(buffer), "%.0f", value);
    return buffer;
  }
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buffer, sizeof(buffer), "%.*g", precision, value);
    if (std::strtod(buffer, nullptr) == value) break;
  }
  return buffer;
}

// A bucket bound as Prometheus' Python client writes it (SGLang's dashboards match these labels): "10.0", "0.06".
std::string format_bucket_bound(double bound) {
  std::string text = format_value(bound);
  if (text.find_first_of(".e") == std::string::npos) text += ".0";
  return text;
}

void render_scalar(std::string& out, const std::string& name, const char* type, const std::string& help, double value) {
  out += "# HELP " + std::string(kPrefix) + name + " " + help + "\n";
  out += "# TYPE " + std::string(kPrefix) + name + " " + type + "\n";
  out += std::string(kPrefix) + name + " " + format_value(value) + "\n";
}

std::vector<double> latency_buckets_s() {
  return {0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
          10.0, 15.0, 20.0, 30.0, 60.0, 120.0, 300.0};
}

}  // namespace

Histogram::Histogram(std::vector<double> upper_bounds)
    : upper_bounds_(std::move(upper_bounds)), bucket_counts_(upper_bounds_.size() + 1, 0) {}

void Histogram::observe(double value, uint64_t times) {
  size_t bucket = 0;
  while (bucket < upper_bounds_.size() && value > upper_bounds_[bucket]) ++bucket;
  bucket_counts_[bucket] += times;
  count_ += times;
  sum_ += value * static_cast<double>(times);
}

void Histogram::render(const std::string& name, const std::string& help, std::string& out) const {
  const std::string full = std::string(kPrefix) + name;
  out += "# HELP " + full + " " + help + "\n# TYPE " + full + " histogram\n";
  uint64_t cumulative = 0;
  for (size_t i = 0; i < upper_bounds_.size(); ++i) {
    cumulative += bucket_counts_[i];
    out += full + "_bucket{le=\"" + format_bucket_bound(upper_bounds_[i]) + "\"} " + std::to_string(cumulative) + "\n";
  }
  cumulative += bucket_counts_.back();
  out += full + "_bucket{le=\"+Inf\"} " + std::to_string(cumulative) + "\n";
  out += full + "_sum " + format_value(sum_) + "\n";
  out += full + "_count " + std::to_string(count_) + "\n";
}

ThroughputWindow::ThroughputWindow(int window_s)
    : window_s_(window_s), origin_(Clock::now()), buckets_(static_cast<size_t>(window_s), {-1, 0}) {}

int64_t ThroughputWindow::second_of(Clock::time_point now) const {
  return std::chrono::duration_cast<std::chrono::seconds>(now - origin_).count();
}

void ThroughputWindow::add(Clock::time_point now, int64_t tokens) {
  const int64_t second = second_of(now);
  auto& bucket = buckets_[static_cast<size_t>(second % window_s_)];
  if (bucket.first != second) bucket = {second, 0};
  bucket.second += tokens;
}

double ThroughputWindow::tokens_per_s(Clock::time_point now) const {
  const int64_t current = second_of(now);
  int64_t tokens = 0;
  for (const auto& [second, count] : buckets_) {
    if (second >= 0 && second > current - window_s_ && second < current) tokens += count;  // whole seconds only
  }
  const int64_t seconds = std::min<int64_t>(window_s_ - 1, std::max<int64_t>(current, 1));
  return static_cast<double>(tokens) / static_cast<double>(seconds);
}

ServerMetrics::ServerMetrics()
    : time_to_first_token_s_(latency_buckets_s()), inter_token_latency_s_(latency_buckets_s()),
      e2e_request_latency_s_(latency_buckets_s()) {}

void ServerMetrics::record_request(const std::string& endpoint) {
  ++requests_total_;
  ++requests_by_endpoint_[endpoint];
}

void ServerMetrics::record_response_status(int status) { ++responses_by_status_[status]; }

void ServerMetrics::record_generated_tokens(Clock::time_point now, int64_t tokens) {
  generation_tokens_total_ += static_cast<uint64_t>(tokens);
  generation_throughput_.add(now, tokens);
}

void ServerMetrics::record_finished(const std::string& reason, int64_t prompt_tokens, int64_t cached_tokens, double e2e_s) {
  ++finished_by_reason_[reason];
  prompt_tokens_total_ += static_cast<uint64_t>(prompt_tokens);
  cached_prompt_tokens_total_ += static_cast<uint64_t>(cached_tokens);
  e2e_request_latency_s_.observe(e2e_s);
}

std::string ServerMetrics::render(const scheduler::EngineStats& engine, const ConnectionGauges& connections,
                                  Clock::time_point now) const {
  std::string out;
  render_scalar(out, "num_queue_reqs", "gauge", "Requests waiting in the engine's queue.", static_cast<double>(engine.waiting_requests));
  render_scalar(out, "num_running_reqs", "gauge", "Requests the engine is running.", static_cast<double>(engine.running_requests));
  render_scalar(out, "kv_used_tokens", "gauge", "KV cache tokens in use.", static_cast<double>(engine.kv_used_tokens));
  render_scalar(out, "kv_total_tokens", "gauge", "KV cache capacity in tokens.", static_cast<double>(engine.kv_total_tokens));
  render_scalar(out, "token_usage", "gauge", "Fraction of the KV cache in use.",
                engine.kv_total_tokens > 0 ? static_cast<double>(engine.kv_used_tokens) / static_cast<double>(engine.kv_total_tokens) : 0.0);
  render_scalar(out, "cache_hit_rate", "gauge", "Prompt tokens served from the prefix cache / all prompt tokens (engine lifetime).",
                engine.prompt_tokens_total > 0
                    ? static_cast<double>(engine.cached_prompt_tokens_total) / static_cast<double>(engine.prompt_tokens_total)
                    : 0.0);
  render_scalar(out, "gen_throughput", "gauge", "Generated tokens per second over the last few seconds.",
                generation_throughput_.tokens_per_s(now));
  render_scalar(out, "engine_prompt_tokens_total", "counter", "Prompt tokens the engine processed.",
                static_cast<double>(engine.prompt_tokens_total));
  render_scalar(out, "engine_generated_tokens_total", "counter", "Tokens the engine generated.",
                static_cast<double>(engine.generated_tokens_total));
  render_scalar(out, "prompt_tokens_total", "counter", "Prompt tokens of finished HTTP generations.", static_cast<double>(prompt_tokens_total_));
  render_scalar(out, "cached_prompt_tokens_total", "counter", "Cached prompt tokens of finished HTTP generations.",
                static_cast<double>(cached_prompt_tokens_total_));
  render_scalar(out, "generation_tokens_total", "counter", "Tokens streamed to HTTP clients.", static_cast<double>(generation_tokens_total_));
  render_scalar(out, "open_connections", "gauge", "Open HTTP connections.", static_cast<double>(connections.open_connections));
  render_scalar(out, "active_generations", "gauge", "HTTP requests with generations in flight.",
                static_cast<double>(connections.active_http_generations));

  out += "# HELP fathom:http_requests_total HTTP requests by endpoint.\n# TYPE fathom:http_requests_total counter\n";
  for (const auto& [endpoint, count] : requests_by_endpoint_) {
    out += "fathom:http_requests_total{endpoint=\"" + endpoint + "\"} " + std::to_string(count) + "\n";
  }
  out += "# HELP fathom:http_responses_total HTTP responses by status code.\n# TYPE fathom:http_responses_total counter\n";
  for (const auto& [status, count] : responses_by_status_) {
    out += "fathom:http_responses_total{code=\"" + std::to_string(status) + "\"} " + std::to_string(count) + "\n";
  }
  out += "# HELP fathom:num_requests_total Finished engine requests by finish reason.\n# TYPE fathom:num_requests_total counter\n";
  for (const auto& [reason, count] : finished_by_reason_) {
    out += "fathom:num_requests_total{finish_reason=\"" + reason + "\"} " + std::to_string(count) + "\n";
  }
  time_to_first_token_s_.render("time_to_first_token_seconds", "Time from request arrival to its first generated token.", out);
  inter_token_latency_s_.render("inter_token_latency_seconds", "Time between consecutive generated tokens.", out);
  e2e_request_latency_s_.render("e2e_request_latency_seconds", "Time from request arrival to its last token.", out);
  return out;
}

}  // namespace fathom::server
