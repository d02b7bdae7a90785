#pragma once
// Everything a loaded tokenizer holds; built once by the loader and then only read.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "tokenizer/added_vocabulary.h"
#include "tokenizer/bpe_model.h"
#include "tokenizer/decoder.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/post_processor.h"
#include "tokenizer/pre_tokenizer.h"

namespace fathom::tokenizer {

struct TokenizerData {
  Normalizer normalizer;
  PreTokenizer pre_tokenizer;
  BpeModel model;
  std::vector<AddedToken> added_tokens;
  std::unique_ptr<AddedTokenMatcher> raw_matcher;         // added tokens with normalized=false
  std::unique_ptr<AddedTokenMatcher> normalized_matcher;  // added tokens with normalized=true
  TokenIdMap added_token_ids;                             // content -> id
  PostProcessor post_processor;
  Decoder decoder;
  nlohmann::json config = nlohmann::json::object();

  int32_t vocab_size = 0;
  std::optional<int32_t> config_model_vocab_size;  // from the model's config.json when loaded from a dir
  std::vector<std::string> id_tokens;     // by id: added-token content or model token
  std::vector<uint8_t> id_flags;          // by id: kHasToken | kSpecial
  std::vector<std::string> token_pieces;  // by id: Decoder::token_piece, when the decoder is per-token
  static constexpr uint8_t kHasToken = 1;
  static constexpr uint8_t kSpecial = 2;

  std::string bos_token;
  std::string eos_token;
  std::optional<int32_t> bos_id;
  std::optional<int32_t> eos_id;
  bool add_bos_token = false;

  static std::shared_ptr<const TokenizerData> parse(const std::string& tokenizer_json, const std::string& config_json);
  std::optional<int32_t> token_to_id(std::string_view token) const;
  // Appends the ids of `text` (valid UTF-8) without special tokens.
  void encode_into(std::string_view text, std::vector<int32_t>& ids) const;
};

}  // namespace fathom::tokenizer
