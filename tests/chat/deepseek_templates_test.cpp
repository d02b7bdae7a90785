// The two DeepSeek chat templates against prompts written out by reading the templates: the HF DeepSeek-V3
// template (hf-deepseek-v3/) and the R1-era template of DeepSeek's API tokenizer bundle (top level).
#include <gtest/gtest.h>

#include "chat/chat_template.h"
#include "test_support.h"

namespace fathom::chat {
namespace {

using json = nlohmann::ordered_json;

const std::string kBos = "<｜begin▁of▁sentence｜>";
const std::string kEos = "<｜end▁of▁sentence｜>";
const std::string kUser = "<｜User｜>";
const std::string kAssistant = "<｜Assistant｜>";
const std::string kCallsBegin = "<｜tool▁calls▁begin｜>";
const std::string kCallsEnd = "<｜tool▁calls▁end｜>";
const std::string kCallBegin = "<｜tool▁call▁begin｜>";
const std::string kCallEnd = "<｜tool▁call▁end｜>";
const std::string kSep = "<｜tool▁sep｜>";
const std::string kOutputsBegin = "<｜tool▁outputs▁begin｜>";
const std::string kOutputsEnd = "<｜tool▁outputs▁end｜>";
const std::string kOutputBegin = "<｜tool▁output▁begin｜>";
const std::string kOutputEnd = "<｜tool▁output▁end｜>";

const std::string kWeatherArgs = R"({"city": "Paris"})";
const std::string kSearchArgs = R"({"query": "events"})";

json tool_call(const std::string& id, const std::string& name, const std::string& arguments) {
  return json{{"id", id}, {"type", "function"}, {"function", {{"name", name}, {"arguments", arguments}}}};
}

json message(const std::string& role, const json& content) { return json{{"role", role}, {"content", content}}; }

// "<｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\nARGS\n```<｜tool▁call▁end｜>"
std::string call_text(const std::string& name, const std::string& arguments) {
  return kCallBegin + "function" + kSep + name + "\n```json\n" + arguments + "\n```" + kCallEnd;
}

class DeepSeekTemplates : public ::testing::Test {
 protected:
  void SetUp() override {
    v3_dir_ = testing::shared_data_dir() + "/deepseek-v3/hf-deepseek-v3";
    r1_dir_ = testing::shared_data_dir() + "/deepseek-v3";
  }

  std::string render(const std::string& dir, const json& messages, bool add_generation_prompt,
                     const json& tools = json()) const {
    ChatTemplate chat_template = load_chat_template(dir, std::nullopt);
    SpecialTokens special = load_special_tokens(dir);
    ChatTemplateInputs inputs;
    inputs.messages = messages;
    inputs.tools = tools;
    inputs.add_generation_prompt = add_generation_prompt;
    inputs.bos_token = special.bos_token.value();
    inputs.eos_token = special.eos_token.value();
    return chat_template.render(inputs);
  }

