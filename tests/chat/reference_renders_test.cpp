// Every recorded reference render, byte for byte:
//  - tests/chat/data/golden.json: transformers' apply_chat_template (tools/chat/make_golden.py on a machine with
//    transformers); skipped while the file is absent.
//  - tests/chat/data/jinja2_reference.json: the same conversations through Jinja2 configured as transformers
//    configures it (make_golden.py --engine jinja2); always present.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>

#include "chat/chat_template.h"
#include "test_support.h"

namespace fathom::chat {
namespace {

using json = nlohmann::ordered_json;

std::string first_difference(const std::string& expected, const std::string& actual) {
  size_t i = 0;
  while (i < expected.size() && i < actual.size() && expected[i] == actual[i]) ++i;
  auto window = [i](const std::string& text) { return json(text.substr(i >= 20 ? i - 20 : 0, 60)).dump(); };
  return "first difference at byte " + std::to_string(i) + ": expected " + window(expected) + ", got " + window(actual);
}

struct ReferenceFile {
  json data;
  std::map<std::string, ChatTemplate> templates;
};

ReferenceFile load_reference(const std::string& path) {
  ReferenceFile file;
  file.data = testing::read_json(path);
  for (const auto& [name, spec] : file.data.at("templates").items()) {
    std::string dir = testing::shared_data_dir() + "/" + spec.at("tokenizer_dir").get<std::string>();
    std::optional<std::string> override_file;
    if (spec.contains("template_file") && spec["template_file"].is_string())
      override_file = testing::source_dir() + "/" + spec["template_file"].get<std::string>();
    file.templates.emplace(name, load_chat_template(dir, override_file));
  }
  return file;
}

ChatTemplateInputs inputs_for(const json& reference, const json& test_case) {
  const json& recorded = test_case.at("inputs");
  const json& special = reference.at("templates").at(test_case.at("template").get<std::string>()).at("special_tokens_map");
  ChatTemplateInputs inputs;
  inputs.messages = recorded.at("messages");
  inputs.tools = recorded.value("tools", json());
  inputs.add_generation_prompt = recorded.at("add_generation_prompt").get<bool>();
  // transformers renders with {**special_tokens_map, **kwargs}.
  for (const auto& [key, value] : special.items()) {
    if (key == "bos_token") inputs.bos_token = value.get<std::string>();
    else if (key == "eos_token") inputs.eos_token = value.get<std::string>();
    else inputs.extra_context[key] = value;
  }
  json extra = recorded.value("extra_context", json::object());
  for (const auto& [key, value] : extra.items()) inputs.extra_context[key] = value;
  return inputs;
}

// Renders every case; returns the number of cases checked.
size_t check_all_cases(const std::string& path) {
  ReferenceFile file = load_reference(path);
  size_t checked = 0;
  for (const json& test_case : file.data.at("cases")) {
    std::string label = test_case.at("template").get<std::string>() + "/" + test_case.at("conversation").get<std::string>() +
                        " add_generation_prompt=" + (test_case.at("inputs").at("add_generation_prompt").get<bool>() ? "true" : "false");
    const ChatTemplate& chat_template = file.templates.at(test_case.at("template").get<std::string>());
    ChatTemplateInputs inputs = inputs_for(file.data, test_case);
    ++checked;
    if (!test_case.at("error").is_null()) {
      EXPECT_THROW(chat_template.render(inputs), fathom::Error)
          << label << ": the reference raised " << test_case["error"].dump();
      continue;
    }
    std::string expected = test_case.at("text").get<std::string>();
    try {
      std::string actual = chat_template.render(inputs);
      EXPECT_EQ(actual, expected) << label << ": " << first_difference(expected, actual);
    } catch (const std::exception& error) {
      ADD_FAILURE() << label << ": raised " << error.what();
    }
  }
  return checked;
}

TEST(ReferenceRenders, Jinja2ReferenceMatchesExactly) {
  std::string path = testing::chat_test_data_dir() + "/jinja2_reference.json";
  ASSERT_TRUE(std::filesystem::exists(path)) << path;
  EXPECT_GE(check_all_cases(path), 100u);
}

TEST(ReferenceRenders, TransformersGoldenMatchesExactly) {
  std::string path = testing::chat_test_data_dir() + "/golden.json";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " not generated yet (tools/chat/make_golden.py)";
  EXPECT_GE(check_all_cases(path), 100u);
}

TEST(ReferenceRenders, GoldenSpecialTokensMatchOurTokenizerConfigReading) {
  std::string path = testing::chat_test_data_dir() + "/golden.json";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " not generated yet (tools/chat/make_golden.py)";
  json golden = testing::read_json(path);
  for (const auto& [name, spec] : golden.at("templates").items()) {
    SpecialTokens ours = load_special_tokens(testing::shared_data_dir() + "/" + spec.at("tokenizer_dir").get<std::string>());
    const json& theirs = spec.at("special_tokens_map");
    EXPECT_EQ(ours.bos_token.value_or(""), theirs.value("bos_token", "")) << name;
    EXPECT_EQ(ours.eos_token.value_or(""), theirs.value("eos_token", "")) << name;
  }
}

TEST(ReferenceRenders, ConversationsFileMatchesReferenceInputs) {
  // jinja2_reference.json must have been generated from the current conversations file.
  json conversations = testing::read_json(testing::source_dir() + "/tools/chat/conversations.json");
  json reference = testing::read_json(testing::chat_test_data_dir() + "/jinja2_reference.json");
  const char* regenerate = "regenerate with tools/chat/make_golden.py --engine jinja2";
  size_t expected_cases = conversations.at("templates").size() * conversations.at("conversations").size() * 2;
  ASSERT_EQ(reference.at("cases").size(), expected_cases) << regenerate;
  std::map<std::string, json> by_name;
  for (const json& conversation : conversations.at("conversations")) by_name[conversation.at("name").get<std::string>()] = conversation;
  for (const json& test_case : reference.at("cases")) {
    const std::string name = test_case.at("conversation").get<std::string>();
    ASSERT_TRUE(by_name.count(name)) << name << ": " << regenerate;
    const json& conversation = by_name[name];
    const json& inputs = test_case.at("inputs");
    EXPECT_EQ(inputs.at("messages"), conversation.at("messages")) << name << ": " << regenerate;
    EXPECT_EQ(inputs.value("tools", json()), conversation.value("tools", json())) << name << ": " << regenerate;
    EXPECT_EQ(inputs.value("extra_context", json::object()), conversation.value("extra_context", json::object())) << name;
  }
}

}  // namespace
}  // namespace fathom::chat
