#pragma once
// tokenizer.json "normalizer": the supported subset (Sequence, Prepend, Replace, Strip); any other
// type (NFC, NFKC, Lowercase, ...) is rejected at load time with an error naming it.
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "tokenizer/onig_regex.h"

namespace fathom::tokenizer {

class Normalizer {
 public:
  Normalizer() = default;
  // `config` is the tokenizer.json "normalizer" value (null means none).
  static Normalizer from_json(const nlohmann::json& config);

  bool is_identity() const { return steps_.empty(); }
  std::string normalize(std::string_view text, RegexScratch& scratch) const;

 private:
  enum class Kind { kPrepend, kReplace, kStrip };
  struct Step {
    Kind kind;
    std::string text;                // Prepend: prefix; Replace: replacement content
    std::shared_ptr<Regex> pattern;  // Replace
    bool strip_left = false;
    bool strip_right = false;
  };
  static void append_steps(const nlohmann::json& config, std::vector<Step>& steps);

  std::vector<Step> steps_;
  std::shared_ptr<Regex> whitespace_;  // Unicode White_Space, for Strip
};

}  // namespace fathom::tokenizer
