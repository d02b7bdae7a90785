// The DeepSeek-R1 reasoning parser over recorded outputs (tests/reasoning/data/deepseek_r1_outputs.json, expected
// results written by hand), streamed in every chunking of stream_chunking.h (each byte boundary, each token
// boundary of the real DeepSeek-V3 tokenizer, ...): streamed results must equal the non-streamed parse.
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "reasoning/reasoning_parser.h"
#include "stream_chunking.h"
#include "tokenizer/tokenizer.h"

namespace fathom::reasoning {
namespace {

struct RecordedOutput {
  std::string name;
  std::string text;
  bool starts_in_reasoning = false;
  std::string reasoning, content;
};

// gtest prints a parameter by its case name.
void PrintTo(const RecordedOutput& output, std::ostream* os) { *os << output.name; }

std::vector<RecordedOutput> load_outputs() {
  const std::string path = std::string(FATHOM_SOURCE_DIR) + "/tests/reasoning/data/deepseek_r1_outputs.json";
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open " + path);
  const nlohmann::json root = nlohmann::json::parse(in);
  std::vector<RecordedOutput> outputs;
  for (const nlohmann::json& entry : root.at("cases")) {
    RecordedOutput output;
    output.name = entry.at("name").get<std::string>();
    output.text = entry.at("text").get<std::string>();
    output.starts_in_reasoning = entry.at("starts_in_reasoning").get<bool>();
    output.reasoning = entry.at("expected").at("reasoning").get<std::string>();
    output.content = entry.at("expected").at("content").get<std::string>();
    outputs.push_back(std::move(output));
  }
  return outputs;
}

const tokenizer::Tokenizer* deepseek_tokenizer() {
  static const std::unique_ptr<tokenizer::Tokenizer> tokenizer = []() -> std::unique_ptr<tokenizer::Tokenizer> {
    const std::string dir = std::string(FATHOM_SHARED_DATA_DIR) + "/deepseek-v3";
    if (!std::ifstream(dir + "/tokenizer.json")) return nullptr;
    return std::make_unique<tokenizer::Tokenizer>(tokenizer::Tokenizer::load(dir));
  }();
  return tokenizer.get();
}

class RecordedReasoningOutputs : public ::testing::TestWithParam<RecordedOutput> {};

TEST_P(RecordedReasoningOutputs, NonStreamingParseMatchesTheRecordedExpectation) {
  const RecordedOutput& output = GetParam();
  const ReasoningChunk parsed = parse_reasoning(ReasoningFormat::kDeepSeekR1, output.text, output.starts_in_reasoning);
  EXPECT_EQ(parsed.reasoning_text, output.reasoning);
  EXPECT_EQ(parsed.normal_text, output.content);
}

TEST_P(RecordedReasoningOutputs, EveryChunkingStreamsTheNonStreamingResult) {
  const RecordedOutput& output = GetParam();
  const ReasoningChunk whole = parse_reasoning(ReasoningFormat::kDeepSeekR1, output.text, output.starts_in_reasoning);
  const std::vector<testing::Chunking> chunkings = testing::all_chunkings(output.text, deepseek_tokenizer());
  for (size_t c = 0; c < chunkings.size(); ++c) {
    std::unique_ptr<ReasoningParser> parser = make_reasoning_parser(ReasoningFormat::kDeepSeekR1, output.starts_in_reasoning);
    ReasoningChunk streamed;
    auto add = [&](const ReasoningChunk& chunk) {
      ASSERT_TRUE(testing::is_valid_utf8(chunk.reasoning_text)) << "chunking " << c;
      ASSERT_TRUE(testing::is_valid_utf8(chunk.normal_text)) << "chunking " << c;
      // Reasoning never follows answer text.
      if (!chunk.reasoning_text.empty()) {
        ASSERT_TRUE(streamed.normal_text.empty()) << "chunking " << c;
      }
      streamed.reasoning_text += chunk.reasoning_text;
      streamed.normal_text += chunk.normal_text;
    };
    for (const std::string& piece : chunkings[c]) add(parser->push(piece));
    add(parser->finish());
    ASSERT_EQ(streamed.reasoning_text, whole.reasoning_text) << "chunking " << c << " (" << chunkings[c].size() << " pieces)";
    ASSERT_EQ(streamed.normal_text, whole.normal_text) << "chunking " << c << " (" << chunkings[c].size() << " pieces)";
  }
}

std::string case_name(const ::testing::TestParamInfo<RecordedOutput>& info) { return info.param.name; }

INSTANTIATE_TEST_SUITE_P(DeepSeekR1, RecordedReasoningOutputs, ::testing::ValuesIn(load_outputs()), case_name);

TEST(ReasoningStreaming, ReasoningStreamsBeforeTheBlockCloses) {
  auto parser = make_reasoning_parser(ReasoningFormat::kDeepSeekR1, /*starts_in_reasoning=*/true);
  EXPECT_EQ(parser->push("\nFirst, ").reasoning_text, "First,");  // trailing space held until more text
  EXPECT_EQ(parser->push("the sum").reasoning_text, " the sum");
  ReasoningChunk chunk = parser->push(".</th");
  EXPECT_EQ(chunk.reasoning_text, ".");
  chunk = parser->push("ink>\n\nIt is 4.");
  EXPECT_EQ(chunk.reasoning_text, "");
  EXPECT_EQ(chunk.normal_text, "It is 4.");
  EXPECT_TRUE(parser->finish().empty());
}

TEST(ReasoningStreaming, OutputStartIsHeldOnlyWhileItCouldBeAnOpenMarker) {
  auto parser = make_reasoning_parser(ReasoningFormat::kDeepSeekR1, /*starts_in_reasoning=*/false);
  EXPECT_TRUE(parser->push(" <thi").empty());
  EXPECT_EQ(parser->push("s is it").normal_text, " <this is it");
}

TEST(ReasoningPrompt, DetectsAPromptThatOpensTheBlock) {
  EXPECT_TRUE(prompt_opens_reasoning(ReasoningFormat::kDeepSeekR1, "<｜User｜>hi<｜Assistant｜><think>\n"));
  EXPECT_TRUE(prompt_opens_reasoning(ReasoningFormat::kDeepSeekR1, "<think>"));
  EXPECT_FALSE(prompt_opens_reasoning(ReasoningFormat::kDeepSeekR1, "<｜User｜>hi<｜Assistant｜></think>"));
  EXPECT_FALSE(prompt_opens_reasoning(ReasoningFormat::kDeepSeekR1, "<｜User｜>hi<｜Assistant｜>"));
  EXPECT_FALSE(prompt_opens_reasoning(ReasoningFormat::kDeepSeekR1, ""));
}

TEST(ReasoningFormatNames, SGLangNameRoundTrips) {
  EXPECT_EQ(parse_reasoning_format("deepseek-r1"), ReasoningFormat::kDeepSeekR1);
  EXPECT_FALSE(parse_reasoning_format("deepseek_r1").has_value());
  EXPECT_EQ(reasoning_format_name(ReasoningFormat::kDeepSeekR1), "deepseek-r1");
  EXPECT_EQ(reasoning_close_marker(ReasoningFormat::kDeepSeekR1), "</think>");
}

TEST(ReasoningMisuse, PushAfterFinishThrows) {
  auto parser = make_reasoning_parser(ReasoningFormat::kDeepSeekR1, false);
  parser->finish();
  EXPECT_THROW(parser->push("x"), fathom::Error);
}

}  // namespace
}  // namespace fathom::reasoning
