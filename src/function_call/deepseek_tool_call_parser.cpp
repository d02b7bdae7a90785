#include "function_call/deepseek_tool_call_parser.h"

#include <algorithm>

#include "core/error.h"
#include "core/marker_search.h"
#include "function_call/deepseek_markers.h"

namespace fathom::function_call {

namespace {

bool all_space(std::string_view text) { return std::all_of(text.begin(), text.end(), is_ascii_space); }

// Whether all of `text` (non-empty) is the beginning of a marker the output stopped inside.
bool is_marker_start(std::string_view text) {
  const std::optional<MarkerMatch> match = find_first_marker(text, deepseek::all_markers(), /*allow_partial=*/true);
  return !text.empty() && match && !match->complete && match->position == 0;
}

}  // namespace

DeepSeekToolCallParser::DeepSeekToolCallParser(std::unique_ptr<const CallSyntax> syntax, ToolCallParserOptions options)
    : syntax_(std::move(syntax)), options_(std::move(options)) {
  FATHOM_CHECK(syntax_ != nullptr, "DeepSeekToolCallParser needs a call syntax");
  argument_ends_ = syntax_->argument_terminators();
  terminator_count_ = argument_ends_.size();
  for (std::string_view marker : deepseek::all_markers()) argument_ends_.push_back(marker);
}

ToolCallChunk DeepSeekToolCallParser::push(std::string_view text) {
  FATHOM_CHECK(!finished_, "tool-call parser: push() after finish()");
  buffer_.append(text);
  ToolCallChunk out;
  run(false, out);
  return out;
}

ToolCallChunk DeepSeekToolCallParser::push_forced(std::string_view text) {
  ToolCallChunk out = push(text);
  held_opener_.clear();  // the server's markers, not the model's: a header that is no call leaves the model's text only
  return out;
}

ToolCallChunk DeepSeekToolCallParser::finish() {
  FATHOM_CHECK(!finished_, "tool-call parser: finish() called twice");
  ToolCallChunk out;
  run(true, out);
  finished_ = true;
  FATHOM_CHECK(buffer_.empty(), "tool-call parser: " << buffer_.size() << " bytes left undecided at the end of output");
  return out;
}

void DeepSeekToolCallParser::run(bool at_end, ToolCallChunk& out) {
  for (;;) {
    bool progressed = false;
    switch (state_) {
      case State::kText: progressed = step_text(at_end, out); break;
      case State::kHeader: progressed = step_header(at_end, out); break;
      case State::kArguments: progressed = step_arguments(at_end, out); break;
    }
    if (!progressed) return;
  }
}

bool DeepSeekToolCallParser::step_text(bool at_end, ToolCallChunk& out) {
  if (buffer_.empty()) return false;
  const std::optional<MarkerMatch> match = find_first_marker(buffer_, deepseek::all_markers(), !at_end);
  const size_t text_end = match ? match->position : buffer_.size();
  std::string_view text = std::string_view(buffer_).substr(0, text_end);
  if (at_end && !match && !held_opener_.empty() && is_marker_start(text)) {
    buffer_.clear();  // the output stopped inside the first marker after a section's opening: an unfinished call
    held_opener_.clear();
    return false;
  }
  if (in_section_ && !raw_section_ && all_space(text)) {
    if (!match) {
      if (at_end) buffer_.clear();  // trailing whitespace of a calls section
      return false;                 // otherwise wait: it is dropped if a marker follows
    }
    if (!match->complete) return false;
    if (!held_opener_.empty()) held_opener_.append(text);  // kept for a section that turns out not to be calls
    text = {};  // whitespace between markers
  } else if (!text.empty() && !raw_section_) {
    in_section_ = false;  // content after the calls
    out.normal_text += held_opener_;  // an opened section with text instead of a call: the marker is content
    held_opener_.clear();
  }
  size_t emit = text.size();
  if (!match && !at_end) emit = utf8_complete_prefix_length(text);
  out.normal_text.append(text.substr(0, emit));
  if (!match || !match->complete) {
    buffer_.erase(0, emit);
    return false;
  }
  const std::string_view marker = deepseek::all_markers()[match->marker];
  buffer_.erase(0, text_end + marker.size());
  if (marker == deepseek::kCallBegin) {
    in_section_ = true;
    held_opener_.append(marker);
    state_ = State::kHeader;
  } else if (raw_section_) {
    out.normal_text.append(marker);  // the section held something other than calls: it stays as written
    if (marker == deepseek::kCallsEnd) raw_section_ = in_section_ = false;
  } else if (marker == deepseek::kCallsBegin) {
    in_section_ = true;
    held_opener_ = marker;
  } else if (marker == deepseek::kCallsEnd) {
    in_section_ = false;
    held_opener_.clear();
  }  // any other marker outside a call is removed
  return true;
}

bool DeepSeekToolCallParser::step_header(bool at_end, ToolCallChunk& out) {
  const HeaderParse header = syntax_->parse_header(buffer_, at_end);
  switch (header.status) {
    case HeaderParse::Status::kNeedMore:
      if (!at_end) return false;
      if (header.name_complete ? known(header.name) : could_become_known(header.name)) {
        buffer_.clear();  // an unfinished call at the end of output is dropped, as SGLang's detectors do
        held_opener_.clear();
        state_ = State::kText;
        return false;
      }
      break;  // the name can no longer become a known tool: not a call
    case HeaderParse::Status::kComplete:
      if (known(header.name)) {
        ToolCallDelta delta;
        delta.index = calls_++;
        delta.name = header.name;
        out.calls.push_back(std::move(delta));
        buffer_.erase(0, header.length);
        held_opener_.clear();
        state_ = State::kArguments;
        return true;
      }
      break;  // an unknown tool: not a call
    case HeaderParse::Status::kInvalid: break;
  }
  // Not a call: the markers that opened it and the rest of its section are content, exactly as the model wrote them.
  out.normal_text += held_opener_;
  held_opener_.clear();
  raw_section_ = true;
  state_ = State::kText;
  return true;
}

bool DeepSeekToolCallParser::step_arguments(bool at_end, ToolCallChunk& out) {
  const std::optional<MarkerMatch> match = find_first_marker(buffer_, argument_ends_, !at_end);
  if (match && match->complete && match->marker < terminator_count_) {
    std::string_view arguments = std::string_view(buffer_).substr(0, match->position);
    // A bare <｜tool▁call▁end｜> after a partial closing fence ("\n``"): the fence is syntax there too.
    if (argument_ends_[match->marker] == deepseek::kCallEnd) {
      arguments.remove_suffix(syntax_->closing_suffix_length(arguments));
    }
    emit_arguments(arguments, out);
    buffer_.erase(0, match->position + argument_ends_[match->marker].size());
    state_ = State::kText;
    in_section_ = true;
    return true;
  }
  // Up to the first (partial) marker, less a closing the syntax may still be writing: it is argument text only
  // if more follows before the arguments end.
  const std::string_view undecided = std::string_view(buffer_).substr(0, match ? match->position : buffer_.size());
  const size_t text_end = undecided.size() - syntax_->closing_suffix_length(undecided);
  const size_t emit = match || at_end ? text_end : utf8_complete_prefix_length(undecided.substr(0, text_end));
  emit_arguments(undecided.substr(0, emit), out);
  const bool arguments_end = match ? match->complete : at_end;  // another marker, or the output stopped
  if (!arguments_end) {
    buffer_.erase(0, emit);
    return false;
  }
  buffer_.erase(0, undecided.size());  // the closing is dropped; the call ends here
  state_ = State::kText;
  in_section_ = true;
  return true;
}

void DeepSeekToolCallParser::emit_arguments(std::string_view text, ToolCallChunk& out) const {
  if (text.empty()) return;
  const int32_t index = calls_ - 1;
  if (!out.calls.empty() && out.calls.back().index == index) {
    out.calls.back().arguments.append(text);
  } else {
    out.calls.push_back(ToolCallDelta{index, std::nullopt, std::string(text)});
  }
}

bool DeepSeekToolCallParser::known(const std::string& name) const {
  return options_.known_names.empty() ||
         std::find(options_.known_names.begin(), options_.known_names.end(), name) != options_.known_names.end();
}

bool DeepSeekToolCallParser::could_become_known(const std::string& name_start) const {
  return options_.known_names.empty() ||
         std::any_of(options_.known_names.begin(), options_.known_names.end(),
                     [&](const std::string& name) { return name.starts_with(name_start); });
}

}  // namespace fathom::function_call
