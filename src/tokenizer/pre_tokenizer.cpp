#include "tokenizer/pre_tokenizer.h"

#include "core/error.h"

namespace fathom::tokenizer {

namespace {
// The GPT-2 pattern HF's ByteLevel pre-tokenizer applies when use_regex is true.
constexpr std::string_view kByteLevelPattern =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
}  // namespace

void PreTokenizer::append_steps(const nlohmann::json& config) {
  FATHOM_CHECK(!byte_level_, "pre_tokenizer: ByteLevel must be the last pre-tokenizer (found "
                                 << config.value("type", "?") << " after it)");
  const std::string type = config.value("type", "");
  if (type == "Sequence") {
    const auto& children = config.at("pretokenizers");
    for (const auto& child : children) append_steps(child);
  } else if (type == "Split") {
    Step step{Kind::kSplit, std::make_shared<Regex>(Regex::from_pattern_json(config.at("pattern"), "Split pre-tokenizer"))};
    step.behavior = parse_split_behavior(config.at("behavior").get<std::string>());
    step.invert = config.value("invert", false);
    steps_.push_back(std::move(step));
  } else if (type == "Digits") {
    // HF splits on char::is_numeric (categories Nd, Nl, No), each numeric character a match.
    Step step{Kind::kSplit, std::make_shared<Regex>("\\p{N}")};
    step.behavior = config.value("individual_digits", false) ? SplitBehavior::kIsolated : SplitBehavior::kContiguous;
    steps_.push_back(std::move(step));
  } else if (type == "ByteLevel") {
    if (config.value("add_prefix_space", true)) steps_.push_back({Kind::kPrefixSpace, nullptr});
    if (config.value("use_regex", true)) {
      steps_.push_back({Kind::kSplit, std::make_shared<Regex>(kByteLevelPattern), SplitBehavior::kIsolated, false});
    }
    byte_level_ = true;
  } else {
    FATHOM_FAIL("unsupported pre_tokenizer type '" << type << "' (supported: Sequence, Split, Digits, ByteLevel)");
  }
}

PreTokenizer PreTokenizer::from_json(const nlohmann::json& config) {
  PreTokenizer pre_tokenizer;
  if (!config.is_null()) pre_tokenizer.append_steps(config);
  return pre_tokenizer;
}

void PreTokenizer::split(std::vector<std::string_view>& words, PreTokenizeScratch& scratch) const {
  for (const Step& step : steps_) {
    std::vector<std::string_view>& next = scratch.next_words;
    next.clear();
    for (std::string_view word : words) {
      if (step.kind == Kind::kPrefixSpace) {
        if (word.front() == ' ') {
          next.push_back(word);
        } else {
          std::string& prefixed = scratch.arena.emplace_back();
          prefixed.reserve(word.size() + 1);
          prefixed.push_back(' ');
          prefixed.append(word);
          next.push_back(prefixed);
        }
        continue;
      }
      step.regex->find_all(word, scratch.matches, scratch.regex);
      const bool whole_word_match =
          scratch.matches.size() == 1 && scratch.matches[0].first == 0 && scratch.matches[0].second == word.size();
      if (whole_word_match && (step.behavior != SplitBehavior::kRemoved || step.invert)) {
        next.push_back(word);  // one match covering the word is kept whole by every other behavior
        continue;
      }
      cover_with_matches(word.size(), scratch.matches, step.invert, scratch.spans);
      scratch.pieces.clear();
      split_by_behavior(scratch.spans, step.behavior, scratch.pieces);
      for (const auto& [begin, end] : scratch.pieces) next.push_back(word.substr(begin, end - begin));
    }
    words.swap(next);
  }
}

}  // namespace fathom::tokenizer
