#include "server/native_generate.h"

#include <algorithm>
#include <climits>
#include <set>

#include "server/api_error.h"
#include "server/json_fields.h"
#include "server/sampling_fields.h"
#include "server/sse.h"

namespace fathom::server {

namespace {

scheduler::SamplingParams parse_native_sampling(const Json* params_json, const std::string& prefix, const RequestLimits& limits,
                                                int64_t& n, bool& max_new_tokens_given) {
  scheduler::SamplingParams sampling;
  sampling.max_new_tokens = kDefaultNativeMaxNewTokens;
  n = 1;
  max_new_tokens_given = false;
  if (params_json == nullptr) return sampling;
  JsonFields fields(*params_json, prefix);
  fields.reject_unknown({"max_new_tokens", "min_new_tokens", "stop", "stop_token_ids", "temperature", "top_p", "top_k",
                         "min_p", "frequency_penalty", "presence_penalty", "repetition_penalty", "ignore_eos",
                         "skip_special_tokens", "spaces_between_special_tokens", "no_stop_trim", "n", "sampling_seed",
                         "seed", "json_schema", "regex", "ebnf", "custom_params", "stream_interval", "logit_bias"});
  if (auto max_new = fields.integer("max_new_tokens")) {
    fields.require_at_least("max_new_tokens", *max_new, 0);  // 0: the prompt's logprobs only (SGLang)
    sampling.max_new_tokens = *max_new;
    max_new_tokens_given = true;
  }
  if (auto min_new = fields.integer("min_new_tokens")) {
    fields.require_at_least("min_new_tokens", *min_new, 0);
    sampling.min_new_tokens = *min_new;
  }
  if (auto no_stop_trim = fields.boolean("no_stop_trim"); no_stop_trim && *no_stop_trim) {
    throw ApiError(400, "'" + fields.qualified("no_stop_trim") + "' is not supported (stop strings are removed).",
                   fields.qualified("no_stop_trim"), "unsupported_parameter");
  }
  if (auto temperature = fields.number("temperature")) {
    if (*temperature < 0) fields.require_range("temperature", *temperature, 0.0, 1e9);
    sampling.temperature = static_cast<float>(*temperature);
  }
  if (auto top_p = fields.number("top_p")) {
    if (*top_p <= 0.0 || *top_p > 1.0) {
      throw ApiError::invalid_value(fields.qualified("top_p"), "Invalid '" + fields.qualified("top_p") + "': must be in (0, 1].");
    }
    sampling.top_p = static_cast<float>(*top_p);
  }
  if (auto top_k = fields.integer("top_k")) {
    if (*top_k < -1) fields.require_at_least("top_k", *top_k, -1);
    sampling.top_k = *top_k <= 0 ? -1 : static_cast<int32_t>(std::min<int64_t>(*top_k, INT32_MAX));
  }
  if (auto min_p = fields.number("min_p")) {
    fields.require_range("min_p", *min_p, 0.0, 1.0);
    sampling.min_p = static_cast<float>(*min_p);
  }
  if (auto frequency = fields.number("frequency_penalty")) {
    fields.require_range("frequency_penalty", *frequency, -2.0, 2.0);
    sampling.frequency_penalty = static_cast<float>(*frequency);
  }
  if (auto presence = fields.number("presence_penalty")) {
    fields.require_range("presence_penalty", *presence, -2.0, 2.0);
    sampling.presence_penalty = static_cast<float>(*presence);
  }
  sampling.repetition_penalty = parse_repetition_penalty(fields, "repetition_penalty");
  if (auto stop = fields.string_or_strings("stop")) {
    if (stop->size() > limits.max_stop_sequences) {
      throw ApiError::invalid_value(fields.qualified("stop"), "Invalid '" + fields.qualified("stop") + "': too many stop strings.");
    }
    for (std::string& text : *stop) {
      if (!text.empty()) sampling.stop.push_back(std::move(text));
    }
  }
  if (auto stop_ids = fields.int32_list("stop_token_ids")) sampling.stop_token_ids = *stop_ids;
  if (auto ignore_eos = fields.boolean("ignore_eos")) sampling.ignore_eos = *ignore_eos;
  if (auto skip = fields.boolean("skip_special_tokens")) sampling.skip_special_tokens = *skip;
  if (auto seed = fields.integer("sampling_seed")) sampling.seed = static_cast<uint64_t>(*seed);
  if (auto seed = fields.integer("seed")) sampling.seed = static_cast<uint64_t>(*seed);
  if (auto count = fields.integer("n")) {
    if (*count < 1 || *count > limits.max_choices) {
      throw ApiError::invalid_value(fields.qualified("n"), "Invalid '" + fields.qualified("n") + "': must be between 1 and " +
                                                               std::to_string(limits.max_choices) + ".");
    }
    n = *count;
  }
  for (const char* constrained : {"json_schema", "regex", "ebnf"}) {
    if (fields.has(constrained)) {
      throw ApiError(400, "'" + fields.qualified(constrained) + "' is not supported (no constrained decoding).",
                     fields.qualified(constrained), "unsupported_parameter");
    }
  }
  sampling.logit_bias = parse_logit_bias(fields, "logit_bias", limits.max_logit_bias_entries);
  return sampling;
}

std::vector<int32_t> parse_id_list(const Json& value, const std::string& name) {
  std::vector<int32_t> ids;
  for (const Json& item : value) {
    if (!item.is_number_integer()) {
      throw ApiError(400, "Invalid type for '" + name + "': expected an array of integers (or of integer arrays), but got " +
                              json_type_phrase(item) + " inside.",
                     name, "invalid_type");
    }
    int64_t id = item.get<int64_t>();
    if (id < 0 || id > INT32_MAX) throw ApiError::invalid_value(name, "Invalid '" + name + "': token id " + std::to_string(id) + " is out of range.");
    ids.push_back(static_cast<int32_t>(id));
  }
  if (ids.empty()) throw ApiError::invalid_value(name, "Invalid '" + name + "': a token id list must not be empty.");
  return ids;
}

}  // namespace

NativeGenerateRequest parse_native_generate_request(const Json& body, const RequestLimits& limits) {
  JsonFields fields(body);
  fields.reject_unknown({"text", "input_ids", "sampling_params", "stream", "return_logprob", "top_logprobs_num",
                         "logprob_start_len", "return_text_in_logprobs", "rid", "model"});
  NativeGenerateRequest request;
  const Json* text = fields.get("text");
  const Json* input_ids = fields.get("input_ids");
  if ((text == nullptr) == (input_ids == nullptr)) {
    throw ApiError(400, "Exactly one of 'text' or 'input_ids' must be given.", text ? "input_ids" : "text", "invalid_value");
  }
  if (text) {
    if (text->is_string()) {
      request.prompts.push_back(PromptSource{true, text->get<std::string>(), {}});
    } else if (text->is_array() && !text->empty()) {
      request.list_response = true;
      for (const Json& item : *text) {
        if (!item.is_string()) fields.type_error("text", "a string or an array of strings", item);
        request.prompts.push_back(PromptSource{true, item.get<std::string>(), {}});
      }
    } else {
      fields.type_error("text", "a string or a non-empty array of strings", *text);
    }
  } else {
    if (!input_ids->is_array()) fields.type_error("input_ids", "a non-empty array of integers", *input_ids);
    if (input_ids->empty()) throw ApiError::invalid_value("input_ids", "Invalid 'input_ids': must not be an empty array.");
    if (input_ids->front().is_array()) {
      request.list_response = true;
      for (const Json& item : *input_ids) {
        if (!item.is_array()) fields.type_error("input_ids", "an array of integer arrays", item);
        request.prompts.push_back(PromptSource{false, "", parse_id_list(item, "input_ids")});
      }
    } else {
      request.prompts.push_back(PromptSource{false, "", parse_id_list(*input_ids, "input_ids")});
    }
  }
  const size_t prompt_count = request.prompts.size();

  const Json* params = fields.get("sampling_params");
  if (params && params->is_array()) {
    if (params->size() != prompt_count) {
      throw ApiError::invalid_value("sampling_params", "Invalid 'sampling_params': " + std::to_string(params->size()) +
                                                           " entries for " + std::to_string(prompt_count) + " prompts.");
    }
  } else if (params && !params->is_object()) {
    fields.type_error("sampling_params", "an object or an array of objects", *params);
  }
  int64_t total_choices = 0;
  for (size_t i = 0; i < prompt_count; ++i) {
    const Json* entry = params && params->is_array() ? &(*params)[i] : params;
    std::string prefix = params && params->is_array() ? "sampling_params[" + std::to_string(i) + "]." : "sampling_params.";
    if (entry && !entry->is_object()) fields.type_error("sampling_params", "an object or an array of objects", *entry);
    int64_t n = 1;
    bool max_new_tokens_given = false;
    request.sampling.push_back(parse_native_sampling(entry, prefix, limits, n, max_new_tokens_given));
    request.sampling_prefixes.push_back(prefix);
    request.n.push_back(n);
    request.max_new_tokens_given.push_back(max_new_tokens_given);
    if (n > 1) request.list_response = true;
    total_choices += n;
  }
  if (total_choices > limits.max_choices) {
    throw ApiError::invalid_value("sampling_params", "Invalid request: " + std::to_string(total_choices) +
                                                         " generations exceed the limit of " + std::to_string(limits.max_choices) + ".");
  }

  request.stream = fields.boolean("stream").value_or(false);
  const bool logprobs = fields.boolean("return_logprob").value_or(false);
  int64_t top = fields.integer("top_logprobs_num").value_or(0);
  if (top < 0 || top > limits.max_top_logprobs) {
    throw ApiError::invalid_value("top_logprobs_num", "Invalid 'top_logprobs_num': must be between 0 and " +
                                                          std::to_string(limits.max_top_logprobs) + ".");
  }
  request.return_text_in_logprobs = fields.boolean("return_text_in_logprobs").value_or(false);
  // SGLang's -1 (the default) returns output logprobs only; a start inside the prompt also asks for the prompt
  // tokens' logprobs from there (input_token_logprobs), checked against each prompt's length once tokenized.
  const int64_t start = fields.integer("logprob_start_len").value_or(-1);
  if (start < -1) fields.require_at_least("logprob_start_len", start, -1);
  for (scheduler::SamplingParams& sampling : request.sampling) {
    sampling.logprobs = logprobs;
    sampling.top_logprobs = logprobs ? static_cast<int32_t>(top) : 0;
    sampling.prompt_logprob_start = logprobs ? start : -1;
  }

  request.rids.assign(prompt_count, "");
  if (auto rid = fields.string_or_strings("rid")) {
    if (!request.list_response && rid->size() == 1) {
      request.rids[0] = rid->front();
    } else if (rid->size() == prompt_count) {
      request.rids = *rid;
    } else {
      throw ApiError::invalid_value("rid", "Invalid 'rid': expected one id per prompt.");
    }
    for (size_t i = 0; i < request.rids.size(); ++i) {
      if (request.rids[i].empty()) throw ApiError::invalid_value("rid", "Invalid 'rid': an id must not be empty.");
      for (size_t j = 0; j < i; ++j) {
        if (request.rids[i] == request.rids[j]) {
          throw ApiError::invalid_value("rid", "Invalid 'rid': '" + request.rids[i].substr(0, 64) + "' is given twice.");
        }
      }
    }
  }
  return request;
}

namespace {

class NativeGenerateProtocol : public GenerationProtocol {
 public:
  NativeGenerateProtocol(bool list_response, bool logprobs, bool text_in_logprobs, std::vector<std::string> rids,
                         std::shared_ptr<const PromptCodec> codec)
      : list_response_(list_response), logprobs_(logprobs), text_in_logprobs_(text_in_logprobs), rids_(std::move(rids)),
        codec_(std::move(codec)) {}