  std::string v3_dir_, r1_dir_;
};

TEST_F(DeepSeekTemplates, SpecialTokensComeFromAddedTokenDicts) {
  for (const std::string& dir : {v3_dir_, r1_dir_}) {
    SpecialTokens special = load_special_tokens(dir);
    EXPECT_EQ(special.bos_token, kBos);
    EXPECT_EQ(special.eos_token, kEos);
    EXPECT_EQ(special.pad_token, kEos);
    EXPECT_FALSE(special.unk_token.has_value());
  }
}

TEST_F(DeepSeekTemplates, SystemAndMultiTurnWithGenerationPrompt) {
  json messages = {message("system", "You are a concise assistant."), message("user", "Capital of France?"),
                   message("assistant", "Paris."), message("user", "And of Italy?")};
  std::string expected = kBos + "You are a concise assistant." + kUser + "Capital of France?" + kAssistant + "Paris." +
                         kEos + kUser + "And of Italy?";
  EXPECT_EQ(render(v3_dir_, messages, false), expected);
  EXPECT_EQ(render(v3_dir_, messages, true), expected + kAssistant);
  EXPECT_EQ(render(r1_dir_, messages, false), expected);
  EXPECT_EQ(render(r1_dir_, messages, true), expected + kAssistant);
}

TEST_F(DeepSeekTemplates, SystemMessagesAreJoinedWithBlankLineWhereverTheyAppear) {
  json messages = {message("system", "Rule one."), message("user", "Hi"), message("system", "Rule two."),
                   message("user", "Bonjour")};
  std::string expected = kBos + "Rule one.\n\nRule two." + kUser + "Hi" + kUser + "Bonjour" + kAssistant;
  EXPECT_EQ(render(v3_dir_, messages, true), expected);
  EXPECT_EQ(render(r1_dir_, messages, true), expected);
}

TEST_F(DeepSeekTemplates, ToolDefinitionsAreNotRendered) {
  json tools = json::array({{{"type", "function"}, {"function", {{"name", "get_weather"}, {"parameters", json::object()}}}}});
  json messages = {message("user", "Weather?")};
  EXPECT_EQ(render(v3_dir_, messages, true, tools), kBos + kUser + "Weather?" + kAssistant);
  EXPECT_EQ(render(r1_dir_, messages, true, tools), kBos + kUser + "Weather?" + kAssistant);
}

TEST_F(DeepSeekTemplates, V3SingleToolCallRoundTrip) {
  json messages = {message("user", "Weather in Paris?"),
                   {{"role", "assistant"}, {"content", nullptr}, {"tool_calls", {tool_call("c1", "get_weather", kWeatherArgs)}}},
                   {{"role", "tool"}, {"tool_call_id", "c1"}, {"content", "sunny"}},
                   message("assistant", "It is sunny.")};
  // The V3 template closes the tool-calls block only after a second call, so one call leaves it open.
  std::string expected = kBos + kUser + "Weather in Paris?" + kAssistant + kCallsBegin + call_text("get_weather", kWeatherArgs) +
                         kOutputsBegin + kOutputBegin + "sunny" + kOutputEnd + kOutputsEnd + "It is sunny." + kEos;
  EXPECT_EQ(render(v3_dir_, messages, false), expected);
  EXPECT_EQ(render(v3_dir_, messages, true), expected + kAssistant);
}

TEST_F(DeepSeekTemplates, V3ParallelToolCallsAndOutputs) {
  json messages = {message("user", "Weather and events?"),
                   {{"role", "assistant"}, {"content", nullptr},
                    {"tool_calls", {tool_call("c1", "get_weather", kWeatherArgs), tool_call("c2", "search_web", kSearchArgs)}}},
                   {{"role", "tool"}, {"tool_call_id", "c1"}, {"content", "sunny"}},
                   {{"role", "tool"}, {"tool_call_id", "c2"}, {"content", "[]"}}};
  std::string expected = kBos + kUser + "Weather and events?" + kAssistant + kCallsBegin + call_text("get_weather", kWeatherArgs) +
                         "\n" + call_text("search_web", kSearchArgs) + kCallsEnd + kEos + kOutputsBegin + kOutputBegin +
                         "sunny" + kOutputEnd + "\n" + kOutputBegin + "[]" + kOutputEnd + kOutputsEnd;
  EXPECT_EQ(render(v3_dir_, messages, false), expected);
  EXPECT_EQ(render(v3_dir_, messages, true), expected);  // ends on tool output: no generation prompt
}

TEST_F(DeepSeekTemplates, R1ToolCallsWithContentAndOutputs) {
  json messages = {message("user", "Check Paris."),
                   {{"role", "assistant"}, {"content", "Let me check."},
                    {"tool_calls", {tool_call("c1", "get_weather", kWeatherArgs), tool_call("c2", "search_web", kSearchArgs)}}},
                   {{"role", "tool"}, {"tool_call_id", "c1"}, {"content", "sunny"}},
                   {{"role", "tool"}, {"tool_call_id", "c2"}, {"content", "[]"}},
                   message("assistant", "Sunny, nothing on.")};
  std::string expected = kBos + kUser + "Check Paris." + kAssistant + "Let me check." + kCallsBegin +
                         call_text("get_weather", kWeatherArgs) + "\n" + call_text("search_web", kSearchArgs) + kCallsEnd +
                         kEos + kOutputsBegin + kOutputBegin + "sunny" + kOutputEnd + kOutputBegin + "[]" + kOutputEnd +
                         kOutputsEnd + "Sunny, nothing on." + kEos;
  EXPECT_EQ(render(r1_dir_, messages, false), expected);
  EXPECT_EQ(render(r1_dir_, messages, true), expected + kAssistant);
}

TEST_F(DeepSeekTemplates, R1EndingOnToolOutputClosesOutputsWithoutPrompt) {
  json messages = {message("user", "Weather?"),
                   {{"role", "assistant"}, {"content", nullptr}, {"tool_calls", {tool_call("c1", "get_weather", kWeatherArgs)}}},
                   {{"role", "tool"}, {"tool_call_id", "c1"}, {"content", "rainy"}}};
  std::string expected = kBos + kUser + "Weather?" + kAssistant + kCallsBegin + call_text("get_weather", kWeatherArgs) +
                         kCallsEnd + kEos + kOutputsBegin + kOutputBegin + "rainy" + kOutputEnd + kOutputsEnd;
  EXPECT_EQ(render(r1_dir_, messages, true), expected);
}

TEST_F(DeepSeekTemplates, R1DropsReasoningOfPastTurnsButV3KeepsIt) {
  json messages = {message("user", "17 * 23?"), message("assistant", "<think>\n340 + 51\n</think>\n\n391."),
                   message("user", "Double it.")};
  EXPECT_EQ(render(r1_dir_, messages, true),
            kBos + kUser + "17 * 23?" + kAssistant + "\n\n391." + kEos + kUser + "Double it." + kAssistant);
  EXPECT_EQ(render(v3_dir_, messages, true), kBos + kUser + "17 * 23?" + kAssistant + "<think>\n340 + 51\n</think>\n\n391." +
                                                 kEos + kUser + "Double it." + kAssistant);
}

TEST_F(DeepSeekTemplates, UnicodeContentPassesThroughUnchanged) {
  json messages = {message("user", "Grüße 👋🏽 — 你好 \"q\" \\ \t\r\n")};
  EXPECT_EQ(render(v3_dir_, messages, true), kBos + kUser + "Grüße 👋🏽 — 你好 \"q\" \\ \t\r\n" + kAssistant);
}

TEST_F(DeepSeekTemplates, ContentGivenAsPartsRaisesLikeTransformers) {
  json messages = {message("user", json::array({{{"type", "text"}, {"text", "hi"}}}))};
  EXPECT_THROW(render(v3_dir_, messages, true), fathom::Error);
  EXPECT_THROW(render(r1_dir_, messages, true), fathom::Error);
  EXPECT_EQ(render(r1_dir_, join_text_content_parts(messages), true), kBos + kUser + "hi" + kAssistant);
}

}  // namespace
}  // namespace fathom::chat
