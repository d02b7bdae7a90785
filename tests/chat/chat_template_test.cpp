// The chat_template API: loading templates and special tokens, what the template sees, errors, threads.
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "chat/chat_template.h"
#include "test_support.h"

namespace fathom::chat {
namespace {

using json = nlohmann::ordered_json;
namespace fs = std::filesystem;

class TempDir {
 public:
  TempDir() {
    std::random_device device;
    path_ = fs::temp_directory_path() / ("fathom_chat_test_" + std::to_string(device()) + std::to_string(device()));
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  void write(const std::string& name, const std::string& contents) const {
    std::ofstream(path_ / name, std::ios::binary) << contents;
  }
  std::string path() const { return path_.string(); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
};

std::string render(const ChatTemplate& chat_template, const json& messages = json::array()) {
  ChatTemplateInputs inputs;
  inputs.messages = messages;
  return chat_template.render(inputs);
}

TEST(LoadChatTemplate, ReadsStringTemplate) {
  TempDir dir;
  dir.write("tokenizer_config.json", R"j({"chat_template": "{{ messages | length }} message(s)"})j");
  EXPECT_EQ(render(load_chat_template(dir.path(), std::nullopt), json::array({{{"role", "user"}, {"content", "x"}}})), "1 message(s)");
}

TEST(LoadChatTemplate, PicksDefaultFromNamedList) {
  TempDir dir;
  dir.write("tokenizer_config.json",
            R"({"chat_template": [{"name": "tool_use", "template": "tools"}, {"name": "default", "template": "default"}]})");
  EXPECT_EQ(render(load_chat_template(dir.path(), std::nullopt)), "default");
}

TEST(LoadChatTemplate, NamedListWithoutDefaultFails) {
  TempDir dir;
  dir.write("tokenizer_config.json", R"({"chat_template": [{"name": "tool_use", "template": "tools"}]})");
  EXPECT_THROW(load_chat_template(dir.path(), std::nullopt), fathom::Error);
}

TEST(LoadChatTemplate, FallsBackToChatTemplateJinjaFile) {
  TempDir dir;
  dir.write("tokenizer_config.json", R"({"bos_token": "<s>"})");
  dir.write("chat_template.jinja", "from file\n");
  EXPECT_EQ(render(load_chat_template(dir.path(), std::nullopt)), "from file");
}

TEST(LoadChatTemplate, MissingTemplateFailsWithAClearMessage) {
  TempDir dir;
  dir.write("tokenizer_config.json", R"({"bos_token": "<s>"})");
  try {
    load_chat_template(dir.path(), std::nullopt);
    FAIL() << "expected an error";
  } catch (const fathom::Error& error) {
    EXPECT_NE(std::string(error.what()).find("no chat template"), std::string::npos) << error.what();
  }
}

TEST(LoadChatTemplate, OverrideFileWins) {
  TempDir dir;
  dir.write("tokenizer_config.json", R"({"chat_template": "config"})");
  dir.write("override.jinja", "override {{ add_generation_prompt }}");
  EXPECT_EQ(render(load_chat_template(dir.path(), dir.file("override.jinja"))), "override False");
  EXPECT_THROW(load_chat_template(dir.path(), dir.file("missing.jinja")), fathom::Error);
}

// A directory or an empty file given as the template is an error when loading, not an empty prompt per request.
TEST(LoadChatTemplate, DirectoryOrEmptyOverrideFails) {
  TempDir dir;
  dir.write("tokenizer_config.json", R"({"chat_template": "config"})");
  dir.write("blank.jinja", " \n");
  for (const std::string& path : {dir.path(), dir.file("blank.jinja")}) {
    try {
      load_chat_template(dir.path(), path);
      FAIL() << path << " loaded";
    } catch (const fathom::Error& error) {
      EXPECT_NE(std::string(error.what()).find(path == dir.path() ? "is a directory" : "is empty"), std::string::npos)
          << error.what();
    }
  }
}

TEST(LoadChatTemplate, SyntaxErrorsNameLineAndColumn) {
  try {
    ChatTemplate broken("line 1\n{% for x in messages %}\n  {{ x.content | nosuchfilter }}\n{% endfor %}");
    FAIL() << "expected a syntax error";
  } catch (const fathom::Error& error) {
    std::string message = error.what();
    EXPECT_NE(message.find("line 3"), std::string::npos) << message;
    EXPECT_NE(message.find("nosuchfilter"), std::string::npos) << message;
  }
}

TEST(LoadSpecialTokens, AcceptsStringsAndAddedTokenDicts) {
  TempDir dir;
  dir.write("tokenizer_config.json",
            R"({"bos_token": "<s>", "eos_token": {"__type": "AddedToken", "content": "</s>"}, "unk_token": null})");
  SpecialTokens tokens = load_special_tokens(dir.path());
  EXPECT_EQ(tokens.bos_token, "<s>");
  EXPECT_EQ(tokens.eos_token, "</s>");
  EXPECT_FALSE(tokens.pad_token.has_value());
  EXPECT_FALSE(tokens.unk_token.has_value());
}

TEST(ChatTemplateRender, TemplateSeesTransformersVariables) {
  ChatTemplate chat_template(
      "{{ bos_token }}|{{ eos_token }}|{{ tools is none }}|{{ documents is none }}|{{ add_generation_prompt }}|"
      "{{ custom }}|{{ messages[0].content }}");
  ChatTemplateInputs inputs;
  inputs.messages = json::array({{{"role", "user"}, {"content", "hi"}}});
  inputs.bos_token = "<s>";
  inputs.eos_token = "</s>";
  inputs.add_generation_prompt = true;
  inputs.extra_context = {{"custom", 42}};
  EXPECT_EQ(chat_template.render(inputs), "<s>|</s>|True|True|True|42|hi");
}

TEST(ChatTemplateRender, ExtraContextOverridesSpecialTokensButNotMessages) {
  ChatTemplate chat_template("{{ bos_token }}");
  ChatTemplateInputs inputs;
  inputs.bos_token = "<s>";
  inputs.extra_context = {{"bos_token", "<override>"}};
  EXPECT_EQ(chat_template.render(inputs), "<override>");
  inputs.extra_context = {{"messages", json::array()}};
  EXPECT_THROW(chat_template.render(inputs), fathom::Error);
}

TEST(ChatTemplateRender, ToolsKeepTheirKeyOrderInTojson) {
  ChatTemplate chat_template("{{ tools | tojson }}");
  ChatTemplateInputs inputs;
  inputs.tools = json::parse(R"([{"type": "function", "function": {"name": "f", "description": "é", "parameters": {"z": 1, "a": 2.5}}}])");
  EXPECT_EQ(chat_template.render(inputs),
            R"([{"type": "function", "function": {"name": "f", "description": "é", "parameters": {"z": 1, "a": 2.5}}}])");
}

TEST(ChatTemplateRender, RaiseExceptionIsATemplateRaisedError) {
  ChatTemplate chat_template("{% if messages | length == 0 %}{{ raise_exception('need at least one message') }}{% endif %}");
  try {
    render(chat_template);
    FAIL() << "expected TemplateRaisedError";
  } catch (const TemplateRaisedError& error) {
    EXPECT_STREQ(error.what(), "need at least one message");
  }
}

TEST(ChatTemplateRender, ConcurrentRendersAgree) {
  ChatTemplate chat_template = load_chat_template(testing::shared_data_dir() + "/deepseek-v3", std::nullopt);
  auto inputs_for = [](int turn) {
    ChatTemplateInputs inputs;
    inputs.bos_token = "<bos>";
    inputs.add_generation_prompt = true;
    inputs.messages = json::array({{{"role", "system"}, {"content", "sys"}},
                                   {{"role", "user"}, {"content", "question " + std::to_string(turn)}},
                                   {{"role", "assistant"}, {"content", "<think>r</think>answer"}},
                                   {{"role", "user"}, {"content", "again"}}});
    return inputs;
  };
  std::vector<std::string> expected;
  for (int turn = 0; turn < 16; ++turn) expected.push_back(chat_template.render(inputs_for(turn)));
  std::atomic<int> mismatches{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) {
        int turn = (t + i) % 16;
        if (chat_template.render(inputs_for(turn)) != expected[static_cast<size_t>(turn)]) ++mismatches;
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(mismatches.load(), 0);
  EXPECT_EQ(expected[3], "<bos>sys<｜User｜>question 3<｜Assistant｜>answer<｜end▁of▁sentence｜><｜User｜>again<｜Assistant｜>");
}

TEST(ChatTemplateRender, DeeplyNestedInputIsAnErrorNotACrash) {
  ChatTemplate chat_template("{{ messages | length }}");
  json nested = json::array();
  for (int i = 0; i < 2000; ++i) nested = json::array({nested});
  ChatTemplateInputs inputs;
  inputs.messages = json::array({{{"role", "user"}, {"content", nested}}});
  EXPECT_THROW(chat_template.render(inputs), fathom::Error);
}

TEST(ChatTemplateRender, RunawayMacroRecursionIsAnErrorNotACrash) {
  ChatTemplate chat_template("{% macro again(n) %}{{ again(n + 1) }}{% endmacro %}{{ again(0) }}");
  EXPECT_THROW(render(chat_template), fathom::Error);
}

TEST(JoinTextContentParts, JoinsTextPartsAndRejectsOthers) {
  json messages = json::parse(R"([
    {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
    {"role": "assistant", "content": "plain"},
    {"role": "assistant", "content": null}
  ])");
  json joined = join_text_content_parts(messages);
  EXPECT_EQ(joined[0]["content"], "a\nb");
  EXPECT_EQ(joined[1]["content"], "plain");
  EXPECT_TRUE(joined[2]["content"].is_null());
  json with_image = json::parse(R"([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}])");
  EXPECT_THROW(join_text_content_parts(with_image), fathom::Error);
}

}  // namespace
}  // namespace fathom::chat
