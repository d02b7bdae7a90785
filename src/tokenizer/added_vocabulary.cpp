#include "tokenizer/added_vocabulary.h"

#include <algorithm>

#include "tokenizer/utf8.h"

namespace fathom::tokenizer {

void TokenTrie::insert(std::string_view key, int32_t value) {
  if (key.empty()) return;
  int32_t node = 0;
  for (char c : key) {
    const auto byte = static_cast<unsigned char>(c);
    auto& children = nodes_[static_cast<size_t>(node)].children;
    auto it = std::find_if(children.begin(), children.end(), [&](const auto& child) { return child.first == byte; });
    if (it != children.end()) {
      node = it->second;
    } else {
      const auto child = static_cast<int32_t>(nodes_.size());
      children.emplace_back(byte, child);
      nodes_.emplace_back();
      node = child;
    }
  }
  // The first token with a given content wins, as in HF where the map keeps one id per content.
  if (nodes_[static_cast<size_t>(node)].value < 0) nodes_[static_cast<size_t>(node)].value = value;
  first_bytes_[static_cast<unsigned char>(key[0])] = true;
}

size_t TokenTrie::longest_match(std::string_view text, size_t pos, int32_t* value) const {
  size_t best_length = 0;
  int32_t node = 0;
  for (size_t i = pos; i < text.size(); ++i) {
    const auto byte = static_cast<unsigned char>(text[i]);
    const auto& children = nodes_[static_cast<size_t>(node)].children;
    auto it = std::find_if(children.begin(), children.end(), [&](const auto& child) { return child.first == byte; });
    if (it == children.end()) break;
    node = it->second;
    if (nodes_[static_cast<size_t>(node)].value >= 0) {
      best_length = i + 1 - pos;
      *value = nodes_[static_cast<size_t>(node)].value;
    }
  }
  return best_length;
}

AddedTokenMatcher::AddedTokenMatcher(const std::vector<AddedToken>& tokens, const std::vector<std::string>& patterns)
    : tokens_(tokens),
      word_char_(std::make_shared<Regex>("[\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\p{Join_Control}]")),
      whitespace_(std::make_shared<Regex>("\\p{White_Space}")) {
  for (size_t i = 0; i < tokens.size(); ++i) trie_.insert(patterns[i], static_cast<int32_t>(i));
}

bool AddedTokenMatcher::is_word_char_before(std::string_view text, size_t end, RegexScratch& scratch) const {
  if (end == 0) return false;
  size_t start;
  utf8::decode_before(text, end, &start);
  return word_char_->matches_at(text, start, scratch);
}

bool AddedTokenMatcher::is_word_char_at(std::string_view text, size_t pos, RegexScratch& scratch) const {
  return pos < text.size() && word_char_->matches_at(text, pos, scratch);
}

void AddedTokenMatcher::find(std::string_view sentence, std::vector<TextPiece>& pieces, RegexScratch& scratch) const {
  pieces.clear();
  size_t covered_until = 0;  // HF's start_offset: end of the last emitted piece
  size_t pos = 0;
  while (pos < sentence.size()) {
    if (!trie_.may_start_with(static_cast<unsigned char>(sentence[pos]))) {
      ++pos;
      continue;
    }
    int32_t token_index = -1;
    const size_t length = trie_.longest_match(sentence, pos, &token_index);
    if (length == 0) {
      ++pos;
      continue;
    }
    size_t start = pos;
    size_t stop = pos + length;
    pos = stop;  // matching resumes after the raw match even when it is discarded or stripped
    const AddedToken& token = tokens_[static_cast<size_t>(token_index)];
    if (token.single_word) {
      const bool word_before = is_word_char_before(sentence, start, scratch);
      const bool word_after = is_word_char_at(sentence, stop, scratch);
      if (word_before || word_after) continue;
    }
    if (token.lstrip) {
      size_t new_start = start;
      while (new_start > 0) {
        size_t char_start;
        utf8::decode_before(sentence, new_start, &char_start);
        if (!whitespace_->matches_at(sentence, char_start, scratch)) break;
        new_start = char_start;
      }
      start = std::max(new_start, covered_until);
    }
    if (token.rstrip) {
      while (stop < sentence.size() && whitespace_->matches_at(sentence, stop, scratch)) utf8::decode_next(sentence, stop);
    }
    if (covered_until < start) pieces.push_back({covered_until, start, -1});
    pieces.push_back({start, stop, token.id});
    covered_until = stop;
  }
  if (covered_until != sentence.size()) pieces.push_back({covered_until, sentence.size(), -1});
}

}  // namespace fathom::tokenizer
