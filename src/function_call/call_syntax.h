#pragma once
// The format-specific part of a DeepSeek-style tool-call parser: what follows <｜tool▁call▁begin｜> up to the
// arguments (the header), and which strings end the arguments. DeepSeekToolCallParser runs the rest.
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fathom::function_call {

struct HeaderParse {
  enum class Status {
    kNeedMore,  // the text so far is a valid beginning; wait for more (at the end of output: the header is unfinished)
    kInvalid,   // not a well-formed header: the caller treats <｜tool▁call▁begin｜> as stray and rescans the text
    kComplete,  // a header of `length` bytes naming function `name`
  };
  Status status = Status::kNeedMore;
  std::string name;  // kNeedMore: the name written so far (empty before the name starts)
  bool name_complete = false;  // kNeedMore: what follows the name has begun, so the name can no longer grow
  size_t length = 0;
};

class CallSyntax {
 public:
  virtual ~CallSyntax() = default;
  // `text` is everything after <｜tool▁call▁begin｜> received so far; `at_end`: no more will come. The decision
  // depends only on the bytes of `text` it looks at, so any chunking of the output decides alike.
  virtual HeaderParse parse_header(std::string_view text, bool at_end) const = 0;
  // Strings that end a call's arguments and are consumed with it (each ends with <｜tool▁call▁end｜>).
  virtual const std::vector<std::string_view>& argument_terminators() const = 0;
  // How many trailing bytes of `arguments` are a closing of the arguments (a terminator less its
  // <｜tool▁call▁end｜>) or the start of one: held back while streaming, dropped when the arguments end without a
  // terminator. Each prefix of a reported suffix must be reported too, so that no part of one is emitted early.
  virtual size_t closing_suffix_length(std::string_view arguments) const = 0;
  // The text that opens a call (after <｜tool▁calls▁begin｜>): through the name and the start of the arguments
  // when `name` is given, otherwise only <｜tool▁call▁begin｜>.
  virtual std::string call_opening(const std::optional<std::string>& name) const = 0;
};

std::unique_ptr<const CallSyntax> make_deepseekv3_syntax();
std::unique_ptr<const CallSyntax> make_deepseekv31_syntax();

// Function-name characters the parsers accept (a superset of OpenAI's [A-Za-z0-9_-]).
inline bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' || c == '.' ||
         c == ':';
}
inline constexpr size_t kMaxNameBytes = 128;

}  // namespace fathom::function_call
