// Function-calling request fields (tools, tool_choice, parallel_tool_calls, tool messages and assistant
// tool_calls in the history) and what preparing a chat request with output parsers does: every invalid value
// with its OpenAI-style error, forced call openings appended to the prompt, tools withheld for "none", and
// special tokens decoded for the parsers.
#include <gtest/gtest.h>

#include "fake_codec.h"
#include "function_call/tool_call_parser.h"
#include "server/api_error.h"
#include "server/chat_protocol.h"
#include "server/openai_request.h"
#include "server/request_preparation.h"

namespace fathom::server {
namespace {

using fathom::testing::FakeCodec;

const std::string kTools =
    R"("tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather of a city", "parameters": {"type": "object", "properties": {"location": {"type": "string"}}, "required": ["location"]}}},
                 {"type": "function", "function": {"name": "get_time"}}])";
const std::string kUser = R"("messages": [{"role": "user", "content": "Weather in Paris?"}])";

struct Fixture {
  RequestIdGenerator ids;
  PreparationContext context;
  explicit Fixture(bool with_parsers = true) {
    context.codec = std::make_shared<FakeCodec>();
    context.served_model_name = "tiny";
    context.max_context_tokens = 4096;
    context.ids = &ids;
    context.special_token_texts = context.codec->special_token_texts();
    if (with_parsers) {
      context.parsers.tool_call_format = function_call::ToolCallFormat::kDeepSeekV3;
      context.parsers.reasoning_format = reasoning::ReasoningFormat::kDeepSeekR1;
    }
  }
};

std::string prompt_text(const PreparedGeneration& prepared) {
  std::string text;
  for (int32_t id : prepared.choices.at(0).request.input_ids) text += static_cast<char>(id);
  return text;
}

struct ToolErrorCase {
  const char* name;
  std::string body;
  std::string param;
  std::string message_fragment;
  bool with_parsers = true;
};

class ToolRequestErrors : public ::testing::TestWithParam<ToolErrorCase> {};

TEST_P(ToolRequestErrors, AreOpenAiStyle400s) {
  const ToolErrorCase& c = GetParam();
  Fixture fixture(c.with_parsers);
  try {
    prepare_chat(c.body, fixture.context);
    FAIL() << "no error for " << c.body;
  } catch (const ApiError& error) {
    EXPECT_EQ(error.status(), 400) << error.message();
    EXPECT_EQ(error.param(), c.param) << error.message();
    EXPECT_NE(error.message().find(c.message_fragment), std::string::npos) << error.message();
  }
}

std::string with(const std::string& fields) { return "{" + kUser + ", " + fields + "}"; }

