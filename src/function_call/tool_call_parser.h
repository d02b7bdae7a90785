#pragma once
// Tool-call parsing of model output (SGLang's --tool-call-parser): splits the text a model generates into
// plain content and structured function calls, either streamed (fed text deltas as they are decoded) or at
// once. Both ways run the same state machine, so for any chunking of the same text the concatenated streamed
// results equal the non-streamed parse (content text, and per call its name and argument text).
//
// Contract of every parser:
// - Markers are matched on decoded text; a marker cut by a chunk boundary is held back until it completes,
//   and no marker text (the format's markers, nor V3's closing fence "\n```" or a start of it) ever reaches
//   `normal_text` or the arguments.
// - A call is reported (its name, in a delta with its index) only once its header is complete and well
//   formed, and its name is one of the known tools (when a list is given); otherwise the text degrades to
//   plain content (markers removed). A header cut off by the end of output that could still have become a
//   call is dropped (no content, no call). A reported call is never dropped: output that stops inside the
//   arguments ends the call with the arguments so far.
// - Emitted text never ends inside a UTF-8 character.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fathom::function_call {

enum class ToolCallFormat {
  kDeepSeekV3,   // <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\nARGS\n```<｜tool▁call▁end｜>...<｜tool▁calls▁end｜>
  kDeepSeekV31,  // <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>NAME<｜tool▁sep｜>ARGS<｜tool▁call▁end｜>...<｜tool▁calls▁end｜>
};

// "deepseekv3" / "deepseekv31" (SGLang's names); nullopt for anything else.
std::optional<ToolCallFormat> parse_tool_call_format(std::string_view name);
std::string_view tool_call_format_name(ToolCallFormat format);
std::string tool_call_format_choices();  // "deepseekv3, deepseekv31", for error messages

// One streamed piece of a call: the first delta of call `index` carries its name, later ones only argument text.
struct ToolCallDelta {
  int32_t index = 0;                // 0, 1, ... in the order the calls appear in the output
  std::optional<std::string> name;  // set on the call's first delta only
  std::string arguments;            // the next fragment of the argument text (the JSON as the model wrote it)
};

// What one push() or finish() yields.
struct ToolCallChunk {
  std::string normal_text;           // content text, in output order
  std::vector<ToolCallDelta> calls;  // in output order; consecutive fragments of one call are merged
  bool empty() const { return normal_text.empty() && calls.empty(); }
};

struct ToolCall {
  std::string name;
  std::string arguments;
};

// A whole output's result (the non-streaming parse, or the concatenation of streamed chunks).
struct ToolCallParseResult {
  std::string normal_text;
  std::vector<ToolCall> calls;
};

// Appends a chunk to an accumulated result (calls are addressed by their index).
void accumulate(ToolCallParseResult& result, const ToolCallChunk& chunk);

struct ToolCallParserOptions {
  std::vector<std::string> known_names;  // the request's tool names; empty: any well-formed name is accepted
};

// A streaming parser for one model output. Not thread-safe; push() after finish() is an error.
class ToolCallParser {
 public:
  virtual ~ToolCallParser() = default;
  // Feeds the next decoded text (any split, even inside a UTF-8 character or a marker).
  virtual ToolCallChunk push(std::string_view text) = 0;
  // Feeds text the server wrote at the end of the prompt (forced_call_opening) before any output: parsed as
  // output, but its markers never show as content, even when the model's header then makes it no call.
  virtual ToolCallChunk push_forced(std::string_view text) = 0;
  // End of output: everything held back is decided (an unfinished marker becomes content, an unfinished call
  // header is dropped, a begun closing fence is dropped from the arguments).
  virtual ToolCallChunk finish() = 0;
  // Calls reported so far.
  virtual int32_t call_count() const = 0;
};

std::unique_ptr<ToolCallParser> make_tool_call_parser(ToolCallFormat format, ToolCallParserOptions options = {});

// The non-streaming parse: push(text) then finish() on a fresh parser.
ToolCallParseResult parse_tool_calls(ToolCallFormat format, std::string_view text, ToolCallParserOptions options = {});

// The start of an assistant turn that makes a call, for forcing one (tool_choice "required" or a named
// function): appended to the prompt, the model continues inside the call, and the parser must be fed this
// text first. With a name: through the name and the opening of the arguments; without: the markers only
// (<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>), so that a malformed header degrades to the model's own text.
// Feed it with push_forced().
std::string forced_call_opening(ToolCallFormat format, const std::optional<std::string>& name);

// Every marker string of the format (they must be decoded, not skipped, for parsing to work).
std::vector<std::string> tool_call_markers(ToolCallFormat format);

}  // namespace fathom::function_call
