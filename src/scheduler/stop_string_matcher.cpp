#include "scheduler/stop_string_matcher.h"

#include <algorithm>

namespace fathom::scheduler {

StopStringMatcher::StopStringMatcher(std::vector<std::string> stop_strings) {
  for (std::string& stop : stop_strings) {
    if (!stop.empty()) stop_strings_.push_back(std::move(stop));
  }
}

StopStringMatcher::Result StopStringMatcher::push(std::string_view piece) {
  Result result;
  if (matched_) return result;
  held_.append(piece);
  if (stop_strings_.empty()) {
    result.text = std::move(held_);
    held_.clear();
    return result;
  }
  // Earliest occurrence of any stop string (the longest one on a tie at the same position).
  size_t best_position = std::string::npos;
  const std::string* best = nullptr;
  for (const std::string& stop : stop_strings_) {
    const size_t position = held_.find(stop);
    if (position == std::string::npos) continue;
    if (position < best_position || (position == best_position && stop.size() > best->size())) {
      best_position = position;
      best = &stop;
    }
  }
  if (best) {
    matched_ = true;
    result.text = held_.substr(0, best_position);
    result.match = *best;
    held_.clear();
    return result;
  }
  result.text = release_unheld();
  return result;
}

StopStringMatcher::Result StopStringMatcher::push_unmatched(std::string_view piece) {
  Result result;
  if (matched_) return result;
  held_.append(piece);
  result.text = release_unheld();
  return result;
}

std::string StopStringMatcher::release_unheld() {
  // Hold back the longest tail that is a proper prefix of some stop string.
  size_t hold = 0;
  for (const std::string& stop : stop_strings_) {
    for (size_t length = std::min(stop.size() - 1, held_.size()); length > hold; --length) {
      if (held_.compare(held_.size() - length, length, stop, 0, length) == 0) {
        hold = length;
        break;
      }
    }
  }
  std::string released = held_.substr(0, held_.size() - hold);
  held_.erase(0, held_.size() - hold);
  return released;
}

std::string StopStringMatcher::flush() {
  std::string rest = matched_ ? std::string() : std::move(held_);
  held_.clear();
  return rest;
}

}  // namespace fathom::scheduler