INSTANTIATE_TEST_SUITE_P(
    Cases, ToolRequestErrors,
    ::testing::Values(
        ToolErrorCase{"tools_not_array", with(R"("tools": {"type": "function"})"), "tools", "expected an array"},
        ToolErrorCase{"tool_not_object", with(R"("tools": ["get_weather"])"), "tools[0]", "expected an object"},
        ToolErrorCase{"tool_without_type", with(R"("tools": [{"function": {"name": "f"}}])"), "tools[0].type", "Missing required parameter"},
        ToolErrorCase{"tool_wrong_type", with(R"("tools": [{"type": "retrieval", "function": {"name": "f"}}])"), "tools[0].type", "expected 'function'"},
        ToolErrorCase{"tool_without_function", with(R"("tools": [{"type": "function"}])"), "tools[0].function", "Missing required parameter"},
        ToolErrorCase{"tool_without_name", with(R"("tools": [{"type": "function", "function": {"description": "x"}}])"), "tools[0].function.name", "Missing"},
        ToolErrorCase{"tool_name_pattern", with(R"("tools": [{"type": "function", "function": {"name": "get weather"}}])"), "tools[0].function.name", "^[a-zA-Z0-9_-]{1,64}$"},
        ToolErrorCase{"tool_name_too_long", with(R"("tools": [{"type": "function", "function": {"name": ")" + std::string(65, 'a') + R"("}}])"), "tools[0].function.name", "does not match pattern"},
        ToolErrorCase{"tool_parameters_not_object", with(R"("tools": [{"type": "function", "function": {"name": "f", "parameters": "x"}}])"), "tools[0].function.parameters", "JSON Schema"},
        ToolErrorCase{"tool_description_not_string", with(R"("tools": [{"type": "function", "function": {"name": "f", "description": 3}}])"), "tools[0].function.description", "expected a string"},
        ToolErrorCase{"duplicate_tool_names", with(R"("tools": [{"type": "function", "function": {"name": "f"}}, {"type": "function", "function": {"name": "f"}}])"), "tools", "more than one tool"},
        ToolErrorCase{"tool_choice_unknown_mode", with(kTools + R"(, "tool_choice": "always")"), "tool_choice", "'always' is not one of"},
        ToolErrorCase{"tool_choice_unknown_function", with(kTools + R"(, "tool_choice": {"type": "function", "function": {"name": "send_email"}})"), "tool_choice", "function 'send_email' is not one of the request's tools ('get_weather', 'get_time')"},
        ToolErrorCase{"tool_choice_function_without_name", with(kTools + R"(, "tool_choice": {"type": "function", "function": {}})"), "tool_choice.function.name", "Missing"},
        ToolErrorCase{"tool_choice_number", with(kTools + R"(, "tool_choice": 1)"), "tool_choice", "expected a string or an object"},
        ToolErrorCase{"required_without_tools", with(R"("tool_choice": "required")"), "tool_choice", "requires 'tools'"},
        ToolErrorCase{"required_without_parser", with(kTools + R"(, "tool_choice": "required")"), "tool_choice", "--tool-call-parser", false},
        ToolErrorCase{"named_without_parser", with(kTools + R"(, "tool_choice": {"type": "function", "function": {"name": "get_time"}})"), "tool_choice", "--tool-call-parser", false},
        ToolErrorCase{"parallel_tool_calls_string", with(kTools + R"(, "parallel_tool_calls": "yes")"), "parallel_tool_calls", "expected a boolean"},
        ToolErrorCase{"deprecated_functions", with(R"("functions": [{"name": "f"}])"), "functions", "use 'tools'"},
        ToolErrorCase{"tool_message_without_call_id",
                      R"({"messages": [{"role": "user", "content": "x"}, {"role": "tool", "content": "18C"}]})", "messages[1].tool_call_id", "Missing"},
        ToolErrorCase{"tool_calls_not_array",
                      R"({"messages": [{"role": "assistant", "content": null, "tool_calls": {"id": "a"}}]})", "messages[0].tool_calls", "expected an array"},
        ToolErrorCase{"tool_call_without_id",
                      R"({"messages": [{"role": "assistant", "content": null, "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": "{}"}}]}]})",
                      "messages[0].tool_calls[0].id", "Missing"},
        ToolErrorCase{"tool_call_arguments_number",
                      R"({"messages": [{"role": "assistant", "content": null, "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": 3}}]}]})",
                      "messages[0].tool_calls[0].function.arguments", "a string (JSON text)"},
        ToolErrorCase{"tool_calls_on_user_message",
                      R"({"messages": [{"role": "user", "content": "x", "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}]})",
                      "messages[0].tool_calls", "only assistant messages"},
        ToolErrorCase{"assistant_without_content_or_calls", R"({"messages": [{"role": "assistant", "content": null, "tool_calls": []}]})",
                      "messages[0].content", "Missing"}),
    [](const ::testing::TestParamInfo<ToolErrorCase>& info) { return std::string(info.param.name); });

TEST(ToolRequestParsing, DefaultsToAutoWithToolsAndNoneWithout) {
  const ChatRequest with_tools = parse_chat_request(Json::parse(with(kTools)), RequestLimits{});
  EXPECT_EQ(with_tools.tools.choice.mode, ToolChoice::Mode::kAuto);
  EXPECT_EQ(with_tools.tools.names, (std::vector<std::string>{"get_weather", "get_time"}));
  EXPECT_TRUE(with_tools.tools.parallel_tool_calls);
  const ChatRequest without = parse_chat_request(Json::parse("{" + kUser + "}"), RequestLimits{});
  EXPECT_EQ(without.tools.choice.mode, ToolChoice::Mode::kNone);
  EXPECT_TRUE(without.tools.tools.is_null());
  const ChatRequest empty = parse_chat_request(Json::parse(with(R"("tools": [])")), RequestLimits{});
  EXPECT_TRUE(empty.tools.tools.is_null());
  const ChatRequest named = parse_chat_request(
      Json::parse(with(kTools + R"(, "tool_choice": {"type": "function", "function": {"name": "get_time"}}, "parallel_tool_calls": false)")),
      RequestLimits{});
  EXPECT_EQ(named.tools.choice.mode, ToolChoice::Mode::kFunction);
  EXPECT_EQ(named.tools.choice.function_name, "get_time");
  EXPECT_FALSE(named.tools.parallel_tool_calls);
}

