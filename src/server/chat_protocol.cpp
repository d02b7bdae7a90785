#include "server/chat_protocol.h"

#include <map>
#include <random>

#include "server/openai_protocol_base.h"

namespace fathom::server {

namespace {

using Json = nlohmann::ordered_json;

constexpr size_t kToolCallIdSuffixChars = 24;

class ChatProtocol : public OpenAiProtocolBase {
 public:
  ChatProtocol(OpenAiResponseContext context, bool logprobs, std::shared_ptr<const ChatOutputOptions> output)
      : OpenAiProtocolBase(std::move(context), "chat.completion", "chat.completion.chunk"),
        logprobs_(logprobs),
        output_(output && output->active() ? std::move(output) : nullptr),
        random_(std::random_device{}()) {}

  void stream_opened(const std::vector<ChoiceResult>& choices, std::string& out) override {
    for (const ChoiceResult& choice : choices) {
      append_chunk(out, Json{{"index", choice.index}, {"delta", {{"role", "assistant"}, {"content", ""}}},
                             {"logprobs", nullptr}, {"finish_reason", nullptr}});
      if (output_) {
        auto [it, inserted] = streams_.try_emplace(choice.index, output_);
        append_output_chunks(out, choice.index, it->second.parser.start(), it->second.call_ids, nullptr);
      }
    }
  }

  void stream_delta(const ChoiceResult& choice, const scheduler::GenerationEvent& event, std::string& out) override {
    int32_t tool_calls = 0;
    if (!output_) {
      if (!event.text_delta.empty() || !event.logprobs.empty()) {
        append_chunk(out, Json{{"index", choice.index}, {"delta", {{"content", event.text_delta}}},
                               {"logprobs", logprobs_json(event.logprobs)}, {"finish_reason", nullptr}});
      }
    } else {
      Stream& stream = streams_.try_emplace(choice.index, output_).first->second;
      ChatOutputDelta delta = stream.parser.push(event.text_delta);
      if (choice.finished) delta.append(stream.parser.finish());
      Json logprobs = event.logprobs.empty() ? Json() : logprobs_json(event.logprobs);
      append_output_chunks(out, choice.index, std::move(delta), stream.call_ids, std::move(logprobs));
      tool_calls = stream.parser.tool_call_count();
    }
    if (choice.finished) {
      Json choice_json{{"index", choice.index}, {"delta", Json::object()}, {"logprobs", nullptr},
                       {"finish_reason", chat_finish_json(choice, tool_calls)}};
      add_matched_stop(choice_json, choice);
      append_chunk(out, std::move(choice_json));
    }
  }

  void stream_closed(const std::vector<ChoiceResult>& choices, std::string& out) override { append_usage_chunk(choices, out); }

  Json final_response(const std::vector<ChoiceResult>& choices) override {
    Json response = envelope(false);
    Json choice_list = Json::array();
    for (const ChoiceResult& choice : choices) {
      int32_t tool_calls = 0;
      Json message = output_ ? parsed_message(choice, tool_calls) : Json{{"role", "assistant"}, {"content", choice.text}};
      Json choice_json{{"index", choice.index}, {"message", std::move(message)}, {"logprobs", logprobs_json(choice.logprobs)},
                       {"finish_reason", chat_finish_json(choice, tool_calls)}};
      add_matched_stop(choice_json, choice);
      choice_list.push_back(std::move(choice_json));
    }
    response["choices"] = std::move(choice_list);
    // One prompt for every choice (vLLM gives the response one list); any choice that started has it.
    if (context_.prompt_logprobs) {
      response["prompt_logprobs"] = nullptr;
      for (const ChoiceResult& choice : choices) {
        if (choice.prompt_logprobs_ready) {
          response["prompt_logprobs"] = vllm_prompt_logprobs_json(choice, *context_.codec);
          break;
        }
      }
    }
    response["usage"] = usage_json(count_usage(choices));
    return response;
  }

