#pragma once
// Ways to cut a recorded model output into streamed chunks, for checking that streaming parsers give the same
// result however their input is split: at every byte boundary (two pieces), byte by byte, character by
// character, at random points, and at the boundaries of the tokens a real tokenizer encodes it into.
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace fathom::testing {

using Chunking = std::vector<std::string>;

// [text[0:cut], text[cut:]] for every cut in [0, size].
inline std::vector<Chunking> two_piece_chunkings(const std::string& text) {
  std::vector<Chunking> chunkings;
  for (size_t cut = 0; cut <= text.size(); ++cut) chunkings.push_back({text.substr(0, cut), text.substr(cut)});
  return chunkings;
}

inline Chunking byte_chunking(const std::string& text) {
  Chunking chunks;
  for (char c : text) chunks.emplace_back(1, c);
  return chunks;
}

// One chunk per UTF-8 character (text must be valid UTF-8).
inline Chunking character_chunking(const std::string& text) {
  Chunking chunks;
  for (size_t i = 0; i < text.size();) {
    const unsigned char lead = static_cast<unsigned char>(text[i]);
    const size_t length = lead < 0x80 ? 1 : (lead & 0xE0) == 0xC0 ? 2 : (lead & 0xF0) == 0xE0 ? 3 : 4;
    chunks.push_back(text.substr(i, length));
    i += length;
  }
  return chunks;
}

// `count` chunkings with random cuts (empty chunks included), reproducible from `seed`.
inline std::vector<Chunking> random_chunkings(const std::string& text, uint64_t seed, int count) {
  std::mt19937_64 random(seed);
  std::vector<Chunking> chunkings;
  for (int n = 0; n < count; ++n) {
    Chunking chunks;
    size_t pos = 0;
    while (pos < text.size()) {
      const size_t length = std::uniform_int_distribution<size_t>(0, 12)(random);
      chunks.push_back(text.substr(pos, length));
      pos += length;
    }
    chunkings.push_back(std::move(chunks));
  }
  return chunkings;
}

// The text deltas an engine streams for `text`: encoded (added-token strings become their tokens), then
// decoded token by token with special tokens kept, as the server decodes when an output parser is active.
inline Chunking token_chunking(const tokenizer::Tokenizer& tokenizer, const std::string& text) {
  tokenizer::IncrementalDetokenizer detokenizer(tokenizer, /*skip_special_tokens=*/false);
  Chunking chunks;
  for (int32_t id : tokenizer.encode(text, /*add_special_tokens=*/false)) chunks.push_back(detokenizer.push(id));
  chunks.push_back(detokenizer.flush());
  return chunks;
}

// Two pieces cut at each token boundary of `tokens`.
inline std::vector<Chunking> token_boundary_chunkings(const Chunking& tokens) {
  std::vector<Chunking> chunkings;
  for (size_t cut = 0; cut <= tokens.size(); ++cut) {
    std::string head, tail;
    for (size_t i = 0; i < tokens.size(); ++i) (i < cut ? head : tail) += tokens[i];
    chunkings.push_back({head, tail});
  }
  return chunkings;
}

// Every chunking above for `text` (token ones when `tokenizer` is given).
inline std::vector<Chunking> all_chunkings(const std::string& text, const tokenizer::Tokenizer* tokenizer, uint64_t seed = 7) {
  std::vector<Chunking> chunkings = two_piece_chunkings(text);
  chunkings.push_back(byte_chunking(text));
  chunkings.push_back(character_chunking(text));
  for (Chunking& chunks : random_chunkings(text, seed, 32)) chunkings.push_back(std::move(chunks));
  if (tokenizer) {
    Chunking tokens = token_chunking(*tokenizer, text);
    for (Chunking& chunks : token_boundary_chunkings(tokens)) chunkings.push_back(std::move(chunks));
    chunkings.push_back(std::move(tokens));
  }
  return chunkings;
}

inline bool is_valid_utf8(const std::string& text) {
  for (size_t i = 0; i < text.size();) {
    const unsigned char lead = static_cast<unsigned char>(text[i]);
    size_t length = lead < 0x80 ? 1 : (lead & 0xE0) == 0xC0 ? 2 : (lead & 0xF0) == 0xE0 ? 3 : (lead & 0xF8) == 0xF0 ? 4 : 0;
    if (length == 0 || i + length > text.size()) return false;
    for (size_t k = 1; k < length; ++k) {
      if ((static_cast<unsigned char>(text[i + k]) & 0xC0) != 0x80) return false;
    }
    i += length;
  }
  return true;
}

}  // namespace fathom::testing
