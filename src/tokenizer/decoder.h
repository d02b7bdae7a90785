#pragma once
// tokenizer.json "decoder": ByteLevel, Sequence, Fuse and Replace; null joins tokens with spaces.
// Other types are rejected at load time.
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "tokenizer/onig_regex.h"

namespace fathom::tokenizer {

class Decoder {
 public:
  Decoder() = default;
  // `config` is the tokenizer.json "decoder" value (null means none).
  static Decoder from_json(const nlohmann::json& config);

  // HF's decode: the chain of decode steps over the token strings, then concatenation.
  std::string decode(const std::vector<std::string_view>& tokens, RegexScratch& scratch) const;

  // Streaming form, available when the chain works token by token: the decoded text is
  // separator-joined token_piece()s, made valid UTF-8 with U+FFFD repair when output_is_bytes().
  bool is_per_token() const { return per_token_; }
  std::string token_piece(std::string_view token, RegexScratch& scratch) const;
  bool output_is_bytes() const { return byte_output_; }
  std::string_view separator() const { return configured_ ? "" : " "; }

 private:
  enum class Kind { kByteLevel, kFuse, kReplace };
  struct Step {
    Kind kind;
    std::shared_ptr<Regex> pattern;  // kReplace
    std::string content;             // kReplace
  };
  void append_steps(const nlohmann::json& config);
  static std::string replace_all(const Step& step, std::string_view text, RegexScratch& scratch);

  std::vector<Step> steps_;
  bool configured_ = false;  // false: no decoder at all, so HF joins tokens with spaces
  bool per_token_ = true;
  bool byte_output_ = false;
};

}  // namespace fathom::tokenizer