 private:
  struct Stream {
    explicit Stream(std::shared_ptr<const ChatOutputOptions> options) : parser(std::move(options)) {}
    ChatOutputParser parser;
    std::vector<std::string> call_ids;  // by call index
  };

  static Json chat_finish_json(const ChoiceResult& choice, int32_t tool_calls) {
    if (choice.finished && choice.finish_reason == scheduler::FinishReason::kStop && tool_calls > 0) return "tool_calls";
    return finish_json(choice);
  }

  std::string new_call_id() {
    static constexpr char kAlphabet[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    std::uniform_int_distribution<size_t> pick(0, sizeof(kAlphabet) - 2);
    std::string id = "call_";
    for (size_t i = 0; i < kToolCallIdSuffixChars; ++i) id += kAlphabet[pick(random_)];
    return id;
  }

  Json parsed_message(const ChoiceResult& choice, int32_t& tool_calls) {
    ChatOutput parsed = parse_chat_output(output_, choice.text);
    Json message{{"role", "assistant"}};
    // null when the turn was only calls or only reasoning (as SGLang and vLLM answer), "" for an empty answer.
    const bool only_other_parts = !parsed.tool_calls.empty() || !parsed.reasoning.empty();
    message["content"] = parsed.content.empty() && only_other_parts ? Json() : Json(parsed.content);
    if (output_->reasoning_format) message["reasoning_content"] = parsed.reasoning.empty() ? Json() : Json(parsed.reasoning);
    if (!parsed.tool_calls.empty()) {
      Json calls = Json::array();
      for (const function_call::ToolCall& call : parsed.tool_calls) {
        calls.push_back(Json{{"id", new_call_id()}, {"type", "function"},
                             {"function", {{"name", call.name}, {"arguments", call.arguments}}}});
      }
      message["tool_calls"] = std::move(calls);
    }
    tool_calls = static_cast<int32_t>(parsed.tool_calls.size());
    return message;
  }

  // One chunk per kind of text (reasoning, content, tool calls); the event's logprobs ride on the first.
  void append_output_chunks(std::string& out, int64_t index, ChatOutputDelta delta, std::vector<std::string>& call_ids, Json logprobs) {
    std::vector<Json> deltas;
    if (!delta.reasoning.empty()) deltas.push_back(Json{{"reasoning_content", std::move(delta.reasoning)}});
    if (!delta.content.empty()) deltas.push_back(Json{{"content", std::move(delta.content)}});
    if (!delta.tool_calls.empty()) {
      Json calls = Json::array();
      for (function_call::ToolCallDelta& call : delta.tool_calls) {
        if (call.name) {
          call_ids.push_back(new_call_id());
          calls.push_back(Json{{"index", call.index}, {"id", call_ids.back()}, {"type", "function"},
                               {"function", {{"name", *call.name}, {"arguments", std::move(call.arguments)}}}});
        } else {
          calls.push_back(Json{{"index", call.index}, {"function", {{"arguments", std::move(call.arguments)}}}});
        }
      }
      deltas.push_back(Json{{"tool_calls", std::move(calls)}});
    }
    if (deltas.empty() && !logprobs.is_null()) deltas.push_back(Json{{"content", ""}});
    for (Json& fields : deltas) {
      append_chunk(out, Json{{"index", index}, {"delta", std::move(fields)}, {"logprobs", std::move(logprobs)}, {"finish_reason", nullptr}});
      logprobs = nullptr;
    }
  }

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
  std::shared_ptr<const ChatOutputOptions> output_;
  std::map<int64_t, Stream> streams_;  // by choice index
  std::mt19937_64 random_;             // tool-call ids
};

}  // namespace

std::unique_ptr<GenerationProtocol> make_chat_protocol(OpenAiResponseContext context, bool logprobs,
                                                       std::shared_ptr<const ChatOutputOptions> output) {
  return std::make_unique<ChatProtocol>(std::move(context), logprobs, std::move(output));
}

}  // namespace fathom::server
