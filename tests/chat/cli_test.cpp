// `fathom chat-template` end to end: stdin JSON in, the exact prompt out (no trailing newline added).
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>

#include "test_support.h"

namespace fathom::chat {
namespace {

struct CommandResult {
  int exit_code;
  std::string output;
};

// Runs the fathom binary with stdin from a file; captures stdout only.
CommandResult run_fathom(const std::string& arguments, const std::string& stdin_text) {
  std::random_device device;
  std::filesystem::path input = std::filesystem::temp_directory_path() / ("fathom_cli_" + std::to_string(device()) + ".json");
  std::ofstream(input, std::ios::binary) << stdin_text;
  std::string command = std::string("'") + FATHOM_BINARY + "' chat-template " + arguments + " < '" + input.string() + "' 2>/dev/null";
  CommandResult result{-1, ""};
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe) {
    char buffer[4096];
    size_t read;
    while ((read = fread(buffer, 1, sizeof(buffer), pipe)) > 0) result.output.append(buffer, read);
    int status = pclose(pipe);
    result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  std::filesystem::remove(input);
  return result;
}

std::string r1_dir() { return testing::shared_data_dir() + "/deepseek-v3"; }

TEST(ChatTemplateCli, RendersMessagesArrayWithGenerationPrompt) {
  CommandResult result = run_fathom("--tokenizer '" + r1_dir() + "' --add-generation-prompt",
                                    R"([{"role": "system", "content": "S"}, {"role": "user", "content": "Hi"}])");
  EXPECT_EQ(result.exit_code, 0);
  EXPECT_EQ(result.output, "<｜begin▁of▁sentence｜>S<｜User｜>Hi<｜Assistant｜>");
}

TEST(ChatTemplateCli, AcceptsObjectWithToolsAndTemplateOverride) {
  std::string template_file = testing::chat_test_data_dir() + "/fathom_v31_style.jinja";
  CommandResult result = run_fathom(
      "--tokenizer '" + r1_dir() + "' --chat-template '" + template_file + "'",
      R"({"messages": [{"role": "user", "content": "Hi"}], "tools": [{"type": "function", "function": {"name": "f", "description": "d", "parameters": {"b": 1, "a": 2}}}]})");
  EXPECT_EQ(result.exit_code, 0);
  EXPECT_NE(result.output.find("### f\nDescription: d\n\nParameters: {\"b\": 1, \"a\": 2}"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("<｜User｜>Hi"), std::string::npos) << result.output;
  EXPECT_NE(result.output.back(), '\n');
}

TEST(ChatTemplateCli, ToolsFromFileAndJoinedTextParts) {
  std::random_device device;
  std::filesystem::path tools = std::filesystem::temp_directory_path() / ("fathom_tools_" + std::to_string(device()) + ".json");
  std::ofstream(tools) << R"([{"type": "function", "function": {"name": "lookup"}}])";
  std::string template_file = testing::chat_test_data_dir() + "/fathom_chatml_tools.jinja";
  CommandResult result = run_fathom("--tokenizer '" + r1_dir() + "' --chat-template '" + template_file + "' --tools '" +
                                        tools.string() + "' --join-text-parts",
                                    R"([{"role": "user", "content": [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}]}])");
  std::filesystem::remove(tools);
  EXPECT_EQ(result.exit_code, 0);
  EXPECT_NE(result.output.find("1/1 lookup"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("one\ntwo"), std::string::npos) << result.output;
}

// --model DIR reads the model folder's tokenizer files; with neither flag, the default model's.
TEST(ChatTemplateCli, TokenizerFolderFromModelOrTheDefaultModel) {
  const std::string nano = std::string(FATHOM_SOURCE_DIR) + "/models/fathom-nano";
  const std::string messages = R"([{"role": "user", "content": "hi"}])";
  const CommandResult by_tokenizer = run_fathom("--add-generation-prompt --tokenizer '" + nano + "'", messages);
  ASSERT_EQ(by_tokenizer.exit_code, 0);
  EXPECT_NE(by_tokenizer.output.find("hi"), std::string::npos) << by_tokenizer.output;
  const CommandResult by_model = run_fathom("--add-generation-prompt --model '" + nano + "'", messages);
  ASSERT_EQ(by_model.exit_code, 0);
  EXPECT_EQ(by_model.output, by_tokenizer.output);
  const CommandResult by_default = run_fathom("--add-generation-prompt", messages);
  ASSERT_EQ(by_default.exit_code, 0);
  EXPECT_EQ(by_default.output, by_tokenizer.output);
  EXPECT_NE(run_fathom("--model /nonexistent", messages).exit_code, 0);
}

TEST(ChatTemplateCli, TemplateErrorsExitNonZero) {
  CommandResult result = run_fathom("--tokenizer '" + r1_dir() + "'", R"([{"role": "user", "content": [{"type": "text", "text": "x"}]}])");
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_EQ(result.output, "");
  EXPECT_EQ(run_fathom("--tokenizer '" + r1_dir() + "'", "not json").exit_code, 1);
  EXPECT_EQ(run_fathom("--tokenizer /nonexistent", "[]").exit_code, 1);
}

}  // namespace
}  // namespace fathom::chat
