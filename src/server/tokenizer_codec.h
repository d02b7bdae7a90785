#pragma once
// PromptCodec over a Hugging Face tokenizer directory (fathom::tokenizer) and its chat template (fathom::chat).
#include <optional>
#include <string>

#include "chat/chat_template.h"
#include "server/prompt_codec.h"
#include "tokenizer/tokenizer.h"

namespace fathom::server {

class TokenizerPromptCodec : public PromptCodec {
 public:
  // `model_vocab_size` > 0 widens the valid id range to the model's embedding rows (DeepSeek-V3: 129280).
  // A --chat-template file that cannot be loaded throws; a tokenizer without a template only fails chat requests.
  TokenizerPromptCodec(const std::string& tokenizer_dir, const std::optional<std::string>& chat_template_file,
                       int64_t model_vocab_size);

  std::vector<int32_t> encode(const std::string& text, bool add_special_tokens) const override;
  std::string render_chat(const ChatPromptInputs& inputs) const override;
  std::string decode(const std::vector<int32_t>& ids) const override;
  TokenPiece token_piece(int32_t id) const override;
  std::optional<std::string> vocabulary_token(int32_t id) const override;
  int64_t vocab_size() const override { return tokenizer_.model_vocab_size(); }
  std::vector<std::string> special_token_texts() const override;

  const tokenizer::Tokenizer& tokenizer() const { return tokenizer_; }
  bool has_chat_template() const { return chat_template_.has_value(); }
  // The Jinja source ("" without a template).
  std::string chat_template_source() const { return chat_template_ ? chat_template_->source() : std::string(); }

 private:
  tokenizer::Tokenizer tokenizer_;
  std::optional<chat::ChatTemplate> chat_template_;
  std::string chat_template_problem_;
  chat::SpecialTokens special_tokens_;
};

// The raw bytes of a byte-level BPE token string (GPT-2's byte-to-unicode alphabet); nullopt when the
// string uses characters outside that alphabet (e.g. an added token).
std::optional<std::vector<uint8_t>> byte_level_token_bytes(const std::string& token);

}  // namespace fathom::server
