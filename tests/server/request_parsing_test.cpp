// OpenAI and SGLang request parsing/validation and request preparation: every error case with its status,
// parameter and message, and the engine requests built from valid bodies.
#include <gtest/gtest.h>

#include "fake_codec.h"
#include "server/api_error.h"
#include "server/native_generate.h"
#include "server/openai_request.h"
#include "server/request_preparation.h"

namespace fathom::server {
namespace {

using fathom::testing::FakeCodec;

struct Fixture {
  RequestIdGenerator ids;
  PreparationContext context;
  Fixture() {
    context.codec = std::make_shared<FakeCodec>();
    context.served_model_name = "tiny";
    context.max_context_tokens = 100;
    context.ids = &ids;
  }
};

enum class Endpoint { kCompletion, kChat, kNative };

PreparedGeneration prepare(Endpoint endpoint, const std::string& body, const PreparationContext& context) {
  switch (endpoint) {
    case Endpoint::kCompletion: return prepare_completion(body, context);
    case Endpoint::kChat: return prepare_chat(body, context);
    case Endpoint::kNative: return prepare_native_generate(body, context);
  }
  throw std::logic_error("endpoint");
}

struct ErrorCase {
  const char* name;
  Endpoint endpoint;
  std::string body;
  int status;
  std::string param;             // expected "param" ("" = null)
  std::string message_fragment;  // must appear in the message
};

class RequestErrors : public ::testing::TestWithParam<ErrorCase> {};

TEST_P(RequestErrors, ThrowsApiError) {
  Fixture fixture;
  const ErrorCase& c = GetParam();
  try {
    prepare(c.endpoint, c.body, fixture.context);
    FAIL() << c.name << ": no error for " << c.body;
  } catch (const ApiError& error) {
    EXPECT_EQ(error.status(), c.status) << error.message();
    EXPECT_EQ(error.param(), c.param) << error.message();
    EXPECT_NE(error.message().find(c.message_fragment), std::string::npos) << error.message();
    nlohmann::ordered_json json = error_json(error);
    EXPECT_EQ(json["error"]["message"], error.message());
    EXPECT_TRUE(json["error"].contains("type"));
    EXPECT_TRUE(json["error"].contains("code"));
    EXPECT_EQ(json["error"]["param"].is_null(), c.param.empty());
  }
}

const std::string kMessages = R"("messages": [{"role": "user", "content": "hi"}])";

INSTANTIATE_TEST_SUITE_P(
    Cases, RequestErrors,
    ::testing::Values(
        ErrorCase{"malformed_json", Endpoint::kChat, "{\"messages\": [", 400, "", "could not parse the JSON body of your request (line 1, column 15: syntax error"},
        ErrorCase{"empty_body", Endpoint::kCompletion, "", 400, "", "could not parse"},
        ErrorCase{"non_object_body", Endpoint::kChat, "[1, 2]", 400, "", "must be a JSON object"},
        ErrorCase{"too_deep", Endpoint::kChat, "{\"messages\": " + std::string(100000, '[') + std::string(100000, ']') + "}", 400, "", "nests deeper than 64"},
        ErrorCase{"role_not_string", Endpoint::kChat, R"({"messages": [{"role": [1], "content": "x"}]})", 400, "messages[0].role", "expected a string"},
        ErrorCase{"missing_messages", Endpoint::kChat, R"({"model": "tiny"})", 400, "messages", "Missing required parameter: 'messages'"},
        ErrorCase{"messages_not_array", Endpoint::kChat, R"({"messages": "hi"})", 400, "messages", "expected an array"},
        ErrorCase{"messages_empty", Endpoint::kChat, R"({"messages": []})", 400, "messages", "at least one message"},
        ErrorCase{"message_not_object", Endpoint::kChat, R"({"messages": [3]})", 400, "messages[0]", "expected an object"},
        ErrorCase{"message_without_role", Endpoint::kChat, R"({"messages": [{"content": "x"}]})", 400, "messages[0].role", "Missing"},
        ErrorCase{"message_bad_role", Endpoint::kChat, R"({"messages": [{"role": "robot", "content": "x"}]})", 400, "messages[0].role", "robot"},
        ErrorCase{"message_function_role", Endpoint::kChat, R"({"messages": [{"role": "function", "name": "f", "content": "x"}]})", 400, "messages[0].role", "send the result as a 'tool' message"},
        ErrorCase{"min_tokens_negative", Endpoint::kCompletion, R"({"prompt": "a", "min_tokens": -1})", 400, "min_tokens", ">= 0"},
        ErrorCase{"min_tokens_over_max", Endpoint::kCompletion, R"({"prompt": "a", "min_tokens": 9, "max_tokens": 8})", 400, "min_tokens", "9 exceeds the completion's limit of 8 tokens"},
        ErrorCase{"min_tokens_over_context", Endpoint::kChat, R"({"min_tokens": 99, )" + kMessages + "}", 400, "min_tokens", "exceeds the completion's limit"},
        ErrorCase{"include_stop_str_in_output", Endpoint::kChat, R"({"include_stop_str_in_output": true, )" + kMessages + "}", 400, "include_stop_str_in_output", "not supported"},
        ErrorCase{"completion_over_context", Endpoint::kCompletion, R"({"prompt": [1, 2, 3], "max_tokens": 98})", 400, "prompt", "maximum context length is 100 tokens. However, you requested 101 tokens (3 in the prompt, 98 in the completion)"},
        ErrorCase{"chat_over_context", Endpoint::kChat, R"({"max_tokens": 99, )" + kMessages + "}", 400, "messages", "maximum context length is 100 tokens. However, you requested"},
        ErrorCase{"completion_max_tokens_overflow", Endpoint::kCompletion, R"({"prompt": [1, 2], "max_tokens": 9223372036854775807})", 400, "prompt", "you requested 9223372036854775807 tokens"},
        ErrorCase{"chat_prompt_fills_the_context", Endpoint::kChat, R"({"messages": [{"role": "user", "content": ")" + std::string(120, 'x') + R"("}]})", 400, "messages", "your messages resulted in"},
        ErrorCase{"native_no_stop_trim", Endpoint::kNative, R"({"text": "a", "sampling_params": {"no_stop_trim": true}})", 400, "sampling_params.no_stop_trim", "not supported"},
        ErrorCase{"native_over_context", Endpoint::kNative, R"({"input_ids": [1, 2], "sampling_params": {"max_new_tokens": 99}})", 400, "input_ids", "maximum context length"},
        ErrorCase{"message_without_content", Endpoint::kChat, R"({"messages": [{"role": "user"}]})", 400, "messages[0].content", "Missing"},
        ErrorCase{"message_content_number", Endpoint::kChat, R"({"messages": [{"role": "user", "content": 5}]})", 400, "messages[0].content", "expected a string or an array"},
        ErrorCase{"message_image_part", Endpoint::kChat, R"({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]})", 400, "messages", "Invalid 'messages'"},
        ErrorCase{"template_raises", Endpoint::kChat, R"({"messages": [{"role": "user", "content": "RAISE"}]})", 400, "messages", "must alternate"},
        ErrorCase{"unknown_model", Endpoint::kChat, R"({"model": "gpt-4", )" + kMessages + "}", 404, "model", "The model 'gpt-4' does not exist"},
        ErrorCase{"model_not_string", Endpoint::kChat, R"({"model": 3, )" + kMessages + "}", 400, "model", "expected a string"},
        ErrorCase{"max_tokens_zero", Endpoint::kChat, R"({"max_tokens": 0, )" + kMessages + "}", 400, "max_tokens", ">= 1"},
        ErrorCase{"max_tokens_negative", Endpoint::kCompletion, R"({"prompt": "a", "max_tokens": -5})", 400, "max_tokens", ">= 1"},
        ErrorCase{"max_completion_tokens_zero", Endpoint::kChat, R"({"max_completion_tokens": 0, )" + kMessages + "}", 400, "max_completion_tokens", ">= 1"},
        ErrorCase{"max_tokens_string", Endpoint::kChat, R"({"max_tokens": "10", )" + kMessages + "}", 400, "max_tokens", "expected an integer, but got a string"},
        ErrorCase{"max_tokens_fraction", Endpoint::kChat, R"({"max_tokens": 1.5, )" + kMessages + "}", 400, "max_tokens", "expected an integer"},
        ErrorCase{"temperature_string", Endpoint::kChat, R"({"temperature": "hot", )" + kMessages + "}", 400, "temperature", "expected a number, but got a string"},
        ErrorCase{"temperature_range", Endpoint::kChat, R"({"temperature": 3, )" + kMessages + "}", 400, "temperature", "not within"},
        ErrorCase{"top_p_range", Endpoint::kChat, R"({"top_p": 1.5, )" + kMessages + "}", 400, "top_p", "not within"},
        ErrorCase{"guided_json", Endpoint::kChat, R"({"guided_json": {"type": "object"}, )" + kMessages + "}", 400, "guided_json", "no constrained decoding"},
        ErrorCase{"guided_regex", Endpoint::kCompletion, R"({"prompt": "a", "guided_regex": "[0-9]+"})", 400, "guided_regex", "not supported"},
        ErrorCase{"modalities_audio", Endpoint::kChat, R"({"modalities": ["text", "audio"], )" + kMessages + "}", 400, "modalities", "may only contain \"text\""},
        ErrorCase{"audio_output", Endpoint::kChat, R"({"audio": {"voice": "alloy", "format": "wav"}, )" + kMessages + "}", 400, "audio", "text output only"},
        ErrorCase{"user_number", Endpoint::kChat, R"({"user": 123, )" + kMessages + "}", 400, "user", "expected a string"},
        ErrorCase{"completion_user_number", Endpoint::kCompletion, R"({"prompt": "a", "user": 1})", 400, "user", "expected a string"},
        ErrorCase{"metadata_string", Endpoint::kChat, R"({"metadata": "x", )" + kMessages + "}", 400, "metadata", "expected an object"},
        ErrorCase{"user_refusal_part", Endpoint::kChat, R"({"messages": [{"role": "user", "content": [{"type": "refusal", "refusal": "no"}]}]})", 400, "messages", "refusal parts of assistant messages"},
        ErrorCase{"orphan_tool_message", Endpoint::kChat, R"({"messages": [{"role": "user", "content": "hi"}, {"role": "tool", "tool_call_id": "c1", "content": "42"}]})", 400, "messages[1].role", "must follow an assistant message with 'tool_calls'"},
        ErrorCase{"chat_echo", Endpoint::kChat, R"({"echo": true, )" + kMessages + "}", 400, "echo", "not supported for chat"},
        ErrorCase{"continue_after_user", Endpoint::kChat, R"({"continue_final_message": true, )" + kMessages + "}", 400, "continue_final_message", "must be an assistant message"},
        ErrorCase{"continue_tool_calls", Endpoint::kChat, R"({"continue_final_message": true, "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "x", "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}]})", 400, "continue_final_message", "no tool calls"},
        ErrorCase{"top_k_negative", Endpoint::kChat, R"({"top_k": -3, )" + kMessages + "}", 400, "top_k", "-1"},
        ErrorCase{"min_p_range", Endpoint::kCompletion, R"({"prompt": "a", "min_p": 1.5})", 400, "min_p", "not within"},
        ErrorCase{"presence_penalty_range", Endpoint::kChat, R"({"presence_penalty": 2.5, )" + kMessages + "}", 400, "presence_penalty", "not within"},
        ErrorCase{"frequency_penalty_type", Endpoint::kChat, R"({"frequency_penalty": true, )" + kMessages + "}", 400, "frequency_penalty", "got a boolean"},
        ErrorCase{"n_zero", Endpoint::kChat, R"({"n": 0, )" + kMessages + "}", 400, "n", "between 1 and"},
        ErrorCase{"n_too_many", Endpoint::kChat, R"({"n": 1000, )" + kMessages + "}", 400, "n", "between 1 and"},
        ErrorCase{"stop_number", Endpoint::kChat, R"({"stop": 5, )" + kMessages + "}", 400, "stop", "a string or an array of strings"},
        ErrorCase{"stop_list_of_numbers", Endpoint::kChat, R"({"stop": ["a", 1], )" + kMessages + "}", 400, "stop", "a string or an array"},
        ErrorCase{"stream_string", Endpoint::kChat, R"({"stream": "yes", )" + kMessages + "}", 400, "stream", "expected a boolean"},
        ErrorCase{"stream_options_without_stream", Endpoint::kChat, R"({"stream_options": {"include_usage": true}, )" + kMessages + "}", 400, "stream_options", "only allowed when 'stream'"},
        ErrorCase{"top_logprobs_without_logprobs", Endpoint::kChat, R"({"top_logprobs": 2, )" + kMessages + "}", 400, "top_logprobs", "requires 'logprobs'"},
        ErrorCase{"top_logprobs_range", Endpoint::kChat, R"({"logprobs": true, "top_logprobs": 21, )" + kMessages + "}", 400, "top_logprobs", "between 0 and 20"},
        ErrorCase{"logprobs_not_bool", Endpoint::kChat, R"({"logprobs": 3, )" + kMessages + "}", 400, "logprobs", "expected a boolean"},
        ErrorCase{"completion_logprobs_range", Endpoint::kCompletion, R"({"prompt": "a", "logprobs": 50})", 400, "logprobs", "between 0 and"},
        ErrorCase{"seed_string", Endpoint::kChat, R"({"seed": "x", )" + kMessages + "}", 400, "seed", "expected an integer"},
        ErrorCase{"repetition_penalty_zero", Endpoint::kChat, R"({"repetition_penalty": 0, )" + kMessages + "}", 400, "repetition_penalty", "greater than 0 and at most 2, got 0"},
        ErrorCase{"repetition_penalty_high", Endpoint::kCompletion, R"({"prompt": "a", "repetition_penalty": 2.5})", 400, "repetition_penalty", "at most 2"},
        ErrorCase{"logit_bias_array", Endpoint::kChat, R"({"logit_bias": [5], )" + kMessages + "}", 400, "logit_bias", "expected an object"},
        ErrorCase{"logit_bias_word_key", Endpoint::kChat, R"({"logit_bias": {"hello": 5}, )" + kMessages + "}", 400, "logit_bias", "the key 'hello' is not a token id"},
        ErrorCase{"logit_bias_negative_key", Endpoint::kChat, R"({"logit_bias": {"-3": 5}, )" + kMessages + "}", 400, "logit_bias", "not a token id"},
        ErrorCase{"logit_bias_huge_key", Endpoint::kCompletion, R"({"prompt": "a", "logit_bias": {"99999999999": 1}})", 400, "logit_bias", "not a token id"},
        ErrorCase{"logit_bias_string_value", Endpoint::kChat, R"({"logit_bias": {"5": "up"}, )" + kMessages + "}", 400, "logit_bias.5", "expected a number"},
        ErrorCase{"logit_bias_range", Endpoint::kChat, R"({"logit_bias": {"5": 101}, )" + kMessages + "}", 400, "logit_bias", "between -100 and 100, got 101"},
        ErrorCase{"logit_bias_same_token", Endpoint::kChat, R"({"logit_bias": {"5": 1, "05": 2}, )" + kMessages + "}", 400, "logit_bias", "token 5 is named twice"},
        ErrorCase{"logit_bias_out_of_vocab", Endpoint::kCompletion, R"({"prompt": "a", "logit_bias": {"1000": 1}})", 400, "logit_bias", "token id 1000 is outside the vocabulary [0, 1000)"},
        ErrorCase{"native_logit_bias_out_of_vocab", Endpoint::kNative, R"({"text": "a", "sampling_params": {"logit_bias": {"4000": -1}}})", 400, "sampling_params.logit_bias", "outside the vocabulary"},
        ErrorCase{"native_batch_logit_bias_out_of_vocab", Endpoint::kNative, R"({"text": ["a", "b"], "sampling_params": [{}, {"logit_bias": {"4000": -1}}]})", 400, "sampling_params[1].logit_bias", "outside the vocabulary"},
        ErrorCase{"native_min_new_tokens_over_max", Endpoint::kNative, R"({"text": "a", "sampling_params": {"min_new_tokens": 5, "max_new_tokens": 4}})", 400, "sampling_params.min_new_tokens", "exceeds"},
        ErrorCase{"native_repetition_penalty_negative", Endpoint::kNative, R"({"text": "a", "sampling_params": {"repetition_penalty": -1}})", 400, "sampling_params.repetition_penalty", "greater than 0"},
        ErrorCase{"response_format_json", Endpoint::kChat, R"({"response_format": {"type": "json_object"}, )" + kMessages + "}", 400, "response_format", "not supported"},
        ErrorCase{"missing_prompt", Endpoint::kCompletion, R"({"model": "tiny"})", 400, "prompt", "Missing required parameter: 'prompt'"},
        ErrorCase{"prompt_number", Endpoint::kCompletion, R"({"prompt": 5})", 400, "prompt", "expected a string"},
        ErrorCase{"prompt_empty_array", Endpoint::kCompletion, R"({"prompt": []})", 400, "prompt", "empty array"},
        ErrorCase{"prompt_mixed", Endpoint::kCompletion, R"({"prompt": [[1, 2], "x", 3]})", 400, "prompt", "expected a string"},
        ErrorCase{"prompt_token_out_of_vocab", Endpoint::kCompletion, R"({"prompt": [1, 5000]})", 400, "prompt", "outside the vocabulary [0, 1000)"},
        ErrorCase{"prompt_negative_token", Endpoint::kCompletion, R"({"prompt": [1, -1]})", 400, "prompt", "out of range"},
        ErrorCase{"prompt_empty_ids", Endpoint::kCompletion, R"({"prompt": [[]]})", 400, "prompt", "must not be empty"},
        ErrorCase{"prompt_logprobs_range", Endpoint::kChat, R"({"prompt_logprobs": 21, )" + kMessages + "}", 400, "prompt_logprobs", "between 0 and 20"},
        ErrorCase{"prompt_logprobs_streamed", Endpoint::kCompletion, R"({"prompt": "a", "prompt_logprobs": 1, "stream": true})", 400, "prompt_logprobs", "not supported with 'stream'"},
        ErrorCase{"native_logprob_start_past_prompt", Endpoint::kNative, R"({"input_ids": [1, 2, 3], "return_logprob": true, "logprob_start_len": 4})", 400, "logprob_start_len", "past the end of a prompt of 3 tokens"},
        ErrorCase{"native_logprob_start_negative", Endpoint::kNative, R"({"text": "a", "return_logprob": true, "logprob_start_len": -2})", 400, "logprob_start_len", ">= -1"},
        ErrorCase{"suffix", Endpoint::kCompletion, R"({"prompt": "a", "suffix": "b"})", 400, "suffix", "not supported"},
        ErrorCase{"batch_times_n", Endpoint::kCompletion, R"({"prompt": ["a", "b", "c"], "n": 50})", 400, "n", "exceeds the limit"},
        ErrorCase{"native_no_prompt", Endpoint::kNative, R"({"sampling_params": {}})", 400, "text", "Exactly one of 'text' or 'input_ids'"},
        ErrorCase{"native_both_prompts", Endpoint::kNative, R"({"text": "a", "input_ids": [1]})", 400, "input_ids", "Exactly one"},
        ErrorCase{"native_unknown_field", Endpoint::kNative, R"({"text": "a", "sampling_param": {}})", 400, "sampling_param", "Unknown parameter"},
        ErrorCase{"native_unknown_sampling_field", Endpoint::kNative, R"({"text": "a", "sampling_params": {"max_tokens": 3}})", 400, "sampling_params.max_tokens", "Unknown parameter"},
        ErrorCase{"native_max_new_tokens_negative", Endpoint::kNative, R"({"text": "a", "sampling_params": {"max_new_tokens": -1}})", 400, "sampling_params.max_new_tokens", ">= 0"},
        ErrorCase{"completion_max_tokens_zero_without_echo", Endpoint::kCompletion, R"({"prompt": "a", "max_tokens": 0})", 400, "max_tokens", ">= 1"},
        ErrorCase{"echo_only_prompt_fills_the_context", Endpoint::kCompletion, R"({"prompt": )" + [] { std::string ids = "["; for (int i = 0; i < 100; ++i) ids += (i ? ", " : "") + std::to_string(i + 1); return ids + "]"; }() + R"(, "max_tokens": 0, "echo": true})", 400, "prompt", "leaving no room for the completion"},
        ErrorCase{"native_sampling_list_mismatch", Endpoint::kNative, R"({"text": ["a", "b"], "sampling_params": [{}]})", 400, "sampling_params", "1 entries for 2 prompts"},
        ErrorCase{"native_input_ids_strings", Endpoint::kNative, R"({"input_ids": ["a"]})", 400, "input_ids", "expected an array of integers"},
        ErrorCase{"native_duplicate_rid", Endpoint::kNative, R"({"text": ["a", "b"], "rid": ["x", "x"]})", 400, "rid", "given twice"},
        ErrorCase{"native_empty_input_ids", Endpoint::kNative, R"({"input_ids": []})", 400, "input_ids", "must not be an empty array"},
        ErrorCase{"native_regex", Endpoint::kNative, R"({"text": "a", "sampling_params": {"regex": "x"}})", 400, "sampling_params.regex", "not supported"}),
    [](const ::testing::TestParamInfo<ErrorCase>& info) { return std::string(info.param.name); });

TEST(RequestPreparation, ChatBuildsOneEngineRequestPerChoice) {
  Fixture fixture;
  PreparedGeneration prepared = prepare_chat(
      R"({"model": "tiny", "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}],
          "n": 3, "temperature": 0.5, "top_p": 0.9, "top_k": 0, "min_p": 0.1, "seed": 7, "stop": "END", "max_completion_tokens": 9,
          "presence_penalty": 0.5, "frequency_penalty": -0.5, "logprobs": true, "top_logprobs": 2, "stream": true,
          "stream_options": {"include_usage": true}, "ignore_eos": true, "stop_token_ids": [3], "chat_template_kwargs": {"thinking": true}})",
      fixture.context);
  EXPECT_TRUE(prepared.stream);
  ASSERT_EQ(prepared.choices.size(), 3u);
  EXPECT_EQ(prepared.response_id.rfind("chatcmpl-", 0), 0u);
  const std::string expected_prompt = "system: be brief\nuser: a\nb\n<think>\nassistant:";
  for (size_t i = 0; i < 3; ++i) {
    const JobChoice& choice = prepared.choices[i];
    EXPECT_EQ(choice.index, static_cast<int64_t>(i));
    EXPECT_EQ(choice.request.request_id, prepared.response_id + "-" + std::to_string(i));
    EXPECT_EQ(choice.request.input_ids, FakeCodec().encode(expected_prompt, false));
    const scheduler::SamplingParams& s = choice.request.sampling;
    EXPECT_FLOAT_EQ(s.temperature, 0.5f);
    EXPECT_FLOAT_EQ(s.top_p, 0.9f);
    EXPECT_EQ(s.top_k, -1);
    EXPECT_FLOAT_EQ(s.min_p, 0.1f);
    EXPECT_EQ(s.seed.value(), 7u + i);  // distinct seeds per choice
    EXPECT_EQ(s.stop, std::vector<std::string>{"END"});
    EXPECT_EQ(s.max_new_tokens, 9);
    EXPECT_FLOAT_EQ(s.presence_penalty, 0.5f);
    EXPECT_FLOAT_EQ(s.frequency_penalty, -0.5f);
    EXPECT_TRUE(s.logprobs);
    EXPECT_EQ(s.top_logprobs, 2);
    EXPECT_TRUE(s.ignore_eos);
    EXPECT_EQ(s.stop_token_ids, std::vector<int32_t>{3});
  }
}