  void stream_delta(const ChoiceResult& choice, const scheduler::GenerationEvent& event, std::string& out) override {
    append_sse_event(out, result_json(choice));
  }

  Json final_response(const std::vector<ChoiceResult>& choices) override {
    if (!list_response_) return result_json(choices.front());
    Json list = Json::array();
    for (const ChoiceResult& choice : choices) list.push_back(result_json(choice));
    return list;
  }

 private:
  Json token_entry(float logprob, int32_t id) const {
    return Json::array({logprob, id, text_in_logprobs_ ? Json(codec_->token_piece(id).text) : Json()});
  }

  // Each entry as [logprob, id, text] into `tokens`, and its alternatives as a list of those into `top`.
  void append_logprobs(const std::vector<scheduler::TokenLogprob>& entries, Json& tokens, Json& top) const {
    for (const scheduler::TokenLogprob& entry : entries) {
      tokens.push_back(token_entry(entry.logprob, entry.token_id));
      Json alternatives = Json::array();
      for (const auto& [id, logprob] : entry.top) alternatives.push_back(token_entry(logprob, id));
      top.push_back(std::move(alternatives));
    }
  }

  Json finish_reason(const ChoiceResult& choice) const {
    if (!choice.finished) return nullptr;
    switch (choice.finish_reason) {
      case scheduler::FinishReason::kStop:
        if (choice.matched_stop_token) return Json{{"type", "stop"}, {"matched", *choice.matched_stop_token}};
        return choice.matched_stop.empty() ? Json{{"type", "stop"}} : Json{{"type", "stop"}, {"matched", choice.matched_stop}};
      case scheduler::FinishReason::kLength:
        return Json{{"type", "length"}, {"length", choice.completion_tokens}};
      case scheduler::FinishReason::kAbort:
        return Json{{"type", "abort"}};
      case scheduler::FinishReason::kError:
        return Json{{"type", "abort"}, {"message", choice.error_message}};
      case scheduler::FinishReason::kNone:
        break;
    }
    return nullptr;
  }

