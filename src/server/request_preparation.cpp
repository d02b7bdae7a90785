#include "server/request_preparation.h"

#include <algorithm>
#include <climits>
#include <cstdio>
#include <ctime>
#include <optional>
#include <random>

#include "core/error.h"
#include "server/api_error.h"
#include "server/chat_protocol.h"
#include "server/native_generate.h"
#include "server/openai_response.h"
#include "server/json_fields.h"
#include "server/sampling_fields.h"

namespace fathom::server {

namespace {

// Throws ApiError(400) on `param` for an id outside [0, vocab_size).
void check_token_ids(const std::vector<int32_t>& ids, int64_t vocab_size, const std::string& param) {
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab_size) {
      throw ApiError::invalid_value(param, "Invalid '" + param + "': token id " + std::to_string(id) +
                                               " is outside the vocabulary [0, " + std::to_string(vocab_size) + ").");
    }
  }
}

std::vector<int32_t> tokenize_prompt(const PromptSource& prompt, bool add_special_tokens, const PreparationContext& context,
                                     const std::string& param) {
  std::vector<int32_t> ids;
  if (prompt.is_text) {
    try {
      ids = context.codec->encode(prompt.text, add_special_tokens);
    } catch (const fathom::Error& error) {
      throw ApiError(400, std::string("The prompt could not be tokenized: ") + error.what(), param, "invalid_value");
    }
  } else {
    ids = prompt.ids;
  }
  if (ids.empty()) throw ApiError::invalid_value(param, "Invalid '" + param + "': the prompt is empty (no tokens).");
  check_token_ids(ids, context.codec->vocab_size(), param);
  return ids;
}

// The completion's token budget: the client's max tokens, which must fit beside the prompt (OpenAI's
// context_length_exceeded otherwise, the code clients match on), or without one `default_tokens` capped to the room
// the prompt leaves (as SGLang caps its default).
int64_t completion_budget(int64_t prompt_tokens, std::optional<int64_t> requested, int64_t default_tokens,
                          const PreparationContext& context, const std::string& param, const char* what) {
  const int64_t limit = context.max_context_tokens;
  if (limit <= 0) return requested.value_or(default_tokens);
  const int64_t room = limit - prompt_tokens;  // no overflow: a prompt is at most the request body in tokens
  const std::string limit_text = "This model's maximum context length is " + std::to_string(limit) + " tokens. ";
  if (requested && *requested > room) {
    const int64_t total = *requested > INT64_MAX - prompt_tokens ? INT64_MAX : prompt_tokens + *requested;
    throw ApiError(400, limit_text + "However, you requested " + std::to_string(total) + " tokens (" +
                            std::to_string(prompt_tokens) + " in the " + what + ", " + std::to_string(*requested) +
                            " in the completion). Please reduce the length of the " + what + " or completion.",
                   param, "context_length_exceeded");
  }
  if ((!requested || *requested == 0) && room < 1) {  // a limit of 0 still runs one token
    throw ApiError(400, limit_text + "However, your " + what + " resulted in " + std::to_string(prompt_tokens) +
                            " tokens, leaving no room for the completion. Please reduce the length of the " + what + ".",
                   param, "context_length_exceeded");
  }
  return requested ? *requested : std::min(default_tokens, room);
}

// What needs the vocabulary or the completion's budget: logit_bias ids, and min tokens within the max.
void check_sampling(const scheduler::SamplingParams& sampling, const PreparationContext& context,
                    const std::string& logit_bias_param, const std::string& min_tokens_param) {
  check_logit_bias_ids(sampling.logit_bias, context.codec->vocab_size(), logit_bias_param);
  if (sampling.min_new_tokens > sampling.max_new_tokens) {
    throw ApiError::invalid_value(min_tokens_param, "Invalid '" + min_tokens_param + "': " +
                                                        std::to_string(sampling.min_new_tokens) +
                                                        " exceeds the completion's limit of " +
                                                        std::to_string(sampling.max_new_tokens) + " tokens.");
  }
}

PreparedGeneration new_generation(std::string_view id_kind, bool stream, const PreparationContext& context) {
  PreparedGeneration prepared;
  prepared.response_id = context.ids->next(id_kind);
  prepared.stream = stream;
  return prepared;
}

// Choice `choice_number` of a prompt gets seed + choice_number so that n > 1 with a seed still differs.
scheduler::SamplingParams choice_sampling(const scheduler::SamplingParams& base, int64_t choice_number) {
  scheduler::SamplingParams sampling = base;
  if (sampling.seed) sampling.seed = *sampling.seed + static_cast<uint64_t>(choice_number);
  return sampling;
}

