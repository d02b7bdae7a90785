#include "server/prompt_codec.h"

#include "server/api_error.h"

namespace fathom::server {

std::vector<int32_t> TokenIdsOnlyCodec::encode(const std::string& text, bool add_special_tokens) const {
  throw ApiError(400, "This server runs without a tokenizer (--skip-tokenizer-init): send token ids instead of text.", "prompt",
                 "tokenizer_unavailable");
}

std::string TokenIdsOnlyCodec::render_chat(const ChatPromptInputs& inputs) const {
  throw ApiError(400, "This server runs without a tokenizer (--skip-tokenizer-init): chat completions are unavailable.", "messages",
                 "tokenizer_unavailable");
}

}  // namespace fathom::server