TEST(RequestPreparation, ContinueFinalMessageExtendsTheAssistantText) {
  Fixture fixture;
  const std::string conversation = R"("messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Hel"}])";
  const std::vector<int32_t> continued = FakeCodec().encode("user: hi\nassistant:Hel", false);
  // vLLM clients send add_generation_prompt false with it; SGLang's form leaves it out: the same prompt.
  for (const std::string extra : {"", R"("add_generation_prompt": false, )"}) {
    PreparedGeneration prepared =
        prepare_chat("{" + extra + R"("continue_final_message": true, )" + conversation + "}", fixture.context);
    EXPECT_EQ(prepared.choices[0].request.input_ids, continued) << extra;
  }
  // Without it, the assistant message is closed and a new turn opens after it.
  PreparedGeneration new_turn = prepare_chat("{" + conversation + "}", fixture.context);
  EXPECT_EQ(new_turn.choices[0].request.input_ids, FakeCodec().encode("user: hi\nassistant: Hel\nassistant:", false));
}

TEST(RequestPreparation, AssistantRefusalPartsAreItsText) {
  Fixture fixture;
  PreparedGeneration prepared = prepare_chat(
      R"({"modalities": ["text"], "user": "u1", "metadata": {"k": "v"}, "messages": [{"role": "user", "content": "hi"},
          {"role": "assistant", "content": [{"type": "refusal", "refusal": "I can't."}]}, {"role": "user", "content": "ok"}]})",
      fixture.context);
  EXPECT_EQ(prepared.choices[0].request.input_ids,
            FakeCodec().encode("user: hi\nassistant: I can't.\nuser: ok\nassistant:", false));
}

