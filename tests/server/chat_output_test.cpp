// Output parsing of chat choices: the pipeline (special-token removal -> reasoning -> tool calls) streamed in
// every chunking equals its non-streamed result, and over HTTP (a scripted engine) the OpenAI shapes:
// message.tool_calls with ids, content null, reasoning_content, finish_reason "tool_calls", and the streamed
// deltas (role, then name with id/type/index, then argument fragments) that add up to the same message.
#include <gtest/gtest.h>

#include "fake_codec.h"
#include "function_call/deepseek_markers.h"
#include "scripted_engine.h"
#include "server/api_server.h"
#include "server/chat_output_parser.h"
#include "server/output_parsing.h"
#include "stream_chunking.h"
#include "test_http_client.h"

namespace fathom::server {
namespace {

using nlohmann::json;
using testing::ScriptedEngine;
using testing::ScriptedOutput;

const std::string kCallsBegin(function_call::deepseek::kCallsBegin), kCallsEnd(function_call::deepseek::kCallsEnd),
    kCallBegin(function_call::deepseek::kCallBegin), kCallEnd(function_call::deepseek::kCallEnd), kSep(function_call::deepseek::kSeparator);

std::string v3_call(const std::string& name, const std::string& arguments) {
  return kCallBegin + "function" + kSep + name + "\n```json\n" + arguments + "\n```" + kCallEnd;
}

std::shared_ptr<ChatOutputOptions> both_parsers() {
  auto options = std::make_shared<ChatOutputOptions>();
  options->tool_format = function_call::ToolCallFormat::kDeepSeekV3;
  options->tool_names = {"get_weather", "get_time"};
  options->reasoning_format = reasoning::ReasoningFormat::kDeepSeekR1;
  options->removed_strings = {"<|eot|>", "<｜end▁of▁sentence｜>"};
  return options;
}

std::string describe(const ChatOutput& output) {
  json calls = json::array();
  for (const auto& call : output.tool_calls) calls.push_back({call.name, call.arguments});
  return json{{"content", output.content}, {"reasoning", output.reasoning}, {"calls", calls}}.dump();
}

ChatOutput streamed(const std::shared_ptr<const ChatOutputOptions>& options, const testing::Chunking& chunks) {
  ChatOutputParser parser(options);
  ChatOutputDelta all = parser.start();
  for (const std::string& chunk : chunks) all.append(parser.push(chunk));
  all.append(parser.finish());
  ChatOutput output;
  output.content = all.content;
  output.reasoning = all.reasoning;
  function_call::ToolCallParseResult calls;
  function_call::accumulate(calls, function_call::ToolCallChunk{"", all.tool_calls});
  output.tool_calls = calls.calls;
  return output;
}

TEST(ChatOutputPipeline, ReasoningThenCallsStreamLikeTheWholeText) {
  auto options = both_parsers();
  const std::string text = "<think>\nThe user wants Paris weather; call the tool.\n</think>\n\nChecking.<|eot|>" + kCallsBegin +
                           v3_call("get_weather", R"({"location": "Paris, France"})") + "\n" + v3_call("get_time", "{}") + kCallsEnd;
  const ChatOutput whole = parse_chat_output(options, text);
  EXPECT_EQ(whole.reasoning, "The user wants Paris weather; call the tool.");
  EXPECT_EQ(whole.content, "Checking.");
  ASSERT_EQ(whole.tool_calls.size(), 2u);
  EXPECT_EQ(whole.tool_calls[0].arguments, R"({"location": "Paris, France"})");
  EXPECT_EQ(whole.tool_calls[1].name, "get_time");
  for (const testing::Chunking& chunks : testing::all_chunkings(text, nullptr)) {
    ASSERT_EQ(describe(streamed(options, chunks)), describe(whole)) << chunks.size() << " pieces";
  }
}

TEST(ChatOutputPipeline, ForcedNamedCallAfterAPromptThatOpenedReasoning) {
  auto options = both_parsers();
  options->starts_in_reasoning = true;
  options->forced_reasoning_text = "</think>";
  options->forced_tool_text = function_call::forced_call_opening(function_call::ToolCallFormat::kDeepSeekV3, std::string("get_time"));
  ChatOutputParser parser(options);
  ChatOutputDelta opened = parser.start();
  ASSERT_EQ(opened.tool_calls.size(), 1u);  // the name is known before the model writes anything
  EXPECT_EQ(opened.tool_calls[0].name, "get_time");
  EXPECT_TRUE(opened.content.empty());
  EXPECT_TRUE(opened.reasoning.empty());
  const std::string model_text = R"({"tz": "Europe/Paris"})" "\n```" + kCallEnd + kCallsEnd;
  const ChatOutput whole = parse_chat_output(options, model_text);
  ASSERT_EQ(whole.tool_calls.size(), 1u);
  EXPECT_EQ(whole.tool_calls[0].arguments, R"({"tz": "Europe/Paris"})");
  EXPECT_EQ(whole.content, "");
  for (const testing::Chunking& chunks : testing::all_chunkings(model_text, nullptr)) {
    ASSERT_EQ(describe(streamed(options, chunks)), describe(whole));
  }
}

TEST(ChatOutputPlan, ContinuedAssistantTextDecidesWhetherReasoningIsOpen) {
  OutputParsers parsers;
  parsers.reasoning_format = reasoning::ReasoningFormat::kDeepSeekR1;
  struct Case { std::string prompt, prefix; bool in_reasoning; };
  const Case cases[] = {
      {"<｜Assistant｜><think>\n", "Let me see", true},         // still inside the block the prompt opened
      {"<｜Assistant｜><think>\n", "hm</think>The answer", false},
      {"<｜Assistant｜>", "<think>first", true},
      {"<｜Assistant｜>", "<think>a</think>b<think>c", true},
      {"<｜Assistant｜>", "plain", false},
  };
  for (const Case& c : cases) {
    ChatRequest request;
    request.assistant_prefix = c.prefix;
    const ChatOutputPlan plan = plan_chat_output(parsers, request, c.prompt, {});
    ASSERT_TRUE(plan.options) << c.prefix;
    EXPECT_EQ(plan.options->starts_in_reasoning, c.in_reasoning) << c.prompt << " + " << c.prefix;
  }
  ChatRequest forced;
  forced.assistant_prefix = "x";
  forced.tools.choice.mode = ToolChoice::Mode::kRequired;
  parsers.tool_call_format = function_call::ToolCallFormat::kDeepSeekV3;
  EXPECT_THROW(plan_chat_output(parsers, forced, "", {}), ApiError);
}

TEST(ChatOutputPipeline, RequiredCallWithAMalformedHeaderDegradesToTheModelsOwnText) {
  auto options = both_parsers();
  options->forced_tool_text = function_call::forced_call_opening(function_call::ToolCallFormat::kDeepSeekV3, std::nullopt);
  const std::string model_text = "I cannot decide which tool.";
  const ChatOutput output = parse_chat_output(options, model_text);
  EXPECT_TRUE(output.tool_calls.empty());
  EXPECT_EQ(output.content, model_text);  // nothing of the forced opening shows
  for (const testing::Chunking& chunks : testing::all_chunkings(model_text, nullptr)) {
    ASSERT_EQ(describe(streamed(options, chunks)), describe(output));
  }
}

TEST(ChatOutputPipeline, SingleCallWhenParallelCallsAreOff) {
  auto options = both_parsers();
  options->parallel_tool_calls = false;
  const std::string text = kCallsBegin + v3_call("get_time", "{}") + v3_call("get_weather", "{}") + kCallsEnd;
  ChatOutputParser parser(options);
  parser.start();
  ChatOutputDelta delta = parser.push(text);
  delta.append(parser.finish());
  ASSERT_EQ(delta.tool_calls.size(), 1u);
  EXPECT_EQ(delta.tool_calls[0].name, "get_time");
  EXPECT_EQ(parser.tool_call_count(), 1);
}

TEST(ChatOutputPipeline, SpecialTokensAreHiddenEvenWhenSplit) {
  auto options = std::make_shared<ChatOutputOptions>();
  options->reasoning_format = reasoning::ReasoningFormat::kDeepSeekR1;
  options->removed_strings = {"<|eot|>"};
  const std::string text = "Hello<|eot|> world <|eo";
  EXPECT_EQ(parse_chat_output(options, text).content, "Hello world <|eo");
  for (const testing::Chunking& chunks : testing::all_chunkings(text, nullptr)) {
    ASSERT_EQ(streamed(options, chunks).content, "Hello world <|eo");
  }
}

// An ApiServer over a ScriptedEngine with both parsers.
struct ScriptedServer {
  ScriptedEngine engine;
  std::unique_ptr<ApiServer> server;
  ScriptedServer() {
    ApiServerConfig config;
    config.http.host = "127.0.0.1";
    config.http.port = 0;
    config.served_model_name = "tiny";
    config.output_parsers.tool_call_format = function_call::ToolCallFormat::kDeepSeekV3;
    config.output_parsers.reasoning_format = reasoning::ReasoningFormat::kDeepSeekR1;
    server = std::make_unique<ApiServer>(config, engine, std::make_shared<testing::FakeCodec>());
    server->start();
  }
  ~ScriptedServer() {
    server->shutdown();
    server.reset();
  }
  int port() const { return server->port(); }
};

const std::string kTools =
    R"([{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"location": {"type": "string"}}}}},
        {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}}])";

