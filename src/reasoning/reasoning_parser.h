#pragma once
// Reasoning parsing of model output (SGLang's --reasoning-parser): splits a reasoning model's text into its
// reasoning (OpenAI-style `reasoning_content`) and the answer (`content`), streamed or at once. Both ways run
// the same state machine, so for any chunking of the same text the concatenated streamed results equal the
// non-streamed parse. Emitted text never ends inside a UTF-8 character; the reasoning markers never appear in
// either part.
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fathom::reasoning {

enum class ReasoningFormat {
  kDeepSeekR1,  // <think>REASONING</think>ANSWER; the <think> may be in the prompt instead of the output
};

// "deepseek-r1" (SGLang's name); nullopt for anything else.
std::optional<ReasoningFormat> parse_reasoning_format(std::string_view name);
std::string_view reasoning_format_name(ReasoningFormat format);
std::string reasoning_format_choices();  // for error messages

struct ReasoningChunk {
  std::string reasoning_text;
  std::string normal_text;
  bool empty() const { return reasoning_text.empty() && normal_text.empty(); }
};

class ReasoningParser {
 public:
  virtual ~ReasoningParser() = default;
  // Feeds the next decoded text (any split). push() after finish() is an error.
  virtual ReasoningChunk push(std::string_view text) = 0;
  // End of output: output that stops inside the reasoning is all reasoning.
  virtual ReasoningChunk finish() = 0;
};

// `starts_in_reasoning`: the prompt already opened the reasoning block (see prompt_opens_reasoning), so the
// output begins inside it.
std::unique_ptr<ReasoningParser> make_reasoning_parser(ReasoningFormat format, bool starts_in_reasoning);

// The non-streaming parse: push(text) then finish() on a fresh parser.
ReasoningChunk parse_reasoning(ReasoningFormat format, std::string_view text, bool starts_in_reasoning);

// Whether a rendered prompt ends inside an opened reasoning block (e.g. "...<｜Assistant｜><think>\n"), as
// templates of thinking models do when they put the opening marker in the prompt.
bool prompt_opens_reasoning(ReasoningFormat format, std::string_view prompt);

// The text that opens the reasoning block ("<think>").
std::string reasoning_open_marker(ReasoningFormat format);
// The text that closes the reasoning block ("</think>"), for forcing an answer without reasoning.
std::string reasoning_close_marker(ReasoningFormat format);

// The format's marker strings (they must be decoded, not skipped, for parsing to work).
std::vector<std::string> reasoning_markers(ReasoningFormat format);

}  // namespace fathom::reasoning