TEST(RequestPreparation, TopPZeroKeepsTheMostLikelyTokenOnly) {
  Fixture fixture;
  const std::string body = R"({"top_p": 0, "top_k": 40, "temperature": 0.8, )" + kMessages + "}";
  const scheduler::SamplingParams sampling = prepare_chat(body, fixture.context).choices[0].request.sampling;
  EXPECT_EQ(sampling.top_k, 1);
  EXPECT_FLOAT_EQ(sampling.top_p, 1.0f);
}

TEST(RequestPreparation, DeveloperMessagesAreSystemMessages) {
  Fixture fixture;
  PreparedGeneration prepared = prepare_chat(
      R"({"messages": [{"role": "developer", "content": "be brief"}, {"role": "user", "content": "hi"}]})", fixture.context);
  EXPECT_EQ(prepared.choices[0].request.input_ids, FakeCodec().encode("system: be brief\nuser: hi\nassistant:", false));
}

TEST(RequestPreparation, OverTheContextIsContextLengthExceeded) {
  Fixture fixture;
  try {
    prepare_completion(R"({"prompt": [1, 2, 3], "max_tokens": 98})", fixture.context);
    FAIL() << "no error";
  } catch (const ApiError& error) {
    EXPECT_EQ(error.code(), "context_length_exceeded");
  }
  EXPECT_NO_THROW(prepare_completion(R"({"prompt": [1, 2, 3], "max_tokens": 97})", fixture.context));
}

