#include "server/openai_response.h"

#include "server/sse.h"

namespace fathom::server {

namespace {

using Json = nlohmann::ordered_json;

Json bytes_json(const std::vector<uint8_t>& bytes) {
  Json array = Json::array();
  for (uint8_t byte : bytes) array.push_back(byte);
  return array;
}

Json finish_json(const ChoiceResult& choice) { return choice.finished ? finish_reason_json(choice.finish_reason) : Json(); }

void add_matched_stop(Json& choice_json, const ChoiceResult& choice) {
  if (choice.finished && !choice.matched_stop.empty()) choice_json["matched_stop"] = choice.matched_stop;
}

class OpenAiProtocolBase : public GenerationProtocol {
 public:
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

  OpenAiResponseContext context_;
  const char* object_;
  const char* chunk_object_;
};

class CompletionProtocol : public OpenAiProtocolBase {
 public:
  CompletionProtocol(OpenAiResponseContext context, std::vector<std::string> echo_prefixes, bool logprobs)
      : OpenAiProtocolBase(std::move(context), "text_completion", "text_completion"),
        echo_prefixes_(std::move(echo_prefixes)), logprobs_(logprobs) {}

  void stream_opened(const std::vector<ChoiceResult>& choices, std::string& out) override {
    if (echo_prefixes_.empty()) return;
    for (const ChoiceResult& choice : choices) {
      Json choice_json{{"index", choice.index}, {"text", echo_prefixes_.at(static_cast<size_t>(choice.prompt_index))},
                       {"logprobs", nullptr}, {"finish_reason", nullptr}};
      append_chunk(out, std::move(choice_json));
    }
  }

  void stream_delta(const ChoiceResult& choice, const scheduler::GenerationEvent& event, std::string& out) override {
    if (!event.text_delta.empty() || !event.new_token_ids.empty() || event.finished) {
      size_t text_offset = choice.text.size() - event.text_delta.size() + echo_length(choice);
      Json choice_json{{"index", choice.index}, {"text", event.text_delta},
                       {"logprobs", logprobs_json(event.logprobs, text_offset)}, {"finish_reason", finish_json(choice)}};
      add_matched_stop(choice_json, choice);
      append_chunk(out, std::move(choice_json));
    }
  }

  void stream_closed(const std::vector<ChoiceResult>& choices, std::string& out) override { append_usage_chunk(choices, out); }

  Json final_response(const std::vector<ChoiceResult>& choices) override {
    Json response = envelope(false);
    Json choice_list = Json::array();
    for (const ChoiceResult& choice : choices) {
      std::string text = echo_prefixes_.empty() ? choice.text : echo_prefixes_.at(static_cast<size_t>(choice.prompt_index)) + choice.text;
      Json choice_json{{"index", choice.index}, {"text", std::move(text)},
                       {"logprobs", logprobs_json(choice.logprobs, echo_length(choice))}, {"finish_reason", finish_json(choice)}};
      add_matched_stop(choice_json, choice);
      choice_list.push_back(std::move(choice_json));
    }
    response["choices"] = std::move(choice_list);
    response["usage"] = usage_json(count_usage(choices));
    return response;
  }

 private:
  size_t echo_length(const ChoiceResult& choice) const {
    return echo_prefixes_.empty() ? 0 : echo_prefixes_.at(static_cast<size_t>(choice.prompt_index)).size();
  }

  // {"tokens", "token_logprobs", "top_logprobs", "text_offset"}; text offsets are byte offsets into the text.
  Json logprobs_json(const std::vector<scheduler::TokenLogprob>& logprobs, size_t first_offset) const {
    if (!logprobs_) return nullptr;
    Json tokens = Json::array(), token_logprobs = Json::array(), top = Json::array(), offsets = Json::array();
    size_t offset = first_offset;
    for (const scheduler::TokenLogprob& entry : logprobs) {
      TokenPiece token = piece(entry.token_id);
      tokens.push_back(token.text);
      token_logprobs.push_back(entry.logprob);
      Json alternatives = Json::object();
      for (const auto& [id, logprob] : entry.top) alternatives[piece(id).text] = logprob;
      top.push_back(std::move(alternatives));
      offsets.push_back(offset);
      offset += token.text.size();
    }
    return Json{{"tokens", std::move(tokens)}, {"token_logprobs", std::move(token_logprobs)},
                {"top_logprobs", std::move(top)}, {"text_offset", std::move(offsets)}};
  }

