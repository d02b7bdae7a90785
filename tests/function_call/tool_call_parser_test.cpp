// Behaviour of the tool-call parsers beyond the recorded outputs: streaming granularity (the name first, then
// argument fragments as they arrive), hold-back of partial markers, forced call openings, limits and misuse.
#include <string>

#include <gtest/gtest.h>

#include "core/error.h"
#include "function_call/deepseek_markers.h"
#include "function_call/tool_call_parser.h"

namespace fathom::function_call {
namespace {

const std::string kCallsBegin(deepseek::kCallsBegin), kCallsEnd(deepseek::kCallsEnd), kCallBegin(deepseek::kCallBegin),
    kCallEnd(deepseek::kCallEnd), kSep(deepseek::kSeparator);

TEST(ToolCallFormatNames, SGLangNamesRoundTrip) {
  EXPECT_EQ(parse_tool_call_format("deepseekv3"), ToolCallFormat::kDeepSeekV3);
  EXPECT_EQ(parse_tool_call_format("deepseekv31"), ToolCallFormat::kDeepSeekV31);
  EXPECT_FALSE(parse_tool_call_format("DeepSeekV3").has_value());
  EXPECT_FALSE(parse_tool_call_format("qwen25").has_value());
  EXPECT_EQ(tool_call_format_name(ToolCallFormat::kDeepSeekV31), "deepseekv31");
}

TEST(ToolCallStreaming, NameComesFirstThenArgumentFragmentsAsTheyArrive) {
  auto parser = make_tool_call_parser(ToolCallFormat::kDeepSeekV3, {{"get_weather"}});
  ToolCallChunk chunk = parser->push("Let me check. " + kCallsBegin + kCallBegin + "function" + kSep);
  EXPECT_EQ(chunk.normal_text, "Let me check. ");
  EXPECT_TRUE(chunk.calls.empty());
  chunk = parser->push("get_weather\n```json\n");
  ASSERT_EQ(chunk.calls.size(), 1u);
  EXPECT_EQ(chunk.calls[0].index, 0);
  EXPECT_EQ(chunk.calls[0].name, "get_weather");
  EXPECT_EQ(chunk.calls[0].arguments, "");
  chunk = parser->push("{\"location\": ");
  ASSERT_EQ(chunk.calls.size(), 1u);
  EXPECT_FALSE(chunk.calls[0].name.has_value());
  EXPECT_EQ(chunk.calls[0].arguments, "{\"location\": ");
  chunk = parser->push("\"Paris\"}\n");  // the newline may start the closing fence: held back
  EXPECT_EQ(chunk.calls.at(0).arguments, "\"Paris\"}");
  chunk = parser->push("```" + kCallEnd + kCallsEnd);
  EXPECT_TRUE(chunk.empty());
  EXPECT_TRUE(parser->finish().empty());
  EXPECT_EQ(parser->call_count(), 1);
}

TEST(ToolCallStreaming, NewlineThatCouldStartTheClosingFenceIsReleasedInOrderWhenTextFollows) {
  auto parser = make_tool_call_parser(ToolCallFormat::kDeepSeekV3, {{"get_weather"}});
  ToolCallChunk chunk = parser->push(kCallsBegin + kCallBegin + "function" + kSep + "get_weather\n```json\n{");
  EXPECT_EQ(chunk.calls.at(0).arguments, "{");
  EXPECT_TRUE(parser->push("\n").empty());
  EXPECT_TRUE(parser->push("`").empty());
  EXPECT_EQ(parser->push("x").calls.at(0).arguments, "\n`x");  // not a fence after all
  EXPECT_EQ(parser->push("\n  \"a\": 1").calls.at(0).arguments, "\n  \"a\": 1");
}

TEST(ToolCallStreaming, ClosingFenceCutOffByTheEndOfOutputIsDroppedAtFinish) {
  for (const std::string closing : {"\n", "\n`", "\n``", "\n```", "\n```\n"}) {
    auto parser = make_tool_call_parser(ToolCallFormat::kDeepSeekV3, {{"get_weather"}});
    ToolCallChunk chunk = parser->push(kCallsBegin + kCallBegin + "function" + kSep + "get_weather\n```json\n");
    chunk = parser->push("{\"city\": \"Paris\"}" + closing);
    EXPECT_EQ(chunk.calls.at(0).arguments, "{\"city\": \"Paris\"}") << closing;
    EXPECT_TRUE(parser->finish().empty()) << closing;
  }
}

TEST(ToolCallStreaming, ClosingFenceIsHeldWhileAMarkerAfterItIsIncomplete) {
  auto parser = make_tool_call_parser(ToolCallFormat::kDeepSeekV3, {{"get_weather", "get_time"}});
  ToolCallParseResult result;
  accumulate(result, parser->push(kCallsBegin + kCallBegin + "function" + kSep + "get_weather\n```json\n{}\n```"));
  // Cut after "<｜tool▁call▁b": no longer the start of <｜tool▁call▁end｜>, so only the fence rule holds it back.
  const size_t cut = kCallBegin.find("begin") + 1;
  const ToolCallChunk before_marker = parser->push(kCallBegin.substr(0, cut));
  EXPECT_TRUE(before_marker.empty());  // the fence is not argument text if a marker follows it
  accumulate(result, before_marker);
  accumulate(result, parser->push(kCallBegin.substr(cut) + "function" + kSep + "get_time\n```json\n{}\n```"));
  accumulate(result, parser->finish());
  ASSERT_EQ(result.calls.size(), 2u);
  EXPECT_EQ(result.calls[0].arguments, "{}");
  EXPECT_EQ(result.calls[1].arguments, "{}");
}

TEST(ToolCallStreaming, PartialMarkerIsHeldBackAndReleasedWhenItIsNotOne) {
  auto parser = make_tool_call_parser(ToolCallFormat::kDeepSeekV3);
  EXPECT_EQ(parser->push("a <｜tool▁ca").normal_text, "a ");
  EXPECT_EQ(parser->push("ll▁end").normal_text, "");
  EXPECT_EQ(parser->push("s").normal_text, "<｜tool▁call▁ends");  // not a marker after all
  EXPECT_EQ(parser->finish().normal_text, "");
}

TEST(ToolCallStreaming, SplitCharacterIsHeldUntilComplete) {
  auto parser = make_tool_call_parser(ToolCallFormat::kDeepSeekV3);
  const std::string cafe = "caf\xC3\xA9";
  EXPECT_EQ(parser->push(cafe.substr(0, 4)).normal_text, "caf");
  EXPECT_EQ(parser->push(cafe.substr(4)).normal_text, "\xC3\xA9");
}

TEST(ToolCallForcing, NamedFunctionOpeningStartsTheCallBeforeTheModelWrites) {
  const std::string opening = forced_call_opening(ToolCallFormat::kDeepSeekV3, std::string("get_weather"));
  EXPECT_EQ(opening, kCallsBegin + kCallBegin + "function" + kSep + "get_weather\n```json\n");
  auto parser = make_tool_call_parser(ToolCallFormat::kDeepSeekV3, {{"get_weather"}});
  ToolCallChunk chunk = parser->push(opening);
  ASSERT_EQ(chunk.calls.size(), 1u);
  EXPECT_EQ(chunk.calls[0].name, "get_weather");
  ToolCallParseResult result;
  accumulate(result, chunk);
  accumulate(result, parser->push("{\"location\": \"Oslo\"}\n```" + kCallEnd + kCallsEnd));
  accumulate(result, parser->finish());
  ASSERT_EQ(result.calls.size(), 1u);
  EXPECT_EQ(result.calls[0].arguments, "{\"location\": \"Oslo\"}");
  EXPECT_EQ(result.normal_text, "");
}

TEST(ToolCallForcing, RequiredOpeningLeavesTheHeaderToTheModel) {
  for (ToolCallFormat format : {ToolCallFormat::kDeepSeekV3, ToolCallFormat::kDeepSeekV31}) {
    const std::string opening = forced_call_opening(format, std::nullopt);
    EXPECT_EQ(opening, kCallsBegin + kCallBegin);
    const std::string rest = format == ToolCallFormat::kDeepSeekV3 ? "function" + kSep + "get_time\n```json\n{}\n```" + kCallEnd + kCallsEnd
                                                                    : "get_time" + kSep + "{}" + kCallEnd + kCallsEnd;
    const ToolCallParseResult result = parse_tool_calls(format, opening + rest, {{"get_time"}});
    ASSERT_EQ(result.calls.size(), 1u) << tool_call_format_name(format);
    EXPECT_EQ(result.calls[0].name, "get_time");
    EXPECT_EQ(result.calls[0].arguments, "{}");
  }
  EXPECT_EQ(forced_call_opening(ToolCallFormat::kDeepSeekV31, std::string("f")), kCallsBegin + kCallBegin + "f" + kSep);
}

TEST(ToolCallForcing, RequiredOpeningWithTheOutputCutOffInsideTheHeaderYieldsNothing) {
  for (ToolCallFormat format : {ToolCallFormat::kDeepSeekV3, ToolCallFormat::kDeepSeekV31}) {
    const std::string partial_header = format == ToolCallFormat::kDeepSeekV3 ? "function" + kSep + "get" : "get";
    auto parser = make_tool_call_parser(format, {{"get_time"}});
    EXPECT_TRUE(parser->push(forced_call_opening(format, std::nullopt)).empty());
    EXPECT_TRUE(parser->push(partial_header).empty());
    EXPECT_TRUE(parser->finish().empty()) << tool_call_format_name(format);  // no content "functionget"
    EXPECT_EQ(parser->call_count(), 0);
  }
}

TEST(ToolCallLimits, OverlongTypeOrNameIsNotACall) {
  const std::string long_type(33, 'x');
  ToolCallParseResult result = parse_tool_calls(ToolCallFormat::kDeepSeekV3, kCallBegin + long_type + kSep + "f\n{}" + kCallEnd);
  EXPECT_TRUE(result.calls.empty());
  EXPECT_EQ(result.normal_text, kCallBegin + long_type + kSep + "f\n{}" + kCallEnd);  // as written
  const std::string long_name(129, 'n');
  result = parse_tool_calls(ToolCallFormat::kDeepSeekV31, kCallBegin + long_name + kSep + "{}" + kCallEnd);
  EXPECT_TRUE(result.calls.empty());
  EXPECT_EQ(result.normal_text, kCallBegin + long_name + kSep + "{}" + kCallEnd);
  const std::string longest_name(128, 'n');
  result = parse_tool_calls(ToolCallFormat::kDeepSeekV31, kCallBegin + longest_name + kSep + "{}" + kCallEnd);
  ASSERT_EQ(result.calls.size(), 1u);
  EXPECT_EQ(result.calls[0].name, longest_name);
}

TEST(ToolCallMisuse, PushAfterFinishAndDoubleFinishThrow) {
  auto parser = make_tool_call_parser(ToolCallFormat::kDeepSeekV3);
  parser->finish();
  EXPECT_THROW(parser->push("x"), fathom::Error);
  EXPECT_THROW(parser->finish(), fathom::Error);
}

TEST(ToolCallAccumulate, RejectsADeltaForACallThatDidNotStart) {
  ToolCallParseResult result;
  EXPECT_THROW(accumulate(result, ToolCallChunk{"", {ToolCallDelta{1, std::string("f"), ""}}}), fathom::Error);
  EXPECT_THROW(accumulate(result, ToolCallChunk{"", {ToolCallDelta{0, std::nullopt, "{}"}}}), fathom::Error);
}

}  // namespace
}  // namespace fathom::function_call
