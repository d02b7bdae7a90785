#pragma once
// The streaming state machine shared by the DeepSeek-V3 and V3.1 tool-call formats (their differences live in
// CallSyntax). Output grammar, leniently:
//   text* ( <｜tool▁calls▁begin｜> ( ws* CALL )* ws* <｜tool▁calls▁end｜> text* )*
//   CALL = <｜tool▁call▁begin｜> HEADER ARGUMENTS TERMINATOR
// A call is also recognized without the surrounding calls markers. Whitespace between markers of a calls
// section is dropped; other marker strings outside a call are removed from the content; a call whose header
// is malformed (or names an unknown tool) is content as the model wrote it, markers included, to the end of
// its section; one whose header the output stops inside is dropped; any marker inside the arguments ends the call.
#include <memory>
#include <string>

#include "function_call/call_syntax.h"
#include "function_call/tool_call_parser.h"

namespace fathom::function_call {

class DeepSeekToolCallParser final : public ToolCallParser {
 public:
  DeepSeekToolCallParser(std::unique_ptr<const CallSyntax> syntax, ToolCallParserOptions options);

  ToolCallChunk push(std::string_view text) override;
  ToolCallChunk push_forced(std::string_view text) override;
  ToolCallChunk finish() override;
  int32_t call_count() const override { return calls_; }

 private:
  enum class State { kText, kHeader, kArguments };

  // Advances through buffer_ as far as its content decides; each step returns false when it needs more text.
  void run(bool at_end, ToolCallChunk& out);
  bool step_text(bool at_end, ToolCallChunk& out);
  bool step_header(bool at_end, ToolCallChunk& out);
  bool step_arguments(bool at_end, ToolCallChunk& out);
  void emit_arguments(std::string_view text, ToolCallChunk& out) const;
  bool known(const std::string& name) const;
  bool could_become_known(const std::string& name_start) const;

  std::unique_ptr<const CallSyntax> syntax_;
  ToolCallParserOptions options_;
  std::vector<std::string_view> argument_ends_;  // terminators first (consumed), then the markers (not consumed)
  size_t terminator_count_ = 0;
  std::string buffer_;  // received text not decided yet
  State state_ = State::kText;
  bool in_section_ = false;  // after <｜tool▁calls▁begin｜> or a call: whitespace before a marker is dropped
  bool raw_section_ = false;  // after a call that was not one: the section's markers are content until it ends
  std::string held_opener_;  // markers (and whitespace) of a section no call has confirmed yet: content if none does
  bool finished_ = false;
  int32_t calls_ = 0;
};

}  // namespace fathom::function_call
