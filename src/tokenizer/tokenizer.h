#pragma once
// Text <-> token ids for Hugging Face tokenizer.json files (byte-level BPE, as DeepSeek-V3/R1 use),
// producing exactly the ids of HF tokenizers 0.23 for the supported components.
//
// Defined behaviour:
// - encode() input that is not valid UTF-8 is repaired first: each maximal invalid subpart becomes
//   U+FFFD, as Python's bytes.decode("utf-8", errors="replace") does; the repaired text is encoded.
// - encode() input longer than max_input_bytes() (default kDefaultMaxInputBytes) throws fathom::Error.
// - Added-token strings in the text (special or not) always map to their ids, as in HF.
// - add_special_tokens: when tokenizer_config.json has add_bos_token / add_eos_token, BOS / EOS are
//   added per those flags (what transformers does); otherwise tokenizer.json's post_processor applies.
// - decode(): ids in [vocab_size(), model_vocab_size()) (embedding rows without a token) decode to
//   nothing; ids outside [0, model_vocab_size()) throw. Invalid UTF-8 produced by byte-level tokens
//   becomes U+FFFD per maximal invalid subpart (HF's from_utf8_lossy).
// - A Tokenizer is immutable: every const method may run concurrently; copies share the loaded data.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace fathom::tokenizer {

inline constexpr size_t kDefaultMaxInputBytes = size_t{64} << 20;

struct TokenizerData;

class Tokenizer {
 public:
  // `dir` holds tokenizer.json and optionally tokenizer_config.json and the model's config.json
  // (whose vocab_size sets model_vocab_size()).
  static Tokenizer load(const std::string& dir);
  // tokenizer_config_json may be empty (no config).
  static Tokenizer from_json(const std::string& tokenizer_json, const std::string& tokenizer_config_json);

  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens) const;
  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const;

  std::optional<int32_t> token_to_id(std::string_view token) const;
  // The token's string (ByteLevel alphabet for model tokens); "" for an id without a token inside
  // [0, model_vocab_size()); throws outside it.
  std::string id_to_token(int32_t id) const;
  int32_t vocab_size() const;  // number of ids the tokenizer knows (128815 for DeepSeek-V3)
  std::optional<int32_t> bos_token_id() const;
  std::optional<int32_t> eos_token_id() const;
  std::string bos_token() const;  // "" when the config names none
  std::string eos_token() const;
  bool add_bos_token() const;
  const nlohmann::json& tokenizer_config() const;  // raw tokenizer_config.json ({} when absent)
  bool is_special(int32_t id) const;

  // Rows of the model's embedding (>= vocab_size()); defaults to vocab_size() or config.json's vocab_size.
  int32_t model_vocab_size() const { return model_vocab_size_; }
  Tokenizer with_model_vocab_size(int32_t model_vocab_size) const;
  size_t max_input_bytes() const { return max_input_bytes_; }
  Tokenizer with_max_input_bytes(size_t max_input_bytes) const;

  // Internal data, for IncrementalDetokenizer and tests.
  const TokenizerData& data() const { return *data_; }

 private:
  explicit Tokenizer(std::shared_ptr<const TokenizerData> data);
  void check_id(int32_t id) const;

  std::shared_ptr<const TokenizerData> data_;
  int32_t model_vocab_size_ = 0;
  size_t max_input_bytes_ = kDefaultMaxInputBytes;
};

// Turns a stream of ids into text pieces whose concatenation equals Tokenizer::decode of all ids.
// A piece is emitted only up to a complete UTF-8 character; bytes of a character split across
// tokens are held until it completes (or proves invalid, which yields U+FFFD).
class IncrementalDetokenizer {
 public:
  // Throws when the tokenizer's decoder does not work token by token (see Decoder::is_per_token).
  IncrementalDetokenizer(const Tokenizer& tokenizer, bool skip_special_tokens);
  // Text made final by this id; may be empty. Throws for ids outside [0, model_vocab_size()).
  std::string push(int32_t id);
  // End of stream: the held-back bytes, an incomplete character becoming U+FFFD. Resets the stream.
  std::string flush();

 private:
  Tokenizer tokenizer_;
  bool skip_special_tokens_;
  bool at_start_ = true;
  std::string pending_;
};

}  // namespace fathom::tokenizer
