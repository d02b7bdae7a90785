#pragma once
// tokenizer.json "pre_tokenizer": Sequence, Split (regex or literal, every behavior, invert),
// Digits and ByteLevel (which must come last). Other types are rejected at load time.
#include <forward_list>
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
  struct Level {
    std::vector<std::pair<size_t, size_t>> matches;
    std::vector<MatchedSpan> spans;
    std::vector<std::pair<size_t, size_t>> pieces;
  };
  RegexScratch regex;
  std::vector<Level> levels;               // one per pre-tokenizer step (steps run depth-first)
  std::forward_list<std::string> arena;    // strings made by pre-tokenizers; alive for the whole call
};

// Receives each pre-token in order; a non-owning callable reference.
class WordSink {
 public:
  template <typename F>
  WordSink(F& function)  // NOLINT: implicit on purpose, like std::function_ref
      : object_(&function), call_([](void* object, std::string_view word) { (*static_cast<F*>(object))(word); }) {}
  void operator()(std::string_view word) const { call_(object_, word); }

 private:
  void* object_;
  void (*call_)(void*, std::string_view);
};

class PreTokenizer {
 public:
  PreTokenizer() = default;
  // `config` is the tokenizer.json "pre_tokenizer" value (null means none).
  static PreTokenizer from_json(const nlohmann::json& config);

  // True when a ByteLevel step is present: the model then sees each byte as one ByteLevel symbol.
  bool byte_level() const { return byte_level_; }

  // Calls `sink` with every pre-token of `text`, in order. Views point into `text` or scratch.arena.
  void for_each_word(std::string_view text, PreTokenizeScratch& scratch, WordSink sink) const;

 private:
  enum class Kind { kSplit, kPrefixSpace };
  struct Step {
    Kind kind;
    std::shared_ptr<Regex> regex;  // kSplit
    SplitBehavior behavior = SplitBehavior::kIsolated;
    bool invert = false;
  };
  void append_steps(const nlohmann::json& config);
  void visit(size_t step_index, std::string_view word, PreTokenizeScratch& scratch, const WordSink& sink) const;

  std::vector<Step> steps_;
  bool byte_level_ = false;
};

}  // namespace fathom::tokenizer