// A limit of 0 tokens runs one (the engine ends a request at its first token at the earliest) and returns none.
void add_choices(PreparedGeneration& prepared, int64_t prompt_index, const std::vector<int32_t>& ids,
                 const scheduler::SamplingParams& sampling, int64_t n) {
  const bool prompt_only = sampling.max_new_tokens == 0;
  for (int64_t i = 0; i < n; ++i) {
    JobChoice choice;
    choice.index = static_cast<int64_t>(prepared.choices.size());
    choice.prompt_index = prompt_index;
    choice.request.request_id = prepared.response_id + "-" + std::to_string(choice.index);
    choice.response_id = prepared.response_id;
    choice.request.input_ids = ids;
    choice.request.sampling = choice_sampling(sampling, i);
    choice.prompt_only = prompt_only;
    if (prompt_only) choice.request.sampling.max_new_tokens = 1;
    prepared.choices.push_back(std::move(choice));
  }
}

OpenAiResponseContext response_context(const PreparedGeneration& prepared, const PreparationContext& context,
                                       const std::string& requested_model, bool include_usage) {
  OpenAiResponseContext response;
  // Only vLLM's prompt_logprobs sets prompt_top_logprobs (echo with logprobs puts prompt tokens in `logprobs`).
  response.prompt_logprobs = !prepared.choices.empty() && prepared.choices.front().request.sampling.prompt_top_logprobs >= 0;
  response.id = prepared.response_id;
  response.created_unix_s = static_cast<int64_t>(std::time(nullptr));
  response.model = requested_model.empty() ? context.served_model_name : requested_model;
  response.include_usage = include_usage;
  response.codec = context.codec;
  return response;
}

}  // namespace

RequestIdGenerator::RequestIdGenerator() {
  std::random_device device;
  char prefix[16];
  std::snprintf(prefix, sizeof(prefix), "%08x", static_cast<unsigned>(device()));
  instance_prefix_ = prefix;
}

std::string RequestIdGenerator::next(std::string_view kind) {
  char number[24];
  std::snprintf(number, sizeof(number), "%08llx", static_cast<unsigned long long>(counter_.fetch_add(1) + 1));
  return std::string(kind) + "-" + instance_prefix_ + number;
}

void check_model_name(const std::string& model, const std::string& served_model_name) {
  if (model.empty() || model == served_model_name) return;
  throw ApiError(404, "The model '" + model + "' does not exist. This server serves '" + served_model_name + "'.", "model",
                 "model_not_found");
}

PreparedGeneration prepare_completion(std::string_view body, const PreparationContext& context) {
  CompletionRequest request = parse_completion_request(parse_json_object(body), context.limits);
  check_model_name(request.model, context.served_model_name);
  PreparedGeneration prepared = new_generation("cmpl", request.stream, context);
  std::vector<std::string> echo_prefixes;
  for (size_t p = 0; p < request.prompts.size(); ++p) {
    const PromptSource& prompt = request.prompts[p];
    std::vector<int32_t> ids = tokenize_prompt(prompt, request.add_special_tokens, context, "prompt");
    scheduler::SamplingParams sampling = request.sampling;
    sampling.max_new_tokens = completion_budget(static_cast<int64_t>(ids.size()), request.max_tokens,
                                                kDefaultCompletionMaxTokens, context, "prompt", "prompt");
    check_sampling(sampling, context, "logit_bias", "min_tokens");
    if (request.echo) echo_prefixes.push_back(prompt.is_text ? prompt.text : context.codec->decode(ids));
    add_choices(prepared, static_cast<int64_t>(p), ids, sampling, request.n);
  }
  prepared.protocol = make_completion_protocol(response_context(prepared, context, request.model, request.include_usage),
                                               std::move(echo_prefixes), request.sampling.logprobs,
                                               request.sampling.skip_special_tokens);
  return prepared;
}

namespace {

// The chat request's prompt as the engine runs it: the template rendered (with the tools unless tool_choice is
// "none"), the continued assistant message and the output parsers' prompt suffix, tokenized without added special
// tokens (the template writes the BOS itself). Sets skip_special_tokens off when the parsers need the markers.
std::vector<int32_t> chat_prompt_ids(ChatRequest& request, const PreparationContext& context, ChatOutputPlan& output) {
  ChatPromptInputs inputs;
  inputs.messages = std::move(request.messages);
  // tool_choice "none": the model is not shown the tools (nor pushed to call them).
  if (request.tools.choice.mode != ToolChoice::Mode::kNone) inputs.tools = request.tools.tools;
  inputs.template_kwargs = std::move(request.template_kwargs);
  // A continued assistant message follows the generation prompt (SGLang's rendering of continue_final_message).
  inputs.add_generation_prompt = request.add_generation_prompt || request.assistant_prefix.has_value();
  PromptSource prompt;
  prompt.text = context.codec->render_chat(inputs);
  output = plan_chat_output(context.parsers, request, prompt.text, context.special_token_texts);
  prompt.text += request.assistant_prefix.value_or("") + output.prompt_suffix;
  if (output.decode_special_tokens) request.sampling.skip_special_tokens = false;  // the parsers need the markers
  return tokenize_prompt(prompt, request.add_special_tokens, context, "messages");
}

}  // namespace

