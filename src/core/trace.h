#pragma once
// Wall-clock spans of a forward pass, written as a Chrome trace (chrome://tracing, Perfetto) by --profile.
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace fathom {

class TraceRecorder {
 public:
  struct Event {
    std::string name;
    std::string category;
    int64_t start_us;
    int64_t duration_us;
    int depth;
  };

  TraceRecorder() : origin_(std::chrono::steady_clock::now()) {}

  int64_t now_us() const {
    return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - origin_).count();
  }
  void record(std::string name, std::string category, int64_t start_us, int64_t end_us, int depth);
  const std::vector<Event>& events() const { return events_; }
  // {"traceEvents": [...]} with complete ("X") events; nesting depth becomes the thread row.
  std::string to_chrome_json() const;
  void write_chrome_json(const std::string& path) const;

 private:
  std::chrono::steady_clock::time_point origin_;
  mutable std::mutex mutex_;
  std::vector<Event> events_;
};

// RAII span; a null recorder makes it free.
class TraceSpan {
 public:
  TraceSpan(TraceRecorder* recorder, std::string name, const char* category = "op", int depth = 0)
      : recorder_(recorder), name_(recorder ? std::move(name) : std::string()), category_(category), depth_(depth),
        start_us_(recorder ? recorder->now_us() : 0) {}
  ~TraceSpan() {
    if (recorder_) recorder_->record(std::move(name_), category_, start_us_, recorder_->now_us(), depth_);
  }
  TraceSpan(const TraceSpan&) = delete;
  TraceSpan& operator=(const TraceSpan&) = delete;

 private:
  TraceRecorder* recorder_;
  std::string name_;
  const char* category_;
  int depth_;
  int64_t start_us_;
};

}  // namespace fathom
