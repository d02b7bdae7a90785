// The tool-call parsers over recorded model outputs (tests/function_call/data/*.json: what DeepSeek-V3 / V3.1
// style models emit, including malformed and truncated outputs), each expected result written by hand. Every
// output is also streamed in every chunking of stream_chunking.h (each byte boundary, each token boundary of
// the real DeepSeek-V3 tokenizer, ...): the streamed result must equal the non-streamed one.
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "function_call/deepseek_markers.h"
#include "function_call/tool_call_parser.h"
#include "stream_chunking.h"
#include "tokenizer/tokenizer.h"

namespace fathom::function_call {
namespace {

struct RecordedOutput {
  std::string file;
  ToolCallFormat format = ToolCallFormat::kDeepSeekV3;
  std::string name;
  std::string text;
  std::vector<std::string> known_names;
  ToolCallParseResult expected;
};

// gtest prints a parameter by its case name.
void PrintTo(const RecordedOutput& output, std::ostream* os) { *os << output.name; }

std::vector<RecordedOutput> load_outputs(const std::string& file) {
  std::ifstream in(std::string(FATHOM_SOURCE_DIR) + "/tests/function_call/data/" + file);
  if (!in) throw std::runtime_error("cannot open tests/function_call/data/" + file);
  const nlohmann::json root = nlohmann::json::parse(in);
  const std::optional<ToolCallFormat> format = parse_tool_call_format(root.at("format").get<std::string>());
  if (!format) throw std::runtime_error(file + ": unknown format");
  std::vector<RecordedOutput> outputs;
  for (const nlohmann::json& entry : root.at("cases")) {
    RecordedOutput output;
    output.file = file;
    output.format = *format;
    output.name = entry.at("name").get<std::string>();
    output.text = entry.at("text").get<std::string>();
    output.known_names = entry.at("known_names").get<std::vector<std::string>>();
    output.expected.normal_text = entry.at("expected").at("content").get<std::string>();
    for (const nlohmann::json& call : entry.at("expected").at("calls")) {
      output.expected.calls.push_back(ToolCall{call.at("name").get<std::string>(), call.at("arguments").get<std::string>()});
    }
    outputs.push_back(std::move(output));
  }
  return outputs;
}

std::vector<RecordedOutput> all_outputs() {
  std::vector<RecordedOutput> outputs = load_outputs("deepseekv3_outputs.json");
  for (RecordedOutput& output : load_outputs("deepseekv31_outputs.json")) outputs.push_back(std::move(output));
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

std::string describe(const ToolCallParseResult& result) {
  std::ostringstream out;
  out << "content=" << nlohmann::json(result.normal_text).dump() << " calls=[";
  for (const ToolCall& call : result.calls) out << "{" << call.name << ": " << nlohmann::json(call.arguments).dump() << "}";
  out << "]";
  return out.str();
}

bool same(const ToolCallParseResult& a, const ToolCallParseResult& b) { return describe(a) == describe(b); }

class RecordedToolCallOutputs : public ::testing::TestWithParam<RecordedOutput> {};

TEST_P(RecordedToolCallOutputs, NonStreamingParseMatchesTheRecordedExpectation) {
  const RecordedOutput& output = GetParam();
  ToolCallParserOptions options;
  options.known_names = output.known_names;
  const ToolCallParseResult parsed = parse_tool_calls(output.format, output.text, options);
  EXPECT_EQ(describe(parsed), describe(output.expected));
}

TEST_P(RecordedToolCallOutputs, EveryChunkingStreamsTheNonStreamingResult) {
  const RecordedOutput& output = GetParam();
  ToolCallParserOptions options;
  options.known_names = output.known_names;
  const ToolCallParseResult whole = parse_tool_calls(output.format, output.text, options);
  const std::vector<testing::Chunking> chunkings = testing::all_chunkings(output.text, deepseek_tokenizer());
  for (size_t c = 0; c < chunkings.size(); ++c) {
    std::unique_ptr<ToolCallParser> parser = make_tool_call_parser(output.format, options);
    ToolCallParseResult streamed;
    std::vector<ToolCallChunk> chunks;
    for (const std::string& piece : chunkings[c]) chunks.push_back(parser->push(piece));
    chunks.push_back(parser->finish());
    for (const ToolCallChunk& chunk : chunks) {
      ASSERT_TRUE(testing::is_valid_utf8(chunk.normal_text)) << "chunking " << c << " split a character in the content";
      for (const ToolCallDelta& delta : chunk.calls) {
        ASSERT_TRUE(testing::is_valid_utf8(delta.arguments)) << "chunking " << c << " split a character in the arguments";
        ASSERT_EQ(delta.name.has_value(), static_cast<size_t>(delta.index) == streamed.calls.size())
            << "chunking " << c << ": a name must come exactly with a call's first delta";
        accumulate(streamed, ToolCallChunk{"", {delta}});
      }
      streamed.normal_text += chunk.normal_text;
    }
    ASSERT_TRUE(same(streamed, whole)) << "chunking " << c << " (" << chunkings[c].size() << " pieces): " << describe(streamed)
                                       << "\nnon-streaming: " << describe(whole);
    EXPECT_EQ(parser->call_count(), static_cast<int32_t>(whole.calls.size()));
  }
}

// Markers reach the content only inside a section kept as written (one that held no call): from the call-begin
// marker that opened the call that was not one. Stray markers elsewhere are removed; arguments never hold one.
TEST_P(RecordedToolCallOutputs, MarkersReachTheContentOnlyInASectionKeptAsWritten) {
  const RecordedOutput& output = GetParam();
  ToolCallParserOptions options;
  options.known_names = output.known_names;
  const ToolCallParseResult parsed = parse_tool_calls(output.format, output.text, options);
  const size_t kept_section = parsed.normal_text.find(std::string(deepseek::kCallBegin));
  for (const std::string& marker : tool_call_markers(output.format)) {
    const size_t first = parsed.normal_text.find(marker);
    if (first != std::string::npos && marker != deepseek::kCallsBegin) {
      EXPECT_TRUE(kept_section != std::string::npos && kept_section <= first) << marker << " in " << parsed.normal_text;
    }
    for (const ToolCall& call : parsed.calls) EXPECT_EQ(call.arguments.find(marker), std::string::npos) << marker;
  }
}

std::string case_name(const ::testing::TestParamInfo<RecordedOutput>& info) {
  return std::string(tool_call_format_name(info.param.format)) + "_" + info.param.name;
}

INSTANTIATE_TEST_SUITE_P(DeepSeek, RecordedToolCallOutputs, ::testing::ValuesIn(all_outputs()), case_name);

TEST(RecordedToolCallOutputsSetup, TheDeepSeekTokenizerMakesEachMarkerOneToken) {
  const tokenizer::Tokenizer* tokenizer = deepseek_tokenizer();
  if (!tokenizer) GTEST_SKIP() << "the DeepSeek-V3 tokenizer is not in " << FATHOM_SHARED_DATA_DIR;
  for (const std::string& marker : tool_call_markers(ToolCallFormat::kDeepSeekV3)) {
    EXPECT_EQ(tokenizer->encode(marker, false).size(), 1u) << marker;
  }
}

}  // namespace
}  // namespace fathom::function_call
