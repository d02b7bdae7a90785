#pragma once
// DeepSeek-R1 reasoning blocks: optional leading whitespace, <think>, the reasoning, </think>, the answer.
// The reasoning is trimmed of surrounding whitespace and the answer of leading whitespace. Output that does not
// begin with <think> (and whose prompt did not open one) is all answer; output that never closes the block is
// all reasoning. A second <think> right at the start of a block the prompt opened is skipped.
#include <string>

#include "reasoning/reasoning_parser.h"

namespace fathom::reasoning {

class DeepSeekR1ReasoningParser final : public ReasoningParser {
 public:
  explicit DeepSeekR1ReasoningParser(bool starts_in_reasoning);

  ReasoningChunk push(std::string_view text) override;
  ReasoningChunk finish() override;

 private:
  enum class State {
    kStart,           // before the output shows whether it opens a block
    kReasoningStart,  // inside a block, before its first non-space text
    kReasoning,
    kAfterReasoning,  // after </think>, before the answer's first non-space text
    kAnswer,
  };

  void run(bool at_end, ReasoningChunk& out);
  bool step_start(bool at_end);
  bool step_reasoning_start(bool at_end);
  bool step_reasoning(bool at_end, ReasoningChunk& out);
  bool step_after_reasoning(bool at_end);
  bool step_answer(bool at_end, ReasoningChunk& out);

  std::string buffer_;
  State state_;
  bool may_skip_open_marker_;  // the prompt opened the block: a repeated <think> is skipped once
  bool finished_ = false;
};

}  // namespace fathom::reasoning