PreparedGeneration prepare_chat(std::string_view body, const PreparationContext& context) {
  ChatRequest request = parse_chat_request(parse_json_object(body), context.limits);
  check_model_name(request.model, context.served_model_name);
  PreparedGeneration prepared = new_generation("chatcmpl", request.stream, context);
  ChatOutputPlan output;
  std::vector<int32_t> ids = chat_prompt_ids(request, context, output);
  request.sampling.max_new_tokens = completion_budget(static_cast<int64_t>(ids.size()), request.max_tokens, INT64_MAX,
                                                      context, "messages", "messages");
  check_sampling(request.sampling, context, "logit_bias", "min_tokens");
  add_choices(prepared, 0, ids, request.sampling, request.n);
  prepared.protocol = make_chat_protocol(response_context(prepared, context, request.model, request.include_usage),
                                         request.sampling.logprobs, std::move(output.options));
  return prepared;
}

PreparedGeneration prepare_native_generate(std::string_view body, const PreparationContext& context) {
  NativeGenerateRequest request = parse_native_generate_request(parse_json_object(body), context.limits);
  PreparedGeneration prepared = new_generation("gen", request.stream, context);
  for (size_t p = 0; p < request.prompts.size(); ++p) {
    const std::string param = request.prompts[p].is_text ? "text" : "input_ids";
    std::vector<int32_t> ids = tokenize_prompt(request.prompts[p], /*add_special_tokens=*/true, context, param);
    std::optional<int64_t> requested;
    if (request.max_new_tokens_given[p]) requested = request.sampling[p].max_new_tokens;
    request.sampling[p].max_new_tokens = completion_budget(static_cast<int64_t>(ids.size()), requested,
                                                           kDefaultNativeMaxNewTokens, context, param, "prompt");
    if (request.sampling[p].prompt_logprob_start > static_cast<int64_t>(ids.size())) {
      throw ApiError::invalid_value("logprob_start_len", "Invalid 'logprob_start_len': " +
                                                             std::to_string(request.sampling[p].prompt_logprob_start) +
                                                             " is past the end of a prompt of " +
                                                             std::to_string(ids.size()) + " tokens.");
    }
    const std::string& prefix = request.sampling_prefixes[p];
    check_sampling(request.sampling[p], context, prefix + "logit_bias", prefix + "min_new_tokens");
    const size_t first = prepared.choices.size();
    add_choices(prepared, static_cast<int64_t>(p), ids, request.sampling[p], request.n[p]);
    for (size_t c = first; c < prepared.choices.size(); ++c) prepared.choices[c].client_rid = request.rids[p];
  }
  const bool logprobs = !request.sampling.empty() && request.sampling.front().logprobs;
  prepared.protocol = make_native_generate_protocol(request.list_response, logprobs, request.return_text_in_logprobs,
                                                    std::move(request.rids), context.codec);
  return prepared;
}

Json prepare_tokenize(std::string_view body, const PreparationContext& context) {
  const Json json = parse_json_object(body);
  JsonFields fields(json);
  check_model_name(fields.string("model").value_or(""), context.served_model_name);
  const bool has_prompt = fields.has("prompt"), has_messages = fields.has("messages");
  if (has_prompt == has_messages) {
    throw ApiError::invalid_value(has_prompt ? "messages" : "prompt", "Exactly one of 'prompt' or 'messages' must be given.");
  }
  std::vector<int32_t> ids;
  if (has_prompt) {
    const std::optional<std::string> text = fields.string("prompt");
    const bool add_special_tokens = fields.boolean("add_special_tokens").value_or(true);
    try {
      ids = context.codec->encode(*text, add_special_tokens);  // an empty prompt is 0 tokens here (vLLM)
    } catch (const fathom::Error& error) {
      throw ApiError(400, std::string("The prompt could not be tokenized: ") + error.what(), "prompt", "invalid_value");
    }
  } else {
    ChatRequest request = parse_chat_request(json, context.limits);  // the generation's own rendering
    ChatOutputPlan output;
    ids = chat_prompt_ids(request, context, output);
  }
  Json response{{"count", static_cast<int64_t>(ids.size())}, {"max_model_len", context.max_context_tokens}, {"tokens", ids}};
  if (fields.boolean("return_token_strs").value_or(false)) {
    Json strings = Json::array();
    for (int32_t id : ids) {
      const std::optional<std::string> token = context.codec->vocabulary_token(id);
      strings.push_back(token ? Json(*token) : Json(nullptr));
    }
    response["token_strs"] = std::move(strings);
  }
  return response;
}

Json prepare_detokenize(std::string_view body, const PreparationContext& context) {
  const Json json = parse_json_object(body);
  JsonFields fields(json);
  check_model_name(fields.string("model").value_or(""), context.served_model_name);
  const std::optional<std::vector<int32_t>> tokens = fields.int32_list("tokens");
  if (!tokens) throw ApiError::missing("tokens");
  if (!context.codec->has_text()) {
    throw ApiError(400, "This server runs without a tokenizer (--skip-tokenizer-init): ids have no text.", "tokens",
                   "tokenizer_unavailable");
  }
  check_token_ids(*tokens, context.codec->vocab_size(), "tokens");
  return Json{{"prompt", context.codec->decode(*tokens)}};
}

}  // namespace fathom::server
