// DeepSeek-V3.1 call syntax: <｜tool▁call▁begin｜>NAME<｜tool▁sep｜>ARGUMENTS<｜tool▁call▁end｜> (no type, no fence).
#include "function_call/call_syntax.h"
#include "function_call/deepseek_markers.h"

namespace fathom::function_call {

namespace {

class DeepSeekV31Syntax final : public CallSyntax {
 public:
  HeaderParse parse_header(std::string_view text, bool /*at_end*/) const override {
    HeaderParse result;
    size_t pos = 0;
    while (pos < text.size() && is_name_char(text[pos])) {
      if (pos >= kMaxNameBytes) {
        result.status = HeaderParse::Status::kInvalid;
        return result;
      }
      ++pos;
    }
    const std::string_view separator = deepseek::kSeparator;
    const std::string_view rest = text.substr(pos);
    const bool separator_complete = rest.substr(0, separator.size()) == separator;
    const bool separator_partial = rest.size() < separator.size() && separator.substr(0, rest.size()) == rest;
    if (pos > 0 && separator_complete) {
      result.status = HeaderParse::Status::kComplete;
      result.name = std::string(text.substr(0, pos));
      result.length = pos + separator.size();
    } else if (separator_partial) {
      result.status = HeaderParse::Status::kNeedMore;  // includes the empty text
      result.name = std::string(text.substr(0, pos));
      result.name_complete = !rest.empty();
    } else {
      result.status = HeaderParse::Status::kInvalid;
    }
    return result;
  }

  const std::vector<std::string_view>& argument_terminators() const override { return terminators_; }

  // No fence: whatever precedes <｜tool▁call▁end｜> (or the end of output) is argument text.
  size_t closing_suffix_length(std::string_view) const override { return 0; }

  std::string call_opening(const std::optional<std::string>& name) const override {
    std::string opening(deepseek::kCallBegin);
    if (name) opening += *name + std::string(deepseek::kSeparator);
    return opening;
  }

 private:
  std::vector<std::string_view> terminators_ = {deepseek::kCallEnd};
};

}  // namespace

std::unique_ptr<const CallSyntax> make_deepseekv31_syntax() { return std::make_unique<DeepSeekV31Syntax>(); }

}  // namespace fathom::function_call