// Without a client max, the default budget is capped to the room the prompt leaves (SGLang's rule), not refused.
TEST(RequestPreparation, DefaultBudgetsAreCappedToTheContext) {
  Fixture fixture;  // context of 100 tokens
  std::string ids = "1";
  for (int i = 1; i < 95; ++i) ids += ", 1";
  const PreparedGeneration completion = prepare_completion(R"({"prompt": [)" + ids + "]}", fixture.context);
  EXPECT_EQ(completion.choices[0].request.sampling.max_new_tokens, 5);  // 16 by default
  const PreparedGeneration native = prepare_native_generate(R"({"input_ids": [)" + ids + "]}", fixture.context);
  EXPECT_EQ(native.choices[0].request.sampling.max_new_tokens, 5);  // 128 by default
  const PreparedGeneration short_prompt = prepare_native_generate(R"({"input_ids": [1, 2]})", fixture.context);
  EXPECT_EQ(short_prompt.choices[0].request.sampling.max_new_tokens, 98);
  EXPECT_THROW(prepare_native_generate(R"({"input_ids": [1, 2], "sampling_params": {"max_new_tokens": 99}})",
                                       fixture.context),
               ApiError);
}

TEST(RequestPreparation, ChatDefaultsMaxTokensToTheRestOfTheContext) {
  Fixture fixture;
  PreparedGeneration prepared = prepare_chat(R"({"messages": [{"role": "user", "content": "hi"}]})", fixture.context);
  const int64_t prompt = static_cast<int64_t>(prepared.choices[0].request.input_ids.size());
  EXPECT_EQ(prepared.choices[0].request.sampling.max_new_tokens, 100 - prompt);
  EXPECT_FALSE(prepared.stream);
}