std::string chat_body(bool stream, const std::string& extra = "") {
  return R"({"model": "tiny", "messages": [{"role": "user", "content": "Weather in Paris and the time?"}], "tools": )" + kTools +
         R"(, "stream": )" + (stream ? "true" : "false") + extra + "}";
}

// Rebuilds a chat.completion message from streamed chunks the way OpenAI clients accumulate them.
json accumulate_stream(const std::vector<json>& events, std::string* finish_reason) {
  json message = {{"role", nullptr}, {"content", ""}, {"reasoning_content", ""}, {"tool_calls", json::array()}};
  for (const json& event : events) {
    if (!event.is_object()) continue;
    for (const json& choice : event["choices"]) {
      const json& delta = choice["delta"];
      if (delta.contains("role")) message["role"] = delta["role"];
      if (delta.contains("content")) message["content"] = message["content"].get<std::string>() + delta["content"].get<std::string>();
      if (delta.contains("reasoning_content")) {
        message["reasoning_content"] = message["reasoning_content"].get<std::string>() + delta["reasoning_content"].get<std::string>();
      }
      if (delta.contains("tool_calls")) {
        for (const json& call : delta["tool_calls"]) {
          const size_t index = call["index"].get<size_t>();
          if (index == message["tool_calls"].size()) {
            EXPECT_TRUE(call.contains("id") && call.contains("type") && call["function"].contains("name")) << call.dump();
            message["tool_calls"].push_back({{"id", call["id"]}, {"type", call["type"]},
                                             {"function", {{"name", call["function"]["name"]}, {"arguments", ""}}}});
          }
          EXPECT_LT(index, message["tool_calls"].size()) << call.dump();
          json& function = message["tool_calls"][index]["function"];
          function["arguments"] = function["arguments"].get<std::string>() + call["function"].value("arguments", "");
        }
      }
      if (!choice["finish_reason"].is_null()) *finish_reason = choice["finish_reason"].get<std::string>();
    }
  }
  return message;
}

