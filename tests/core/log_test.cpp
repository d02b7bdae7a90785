// Logger: level names, the threshold, the line format, and whole lines under concurrent writers.
#include <gtest/gtest.h>

#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/log.h"
#include "log_capture.h"

namespace fathom {
namespace {

using testing::LogCapture;

TEST(LogLevel, ParsesNamesInAnyCaseAndRejectsOthers) {
  EXPECT_EQ(parse_log_level("debug"), LogLevel::kDebug);
  EXPECT_EQ(parse_log_level("INFO"), LogLevel::kInfo);
  EXPECT_EQ(parse_log_level("Warning"), LogLevel::kWarning);
  EXPECT_EQ(parse_log_level("error"), LogLevel::kError);
  try {
    parse_log_level("verbose");
    FAIL() << "no error for an unknown level";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("--log-level must be debug, info, warning or error, got 'verbose'"),
              std::string::npos)
        << error.what();
  }
  EXPECT_STREQ(log_level_name(LogLevel::kWarning), "WARNING");
}

TEST(Logger, WritesStampedLinesAtOrAboveItsThreshold) {
  LogCapture capture;
  const Logger logger(LogLevel::kInfo, capture.file());
  EXPECT_FALSE(logger.enabled(LogLevel::kDebug));
  EXPECT_TRUE(logger.enabled(LogLevel::kInfo));
  logger.log(LogLevel::kDebug, "hidden");
  logger.info("shown \"as is\"");
  logger.warning("careful");
  logger.error("broken");
  const std::vector<std::string> lines = capture.lines();
  ASSERT_EQ(lines.size(), 3u);
  const std::regex stamp(R"(^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\] )");
  for (const std::string& line : lines) EXPECT_TRUE(std::regex_search(line, stamp)) << line;
  EXPECT_EQ(lines[0].substr(22), "INFO shown \"as is\"");
  EXPECT_EQ(lines[1].substr(22), "WARNING careful");
  EXPECT_EQ(lines[2].substr(22), "ERROR broken");
}

TEST(Logger, AMultiLineMessageStaysOneLine) {
  LogCapture capture;
  const Logger logger(LogLevel::kInfo, capture.file());
  logger.error("engine step failed: first\nsecond\r\nthird");
  const std::vector<std::string> lines = capture.lines();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].substr(22), "ERROR engine step failed: first\\nsecond\\r\\nthird");
}

TEST(Logger, ErrorThresholdHidesEverythingElse) {
  LogCapture capture;
  const Logger logger(LogLevel::kError, capture.file());
  logger.info("a");
  logger.warning("b");
  logger.error("c");
  const std::vector<std::string> lines = capture.lines();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].substr(22), "ERROR c");
}

TEST(Logger, ConcurrentWritersKeepLinesWhole) {
  LogCapture capture;
  const Logger logger(LogLevel::kInfo, capture.file());
  constexpr int kThreads = 8, kLinesPerThread = 300;
  const std::string payload(200, 'x');  // long enough that a split write would show
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kLinesPerThread; ++i) logger.info("thread " + std::to_string(t) + " " + payload + " end");
    });
  }
  for (std::thread& thread : threads) thread.join();
  const std::vector<std::string> lines = capture.lines();
  ASSERT_EQ(lines.size(), static_cast<size_t>(kThreads * kLinesPerThread));
  const std::regex whole(R"(^\[[^\]]+\] INFO thread [0-7] x{200} end$)");
  for (const std::string& line : lines) ASSERT_TRUE(std::regex_match(line, whole)) << line;
}

}  // namespace
}  // namespace fathom