TEST(ToolRequestParsing, HistoryWithToolCallsAndToolResultsReachesTheTemplate) {
  const ChatRequest request = parse_chat_request(Json::parse(R"({"messages": [
      {"role": "user", "content": "Weather in Paris?"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"location\": \"Paris\"}"}}]},
      {"role": "tool", "tool_call_id": "call_1", "content": [{"type": "text", "text": "18C, cloudy"}]},
      {"role": "assistant", "content": "It is 18C.", "tool_calls": null}]})"),
                                                 RequestLimits{});
  const Json& messages = request.messages;
  ASSERT_EQ(messages.size(), 4u);
  EXPECT_EQ(messages[1]["tool_calls"][0]["function"]["arguments"], "{\"location\": \"Paris\"}");  // JSON text, as sent
  EXPECT_TRUE(messages[1]["content"].is_null());
  EXPECT_EQ(messages[2]["content"], "18C, cloudy");
  EXPECT_EQ(messages[2]["tool_call_id"], "call_1");
  EXPECT_FALSE(messages[3].contains("tool_calls"));  // a null tool_calls is dropped: templates test for the key
}

TEST(ToolRequestPreparation, RequiredChoiceEndsThePromptWithACallOpening) {
  Fixture fixture;
  PreparedGeneration prepared = prepare_chat(with(kTools + R"(, "tool_choice": "required")"), fixture.context);
  const std::string prompt = prompt_text(prepared);
  EXPECT_EQ(prompt.rfind("tools: get_weather get_time\n", 0), 0u);
  const std::string opening = function_call::forced_call_opening(function_call::ToolCallFormat::kDeepSeekV3, std::nullopt);
  EXPECT_EQ(prompt.substr(prompt.size() - opening.size()), opening);
  EXPECT_FALSE(prepared.choices[0].request.sampling.skip_special_tokens);
}

TEST(ToolRequestPreparation, NamedChoiceOpensThatFunctionsArguments) {
  Fixture fixture;
  PreparedGeneration prepared =
      prepare_chat(with(kTools + R"(, "tool_choice": {"type": "function", "function": {"name": "get_weather"}})"), fixture.context);
  const std::string prompt = prompt_text(prepared);
  const std::string opening = function_call::forced_call_opening(function_call::ToolCallFormat::kDeepSeekV3, std::string("get_weather"));
  ASSERT_GE(prompt.size(), opening.size());
  EXPECT_EQ(prompt.substr(prompt.size() - opening.size()), opening);
  EXPECT_NE(opening.find("get_weather\n```json\n"), std::string::npos);
}

TEST(ToolRequestPreparation, NoneWithholdsTheToolsAndLeavesTheTextUnparsed) {
  Fixture fixture(/*with_parsers=*/false);
  fixture.context.parsers.tool_call_format = function_call::ToolCallFormat::kDeepSeekV3;
  PreparedGeneration prepared = prepare_chat(with(kTools + R"(, "tool_choice": "none")"), fixture.context);
  EXPECT_EQ(prompt_text(prepared).find("tools:"), std::string::npos);
  EXPECT_TRUE(prepared.choices[0].request.sampling.skip_special_tokens);
}

TEST(ToolRequestPreparation, AutoWithoutAParserRendersToolsButDoesNotParse) {
  Fixture fixture(/*with_parsers=*/false);
  PreparedGeneration prepared = prepare_chat(with(kTools), fixture.context);
  EXPECT_EQ(prompt_text(prepared).rfind("tools: get_weather get_time\n", 0), 0u);
  EXPECT_TRUE(prepared.choices[0].request.sampling.skip_special_tokens);
}

TEST(ToolRequestPreparation, SeparateReasoningFalseTurnsTheReasoningParserOff) {
  Fixture fixture(/*with_parsers=*/false);
  fixture.context.parsers.reasoning_format = reasoning::ReasoningFormat::kDeepSeekR1;
  EXPECT_FALSE(prepare_chat("{" + kUser + "}", fixture.context).choices[0].request.sampling.skip_special_tokens);
  EXPECT_TRUE(prepare_chat(with(R"("separate_reasoning": false)"), fixture.context).choices[0].request.sampling.skip_special_tokens);
}

}  // namespace
}  // namespace fathom::server
