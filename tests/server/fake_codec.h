#pragma once
// A PromptCodec for server tests: one token per byte (BOS 256 when special tokens are added), a chat
// "template" of "role: content\n" lines (after a "tools: NAME ..." line when tools are given), and token pieces
// that match FakeEngine's text.
#include <string>

#include "fake_engine.h"
#include "server/api_error.h"
#include "server/prompt_codec.h"

namespace fathom::testing {

class FakeCodec : public server::PromptCodec {
 public:
  static constexpr int32_t kBos = 256;

  std::vector<int32_t> encode(const std::string& text, bool add_special_tokens) const override {
    std::vector<int32_t> ids;
    if (add_special_tokens) ids.push_back(kBos);
    for (unsigned char c : text) ids.push_back(c);
    return ids;
  }
  std::string render_chat(const server::ChatPromptInputs& inputs) const override {
    std::string prompt;
    if (inputs.tools.is_array()) {
      prompt += "tools:";
      for (const auto& tool : inputs.tools) prompt += " " + tool["function"]["name"].get<std::string>();
      prompt += "\n";
    }
    for (const auto& message : inputs.messages) {
      if (message.value("content", nlohmann::ordered_json()) == "RAISE") {
        throw server::ApiError(400, "Conversation roles must alternate user/assistant/user/assistant/...", "messages");
      }
      prompt += message["role"].get<std::string>() + ": " +
                (message["content"].is_string() ? message["content"].get<std::string>() : std::string()) + "\n";
    }
    if (inputs.template_kwargs.contains("thinking")) prompt += "<think>\n";
    if (inputs.add_generation_prompt) prompt += "assistant:";
    return prompt;
  }
  std::string decode(const std::vector<int32_t>& ids) const override {
    std::string text;
    for (int32_t id : ids) {
      if (id < 256) text += static_cast<char>(id);
    }
    return text;
  }
  server::TokenPiece token_piece(int32_t id) const override {
    server::TokenPiece piece;
    piece.text = FakeEngine::token_text(id);
    piece.bytes.assign(piece.text.begin(), piece.text.end());
    return piece;
  }
  // The vocabulary's strings differ from the decoded texts (as ByteLevel's "Ġ" forms do); ids past 300 have none.
  std::optional<std::string> vocabulary_token(int32_t id) const override {
    if (id >= 300) return std::nullopt;
    return "v" + std::to_string(id);
  }
  int64_t vocab_size() const override { return 1000; }
  std::vector<std::string> special_token_texts() const override { return {kEndOfTurn}; }
  static constexpr const char* kEndOfTurn = "<|eot|>";  // a "special token" text for the output-parsing tests
};

}  // namespace fathom::testing
