#pragma once
// What the OpenAI completion and chat protocols share: the response envelope, SSE chunks, the usage chunk,
// finish reasons, token pieces for logprobs.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/generation_protocol.h"
#include "server/openai_response.h"
#include "server/sse.h"

namespace fathom::server {

class OpenAiProtocolBase : public GenerationProtocol {
 public:
  using Json = nlohmann::ordered_json;

  OpenAiProtocolBase(OpenAiResponseContext context, const char* object, const char* chunk_object)
      : context_(std::move(context)), object_(object), chunk_object_(chunk_object) {}

 protected:
  Json envelope(bool chunk) const {
    Json json;
    json["id"] = context_.id;
    json["object"] = chunk ? chunk_object_ : object_;
    json["created"] = context_.created_unix_s;
    json["model"] = context_.model;
    return json;
  }
  void append_chunk(std::string& out, Json choice_json) const {
    Json chunk = envelope(true);
    chunk["choices"] = Json::array({std::move(choice_json)});
    if (context_.include_usage) chunk["usage"] = nullptr;
    append_sse_event(out, chunk);
  }
  void append_usage_chunk(const std::vector<ChoiceResult>& choices, std::string& out) const {
    if (!context_.include_usage) return;
    Json chunk = envelope(true);
    chunk["choices"] = Json::array();
    chunk["usage"] = usage_json(count_usage(choices));
    append_sse_event(out, chunk);
  }
  TokenPiece piece(int32_t id) const { return context_.codec->token_piece(id); }

  static Json bytes_json(const std::vector<uint8_t>& bytes) {
    Json array = Json::array();
    for (uint8_t byte : bytes) array.push_back(byte);
    return array;
  }
  static Json finish_json(const ChoiceResult& choice) { return choice.finished ? finish_reason_json(choice.finish_reason) : Json(); }
  static void add_matched_stop(Json& choice_json, const ChoiceResult& choice) {
    if (!choice.finished) return;
    // As SGLang reports it: the stop string, or the token id as a number.
    if (choice.matched_stop_token) {
      choice_json["matched_stop"] = *choice.matched_stop_token;
    } else if (!choice.matched_stop.empty()) {
      choice_json["matched_stop"] = choice.matched_stop;
    }
  }

  OpenAiResponseContext context_;
  const char* object_;
  const char* chunk_object_;
};

}  // namespace fathom::server
