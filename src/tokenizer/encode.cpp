// TokenizerData::encode_into: added tokens -> normalizer -> pre-tokenizer -> BPE, as HF orders them.
#include <forward_list>

#include "tokenizer/tokenizer_data.h"
#include "tokenizer/word_cache.h"

namespace fathom::tokenizer {

namespace {

// Inputs shorter than this skip the word cache: setting it up costs more than it saves.
constexpr size_t kWordCacheMinInputBytes = 256;

struct EncodeScratch {
  PreTokenizeScratch pre_tokenize;
  BpeScratch bpe;
  std::vector<TextPiece> raw_pieces;
  std::vector<TextPiece> normalized_pieces;
  std::forward_list<std::string> normalized_texts;  // alive for the whole call: cached words point into them
  WordCache cache;
  bool use_cache = false;
};

void encode_plain(const TokenizerData& data, std::string_view text, std::vector<int32_t>& ids, EncodeScratch& scratch) {
  const bool byte_level = data.pre_tokenizer.byte_level();
  auto encode_word = [&](std::string_view word) {
    if (!scratch.use_cache || word.size() < 2 || word.size() > WordCache::kMaxWordBytes) {
      data.model.encode_word(word, byte_level, ids, scratch.bpe);
      return;
    }
    size_t count = 0;
    WordCache::Probe probe;
    if (const int32_t* cached = scratch.cache.find(word, &count, &probe)) {
      ids.insert(ids.end(), cached, cached + count);
      return;
    }
    const size_t first = ids.size();
    data.model.encode_word(word, byte_level, ids, scratch.bpe);
    scratch.cache.insert(probe, word, ids.data() + first, ids.size() - first);
  };
  data.pre_tokenizer.for_each_word(text, scratch.pre_tokenize, encode_word);
}

// Second pass: normalize a text piece, then find the normalized added tokens in it.
void encode_unmatched(const TokenizerData& data, std::string_view piece, std::vector<int32_t>& ids, EncodeScratch& scratch) {
  if (piece.empty()) return;
  std::string_view normalized = piece;
  if (!data.normalizer.is_identity()) {
    normalized = scratch.normalized_texts.emplace_front(data.normalizer.normalize(piece, scratch.pre_tokenize.regex));
  }
  if (data.normalized_matcher->empty()) {
    encode_plain(data, normalized, ids, scratch);
    return;
  }
  data.normalized_matcher->find(normalized, scratch.normalized_pieces, scratch.pre_tokenize.regex);
  for (const TextPiece& sub : scratch.normalized_pieces) {
    if (sub.token_id >= 0) {
      ids.push_back(sub.token_id);
    } else {
      encode_plain(data, normalized.substr(sub.begin, sub.end - sub.begin), ids, scratch);
    }
  }
}

}  // namespace

void TokenizerData::encode_into(std::string_view text, std::vector<int32_t>& ids) const {
  EncodeScratch scratch;
  scratch.use_cache = text.size() >= kWordCacheMinInputBytes;
  if (raw_matcher->empty()) {
    encode_unmatched(*this, text, ids, scratch);
    return;
  }
  raw_matcher->find(text, scratch.raw_pieces, scratch.pre_tokenize.regex);
  for (const TextPiece& piece : scratch.raw_pieces) {
    if (piece.token_id >= 0) {
      ids.push_back(piece.token_id);
    } else {
      encode_unmatched(*this, text.substr(piece.begin, piece.end - piece.begin), ids, scratch);
    }
  }
}

}  // namespace fathom::tokenizer
