// Rendered prompts to token ids (render, then fathom_tokenizer encode without special tokens), as
// transformers' apply_chat_template(tokenize=True) does; checked against golden.json's recorded ids.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>

#include "chat/chat_template.h"
#include "test_support.h"
#include "tokenizer/tokenizer.h"

namespace fathom::chat {
namespace {

using json = nlohmann::ordered_json;

constexpr int32_t kBosId = 0;
constexpr int32_t kUserId = 128803;
constexpr int32_t kAssistantId = 128804;

TEST(ChatIds, SpecialTokensOfARenderedPromptMapToTheirIds) {
  std::string dir = testing::shared_data_dir() + "/deepseek-v3";
  ChatTemplate chat_template = load_chat_template(dir, std::nullopt);
  SpecialTokens special = load_special_tokens(dir);
  ChatTemplateInputs inputs;
  inputs.messages = json::array({{{"role", "user"}, {"content", "Hello!"}}});
  inputs.add_generation_prompt = true;
  inputs.bos_token = special.bos_token.value();
  inputs.eos_token = special.eos_token.value();
  std::vector<int32_t> ids = tokenizer::Tokenizer::load(dir).encode(chat_template.render(inputs), false);
  ASSERT_GE(ids.size(), 4u);
  EXPECT_EQ(ids.front(), kBosId);
  EXPECT_EQ(ids[1], kUserId);
  EXPECT_EQ(ids.back(), kAssistantId);
}

TEST(ChatIds, GoldenIdsMatchRenderThenEncode) {
  std::string path = testing::chat_test_data_dir() + "/golden.json";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " not generated yet (tools/chat/make_golden.py)";
  json golden = testing::read_json(path);
  std::map<std::string, tokenizer::Tokenizer> tokenizers;
  std::map<std::string, ChatTemplate> templates;
  for (const auto& [name, spec] : golden.at("templates").items()) {
    std::string dir = testing::shared_data_dir() + "/" + spec.at("tokenizer_dir").get<std::string>();
    std::optional<std::string> override_file;
    if (spec.contains("template_file") && spec["template_file"].is_string())
      override_file = testing::source_dir() + "/" + spec["template_file"].get<std::string>();
    tokenizers.emplace(name, tokenizer::Tokenizer::load(dir));
    templates.emplace(name, load_chat_template(dir, override_file));
  }
  size_t checked = 0;
  for (const json& test_case : golden.at("cases")) {
    if (!test_case.at("error").is_null() || test_case.at("ids").is_null()) continue;
    std::string name = test_case.at("template").get<std::string>();
    std::string label = name + "/" + test_case.at("conversation").get<std::string>();
    std::vector<int32_t> expected = test_case.at("ids").get<std::vector<int32_t>>();
    // The tokenizer alone, on transformers' text.
    EXPECT_EQ(tokenizers.at(name).encode(test_case.at("text").get<std::string>(), false), expected) << label;
    // Our render, then our tokenizer.
    const json& recorded = test_case.at("inputs");
    ChatTemplateInputs inputs;
    inputs.messages = recorded.at("messages");
    inputs.tools = recorded.value("tools", json());
    inputs.add_generation_prompt = recorded.at("add_generation_prompt").get<bool>();
    for (const auto& [key, value] : golden.at("templates").at(name).at("special_tokens_map").items()) {
      if (key == "bos_token") inputs.bos_token = value.get<std::string>();
      else if (key == "eos_token") inputs.eos_token = value.get<std::string>();
      else inputs.extra_context[key] = value;
    }
    json extra = recorded.value("extra_context", json::object());
    for (const auto& [key, value] : extra.items()) inputs.extra_context[key] = value;
    EXPECT_EQ(tokenizers.at(name).encode(templates.at(name).render(inputs), false), expected) << label;
    ++checked;
  }
  EXPECT_GE(checked, 100u);
}

}  // namespace
}  // namespace fathom::chat