TEST(RequestPreparation, CompletionBatchIsPromptMajor) {
  Fixture fixture;
  PreparedGeneration prepared = prepare_completion(R"({"prompt": ["ab", [5, 6]], "n": 2, "stop": ["x", "", "y"]})", fixture.context);
  ASSERT_EQ(prepared.choices.size(), 4u);
  EXPECT_EQ(prepared.choices[0].prompt_index, 0);
  EXPECT_EQ(prepared.choices[1].prompt_index, 0);
  EXPECT_EQ(prepared.choices[2].prompt_index, 1);
  EXPECT_EQ(prepared.choices[0].request.input_ids, (std::vector<int32_t>{FakeCodec::kBos, 'a', 'b'}));
  EXPECT_EQ(prepared.choices[3].request.input_ids, (std::vector<int32_t>{5, 6}));
  EXPECT_EQ(prepared.choices[0].request.sampling.max_new_tokens, kDefaultCompletionMaxTokens);
  EXPECT_EQ(prepared.choices[0].request.sampling.stop, (std::vector<std::string>{"x", "y"}));
  EXPECT_FALSE(prepared.choices[0].request.sampling.seed.has_value());
}

TEST(RequestPreparation, NativeGenerateBatchAndSamplingLists) {
  Fixture fixture;
  fixture.context.max_context_tokens = 1000;  // room for the uncapped default max_new_tokens
  PreparedGeneration prepared = prepare_native_generate(
      R"({"input_ids": [[1, 2], [3]], "sampling_params": [{"max_new_tokens": 4, "temperature": 0}, {"n": 2, "sampling_seed": 5, "stop": "z"}],
          "return_logprob": true, "top_logprobs_num": 3, "stream": true})",
      fixture.context);
  ASSERT_EQ(prepared.choices.size(), 3u);
  EXPECT_TRUE(prepared.stream);
  EXPECT_EQ(prepared.choices[0].request.sampling.max_new_tokens, 4);
  EXPECT_FLOAT_EQ(prepared.choices[0].request.sampling.temperature, 0.0f);
  EXPECT_EQ(prepared.choices[1].request.sampling.max_new_tokens, kDefaultNativeMaxNewTokens);
  EXPECT_EQ(prepared.choices[1].request.sampling.seed.value(), 5u);
  EXPECT_EQ(prepared.choices[2].request.sampling.seed.value(), 6u);
  EXPECT_EQ(prepared.choices[2].prompt_index, 1);
  EXPECT_TRUE(prepared.choices[2].request.sampling.logprobs);
  EXPECT_EQ(prepared.choices[2].request.sampling.top_logprobs, 3);
}

