#pragma once
// Added tokens (tokenizer.json "added_tokens"): found in the text before pre-tokenization, with HF's
// rules: non-normalized tokens are matched on the raw text first, then normalized tokens on each
// normalized remaining piece; leftmost-longest matching; single_word, lstrip and rstrip options.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/onig_regex.h"

namespace fathom::tokenizer {

struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = true;
  bool special = false;
};

// A piece of text produced by added-token matching: either an added token's id or plain text.
struct TextPiece {
  size_t begin;
  size_t end;
  int32_t token_id;  // -1 for plain text
};

// Byte trie answering "longest token starting here".
class TokenTrie {
 public:
  void insert(std::string_view key, int32_t value);
  bool empty() const { return nodes_.size() <= 1; }
  bool may_start_with(unsigned char byte) const { return first_bytes_[byte]; }
  // Length of the longest key that prefixes text[pos..] (0 if none); *value is set when found.
  size_t longest_match(std::string_view text, size_t pos, int32_t* value) const;

 private:
  struct Node {
    std::vector<std::pair<unsigned char, int32_t>> children;
    int32_t value = -1;
  };
  std::vector<Node> nodes_{Node{}};
  bool first_bytes_[256] = {};
};

class AddedTokenMatcher {
 public:
  // `patterns` are the strings to look for (the normalized content for normalized tokens).
  AddedTokenMatcher(const std::vector<AddedToken>& tokens, const std::vector<std::string>& patterns);
  bool empty() const { return trie_.empty(); }
  // HF AddedVocabulary::find_matches: pieces covering `sentence`, added tokens marked with their id.
  void find(std::string_view sentence, std::vector<TextPiece>& pieces, RegexScratch& scratch) const;

 private:
  bool is_word_char_before(std::string_view text, size_t end, RegexScratch& scratch) const;
  bool is_word_char_at(std::string_view text, size_t pos, RegexScratch& scratch) const;

  TokenTrie trie_;
  std::vector<AddedToken> tokens_;
  std::shared_ptr<Regex> word_char_;   // Rust regex \w
  std::shared_ptr<Regex> whitespace_;  // Rust regex \s
};

}  // namespace fathom::tokenizer
