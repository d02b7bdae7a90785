#pragma once
// tokenizer.json "pre_tokenizer": Sequence, Split (regex or literal, every behavior, invert),
// Digits and ByteLevel (which must come last). Other types are rejected at load time.
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "tokenizer/onig_regex.h"
#include "tokenizer/split.h"

namespace fathom::tokenizer {

// Reusable buffers of one encode call.
struct PreTokenizeScratch {
  RegexScratch regex;
  std::vector<std::string_view> next_words;
  std::vector<std::pair<size_t, size_t>> matches;
  std::vector<MatchedSpan> spans;
  std::vector<std::pair<size_t, size_t>> pieces;
  std::deque<std::string> arena;  // strings created by pre-tokenizers (prefix spaces); stable addresses
};

class PreTokenizer {
 public:
  PreTokenizer() = default;
  // `config` is the tokenizer.json "pre_tokenizer" value (null means none).
  static PreTokenizer from_json(const nlohmann::json& config);

  // True when a ByteLevel step is present: the model then sees each byte as one ByteLevel symbol.
  bool byte_level() const { return byte_level_; }

  // Replaces `words` (initially the one piece of text to split) with the pre-tokens. Views point into
  // the original text or into scratch.arena.
  void split(std::vector<std::string_view>& words, PreTokenizeScratch& scratch) const;

 private:
  enum class Kind { kSplit, kPrefixSpace };
  struct Step {
    Kind kind;
    std::shared_ptr<Regex> regex;  // kSplit
    SplitBehavior behavior = SplitBehavior::kIsolated;
    bool invert = false;
  };
  void append_steps(const nlohmann::json& config);

  std::vector<Step> steps_;
  bool byte_level_ = false;
};

}  // namespace fathom::tokenizer