TEST(RequestPreparation, LogitBiasRepetitionPenaltyAndMinTokensReachTheEngine) {
  Fixture fixture;
  const std::string fields = R"("logit_bias": {"17": -100, "3": 2.5, "250": 0}, "repetition_penalty": 1.15, "min_tokens": 3)";
  for (const PreparedGeneration& prepared :
       {prepare_chat("{" + fields + ", " + kMessages + "}", fixture.context),
        prepare_completion(R"({"prompt": "a", "max_tokens": 5, )" + fields + "}", fixture.context)}) {
    const scheduler::SamplingParams& sampling = prepared.choices.at(0).request.sampling;
    EXPECT_EQ(sampling.logit_bias, (std::vector<std::pair<int32_t, float>>{{3, 2.5f}, {17, -100.0f}, {250, 0.0f}}));
    EXPECT_FLOAT_EQ(sampling.repetition_penalty, 1.15f);
    EXPECT_EQ(sampling.min_new_tokens, 3);
  }
  const PreparedGeneration native = prepare_native_generate(
      R"({"text": "a", "sampling_params": {"logit_bias": {"9": 1}, "repetition_penalty": 0.8, "min_new_tokens": 2}})",
      fixture.context);
  const scheduler::SamplingParams& sampling = native.choices.at(0).request.sampling;
  EXPECT_EQ(sampling.logit_bias, (std::vector<std::pair<int32_t, float>>{{9, 1.0f}}));
  EXPECT_FLOAT_EQ(sampling.repetition_penalty, 0.8f);
  EXPECT_EQ(sampling.min_new_tokens, 2);
  // Absent, empty or null: nothing changes the logits.
  const PreparedGeneration plain =
      prepare_chat(R"({"logit_bias": {}, "repetition_penalty": null, )" + kMessages + "}", fixture.context);
  EXPECT_TRUE(plain.choices.at(0).request.sampling.logit_bias.empty());
  EXPECT_FLOAT_EQ(plain.choices.at(0).request.sampling.repetition_penalty, 1.0f);
  EXPECT_EQ(plain.choices.at(0).request.sampling.min_new_tokens, 0);
  // More entries than the limit: refused before anything is built.
  fixture.context.limits.max_logit_bias_entries = 2;
  try {
    prepare_chat("{" + fields + ", " + kMessages + "}", fixture.context);
    FAIL() << "no error for three biased tokens with a limit of two";
  } catch (const ApiError& error) {
    EXPECT_EQ(error.param(), "logit_bias");
    EXPECT_NE(error.message().find("at most 2 tokens may be biased, got 3"), std::string::npos) << error.message();
  }
}

