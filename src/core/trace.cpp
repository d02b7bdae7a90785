#include "core/trace.h"

#include <fstream>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace fathom {

void TraceRecorder::record(std::string name, std::string category, int64_t start_us, int64_t end_us, int depth) {
  std::lock_guard<std::mutex> lock(mutex_);
  events_.push_back({std::move(name), std::move(category), start_us, end_us - start_us, depth});
}

std::string TraceRecorder::to_chrome_json() const {
  std::lock_guard<std::mutex> lock(mutex_);
  nlohmann::json events = nlohmann::json::array();
  for (const Event& event : events_) {
    events.push_back({{"name", event.name}, {"cat", event.category}, {"ph", "X"}, {"ts", event.start_us},
                      {"dur", event.duration_us}, {"pid", 1}, {"tid", event.depth}});
  }
  return nlohmann::json{{"traceEvents", events}, {"displayTimeUnit", "ms"}}.dump();
}

void TraceRecorder::write_chrome_json(const std::string& path) const {
  std::ofstream out(path);
  FATHOM_CHECK(out.good(), "cannot write trace file " << path);
  out << to_chrome_json();
}

}  // namespace fathom
