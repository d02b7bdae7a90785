// serve's logs: the access log (one line per exchange, answered by the server or by the HTTP layer, or left by its
// client), --log-requests' line per finished engine request, and the periodic engine stats line.
#include <gtest/gtest.h>

#include <cstdio>
#include <regex>
#include <thread>

#include "log_capture.h"
#include "server/access_log.h"
#include "server/stats_log.h"
#include "server_harness.h"
#include "test_http_client.h"

namespace fathom::testing {
namespace {

using namespace std::chrono_literals;

TEST(AccessLog, FormatsTheRequestLineStatusAndDuration) {
  server::ExchangeRecord record;
  record.peer = "127.0.0.1:53422";
  record.method = "POST";
  record.target = "/v1/chat/completions";
  record.status = 200;
  record.duration_ms = 35.21;
  EXPECT_EQ(server::format_access_line(record), "127.0.0.1:53422 \"POST /v1/chat/completions HTTP/1.1\" 200 35.2 ms");
  record.version_minor = 0;
  record.connection_closed = true;
  record.duration_ms = 5012.0;
  EXPECT_EQ(server::format_access_line(record),
            "127.0.0.1:53422 \"POST /v1/chat/completions HTTP/1.0\" 200 connection closed unfinished after 5012.0 ms");
  record.status = 0;  // nothing sent before the client left
  EXPECT_EQ(server::format_access_line(record),
            "127.0.0.1:53422 \"POST /v1/chat/completions HTTP/1.0\" - connection closed unfinished after 5012.0 ms");
  record.method = "-";  // no valid request line
  record.status = 400;
  record.connection_closed = false;
  record.duration_ms = 1.0;
  EXPECT_EQ(server::format_access_line(record), "127.0.0.1:53422 \"-\" 400 1.0 ms");
}

TEST(AccessLog, EscapesAndCutsWhatTheClientControls) {
  server::ExchangeRecord record;
  record.peer = "[::1]:80";
  record.method = "GET";
  record.target = "/a\"b\\c\n\xc3\xa9";
  record.status = 404;
  EXPECT_EQ(server::format_access_line(record), "[::1]:80 \"GET /a\\x22b\\x5cc\\x0a\\xc3\\xa9 HTTP/1.1\" 404 0.0 ms");
  record.target = "/" + std::string(400, 'a');
  const std::string line = server::format_access_line(record);
  EXPECT_NE(line.find("/" + std::string(255, 'a') + "... HTTP/1.1"), std::string::npos) << line;
}

// Waits until the log holds `count` lines (the loop thread writes each just after its response left).
std::vector<std::string> wait_for_lines(const LogCapture& capture, size_t count) {
  std::vector<std::string> lines;
  for (int attempt = 0; attempt < 500; ++attempt) {
    lines = capture.lines();
    if (lines.size() >= count) break;
    std::this_thread::sleep_for(10ms);
  }
  return lines;
}

TEST(AccessLog, ServerLogsEveryExchangeOnceAtInfo) {
  LogCapture capture;
  FakeEngineOptions options;
  options.token_delay = 5ms;
  {
    ServerHarness harness(options, [&](server::ApiServerConfig& config) {
      config.logger = std::make_shared<const Logger>(LogLevel::kInfo, capture.file());
    });
    EXPECT_EQ(http_call(harness.port(), "GET", "/health").status, 200);
    EXPECT_EQ(http_call(harness.port(), "GET", "/nope?x=1").status, 404);
    const std::string short_stream = R"({"prompt": "hi", "max_tokens": 3, "stream": true})";
    EXPECT_EQ(http_call(harness.port(), "POST", "/v1/completions", short_stream).status, 200);
    {  // a protocol error, answered by the HTTP layer
      TestConnection connection(harness.port());
      connection.send("GET /health HTTP/2.0\r\n\r\n");
      EXPECT_EQ(connection.read_response().status, 505);
    }
    {  // a client that leaves mid-stream
      TestConnection connection(harness.port());
      const std::string long_stream = R"({"prompt": "long", "max_tokens": 250, "stream": true})";
      connection.send(build_request("POST", "/v1/completions", long_stream));
      connection.read_until("\"text\":\"t");
    }
    const std::vector<std::string> lines = wait_for_lines(capture, 5);
    ASSERT_EQ(lines.size(), 5u);
    auto expect_line = [&](size_t i, const std::string& request, const std::string& outcome) {
      EXPECT_NE(lines[i].find("] INFO 127.0.0.1:"), std::string::npos) << lines[i];
      EXPECT_NE(lines[i].find(" \"" + request + "\" " + outcome), std::string::npos) << lines[i];
      EXPECT_EQ(lines[i].substr(lines[i].size() - 3), " ms") << lines[i];
    };
    expect_line(0, "GET /health HTTP/1.1", "200 ");
    expect_line(1, "GET /nope?x=1 HTTP/1.1", "404 ");
    expect_line(2, "POST /v1/completions HTTP/1.1", "200 ");
    EXPECT_NE(lines[3].find(" \"-\" 505 "), std::string::npos) << lines[3];  // an invalid request line
    expect_line(4, "POST /v1/completions HTTP/1.1", "200 connection closed unfinished after ");
  }
  EXPECT_EQ(capture.lines().size(), 5u);  // nothing more at shutdown
}

TEST(AccessLog, NoLinesAboveInfo) {
  LogCapture capture;
  {
    ServerHarness harness({}, [&](server::ApiServerConfig& config) {
      config.logger = std::make_shared<const Logger>(LogLevel::kWarning, capture.file());
    });
    EXPECT_EQ(http_call(harness.port(), "GET", "/health").status, 200);
  }
  EXPECT_TRUE(capture.lines().empty());
}

TEST(RequestLog, OneLinePerFinishedEngineRequestWithLogRequests) {
  LogCapture capture;
  FakeEngineOptions options;
  options.refuse_prompt_tokens = 6;
  {
    ServerHarness harness(options, [&](server::ApiServerConfig& config) {
      config.logger = std::make_shared<const Logger>(LogLevel::kInfo, capture.file());
      config.log_requests = true;
    });
    const std::string two_choices = R"({"prompt": "hi", "max_tokens": 3, "n": 2})";
    EXPECT_EQ(http_call(harness.port(), "POST", "/v1/completions", two_choices).status, 200);
    const std::string refused = R"({"prompt": "a b c d e f g h", "max_tokens": 3})";
    EXPECT_EQ(http_call(harness.port(), "POST", "/v1/completions", refused).status, 400);
    const std::vector<std::string> lines = wait_for_lines(capture, 5);  // 3 engine requests, 2 exchanges
    ASSERT_EQ(lines.size(), 5u);
    std::vector<std::string> requests;
    for (const std::string& line : lines) {
      if (line.find("] INFO request ") != std::string::npos) requests.push_back(line);
    }
    ASSERT_EQ(requests.size(), 3u);
    const std::regex finished(R"(\] INFO request \S+: length, \d+ prompt tokens \(\d+ cached\), 3 generated, )"
                              R"(first token \d+\.\d ms, total \d+\.\d ms$)");
    EXPECT_TRUE(std::regex_search(requests[0], finished)) << requests[0];
    EXPECT_TRUE(std::regex_search(requests[1], finished)) << requests[1];
    const std::regex failed(R"(\] INFO request \S+: error, \d+ prompt tokens \(\d+ cached\), 0 generated, )"
                            R"(first token -, total \d+\.\d ms, error: .+$)");
    EXPECT_TRUE(std::regex_search(requests[2], failed)) << requests[2];
  }
}

TEST(RequestLog, NoRequestLinesWithoutTheFlag) {
  LogCapture capture;
  {
    ServerHarness harness({}, [&](server::ApiServerConfig& config) {
      config.logger = std::make_shared<const Logger>(LogLevel::kInfo, capture.file());
    });
    EXPECT_EQ(http_call(harness.port(), "POST", "/v1/completions", R"({"prompt": "hi", "max_tokens": 3})").status, 200);
    const std::vector<std::string> lines = wait_for_lines(capture, 1);
    ASSERT_EQ(lines.size(), 1u);
    EXPECT_NE(lines[0].find("\"POST /v1/completions HTTP/1.1\" 200"), std::string::npos) << lines[0];
  }
}

TEST(StatsLog, IdleIntervalsLogNothing) {
  scheduler::EngineStats idle;
  idle.kv_total_tokens = 1000;
  idle.prompt_tokens_total = 50;
  idle.generated_tokens_total = 70;
  EXPECT_FALSE(server::format_stats_line(idle, idle, 10.0).has_value());
}

TEST(StatsLog, BusyIntervalsLogRatesAndUse) {
  scheduler::EngineStats before, after;
  before.kv_total_tokens = after.kv_total_tokens = 8192;
  before.prompt_tokens_total = 100;
  before.cached_prompt_tokens_total = 10;
  before.generated_tokens_total = 1000;
  after = before;
  after.running_requests = 3;
  after.waiting_requests = 1;
  after.kv_used_tokens = 2048;
  after.prompt_tokens_total = 100 + 400;
  after.cached_prompt_tokens_total = 10 + 100;
  after.generated_tokens_total = 1000 + 250;
  const std::optional<std::string> line = server::format_stats_line(before, after, 2.0);
  ASSERT_TRUE(line.has_value());
  EXPECT_EQ(*line, "engine: 3 running, 1 queued, KV 2048 / 8192 tokens (25.0%), prompts in 200.0 tok/s, "
                   "prefix cache hits 50.0 tok/s, generated 125.0 tok/s");
  // Tokens counted in an interval that ends idle still make a line (the last requests finished inside it).
  scheduler::EngineStats finished = before;
  finished.generated_tokens_total += 5;
  EXPECT_TRUE(server::format_stats_line(before, finished, 1.0).has_value());
}

TEST(StatsLog, ThreadLogsWhileTheEngineWorks) {
  LogCapture capture;
  FakeEngineOptions options;
  options.token_delay = 5ms;
  FakeEngine engine(options);
  const Logger logger(LogLevel::kInfo, capture.file());
  {
    server::EngineStatsLog stats_log(engine, logger, 50ms);
    std::this_thread::sleep_for(200ms);  // idle: no line
    EXPECT_TRUE(capture.lines().empty());
    scheduler::GenerateRequest request;
    request.request_id = "r1";
    request.input_ids = {1, 2, 3};
    request.sampling.max_new_tokens = 100;
    engine.submit(request, [](const scheduler::GenerationEvent&) {});
    const std::vector<std::string> lines = wait_for_lines(capture, 1);
    ASSERT_FALSE(lines.empty());
    EXPECT_NE(lines[0].find("] INFO engine: "), std::string::npos) << lines[0];
    engine.abort("r1");
  }
}

}  // namespace
}  // namespace fathom::testing