  Json result_json(const ChoiceResult& choice) const {
    Json meta;
    const std::string& rid = rids_.at(static_cast<size_t>(choice.prompt_index));
    meta["id"] = rid.empty() ? choice.request_id : rid;
    meta["finish_reason"] = finish_reason(choice);
    meta["prompt_tokens"] = choice.prompt_length;
    meta["completion_tokens"] = choice.completion_tokens;
    meta["cached_tokens"] = choice.cached_prompt_tokens;
    if (choice.finished) meta["e2e_latency"] = choice.latency_s;
    if (logprobs_) {
      Json output = Json::array(), top = Json::array();
      append_logprobs(choice.logprobs, output, top);
      meta["output_token_logprobs"] = std::move(output);
      meta["output_top_logprobs"] = std::move(top);
      if (choice.prompt_logprobs_ready) {
        Json input = Json::array(), input_top = Json::array();
        if (const auto& first = choice.unscored_first_prompt_token) {  // position 0 has no logprob
          input.push_back(Json::array({nullptr, *first, text_in_logprobs_ ? Json(codec_->token_piece(*first).text) : Json()}));
          input_top.push_back(nullptr);
        }
        append_logprobs(choice.prompt_logprobs, input, input_top);
        meta["input_token_logprobs"] = std::move(input);
        meta["input_top_logprobs"] = std::move(input_top);
      }
    }
    Json result;
    result["text"] = choice.text;
    result["output_ids"] = choice.token_ids;
    result["meta_info"] = std::move(meta);
    if (list_response_) result["index"] = choice.index;
    return result;
  }

  bool list_response_;
  bool logprobs_;
  bool text_in_logprobs_;
  std::vector<std::string> rids_;
  std::shared_ptr<const PromptCodec> codec_;
};

}  // namespace

std::unique_ptr<GenerationProtocol> make_native_generate_protocol(bool list_response, bool logprobs, bool text_in_logprobs,
                                                                  std::vector<std::string> rids,
                                                                  std::shared_ptr<const PromptCodec> codec) {
  return std::make_unique<NativeGenerateProtocol>(list_response, logprobs, text_in_logprobs, std::move(rids), std::move(codec));
}

}  // namespace fathom::server
