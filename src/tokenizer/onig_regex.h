#pragma once
// Oniguruma regex compiled exactly as HF tokenizers compiles its split patterns (default syntax,
// UTF-8, capture groups), so Unicode classes and lookarounds behave identically.
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

struct re_pattern_buffer;
struct re_registers;

namespace fathom::tokenizer {

// Per-thread search state; one per encode call keeps searches allocation-free and thread-safe.
class RegexScratch {
 public:
  RegexScratch();
  ~RegexScratch();
  RegexScratch(const RegexScratch&) = delete;
  RegexScratch& operator=(const RegexScratch&) = delete;
  re_registers* region() { return region_; }

 private:
  re_registers* region_;
};

class Regex {
 public:
  // Throws fathom::Error naming the pattern and Oniguruma's message when it does not compile.
  explicit Regex(std::string_view pattern);
  // A pattern matching `literal` verbatim (HF's {"String": ...} patterns).
  static Regex literal(std::string_view literal);
  // tokenizer.json pattern objects: {"String": literal} or {"Regex": pattern}; `owner` names the user in errors.
  static Regex from_pattern_json(const nlohmann::json& pattern, std::string_view owner);

  const std::string& pattern() const { return pattern_; }

  // All matches in `text` as [begin, end) byte offsets, with the onig crate's find_iter rule:
  // an empty match right where the previous match ended is skipped by advancing one character.
  void find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>& matches,
                RegexScratch& scratch) const;

  // True when the regex matches starting exactly at text[pos] (anchored), text seen as a whole.
  bool matches_at(std::string_view text, size_t pos, RegexScratch& scratch) const;

 private:
  std::string pattern_;
  std::shared_ptr<re_pattern_buffer> compiled_;
};

}  // namespace fathom::tokenizer
