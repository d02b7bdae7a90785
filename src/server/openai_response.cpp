#include "server/openai_response.h"

#include "server/openai_protocol_base.h"

namespace fathom::server {

namespace {

using Json = nlohmann::ordered_json;

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

}  // namespace

std::unique_ptr<GenerationProtocol> make_completion_protocol(OpenAiResponseContext context, std::vector<std::string> echo_prefixes,
                                                             bool logprobs) {
  return std::make_unique<CompletionProtocol>(std::move(context), std::move(echo_prefixes), logprobs);
}

nlohmann::ordered_json model_card_json(const std::string& model_name, int64_t created_unix_s, int64_t max_model_len) {
  return Json{{"id", model_name}, {"object", "model"}, {"created", created_unix_s}, {"owned_by", "fathom"},
              {"root", model_name}, {"max_model_len", max_model_len}};
}

}  // namespace fathom::server