json without_ids(json message) {
  for (json& call : message["tool_calls"]) call.erase("id");
  return message;
}

TEST(ChatToolCallsOverHttp, StreamedDeltasAddUpToTheNonStreamedMessage) {
  ScriptedServer scripted;
  const std::vector<std::string> pieces = {"<think>", "\nParis weather", " and time.\n", "</think>", "\n\n", "On it.", kCallsBegin,
                                           kCallBegin, "function", kSep, "get", "_weather", "\n```", "json\n", "{\"loc",
                                           "ation\": \"Paris\"}", "\n```", kCallEnd, "\n", kCallBegin, "function", kSep, "get_time",
                                           "\n```json\n", "{}", "\n```", kCallEnd, kCallsEnd};
  scripted.engine.add_script(ScriptedOutput{pieces});
  testing::TestResponse plain = testing::http_call(scripted.port(), "POST", "/v1/chat/completions", chat_body(false));
  ASSERT_EQ(plain.status, 200) << plain.body;
  const json choice = plain.json()["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "tool_calls");
  const json& message = choice["message"];
  EXPECT_EQ(message["content"], "On it.");
  EXPECT_EQ(message["reasoning_content"], "Paris weather and time.");
  ASSERT_EQ(message["tool_calls"].size(), 2u);
  EXPECT_EQ(message["tool_calls"][0]["type"], "function");
  EXPECT_EQ(message["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(json::parse(message["tool_calls"][0]["function"]["arguments"].get<std::string>()), json({{"location", "Paris"}}));
  EXPECT_EQ(message["tool_calls"][1]["function"]["arguments"], "{}");
  const std::string id0 = message["tool_calls"][0]["id"], id1 = message["tool_calls"][1]["id"];
  EXPECT_EQ(id0.rfind("call_", 0), 0u);
  EXPECT_EQ(id0.size(), 5u + 24u);
  EXPECT_NE(id0, id1);

  testing::TestResponse stream = testing::http_call(scripted.port(), "POST", "/v1/chat/completions", chat_body(true));
  ASSERT_EQ(stream.status, 200);
  std::string finish_reason;
  const std::vector<json> events = testing::sse_events(stream.body);
  const json rebuilt = accumulate_stream(events, &finish_reason);
  EXPECT_EQ(finish_reason, "tool_calls");
  EXPECT_EQ(rebuilt["role"], "assistant");
  EXPECT_EQ(without_ids(rebuilt).dump(), without_ids(message).dump());
  // Argument text arrives in more than one delta (it is streamed, not buffered to the end).
  int argument_deltas = 0;
  for (const json& event : events) {
    if (!event.is_object()) continue;
    for (const json& choice_delta : event["choices"]) {
      if (!choice_delta["delta"].contains("tool_calls")) continue;
      for (const json& call : choice_delta["delta"]["tool_calls"]) {
        if (call["index"] == 0 && !call.contains("id")) ++argument_deltas;
      }
    }
  }
  EXPECT_GE(argument_deltas, 2);
  for (const std::string& marker : {kCallsBegin, kCallBegin, kSep, kCallEnd}) EXPECT_EQ(stream.body.find(marker), std::string::npos);

  const std::vector<scheduler::GenerateRequest> submitted = scripted.engine.submitted();
  ASSERT_EQ(submitted.size(), 2u);
  EXPECT_FALSE(submitted[0].sampling.skip_special_tokens);  // the markers must be decoded for the parser
}

TEST(ChatToolCallsOverHttp, PlainAnswerKeepsStopAndHasNoToolCalls) {
  ScriptedServer scripted;
  scripted.engine.add_script(ScriptedOutput{{"It is ", "sunny.", "<|eot|>"}});
  testing::TestResponse plain = testing::http_call(scripted.port(), "POST", "/v1/chat/completions", chat_body(false));
  const json choice = plain.json()["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "stop");
  EXPECT_EQ(choice["message"]["content"], "It is sunny.");
  EXPECT_TRUE(choice["message"]["reasoning_content"].is_null());
  EXPECT_FALSE(choice["message"].contains("tool_calls"));
}

TEST(ChatToolCallsOverHttp, ReasoningCutOffHasNullContent) {
  ScriptedServer scripted;
  scripted.engine.add_script(ScriptedOutput{{"<think>", "Let me think"}, scheduler::FinishReason::kLength});
  const json choice = testing::http_call(scripted.port(), "POST", "/v1/chat/completions", chat_body(false)).json()["choices"][0];
  EXPECT_EQ(choice["message"]["reasoning_content"], "Let me think");
  EXPECT_TRUE(choice["message"]["content"].is_null()) << choice.dump();
}

TEST(ChatToolCallsOverHttp, TruncatedCallKeepsLengthAsTheFinishReason) {
  ScriptedServer scripted;
  scripted.engine.add_script(
      ScriptedOutput{{kCallsBegin, kCallBegin, "function", kSep, "get_time\n```json\n", "{\"tz\": \"U"}, scheduler::FinishReason::kLength});
  const json choice = testing::http_call(scripted.port(), "POST", "/v1/chat/completions", chat_body(false)).json()["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "length");
  ASSERT_EQ(choice["message"]["tool_calls"].size(), 1u);
  EXPECT_EQ(choice["message"]["tool_calls"][0]["function"]["arguments"], "{\"tz\": \"U");
  EXPECT_TRUE(choice["message"]["content"].is_null());
}

TEST(ChatToolCallsOverHttp, NamedToolChoiceStreamsTheNameBeforeAnyModelText) {
  ScriptedServer scripted;
  scripted.engine.add_script(ScriptedOutput{{"{\"location\": ", "\"Oslo\"}", "\n```", kCallEnd, kCallsEnd}});
  const std::string extra = R"(, "tool_choice": {"type": "function", "function": {"name": "get_weather"}})";
  testing::TestResponse stream = testing::http_call(scripted.port(), "POST", "/v1/chat/completions", chat_body(true, extra));
  const std::vector<json> events = testing::sse_events(stream.body);
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events[0]["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(events[1]["choices"][0]["delta"]["tool_calls"][0]["function"]["name"], "get_weather");
  std::string finish_reason;
  const json message = accumulate_stream(events, &finish_reason);
  EXPECT_EQ(finish_reason, "tool_calls");
  EXPECT_EQ(message["tool_calls"][0]["function"]["arguments"], "{\"location\": \"Oslo\"}");
  EXPECT_EQ(message["content"], "");
}

TEST(ChatToolCallsOverHttp, UnknownNamedFunctionIsA400) {
  ScriptedServer scripted;
  const std::string extra = R"(, "tool_choice": {"type": "function", "function": {"name": "send_email"}})";
  testing::TestResponse response = testing::http_call(scripted.port(), "POST", "/v1/chat/completions", chat_body(false, extra));
  EXPECT_EQ(response.status, 400);
  EXPECT_EQ(response.json()["error"]["param"], "tool_choice");
  EXPECT_EQ(response.json()["error"]["type"], "invalid_request_error");
}

}  // namespace
}  // namespace fathom::server
