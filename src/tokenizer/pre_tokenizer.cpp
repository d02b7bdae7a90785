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

void PreTokenizer::for_each_word(std::string_view text, PreTokenizeScratch& scratch, WordSink sink) const {
  if (text.empty()) return;
  if (scratch.levels.size() < steps_.size()) scratch.levels.resize(steps_.size());
  visit(0, text, scratch, sink);
}

// Depth-first: each piece of one step goes through the remaining steps before the next piece, so
// no list of all words of a long text is ever built.
void PreTokenizer::visit(size_t step_index, std::string_view word, PreTokenizeScratch& scratch, const WordSink& sink) const {
  if (step_index == steps_.size()) {
    sink(word);
    return;
  }
  const Step& step = steps_[step_index];
  if (step.kind == Kind::kPrefixSpace) {
    if (word.front() != ' ') {
      std::string& prefixed = scratch.arena.emplace_front();
      prefixed.reserve(word.size() + 1);
      prefixed.push_back(' ');
      prefixed.append(word);
      word = prefixed;
    }
    visit(step_index + 1, word, scratch, sink);
    return;
  }
  PreTokenizeScratch::Level& level = scratch.levels[step_index];
  step.regex->find_all(word, level.matches, scratch.regex);
  const bool whole_word_match = level.matches.size() == 1 && level.matches[0].first == 0 && level.matches[0].second == word.size();
  if (whole_word_match && (step.behavior != SplitBehavior::kRemoved || step.invert)) {
    visit(step_index + 1, word, scratch, sink);  // one match covering the word is kept whole by every other behavior
    return;
  }
  cover_with_matches(word.size(), level.matches, step.invert, level.spans);
  level.pieces.clear();
  split_by_behavior(level.spans, step.behavior, level.pieces);
  for (size_t i = 0; i < level.pieces.size(); ++i) {
    const auto [begin, end] = level.pieces[i];  // copy: deeper levels never touch this level's buffers
    visit(step_index + 1, word.substr(begin, end - begin), scratch, sink);
  }
}

}  // namespace fathom::tokenizer