TEST(RequestPreparation, EchoWithLogprobsAndLogprobStartLenAskForPromptLogprobs) {
  Fixture fixture;
  const PreparedGeneration echo =
      prepare_completion(R"({"prompt": [[1, 2, 3], [4, 5]], "echo": true, "logprobs": 1, "max_tokens": 1})", fixture.context);
  ASSERT_EQ(echo.choices.size(), 2u);
  for (const JobChoice& choice : echo.choices) {
    EXPECT_EQ(choice.request.sampling.prompt_logprob_start, 0);
    EXPECT_EQ(choice.request.sampling.top_logprobs, 1);
  }
  EXPECT_EQ(prepare_completion(R"({"prompt": "a", "echo": true})", fixture.context).choices[0].request.sampling.prompt_logprob_start, -1);
  EXPECT_EQ(prepare_completion(R"({"prompt": "a", "logprobs": 2})", fixture.context).choices[0].request.sampling.prompt_logprob_start, -1);
  const PreparedGeneration native = prepare_native_generate(
      R"({"input_ids": [1, 2, 3, 4], "return_logprob": true, "top_logprobs_num": 2, "logprob_start_len": 2})", fixture.context);
  EXPECT_EQ(native.choices[0].request.sampling.prompt_logprob_start, 2);
  EXPECT_EQ(native.choices[0].request.sampling.top_logprobs, 2);
  // vLLM's prompt_logprobs: from the first token, with its own count of alternatives.
  for (const PreparedGeneration& prepared : {prepare_completion(R"({"prompt": "ab", "prompt_logprobs": 3, "logprobs": 1})", fixture.context),
                                            prepare_chat(R"({"prompt_logprobs": 3, )" + kMessages + "}", fixture.context)}) {
    EXPECT_EQ(prepared.choices[0].request.sampling.prompt_logprob_start, 0);
    EXPECT_EQ(prepared.choices[0].request.sampling.prompt_top_logprobs, 3);
  }
  EXPECT_EQ(echo.choices[0].request.sampling.prompt_top_logprobs, -1);  // echo's prompt tokens: the output's count
  // Without return_logprob the start is ignored, as SGLang ignores it.
  EXPECT_EQ(prepare_native_generate(R"({"input_ids": [1, 2], "logprob_start_len": 0})", fixture.context)
                .choices[0].request.sampling.prompt_logprob_start, -1);
}

