// DeepSeek-V3 call syntax, as DeepSeek-V3's chat template renders calls:
//   <｜tool▁call▁begin｜>TYPE<｜tool▁sep｜>NAME\n```json\nARGUMENTS\n```<｜tool▁call▁end｜>
// TYPE is "function" in practice (any short identifier is accepted). Tolerated variations: another or no
// language tag on the fence, no fence at all (the arguments then run to <｜tool▁call▁end｜>), and a fence closed
// with or without a newline around it.
#include "function_call/call_syntax.h"
#include "function_call/deepseek_markers.h"

namespace fathom::function_call {

namespace {

constexpr size_t kMaxTypeBytes = 32;
constexpr size_t kMaxLanguageTagBytes = 16;
constexpr std::string_view kFence = "```";

bool is_identifier_char(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_'; }

class DeepSeekV3Syntax final : public CallSyntax {
 public:
  HeaderParse parse_header(std::string_view text, bool at_end) const override {
    HeaderParse result;
    auto need_more = [&] {
      result.status = HeaderParse::Status::kNeedMore;
      return result;
    };
    auto invalid = [&] {
      result.status = HeaderParse::Status::kInvalid;
      return result;
    };
    // TYPE up to the separator.
    size_t pos = 0;
    while (pos < text.size() && is_identifier_char(text[pos])) ++pos;
    if (pos > kMaxTypeBytes) return invalid();
    if (pos == text.size()) return need_more();
    const std::string_view separator = deepseek::kSeparator;
    const std::string_view after_type = text.substr(pos);
    if (after_type.size() < separator.size()) {
      return separator.substr(0, after_type.size()) == after_type ? need_more() : invalid();
    }
    if (after_type.substr(0, separator.size()) != separator) return invalid();
    pos += separator.size();
    // NAME up to the newline.
    const size_t name_begin = pos;
    while (pos < text.size() && is_name_char(text[pos])) {
      if (pos - name_begin >= kMaxNameBytes) return invalid();
      ++pos;
    }
    if (pos == text.size()) {
      result.name = std::string(text.substr(name_begin));
      return need_more();
    }
    if (text[pos] != '\n' || pos == name_begin) return invalid();
    result.name = std::string(text.substr(name_begin, pos - name_begin));
    ++pos;
    // Optional fence: ``` + language tag + newline.
    result.status = HeaderParse::Status::kComplete;
    const std::string_view rest = text.substr(pos);
    if (rest.size() < kFence.size() && kFence.substr(0, rest.size()) == rest) {
      if (!at_end) return need_more();
      result.length = text.size();  // an opening fence cut off by the end of output is syntax, not arguments
      return result;
    }
    if (rest.substr(0, kFence.size()) != kFence) {
      result.length = pos;  // unfenced arguments
      return result;
    }
    pos += kFence.size();
    const size_t tag_begin = pos;
    while (pos < text.size() && is_identifier_char(text[pos]) && pos - tag_begin < kMaxLanguageTagBytes) ++pos;
    if (pos == text.size() && !at_end) {
      result.status = HeaderParse::Status::kNeedMore;
      return result;
    }
    if (pos < text.size() && text[pos] == '\n') ++pos;
    result.length = pos;
    return result;
  }

  const std::vector<std::string_view>& argument_terminators() const override { return terminators_; }

  size_t closing_suffix_length(std::string_view arguments) const override {
    for (std::string_view closing : closings_) {
      if (arguments.ends_with(closing)) return closing.size();
    }
    return 0;
  }

  // Without a name only the marker is forced: the model writes the rest of the header, so that a header it
  // gets wrong degrades to its own text alone.
  std::string call_opening(const std::optional<std::string>& name) const override {
    std::string opening(deepseek::kCallBegin);
    if (name) opening += "function" + std::string(deepseek::kSeparator) + *name + "\n```json\n";
    return opening;
  }

 private:
  // The closing fence is written as it is held in memory once, here.
  std::string fence_then_end_ = std::string("\n```") + std::string(deepseek::kCallEnd);
  std::string fence_newline_then_end_ = std::string("\n```\n") + std::string(deepseek::kCallEnd);
  std::string bare_fence_then_end_ = std::string("```") + std::string(deepseek::kCallEnd);
  std::vector<std::string_view> terminators_ = {fence_then_end_, fence_newline_then_end_, bare_fence_then_end_, deepseek::kCallEnd};
  // The terminators less <｜tool▁call▁end｜>, with every prefix (so no part of one is emitted before it is
  // decided), longest first.
  std::vector<std::string_view> closings_ = {"\n```\n", "\n```", "\n``", "```", "\n`", "``", "\n", "`"};
};

}  // namespace

std::unique_ptr<const CallSyntax> make_deepseekv3_syntax() { return std::make_unique<DeepSeekV3Syntax>(); }

}  // namespace fathom::function_call
