// Response and SSE building for the three API formats, usage accounting, error JSON, and metrics text.
#include <gtest/gtest.h>

#include "fake_codec.h"
#include "server/api_error.h"
#include "server/metrics.h"
#include "server/native_generate.h"
#include "server/chat_protocol.h"
#include "server/openai_response.h"
#include "server/sse.h"
#include "test_http_client.h"

namespace fathom::server {
namespace {

using Json = nlohmann::ordered_json;
using scheduler::FinishReason;

OpenAiResponseContext context(bool include_usage = false) {
  OpenAiResponseContext c;
  c.id = "cmpl-1";
  c.created_unix_s = 1700000000;
  c.model = "tiny";
  c.include_usage = include_usage;
  c.codec = std::make_shared<fathom::testing::FakeCodec>();
  return c;
}

ChoiceResult finished_choice(int64_t index, int64_t prompt_index, const std::string& text, FinishReason reason) {
  ChoiceResult choice;
  choice.index = index;
  choice.prompt_index = prompt_index;
  choice.request_id = "r-" + std::to_string(index);
  choice.prompt_length = 10;
  choice.text = text;
  choice.token_ids = {11, 12};
  choice.completion_tokens = 2;
  choice.cached_prompt_tokens = 4;
  choice.finished = true;
  choice.finish_reason = reason;
  return choice;
}

scheduler::GenerationEvent event_with(const std::string& text, std::vector<int32_t> ids, bool finished = false) {
  scheduler::GenerationEvent event;
  event.text_delta = text;
  event.new_token_ids = std::move(ids);
  event.finished = finished;
  return event;
}

TEST(ResponseBuilding, UsageCountsEachPromptOnce) {
  std::vector<ChoiceResult> choices = {finished_choice(0, 0, "a", FinishReason::kStop), finished_choice(1, 0, "b", FinishReason::kLength),
                                       finished_choice(2, 1, "c", FinishReason::kStop)};
  UsageCounts usage = count_usage(choices);
  EXPECT_EQ(usage.prompt_tokens, 20);
  EXPECT_EQ(usage.completion_tokens, 6);
  EXPECT_EQ(usage.cached_tokens, 8);
  Json json = usage_json(usage);
  EXPECT_EQ(json["total_tokens"], 26);
  EXPECT_EQ(json["prompt_tokens_details"]["cached_tokens"], 8);
}

// An EOS or stop token id is reported as a number (SGLang's form), never as a string that a stop string could equal.
TEST(ResponseBuilding, MatchedStopTokenIsANumber) {
  auto protocol = make_chat_protocol(context(), false);
  std::vector<ChoiceResult> choices = {finished_choice(0, 0, "hello", FinishReason::kStop)};
  choices[0].matched_stop_token = 1;
  Json response = protocol->final_response(choices);
  EXPECT_EQ(response["choices"][0]["finish_reason"], "stop");
  EXPECT_TRUE(response["choices"][0]["matched_stop"].is_number_integer()) << response.dump();
  EXPECT_EQ(response["choices"][0]["matched_stop"], 1);
}

TEST(ResponseBuilding, ChatFinalResponse) {
  auto protocol = make_chat_protocol(context(), false);
  std::vector<ChoiceResult> choices = {finished_choice(0, 0, "hello", FinishReason::kStop), finished_choice(1, 0, "bye", FinishReason::kLength)};
  choices[0].matched_stop = "END";
  Json response = protocol->final_response(choices);
  EXPECT_EQ(response["object"], "chat.completion");
  EXPECT_EQ(response["id"], "cmpl-1");
  EXPECT_EQ(response["model"], "tiny");
  ASSERT_EQ(response["choices"].size(), 2u);
  EXPECT_EQ(response["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(response["choices"][0]["message"]["content"], "hello");
  EXPECT_EQ(response["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(response["choices"][0]["matched_stop"], "END");
  EXPECT_TRUE(response["choices"][0]["logprobs"].is_null());
  EXPECT_EQ(response["choices"][1]["finish_reason"], "length");
  EXPECT_FALSE(response["choices"][1].contains("matched_stop"));
  EXPECT_EQ(response["usage"]["prompt_tokens"], 10);
  EXPECT_EQ(response["usage"]["completion_tokens"], 4);
}

TEST(ResponseBuilding, ChatStreamChunksAndUsage) {
  auto protocol = make_chat_protocol(context(/*include_usage=*/true), false);
  std::vector<ChoiceResult> choices(1);
  std::string out;
  protocol->stream_opened(choices, out);
  choices[0].text = "ab";
  protocol->stream_delta(choices[0], event_with("ab", {11}), out);
  choices[0].finished = true;
  choices[0].finish_reason = FinishReason::kStop;
  choices[0].prompt_length = 3;
  choices[0].completion_tokens = 2;
  protocol->stream_delta(choices[0], event_with("", {12}, true), out);
  protocol->stream_closed(choices, out);
  append_sse_done(out);
  std::vector<nlohmann::json> events = fathom::testing::sse_events(out);
  ASSERT_EQ(events.size(), 5u) << out;
  EXPECT_EQ(events[0]["object"], "chat.completion.chunk");
  EXPECT_EQ(events[0]["choices"][0]["delta"]["role"], "assistant");
  EXPECT_TRUE(events[0]["usage"].is_null());
  EXPECT_EQ(events[1]["choices"][0]["delta"]["content"], "ab");
  EXPECT_TRUE(events[1]["choices"][0]["finish_reason"].is_null());
  EXPECT_EQ(events[2]["choices"][0]["finish_reason"], "stop");
  EXPECT_TRUE(events[2]["choices"][0]["delta"].empty());
  EXPECT_TRUE(events[3]["choices"].empty());
  EXPECT_EQ(events[3]["usage"]["total_tokens"], 5);
  EXPECT_EQ(events[4], "[DONE]");
}

TEST(ResponseBuilding, ChatLogprobs) {
  auto protocol = make_chat_protocol(context(), true);
  ChoiceResult choice = finished_choice(0, 0, "t11 ", FinishReason::kStop);
  scheduler::TokenLogprob logprob;
  logprob.token_id = 11;
  logprob.logprob = -0.5f;
  logprob.top = {{11, -0.5f}, {12, -1.5f}};
  choice.logprobs = {logprob};
  Json response = protocol->final_response({choice});
  const Json& content = response["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 1u);
  EXPECT_EQ(content[0]["token"], "t11 ");
  EXPECT_DOUBLE_EQ(content[0]["logprob"].get<double>(), -0.5);
  EXPECT_EQ(content[0]["bytes"], Json::array({'t', '1', '1', ' '}));
  ASSERT_EQ(content[0]["top_logprobs"].size(), 2u);
  EXPECT_EQ(content[0]["top_logprobs"][1]["token"], "t12 ");
}

TEST(ResponseBuilding, CompletionEchoLogprobsAndStream) {
  auto protocol = make_completion_protocol(context(), {"PROMPT "}, true);
  ChoiceResult choice = finished_choice(0, 0, "t11 t12 ", FinishReason::kLength);
  scheduler::TokenLogprob a, b;
  a.token_id = 11;
  b.token_id = 12;
  b.top = {{12, -0.1f}};
  choice.logprobs = {a, b};
  Json response = protocol->final_response({choice});
  EXPECT_EQ(response["object"], "text_completion");
  EXPECT_EQ(response["choices"][0]["text"], "PROMPT t11 t12 ");
  const Json& logprobs = response["choices"][0]["logprobs"];
  EXPECT_EQ(logprobs["tokens"], Json::array({"t11 ", "t12 "}));
  EXPECT_EQ(logprobs["text_offset"], Json::array({7, 11}));
  EXPECT_EQ(logprobs["top_logprobs"][1].size(), 1u);

  std::string out;
  std::vector<ChoiceResult> streaming(1);
  protocol->stream_opened(streaming, out);
  streaming[0].text = "t11 ";
  protocol->stream_delta(streaming[0], event_with("t11 ", {11}), out);
  std::vector<nlohmann::json> events = fathom::testing::sse_events(out);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0]["choices"][0]["text"], "PROMPT ");
  EXPECT_EQ(events[1]["choices"][0]["text"], "t11 ");
  EXPECT_FALSE(events[1].contains("usage"));
}

// echo with logprobs (lm-evaluation-harness's loglikelihood requests): the prompt's tokens lead the logprobs, the
// first with null, offsets from the start of the echoed text; streamed, the echo waits for the first event, which
// brings the prompt's logprobs.
TEST(ResponseBuilding, CompletionEchoWithPromptLogprobs) {
  auto protocol = make_completion_protocol(context(), {"t7 t8 t9 "}, true);
  ChoiceResult choice = finished_choice(0, 0, "t11 t12 ", FinishReason::kLength);
  choice.logprobs = {scheduler::TokenLogprob{11, -1.5f, {}}, scheduler::TokenLogprob{12, -2.5f, {}}};
  choice.prompt_logprobs_ready = true;
  choice.unscored_first_prompt_token = 7;
  choice.prompt_logprobs = {scheduler::TokenLogprob{8, -0.5f, {{9, -0.2f}}}, scheduler::TokenLogprob{9, -0.1f, {}}};
  const Json response = protocol->final_response({choice});
  EXPECT_EQ(response["choices"][0]["text"], "t7 t8 t9 t11 t12 ");
  const Json& logprobs = response["choices"][0]["logprobs"];
  EXPECT_EQ(logprobs["tokens"], Json::array({"t7 ", "t8 ", "t9 ", "t11 ", "t12 "}));
  EXPECT_EQ(logprobs["token_logprobs"], Json::array({nullptr, -0.5f, -0.1f, -1.5f, -2.5f}));
  EXPECT_EQ(logprobs["text_offset"], Json::array({0, 3, 6, 9, 13}));
  EXPECT_TRUE(logprobs["top_logprobs"][0].is_null());
  EXPECT_EQ(logprobs["top_logprobs"][1], (Json{{"t9 ", -0.2f}, {"t8 ", -0.5f}}));
  EXPECT_EQ(logprobs["top_logprobs"][2], (Json{{"t9 ", -0.1f}}));

  std::string out;
  std::vector<ChoiceResult> streaming = {choice};
  protocol->stream_opened(streaming, out);
  EXPECT_EQ(out, "");
  scheduler::GenerationEvent first = event_with("t11 ", {11});
  first.logprobs = {choice.logprobs[0]};
  protocol->stream_delta(streaming[0], first, out);
  protocol->stream_delta(streaming[0], event_with("t12 ", {12}), out);
  const std::vector<nlohmann::json> events = fathom::testing::sse_events(out);
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0]["choices"][0]["text"], "t7 t8 t9 ");
  EXPECT_EQ(events[0]["choices"][0]["logprobs"]["token_logprobs"], Json::array({nullptr, -0.5f, -0.1f}));
  EXPECT_EQ(events[1]["choices"][0]["logprobs"]["text_offset"], Json::array({9}));
  EXPECT_EQ(events[2]["choices"][0]["text"], "t12 ");  // the echo went once

  // Ended before its first token (aborted, failed): the echo without a prompt block, never a partial one.
  ChoiceResult aborted = finished_choice(0, 0, "", FinishReason::kAbort);
  aborted.token_ids.clear();
  const Json cut = protocol->final_response({aborted})["choices"][0]["logprobs"];
  EXPECT_EQ(cut["tokens"], Json::array());
  std::string aborted_out;
  auto stream_protocol = make_completion_protocol(context(), {"t7 t8 t9 "}, true);
  stream_protocol->stream_delta(aborted, event_with("", {}, true), aborted_out);
  const std::vector<nlohmann::json> aborted_events = fathom::testing::sse_events(aborted_out);
  ASSERT_EQ(aborted_events.size(), 2u);
  EXPECT_EQ(aborted_events[0]["choices"][0]["text"], "t7 t8 t9 ");
  EXPECT_TRUE(aborted_events[0]["choices"][0]["logprobs"].is_null());
}

// vLLM's prompt_logprobs: per prompt token a dict by id of {logprob, rank, decoded_token}, null for the first; a
// choice's field in completions, the response's in chat.
TEST(ResponseBuilding, VllmPromptLogprobs) {
  OpenAiResponseContext scored_context = context();
  scored_context.prompt_logprobs = true;
  ChoiceResult choice = finished_choice(0, 0, "t11 t12 ", FinishReason::kLength);
  choice.prompt_logprobs_ready = true;
  choice.unscored_first_prompt_token = 7;
  choice.prompt_logprobs = {scheduler::TokenLogprob{8, -1.5f, {{9, -0.25f}, {8, -1.5f}}, 2}};
  const Json expected = Json::array(
      {nullptr, Json{{"9", Json{{"logprob", -0.25f}, {"rank", 1}, {"decoded_token", "t9 "}}},
                     {"8", Json{{"logprob", -1.5f}, {"rank", 2}, {"decoded_token", "t8 "}}}}});
  EXPECT_EQ(make_completion_protocol(scored_context, {}, false)->final_response({choice})["choices"][0]["prompt_logprobs"],
            expected);
  EXPECT_EQ(make_chat_protocol(scored_context, false)->final_response({choice})["prompt_logprobs"], expected);
  EXPECT_FALSE(make_completion_protocol(context(), {}, false)->final_response({choice})["choices"][0].contains("prompt_logprobs"));
  ChoiceResult unstarted = finished_choice(0, 0, "", FinishReason::kAbort);
  EXPECT_TRUE(make_chat_protocol(scored_context, false)->final_response({unstarted})["prompt_logprobs"].is_null());
}

// Tokens that are parts of UTF-8 characters (byte-level BPE): 21 "°" whole, 22 / 23 its two bytes, 24 "C",
// 25 two of the three bytes of a CJK character.
class Utf8PiecesCodec : public fathom::testing::FakeCodec {
 public:
  TokenPiece token_piece(int32_t id) const override {
    switch (id) {
      case 21: return {"\u00b0", {0xc2, 0xb0}};
      case 22: return {"\ufffd", {0xc2}};
      case 23: return {"\ufffd", {0xb0}};
      case 24: return {"C", {'C'}};
      case 25: return {"\ufffd", {0xe6, 0x97}};
      case 26: return {"<sp>", {'<', 's', 'p', '>'}, true};
      default: return FakeCodec::token_piece(id);
    }
  }
};

// text_offset counts characters of the returned text (not bytes), the same streamed or not; tokens that are not
// whole characters are written as OpenAI writes them ("bytes:\xc2") and stay distinct in top_logprobs.
TEST(ResponseBuilding, CompletionLogprobsOfPartialUtf8Tokens) {
  OpenAiResponseContext utf8_context = context();
  utf8_context.codec = std::make_shared<Utf8PiecesCodec>();
  auto protocol = make_completion_protocol(utf8_context, {"\u00e9 "}, true);
  const std::vector<int32_t> ids = {21, 24, 22, 23, 24};
  ChoiceResult choice = finished_choice(0, 0, "\u00b0C\u00b0C", FinishReason::kLength);
  for (int32_t id : ids) {
    scheduler::TokenLogprob entry;
    entry.token_id = id;
    entry.top = {{22, -1.0f}, {23, -2.0f}, {25, -3.0f}};
    choice.logprobs.push_back(entry);
  }
  const Json logprobs = protocol->final_response({choice})["choices"][0]["logprobs"];
  EXPECT_EQ(logprobs["tokens"], Json::array({"\u00b0", "C", "bytes:\\xc2", "bytes:\\xb0", "C"}));
  EXPECT_EQ(logprobs["text_offset"], Json::array({2, 3, 4, 4, 5}));  // "é °C°C": ° at 2, C at 3, ° at 4, C at 5
  ASSERT_EQ(logprobs["top_logprobs"][0].size(), 4u);  // the three alternatives and the sampled token (OpenAI)
  EXPECT_EQ(logprobs["top_logprobs"][0]["bytes:\\xe6\\x97"], -3.0f);
  EXPECT_EQ(logprobs["top_logprobs"][0]["\u00b0"], 0.0f);
  ASSERT_EQ(logprobs["top_logprobs"][2].size(), 3u);  // token 22 was sampled and is an alternative

  // Streamed in three events on a fresh protocol: the same offsets.
  auto streaming_protocol = make_completion_protocol(utf8_context, {"\u00e9 "}, true);
  std::string out;
  std::vector<ChoiceResult> streaming(1);
  streaming_protocol->stream_opened(streaming, out);
  const std::vector<std::pair<size_t, size_t>> event_ranges = {{0, 2}, {2, 3}, {3, 5}};
  for (const auto& [begin, end] : event_ranges) {
    scheduler::GenerationEvent event = event_with("", std::vector<int32_t>(ids.begin() + begin, ids.begin() + end));
    event.logprobs.assign(choice.logprobs.begin() + begin, choice.logprobs.begin() + end);
    streaming_protocol->stream_delta(streaming[0], event, out);
  }
  Json streamed_offsets = Json::array();
  for (const nlohmann::json& event : fathom::testing::sse_events(out)) {
    if (event["choices"][0]["logprobs"].is_null()) continue;
    for (const auto& offset : event["choices"][0]["logprobs"]["text_offset"]) {
      streamed_offsets.push_back(offset.get<int64_t>());
    }
  }
  EXPECT_EQ(streamed_offsets, logprobs["text_offset"]);
}

// A special token takes no characters of the text when skip_special_tokens leaves it out, four when it is kept.
// The echoed prompt's offsets follow the echoed text: token-id prompts echo their decoded ids, special tokens
// included; a text prompt echoes the text, which lacks the BOS the tokenizer added.
TEST(ResponseBuilding, EchoedPromptOffsetsFollowTheEchoedText) {
  OpenAiResponseContext utf8_context = context();
  utf8_context.codec = std::make_shared<Utf8PiecesCodec>();
  ChoiceResult choice = finished_choice(0, 0, "t11 ", FinishReason::kLength);
  choice.token_ids = {11};
  choice.logprobs = {scheduler::TokenLogprob{11, -1.0f, {}}};
  choice.prompt_logprobs_ready = true;
  choice.unscored_first_prompt_token = 26;  // "<sp>", special
  choice.prompt_logprobs = {scheduler::TokenLogprob{7, -0.5f, {}}, scheduler::TokenLogprob{21, -0.25f, {}}};
  const Json with_special = make_completion_protocol(utf8_context, {"<sp>t7 \u00b0"}, true)
                                ->final_response({choice})["choices"][0]["logprobs"];
  EXPECT_EQ(with_special["text_offset"], Json::array({0, 4, 7, 8}));
  const Json text_prompt = make_completion_protocol(utf8_context, {"t7 \u00b0"}, true)
                               ->final_response({choice})["choices"][0]["logprobs"];
  EXPECT_EQ(text_prompt["text_offset"], Json::array({0, 0, 3, 4}));
  EXPECT_EQ(text_prompt["tokens"], Json::array({"<sp>", "t7 ", "\u00b0", "t11 "}));
}

TEST(ResponseBuilding, CompletionLogprobOffsetsSkipSpecialTokens) {
  OpenAiResponseContext utf8_context = context();
  utf8_context.codec = std::make_shared<Utf8PiecesCodec>();
  for (const bool skip : {true, false}) {
    ChoiceResult choice = finished_choice(0, 0, skip ? "CC" : "C<sp>C", FinishReason::kLength);
    for (int32_t id : {24, 26, 24}) {
      scheduler::TokenLogprob entry;
      entry.token_id = id;
      choice.logprobs.push_back(entry);
    }
    const Json logprobs =
        make_completion_protocol(utf8_context, {}, true, skip)->final_response({choice})["choices"][0]["logprobs"];
    EXPECT_EQ(logprobs["tokens"], Json::array({"C", "<sp>", "C"}));
    EXPECT_EQ(logprobs["text_offset"], skip ? Json::array({0, 1, 1}) : Json::array({0, 1, 5})) << skip;
  }
}

TEST(ResponseBuilding, NativeGenerateSingleAndList) {
  auto codec = std::make_shared<fathom::testing::FakeCodec>();
  ChoiceResult choice = finished_choice(0, 0, "xyz", FinishReason::kStop);
  choice.matched_stop = "STOP";
  Json single = make_native_generate_protocol(false, false, false, {""}, codec)->final_response({choice});
  EXPECT_EQ(single["text"], "xyz");
  EXPECT_EQ(single["output_ids"], Json::array({11, 12}));
  EXPECT_EQ(single["meta_info"]["id"], "r-0");
  EXPECT_EQ(single["meta_info"]["finish_reason"]["type"], "stop");
  EXPECT_EQ(single["meta_info"]["finish_reason"]["matched"], "STOP");
  ChoiceResult eos = choice;
  eos.matched_stop.clear();
  eos.matched_stop_token = 1;
  EXPECT_EQ(make_native_generate_protocol(false, false, false, {""}, codec)->final_response({eos})["meta_info"]
                ["finish_reason"]["matched"], 1);
  EXPECT_EQ(single["meta_info"]["prompt_tokens"], 10);
  EXPECT_EQ(single["meta_info"]["cached_tokens"], 4);
  EXPECT_FALSE(single.contains("index"));

  ChoiceResult second = finished_choice(1, 1, "w", FinishReason::kLength);
  scheduler::TokenLogprob logprob;
  logprob.token_id = 11;
  logprob.logprob = -1.0f;
  logprob.top = {{11, -1.0f}};
  second.logprobs = {logprob, logprob};
  Json list = make_native_generate_protocol(true, true, true, {"mine", ""}, codec)->final_response({choice, second});
  ASSERT_TRUE(list.is_array());
  EXPECT_EQ(list[0]["meta_info"]["id"], "mine");
  EXPECT_EQ(list[1]["index"], 1);
  EXPECT_EQ(list[1]["meta_info"]["finish_reason"]["type"], "length");
  EXPECT_EQ(list[1]["meta_info"]["output_token_logprobs"][0], Json::array({-1.0, 11, "t11 "}));
  EXPECT_EQ(list[1]["meta_info"]["output_top_logprobs"][0][0][1], 11);
  EXPECT_FALSE(list[1]["meta_info"].contains("input_token_logprobs"));

  // logprob_start_len 0: the prompt's first token has no logprob (null), the rest have theirs (SGLang's shape).
  ChoiceResult scored = second;
  scored.prompt_index = 0;
  scored.prompt_logprobs_ready = true;
  scored.unscored_first_prompt_token = 7;
  scored.prompt_logprobs = {scheduler::TokenLogprob{8, -0.5f, {{9, -0.25f}}}};
  const Json meta = make_native_generate_protocol(false, true, true, {""}, codec)->final_response({scored})["meta_info"];
  EXPECT_EQ(meta["input_token_logprobs"], Json::array({Json::array({nullptr, 7, "t7 "}), Json::array({-0.5, 8, "t8 "})}));
  EXPECT_EQ(meta["input_top_logprobs"], Json::array({nullptr, Json::array({Json::array({-0.25, 9, "t9 "})})}));
  ChoiceResult at_end = second;  // logprob_start_len == the prompt's length: empty lists
  at_end.prompt_index = 0;
  at_end.prompt_logprobs_ready = true;
  const Json end_meta = make_native_generate_protocol(false, true, true, {""}, codec)->final_response({at_end})["meta_info"];
  EXPECT_EQ(end_meta["input_token_logprobs"], Json::array());
}

TEST(ResponseBuilding, ErrorJsonShape) {
  Json json = error_json(ApiError(404, "no such model", "model", "model_not_found"));
  EXPECT_EQ(json.dump(), R"({"error":{"message":"no such model","type":"invalid_request_error","param":"model","code":"model_not_found"}})");
  HttpResponse response = error_response(ApiError(500, std::string("bad \xff byte")));
  EXPECT_EQ(response.status, 500);
  EXPECT_NE(response.body.find("server_error"), std::string::npos);
}

TEST(Metrics, PrometheusText) {
  ServerMetrics metrics;
  metrics.record_request("/v1/completions");
  metrics.record_response_status(200);
  metrics.record_first_token(0.05);
  metrics.record_inter_token(0.01, 3);
  metrics.record_generated_tokens(ServerMetrics::Clock::now(), 4);
  metrics.record_finished("stop", 10, 5, 0.3);
  scheduler::EngineStats stats;
  stats.waiting_requests = 2;
  stats.running_requests = 3;
  stats.kv_total_tokens = 100;
  stats.kv_used_tokens = 25;
  stats.prompt_tokens_total = 10;
  stats.cached_prompt_tokens_total = 5;
  std::string text = metrics.render(stats, ConnectionGauges{7, 1}, ServerMetrics::Clock::now());
  for (const char* line : {"fathom:num_queue_reqs 2\n", "fathom:num_running_reqs 3\n", "fathom:token_usage 0.25\n",
                           "fathom:cache_hit_rate 0.5\n", "fathom:kv_used_tokens 25\n", "fathom:generation_tokens_total 4\n",
                           "fathom:open_connections 7\n", "fathom:http_requests_total{endpoint=\"/v1/completions\"} 1\n",
                           "fathom:http_responses_total{code=\"200\"} 1\n", "fathom:num_requests_total{finish_reason=\"stop\"} 1\n",
                           "fathom:time_to_first_token_seconds_bucket{le=\"0.06\"} 1\n",
                           "fathom:time_to_first_token_seconds_bucket{le=\"0.04\"} 0\n",
                           "fathom:inter_token_latency_seconds_count 3\n", "fathom:e2e_request_latency_seconds_count 1\n",
                           "# TYPE fathom:time_to_first_token_seconds histogram\n"}) {
    EXPECT_NE(text.find(line), std::string::npos) << "missing: " << line << "\n" << text;
  }
  // Integers stay integers past 9 ("10", not "1e+01"); whole bucket bounds read as Prometheus' Python client
  // writes them ("10.0").
  stats.prompt_tokens_total = 123456;
  text = metrics.render(stats, ConnectionGauges{7, 1}, ServerMetrics::Clock::now());
  for (const char* line : {"fathom:engine_prompt_tokens_total 123456\n",
                           "fathom:e2e_request_latency_seconds_bucket{le=\"10.0\"} 1\n",
                           "fathom:e2e_request_latency_seconds_bucket{le=\"0.3\"} 1\n"}) {
    EXPECT_NE(text.find(line), std::string::npos) << "missing: " << line << "\n" << text;
  }
  EXPECT_EQ(text.find("e+"), std::string::npos) << text;
}

TEST(Metrics, ThroughputWindowCountsWholeSeconds) {
  ThroughputWindow window(10);
  auto start = ThroughputWindow::Clock::now();
  window.add(start, 100);
  window.add(start + std::chrono::seconds(1), 100);
  EXPECT_GT(window.tokens_per_s(start + std::chrono::seconds(2)), 0.0);
  EXPECT_EQ(window.tokens_per_s(start + std::chrono::seconds(30)), 0.0);
}

}  // namespace
}  // namespace fathom::server