TEST(RequestPreparation, DetokenizeNeedsATokenizer) {
  Fixture fixture;
  fixture.context.codec = std::make_shared<TokenIdsOnlyCodec>(1000);
  try {
    prepare_detokenize(R"({"tokens": [1, 2]})", fixture.context);
    FAIL() << "ids without a tokenizer decoded to nothing";
  } catch (const ApiError& error) {
    EXPECT_EQ(error.status(), 400);
    EXPECT_EQ(error.code(), "tokenizer_unavailable");
  }
  EXPECT_THROW(prepare_tokenize(R"({"prompt": "a"})", fixture.context), ApiError);
}

TEST(RequestPreparation, TextPromptsAddSpecialTokensButChatDoesNot) {
  Fixture fixture;
  EXPECT_EQ(prepare_native_generate(R"({"text": "a"})", fixture.context).choices[0].request.input_ids,
            (std::vector<int32_t>{FakeCodec::kBos, 'a'}));
  EXPECT_EQ(prepare_chat(R"({"messages": [{"role": "user", "content": "a"}]})", fixture.context).choices[0].request.input_ids.front(), 'u');
}

TEST(RequestPreparation, IdsAreUnique) {
  RequestIdGenerator ids;
  std::set<std::string> seen;
  for (int i = 0; i < 1000; ++i) EXPECT_TRUE(seen.insert(ids.next("x")).second);
}

}  // namespace
}  // namespace fathom::server
