#include "core/error.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_data.h"
#include "tokenizer/utf8.h"

namespace fathom::tokenizer {

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer& tokenizer, bool skip_special_tokens)
    : tokenizer_(tokenizer), skip_special_tokens_(skip_special_tokens) {
  FATHOM_CHECK(tokenizer.data().decoder.is_per_token(),
               "incremental decoding needs a decoder that works token by token (ByteLevel, Replace, Fuse)");
}

std::string IncrementalDetokenizer::push(int32_t id) {
  const TokenizerData& data = tokenizer_.data();
  FATHOM_CHECK(id >= 0 && id < tokenizer_.model_vocab_size(),
               "token id " << id << " is outside [0, " << tokenizer_.model_vocab_size() << ")");
  if (id >= data.vocab_size) return {};
  const uint8_t flags = data.id_flags[static_cast<size_t>(id)];
  if (!(flags & TokenizerData::kHasToken) || (skip_special_tokens_ && (flags & TokenizerData::kSpecial))) return {};
  if (!at_start_) pending_.append(data.decoder.separator());
  at_start_ = false;
  pending_.append(data.token_pieces[static_cast<size_t>(id)]);
  std::string ready;
  if (!data.decoder.output_is_bytes()) {
    ready.swap(pending_);
    return ready;
  }
  const size_t consumed = utf8::append_lossy(pending_, ready, /*final=*/false);
  pending_.erase(0, consumed);
  return ready;
}

std::string IncrementalDetokenizer::flush() {
  std::string rest = utf8::to_lossy(pending_);
  pending_.clear();
  at_start_ = true;
  return rest;
}

}  // namespace fathom::tokenizer
