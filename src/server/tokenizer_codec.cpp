#include "server/tokenizer_codec.h"

#include <array>

#include "chat/template_error.h"
#include "core/error.h"
#include "server/api_error.h"
#include "tokenizer/tokenizer_data.h"

namespace fathom::server {

namespace {

// Code point -> byte for the byte-level alphabet: printable Latin-1 bytes stand for themselves, the other
// 68 bytes are assigned the code points 256, 257, ... in increasing byte order.
std::array<int, 324> make_codepoint_to_byte() {
  std::array<int, 324> table;
  table.fill(-1);
  int next_extra = 256;
  for (int byte = 0; byte < 256; ++byte) {
    const bool printable = (byte >= 33 && byte <= 126) || (byte >= 161 && byte <= 172) || (byte >= 174 && byte <= 255);
    table[static_cast<size_t>(printable ? byte : next_extra++)] = byte;
  }
  return table;
}

}  // namespace

std::optional<std::vector<uint8_t>> byte_level_token_bytes(const std::string& token) {
  static const std::array<int, 324> kCodepointToByte = make_codepoint_to_byte();
  std::vector<uint8_t> bytes;
  for (size_t i = 0; i < token.size();) {
    const unsigned char lead = static_cast<unsigned char>(token[i]);
    uint32_t codepoint = 0;
    size_t length = 0;
    if (lead < 0x80) {
      codepoint = lead;
      length = 1;
    } else if ((lead & 0xe0) == 0xc0 && i + 1 < token.size()) {
      codepoint = ((lead & 0x1fu) << 6) | (static_cast<unsigned char>(token[i + 1]) & 0x3fu);
      length = 2;
    } else {
      return std::nullopt;  // the alphabet only uses code points below 0x800
    }
    if (codepoint >= kCodepointToByte.size() || kCodepointToByte[codepoint] < 0) return std::nullopt;
    bytes.push_back(static_cast<uint8_t>(kCodepointToByte[codepoint]));
    i += length;
  }
  return bytes;
}

TokenizerPromptCodec::TokenizerPromptCodec(const std::string& tokenizer_dir, const std::optional<std::string>& chat_template_file,
                                           int64_t model_vocab_size)
    : tokenizer_(tokenizer::Tokenizer::load(tokenizer_dir)) {
  if (model_vocab_size > 0 && model_vocab_size != tokenizer_.model_vocab_size()) {
    FATHOM_CHECK(model_vocab_size >= tokenizer_.vocab_size(),
                 "the model's vocab_size " << model_vocab_size << " is smaller than the tokenizer's " << tokenizer_.vocab_size()
                                           << " (" << tokenizer_dir << ")");
    tokenizer_ = tokenizer_.with_model_vocab_size(static_cast<int32_t>(model_vocab_size));
  }
  special_tokens_ = chat::load_special_tokens(tokenizer_dir);
  if (chat_template_file) {
    chat_template_.emplace(chat::load_chat_template(tokenizer_dir, chat_template_file));
  } else {
    try {
      chat_template_.emplace(chat::load_chat_template(tokenizer_dir, std::nullopt));
    } catch (const fathom::Error& error) {
      chat_template_problem_ = error.what();
    }
  }
}

std::vector<int32_t> TokenizerPromptCodec::encode(const std::string& text, bool add_special_tokens) const {
  return tokenizer_.encode(text, add_special_tokens);
}

std::string TokenizerPromptCodec::render_chat(const ChatPromptInputs& inputs) const {
  if (!chat_template_) {
    throw ApiError(400, "This model has no chat template (" + chat_template_problem_ +
                            "); start the server with --chat-template FILE or use /v1/completions.",
                   "messages", "no_chat_template");
  }
  chat::ChatTemplateInputs template_inputs;
  template_inputs.messages = inputs.messages;
  template_inputs.tools = inputs.tools;
  template_inputs.add_generation_prompt = inputs.add_generation_prompt;
  template_inputs.bos_token = special_tokens_.bos_token.value_or("");
  template_inputs.eos_token = special_tokens_.eos_token.value_or("");
  if (special_tokens_.pad_token) template_inputs.extra_context["pad_token"] = *special_tokens_.pad_token;
  if (special_tokens_.unk_token) template_inputs.extra_context["unk_token"] = *special_tokens_.unk_token;
  for (auto it = inputs.template_kwargs.begin(); it != inputs.template_kwargs.end(); ++it) {
    template_inputs.extra_context[it.key()] = it.value();
  }
  try {
    return chat_template_->render(template_inputs);
  } catch (const chat::TemplateRaisedError& error) {
    throw ApiError(400, error.what(), "messages", "invalid_value");
  } catch (const fathom::Error& error) {
    throw ApiError(400, std::string("The chat template could not render these messages: ") + error.what(), "messages",
                   "chat_template_error");
  }
}

std::string TokenizerPromptCodec::decode(const std::vector<int32_t>& ids) const { return tokenizer_.decode(ids, false); }

std::vector<std::string> TokenizerPromptCodec::special_token_texts() const {
  std::vector<std::string> texts;
  for (const tokenizer::AddedToken& token : tokenizer_.data().added_tokens) {
    if (token.special) texts.push_back(token.content);
  }
  return texts;
}

std::optional<std::string> TokenizerPromptCodec::vocabulary_token(int32_t id) const {
  std::string token = tokenizer_.id_to_token(id);
  if (token.empty()) return std::nullopt;
  return token;
}

TokenPiece TokenizerPromptCodec::token_piece(int32_t id) const {
  TokenPiece piece;
  piece.text = tokenizer_.decode({id}, false);
  piece.is_special = tokenizer_.is_special(id);
  std::optional<std::vector<uint8_t>> bytes;
  if (!piece.is_special) bytes = byte_level_token_bytes(tokenizer_.id_to_token(id));
  if (bytes) {
    piece.bytes = std::move(*bytes);
  } else {
    piece.bytes.assign(piece.text.begin(), piece.text.end());
  }
  return piece;
}

}  // namespace fathom::server
