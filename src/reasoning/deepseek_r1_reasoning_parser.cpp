#include "reasoning/deepseek_r1_reasoning_parser.h"

#include "core/error.h"
#include "core/marker_search.h"

namespace fathom::reasoning {

namespace {

constexpr std::string_view kOpen = "<think>";
constexpr std::string_view kClose = "</think>";

size_t leading_space(std::string_view text) {
  size_t count = 0;
  while (count < text.size() && is_ascii_space(text[count])) ++count;
  return count;
}

size_t without_trailing_space(std::string_view text) {
  size_t end = text.size();
  while (end > 0 && is_ascii_space(text[end - 1])) --end;
  return end;
}

enum class Prefix { kYes, kMaybe, kNo };
// Whether `text` starts with `marker` (kMaybe: text is a proper prefix of it).
Prefix starts_with(std::string_view text, std::string_view marker) {
  if (text.size() >= marker.size()) return text.substr(0, marker.size()) == marker ? Prefix::kYes : Prefix::kNo;
  return marker.substr(0, text.size()) == text ? Prefix::kMaybe : Prefix::kNo;
}

}  // namespace

DeepSeekR1ReasoningParser::DeepSeekR1ReasoningParser(bool starts_in_reasoning)
    : state_(starts_in_reasoning ? State::kReasoningStart : State::kStart), may_skip_open_marker_(starts_in_reasoning) {}

ReasoningChunk DeepSeekR1ReasoningParser::push(std::string_view text) {
  FATHOM_CHECK(!finished_, "reasoning parser: push() after finish()");
  buffer_.append(text);
  ReasoningChunk out;
  run(false, out);
  return out;
}

ReasoningChunk DeepSeekR1ReasoningParser::finish() {
  FATHOM_CHECK(!finished_, "reasoning parser: finish() called twice");
  ReasoningChunk out;
  run(true, out);
  finished_ = true;
  FATHOM_CHECK(buffer_.empty(), "reasoning parser: " << buffer_.size() << " bytes left undecided at the end of output");
  return out;
}

void DeepSeekR1ReasoningParser::run(bool at_end, ReasoningChunk& out) {
  for (;;) {
    bool progressed = false;
    switch (state_) {
      case State::kStart: progressed = step_start(at_end); break;
      case State::kReasoningStart: progressed = step_reasoning_start(at_end); break;
      case State::kReasoning: progressed = step_reasoning(at_end, out); break;
      case State::kAfterReasoning: progressed = step_after_reasoning(at_end); break;
      case State::kAnswer: progressed = step_answer(at_end, out); break;
    }
    if (!progressed) return;
  }
}

bool DeepSeekR1ReasoningParser::step_start(bool at_end) {
  const size_t space = leading_space(buffer_);
  const Prefix opens = starts_with(std::string_view(buffer_).substr(space), kOpen);
  if (opens == Prefix::kYes) {
    buffer_.erase(0, space + kOpen.size());
    state_ = State::kReasoningStart;
    return true;
  }
  if (opens == Prefix::kMaybe && !at_end) return false;  // includes text that is all space so far
  state_ = State::kAnswer;                               // the leading space is part of the answer
  return true;
}

bool DeepSeekR1ReasoningParser::step_reasoning_start(bool at_end) {
  buffer_.erase(0, leading_space(buffer_));
  if (may_skip_open_marker_) {
    const Prefix repeated = starts_with(buffer_, kOpen);
    if (repeated == Prefix::kMaybe && !at_end) return false;
    may_skip_open_marker_ = false;
    if (repeated == Prefix::kYes) {
      buffer_.erase(0, kOpen.size());
      return true;
    }
  }
  if (buffer_.empty()) return false;
  state_ = State::kReasoning;
  return true;
}

bool DeepSeekR1ReasoningParser::step_reasoning(bool at_end, ReasoningChunk& out) {
  const std::optional<MarkerMatch> match = find_first_marker(buffer_, {kClose}, !at_end);
  std::string_view text = std::string_view(buffer_).substr(0, match ? match->position : buffer_.size());
  if (!match && !at_end) text = text.substr(0, utf8_complete_prefix_length(text));
  // Trailing space is held back: it is dropped if the block closes (or the output ends) after it.
  const size_t emit = without_trailing_space(text);
  out.reasoning_text.append(text.substr(0, emit));
  if (match && match->complete) {
    buffer_.erase(0, match->position + kClose.size());
    state_ = State::kAfterReasoning;
    return true;
  }
  buffer_.erase(0, at_end ? buffer_.size() : emit);
  return false;
}

bool DeepSeekR1ReasoningParser::step_after_reasoning(bool at_end) {
  buffer_.erase(0, leading_space(buffer_));
  if (buffer_.empty()) return false;
  state_ = State::kAnswer;
  return true;
}

bool DeepSeekR1ReasoningParser::step_answer(bool at_end, ReasoningChunk& out) {
  const size_t emit = at_end ? buffer_.size() : utf8_complete_prefix_length(buffer_);
  out.normal_text.append(buffer_, 0, emit);
  buffer_.erase(0, emit);
  return false;
}

}  // namespace fathom::reasoning
