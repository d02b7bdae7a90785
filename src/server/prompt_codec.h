#pragma once
// What the HTTP layer needs from a tokenizer and chat template: prompt text -> token ids, chat messages ->
// prompt text, and token strings for logprobs. Implemented over fathom::tokenizer + fathom::chat by
// TokenizerPromptCodec; faked in tests. All methods are const and may run concurrently.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace fathom::server {

struct ChatPromptInputs {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  nlohmann::ordered_json tools;                                          // null or an array
  nlohmann::ordered_json template_kwargs = nlohmann::ordered_json::object();  // extra template variables
  bool add_generation_prompt = true;
};

// A token as logprobs report it: its text (lossy for partial UTF-8) and its exact bytes.
struct TokenPiece {
  std::string text;
  std::vector<uint8_t> bytes;
  bool is_special = false;  // a special token (left out of the text under skip_special_tokens)
};

class PromptCodec {
 public:
  virtual ~PromptCodec() = default;
  virtual std::vector<int32_t> encode(const std::string& text, bool add_special_tokens) const = 0;
  // Throws ApiError(400) when the template rejects the conversation (raise_exception) or there is none.
  virtual std::string render_chat(const ChatPromptInputs& inputs) const = 0;
  virtual std::string decode(const std::vector<int32_t>& ids) const = 0;
  virtual TokenPiece token_piece(int32_t id) const = 0;
  // The tokenizer's own string for the id (HF convert_ids_to_tokens: the ByteLevel alphabet, "Ġworld"); nullopt for
  // an id the tokenizer has no token for, or without a tokenizer.
  virtual std::optional<std::string> vocabulary_token(int32_t id) const { return std::nullopt; }
  // Valid token ids are [0, vocab_size()).
  virtual int64_t vocab_size() const = 0;
  // The texts of the tokenizer's special tokens (what skip_special_tokens drops when decoding).
  virtual std::vector<std::string> special_token_texts() const { return {}; }
  // False without a tokenizer: decode() and token_piece() have no text to give.
  virtual bool has_text() const { return true; }
};

}  // namespace fathom::server

namespace fathom::server {

// For servers started without a tokenizer (--skip-tokenizer-init): token-id prompts only; text prompts and
// chat requests get a 400, and logprob tokens have no text.
class TokenIdsOnlyCodec : public PromptCodec {
 public:
  explicit TokenIdsOnlyCodec(int64_t vocab_size) : vocab_size_(vocab_size) {}
  std::vector<int32_t> encode(const std::string& text, bool add_special_tokens) const override;
  std::string render_chat(const ChatPromptInputs& inputs) const override;
  std::string decode(const std::vector<int32_t>& ids) const override { return ""; }
  TokenPiece token_piece(int32_t id) const override { return {}; }
  int64_t vocab_size() const override { return vocab_size_; }
  bool has_text() const override { return false; }

 private:
  int64_t vocab_size_;
};

}  // namespace fathom::server
