// `fathom tokenize` / `fathom detokenize`: the line-oriented JSON contract used from outside.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "test_support.h"

namespace fathom::tokenizer {
namespace {

using testing::DeepSeekVariant;

struct CliResult {
  int exit_code;
  std::string out;
  std::string err;
};

CliResult run_cli(const std::string& arguments, const std::string& stdin_text) {
  const auto dir = std::filesystem::temp_directory_path() / ("fathom_cli_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto in = dir / "in.txt", out = dir / "out.txt", err = dir / "err.txt";
  std::ofstream(in, std::ios::binary) << stdin_text;
  const std::string command = std::string("'") + FATHOM_BINARY + "' " + arguments + " < '" + in.string() + "' > '" +
                              out.string() + "' 2> '" + err.string() + "'";
  const int status = std::system(command.c_str());
  CliResult result{WIFEXITED(status) ? WEXITSTATUS(status) : -1, testing::read_text_file(out.string()),
                   testing::read_text_file(err.string())};
  std::filesystem::remove_all(dir);
  return result;
}

std::string tokenizer_flag(DeepSeekVariant variant) { return "--tokenizer '" + testing::deepseek_dir(variant) + "'"; }

TEST(Cli, TokenizeLinesOfJsonStrings) {
  FATHOM_REQUIRE_DEEPSEEK_DATA();
  const CliResult plain = run_cli("tokenize " + tokenizer_flag(DeepSeekVariant::kV3), "\"Hello World!\"\n\"\"\n\"a\\nb\"\n");
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_EQ(plain.out, "[19923,4495,3]\n[]\n[67,201,68]\n");
  const CliResult with_bos = run_cli("tokenize --add-special-tokens " + tokenizer_flag(DeepSeekVariant::kV3), "\"Hello World!\"\n");
  ASSERT_EQ(with_bos.exit_code, 0) << with_bos.err;
  EXPECT_EQ(with_bos.out, "[0,19923,4495,3]\n");
  const CliResult r1 = run_cli("tokenize " + tokenizer_flag(DeepSeekVariant::kR1), "\"<think>x</think>\"\n");
  EXPECT_EQ(r1.out, "[128798,90,128799]\n");
}

TEST(Cli, DetokenizeLinesOfIdArrays) {
  FATHOM_REQUIRE_DEEPSEEK_DATA();
  const CliResult plain = run_cli("detokenize " + tokenizer_flag(DeepSeekVariant::kR1), "[0,19923,4495,3]\n[]\n[129000,67]\n");
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_EQ(plain.out, "\"<｜begin▁of▁sentence｜>Hello World!\"\n\"\"\n\"a\"\n");
  const CliResult skipping = run_cli("detokenize --skip-special-tokens " + tokenizer_flag(DeepSeekVariant::kR1), "[0,19923,1]\n");
  EXPECT_EQ(skipping.out, "\"Hello\"\n");
}

TEST(Cli, BadLinesNameTheLineAndFail) {
  FATHOM_REQUIRE_DEEPSEEK_DATA();
  const std::string r1 = tokenizer_flag(DeepSeekVariant::kR1);
  CliResult result = run_cli("tokenize " + r1, "\"ok\"\nnot json\n\"never reached\"\n");
  EXPECT_NE(result.exit_code, 0);
  EXPECT_EQ(result.out, "[633]\n");
  EXPECT_NE(result.err.find("line 2"), std::string::npos) << result.err;
  result = run_cli("tokenize " + r1, "[1,2]\n");
  EXPECT_NE(result.exit_code, 0);
  EXPECT_NE(result.err.find("line 1: expected a JSON string"), std::string::npos) << result.err;
  result = run_cli("detokenize " + r1, "[1]\n[1, 129280]\n");
  EXPECT_NE(result.exit_code, 0);
  EXPECT_NE(result.err.find("line 2: token id 129280 is outside [0, 129280)"), std::string::npos) << result.err;
  result = run_cli("detokenize " + r1, "[1.5]\n");
  EXPECT_NE(result.err.find("line 1: token id 1.5 is not a 32-bit integer"), std::string::npos) << result.err;
  result = run_cli("tokenize --max-input-bytes 4 " + r1, "\"abcd\"\n\"abcde\"\n");
  EXPECT_NE(result.exit_code, 0);
  EXPECT_NE(result.err.find("line 2: text to encode is 5 bytes"), std::string::npos) << result.err;
  result = run_cli("tokenize --tokenizer /nonexistent", "");
  EXPECT_NE(result.exit_code, 0);
  EXPECT_NE(result.err.find("has no tokenizer.json"), std::string::npos) << result.err;
}

// --tokenizer wins over --model; with neither, the default model's tokenizer (said on stderr), as serve does.
TEST(Cli, TokenizerFolderFromModelOrTheDefaultModel) {
  const std::string nano = std::string(FATHOM_SOURCE_DIR) + "/models/fathom-nano";
  const std::string text = "\"Hello World!\"\n";
  const CliResult by_tokenizer = run_cli("tokenize --tokenizer '" + nano + "'", text);
  ASSERT_EQ(by_tokenizer.exit_code, 0) << by_tokenizer.err;
  ASSERT_GT(by_tokenizer.out.size(), 3u);
  const CliResult by_model = run_cli("tokenize --model '" + nano + "'", text);
  ASSERT_EQ(by_model.exit_code, 0) << by_model.err;
  EXPECT_EQ(by_model.out, by_tokenizer.out);
  const CliResult by_default = run_cli("tokenize", text);
  ASSERT_EQ(by_default.exit_code, 0) << by_default.err;
  EXPECT_EQ(by_default.out, by_tokenizer.out);
  EXPECT_NE(by_default.err.find("default model's tokenizer"), std::string::npos) << by_default.err;
  const CliResult both = run_cli("tokenize --model /nonexistent --tokenizer '" + nano + "'", text);
  ASSERT_EQ(both.exit_code, 0) << both.err;
  EXPECT_EQ(both.out, by_tokenizer.out);
  const CliResult decoded = run_cli("detokenize", by_tokenizer.out);
  ASSERT_EQ(decoded.exit_code, 0) << decoded.err;
  EXPECT_EQ(decoded.out, text);
  const CliResult missing = run_cli("detokenize --model /nonexistent", "[1]\n");
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_NE(missing.err.find("/nonexistent has no tokenizer.json"), std::string::npos) << missing.err;
}

}  // namespace
}  // namespace fathom::tokenizer