  std::vector<std::string> echo_prefixes_;
  bool logprobs_;
};

class ChatProtocol : public OpenAiProtocolBase {
 public:
  ChatProtocol(OpenAiResponseContext context, bool logprobs)
      : OpenAiProtocolBase(std::move(context), "chat.completion", "chat.completion.chunk"), logprobs_(logprobs) {}

  void stream_opened(const std::vector<ChoiceResult>& choices, std::string& out) override {
    for (const ChoiceResult& choice : choices) {
      append_chunk(out, Json{{"index", choice.index}, {"delta", {{"role", "assistant"}, {"content", ""}}},
                             {"logprobs", nullptr}, {"finish_reason", nullptr}});
    }
  }

  void stream_delta(const ChoiceResult& choice, const scheduler::GenerationEvent& event, std::string& out) override {
    if (!event.text_delta.empty() || !event.logprobs.empty()) {
      append_chunk(out, Json{{"index", choice.index}, {"delta", {{"content", event.text_delta}}},
                             {"logprobs", logprobs_json(event.logprobs)}, {"finish_reason", nullptr}});
    }
    if (choice.finished) {
      Json choice_json{{"index", choice.index}, {"delta", Json::object()}, {"logprobs", nullptr},
                       {"finish_reason", finish_json(choice)}};
      add_matched_stop(choice_json, choice);
      append_chunk(out, std::move(choice_json));
    }
  }

  void stream_closed(const std::vector<ChoiceResult>& choices, std::string& out) override { append_usage_chunk(choices, out); }

  Json final_response(const std::vector<ChoiceResult>& choices) override {
    Json response = envelope(false);
    Json choice_list = Json::array();
    for (const ChoiceResult& choice : choices) {
      Json choice_json{{"index", choice.index}, {"message", {{"role", "assistant"}, {"content", choice.text}}},
                       {"logprobs", logprobs_json(choice.logprobs)}, {"finish_reason", finish_json(choice)}};
      add_matched_stop(choice_json, choice);
      choice_list.push_back(std::move(choice_json));
    }
    response["choices"] = std::move(choice_list);
    response["usage"] = usage_json(count_usage(choices));
    return response;
  }

 private:
  // {"content": [{"token", "logprob", "bytes", "top_logprobs": [{"token", "logprob", "bytes"}]}]}
  Json logprobs_json(const std::vector<scheduler::TokenLogprob>& logprobs) const {
    if (!logprobs_) return nullptr;
    Json content = Json::array();
    for (const scheduler::TokenLogprob& entry : logprobs) {
      TokenPiece token = piece(entry.token_id);
      Json alternatives = Json::array();
      for (const auto& [id, logprob] : entry.top) {
        TokenPiece alternative = piece(id);
        alternatives.push_back(Json{{"token", alternative.text}, {"logprob", logprob}, {"bytes", bytes_json(alternative.bytes)}});
      }
      content.push_back(Json{{"token", token.text}, {"logprob", entry.logprob}, {"bytes", bytes_json(token.bytes)},
                             {"top_logprobs", std::move(alternatives)}});
    }
    return Json{{"content", std::move(content)}};
  }

  bool logprobs_;
};

}  // namespace

std::unique_ptr<GenerationProtocol> make_completion_protocol(OpenAiResponseContext context, std::vector<std::string> echo_prefixes,
                                                             bool logprobs) {
  return std::make_unique<CompletionProtocol>(std::move(context), std::move(echo_prefixes), logprobs);
}

std::unique_ptr<GenerationProtocol> make_chat_protocol(OpenAiResponseContext context, bool logprobs) {
  return std::make_unique<ChatProtocol>(std::move(context), logprobs);
}

nlohmann::ordered_json model_card_json(const std::string& model_name, int64_t created_unix_s, int64_t max_model_len) {
  return Json{{"id", model_name}, {"object", "model"}, {"created", created_unix_s}, {"owned_by", "fathom"},
              {"root", model_name}, {"max_model_len", max_model_len}};
}

}  // namespace fathom::server
