#include "server/openai_response.h"

#include <cstdio>
#include <map>
#include <set>
#include <string_view>

#include "server/openai_protocol_base.h"
#include "tokenizer/utf8.h"

namespace fathom::server {

namespace {

using Json = nlohmann::ordered_json;

class CompletionProtocol : public OpenAiProtocolBase {
 public:
  CompletionProtocol(OpenAiResponseContext context, std::vector<std::string> echo_prefixes, bool logprobs,
                     bool skip_special_tokens)
      : OpenAiProtocolBase(std::move(context), "text_completion", "text_completion"),
        echo_prefixes_(std::move(echo_prefixes)), logprobs_(logprobs), skip_special_tokens_(skip_special_tokens) {}

  void stream_opened(const std::vector<ChoiceResult>& choices, std::string& out) override {
    // With logprobs the echo waits for each choice's first event, which brings the prompt's logprobs.
    if (echo_prefixes_.empty() || logprobs_) return;
    for (const ChoiceResult& choice : choices) {
      Json choice_json{{"index", choice.index}, {"text", echo_prefixes_.at(static_cast<size_t>(choice.prompt_index))},
                       {"logprobs", nullptr}, {"finish_reason", nullptr}};
      append_chunk(out, std::move(choice_json));
    }
  }

  void stream_delta(const ChoiceResult& choice, const scheduler::GenerationEvent& event, std::string& out) override {
    if (!echo_prefixes_.empty() && logprobs_ && echo_streamed_.insert(choice.index).second) {
      Json choice_json{{"index", choice.index}, {"text", echo_prefixes_.at(static_cast<size_t>(choice.prompt_index))},
                       {"logprobs", prompt_logprobs_json(choice)}, {"finish_reason", nullptr}};
      append_chunk(out, std::move(choice_json));
    }
    if (!event.text_delta.empty() || !event.new_token_ids.empty() || event.finished) {
      // Characters of the choice's tokens streamed before this event (the same offsets as the final response's).
      int64_t& streamed_chars = streamed_token_chars_[choice.index];
      Json choice_json{{"index", choice.index}, {"text", event.text_delta},
                       {"logprobs", logprobs_json(event.logprobs, echo_chars(choice), streamed_chars)},
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
      int64_t token_chars = 0;
      std::string text = echo_prefixes_.empty() ? choice.text : echo_prefixes_.at(static_cast<size_t>(choice.prompt_index)) + choice.text;
      Json logprobs = logprobs_json(choice.logprobs, echo_chars(choice), token_chars);
      if (!echo_prefixes_.empty() && logprobs_ && choice.prompt_logprobs_ready) {  // the prompt's tokens first (echo)
        Json prompt = prompt_logprobs_json(choice);
        for (const char* key : {"tokens", "token_logprobs", "top_logprobs", "text_offset"}) {
          for (Json& item : logprobs[key]) prompt[key].push_back(std::move(item));
        }
        logprobs = std::move(prompt);
      }
      Json choice_json{{"index", choice.index}, {"text", std::move(text)}, {"logprobs", std::move(logprobs)},
                       {"finish_reason", finish_json(choice)}};
      if (context_.prompt_logprobs) choice_json["prompt_logprobs"] = vllm_prompt_logprobs_json(choice, *context_.codec);
      add_matched_stop(choice_json, choice);
      choice_list.push_back(std::move(choice_json));
    }
    response["choices"] = std::move(choice_list);
    response["usage"] = usage_json(count_usage(choices));
    return response;
  }

 private:
  int64_t echo_chars(const ChoiceResult& choice) const {
    return echo_prefixes_.empty() ? 0 : utf8_chars(echo_prefixes_.at(static_cast<size_t>(choice.prompt_index)));
  }

  // {"tokens", "token_logprobs", "top_logprobs", "text_offset"}. Offsets count characters (code points) of the
  // returned text, as OpenAI's do: a token's offset is that of the character holding its first byte. token_chars:
  // the characters of the choice's earlier tokens, advanced past these.
  Json logprobs_json(const std::vector<scheduler::TokenLogprob>& logprobs, int64_t echo_chars,
                     int64_t& token_chars) const {
    if (!logprobs_) return nullptr;
    Json arrays = empty_logprobs();
    for (const scheduler::TokenLogprob& entry : logprobs) {
      const TokenPiece token = piece(entry.token_id);
      const bool starts_inside_a_character = !token.bytes.empty() && is_continuation_byte(token.bytes.front());
      append_token(arrays, token, &entry, echo_chars + token_chars - (starts_inside_a_character && token_chars > 0 ? 1 : 0));
      if (token.is_special && skip_special_tokens_) continue;  // not in the text
      for (uint8_t byte : token.bytes) token_chars += is_continuation_byte(byte) ? 0 : 1;
    }
    return arrays;
  }

  // The echoed prompt's tokens: the first (no logprob: null, as OpenAI and vLLM write it), then the scored ones;
  // null until the first token's event brought them. Offsets are found in the echoed text itself, which holds a
  // special token's text only when the prompt did (an added BOS is not in a text prompt; token ids decode with it).
  Json prompt_logprobs_json(const ChoiceResult& choice) const {
    if (!choice.prompt_logprobs_ready) return nullptr;
    const std::string& echo = echo_prefixes_.at(static_cast<size_t>(choice.prompt_index));
    Json arrays = empty_logprobs();
    size_t cursor = 0;    // bytes of the echo the tokens so far account for
    int64_t chars = 0;    // characters that start before `cursor`
    auto add = [&](int32_t id, const scheduler::TokenLogprob* entry) {
      const TokenPiece token = piece(id);
      const bool inside = cursor < echo.size() && is_continuation_byte(static_cast<uint8_t>(echo[cursor]));
      append_token(arrays, token, entry, chars - (inside && chars > 0 ? 1 : 0));
      const std::string_view bytes(reinterpret_cast<const char*>(token.bytes.data()), token.bytes.size());
      const bool in_echo = echo.compare(cursor, bytes.size(), bytes) == 0;
      if (!in_echo && token.is_special) return;  // not in the echoed text
      const size_t end = std::min(echo.size(), cursor + bytes.size());
      for (; cursor < end; ++cursor) chars += is_continuation_byte(static_cast<uint8_t>(echo[cursor])) ? 0 : 1;
    };
    if (choice.unscored_first_prompt_token) add(*choice.unscored_first_prompt_token, nullptr);
    for (const scheduler::TokenLogprob& entry : choice.prompt_logprobs) add(entry.token_id, &entry);
    return arrays;
  }

  static Json empty_logprobs() {
    return Json{{"tokens", Json::array()}, {"token_logprobs", Json::array()}, {"top_logprobs", Json::array()},
                {"text_offset", Json::array()}};
  }

  // Appends `token` at text offset `offset` (entry: its logprob and alternatives; null: none).
  void append_token(Json& arrays, const TokenPiece& token, const scheduler::TokenLogprob* entry, int64_t offset) const {
    const std::string label = token_label(token);
    arrays["tokens"].push_back(label);
    if (entry) {
      arrays["token_logprobs"].push_back(entry->logprob);
      Json alternatives = Json::object();
      for (const auto& [id, logprob] : entry->top) alternatives[token_label(piece(id))] = logprob;
      alternatives[label] = entry->logprob;  // OpenAI: the chosen token is always listed
      arrays["top_logprobs"].push_back(std::move(alternatives));
    } else {
      arrays["token_logprobs"].push_back(nullptr);
      arrays["top_logprobs"].push_back(nullptr);
    }
    arrays["text_offset"].push_back(offset);
  }

  static bool is_continuation_byte(uint8_t byte) { return (byte & 0xC0) == 0x80; }
  static int64_t utf8_chars(const std::string& text) {
    int64_t chars = 0;
    for (char c : text) chars += is_continuation_byte(static_cast<uint8_t>(c)) ? 0 : 1;
    return chars;
  }
  // A token's text, or for a token that is not whole UTF-8 characters its bytes as OpenAI writes them
  // ("bytes:\xe6\x97"), so that distinct partial tokens stay distinct keys of top_logprobs.
  static std::string token_label(const TokenPiece& token) {
    const std::string_view bytes(reinterpret_cast<const char*>(token.bytes.data()), token.bytes.size());
    if (token.bytes.empty()) return token.text;
    if (tokenizer::utf8::is_valid(bytes)) return std::string(bytes);
    std::string label = "bytes:";
    char escaped[5];
    for (uint8_t byte : token.bytes) {
      std::snprintf(escaped, sizeof(escaped), "\\x%02x", byte);
      label += escaped;
    }
    return label;
  }

  std::map<int64_t, int64_t> streamed_token_chars_;  // choice index -> characters of its streamed tokens
  std::set<int64_t> echo_streamed_;                  // choices whose echo (with prompt logprobs) was streamed
  std::vector<std::string> echo_prefixes_;
  bool logprobs_;
  bool skip_special_tokens_;
};

}  // namespace

Json vllm_prompt_logprobs_json(const ChoiceResult& choice, const PromptCodec& codec) {
  if (!choice.prompt_logprobs_ready) return nullptr;
  Json list = Json::array();
  if (choice.unscored_first_prompt_token) list.push_back(nullptr);
  for (const scheduler::TokenLogprob& entry : choice.prompt_logprobs) {
    Json tokens = Json::object();
    for (size_t k = 0; k < entry.top.size(); ++k) {  // alternatives, most likely first: rank k + 1
      const auto& [id, logprob] = entry.top[k];
      tokens[std::to_string(id)] = Json{{"logprob", logprob}, {"rank", k + 1}, {"decoded_token", codec.token_piece(id).text}};
    }
    tokens[std::to_string(entry.token_id)] = Json{{"logprob", entry.logprob},
                                                  {"rank", entry.rank > 0 ? Json(entry.rank) : Json()},
                                                  {"decoded_token", codec.token_piece(entry.token_id).text}};
    list.push_back(std::move(tokens));
  }
  return list;
}

std::unique_ptr<GenerationProtocol> make_completion_protocol(OpenAiResponseContext context, std::vector<std::string> echo_prefixes,
                                                             bool logprobs, bool skip_special_tokens) {
  return std::make_unique<CompletionProtocol>(std::move(context), std::move(echo_prefixes), logprobs,
                                              skip_special_tokens);
}

nlohmann::ordered_json model_card_json(const std::string& model_name, int64_t created_unix_s, int64_t max_model_len) {
  return Json{{"id", model_name}, {"object", "model"}, {"created", created_unix_s}, {"owned_by", "fathom"},
              {"root", model_name}, {"max_model_len", max_model_len}};
}

}  // namespace fathom::server
