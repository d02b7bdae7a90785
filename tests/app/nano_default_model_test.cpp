// The embedded default model: `fathom generate --prompt` and `fathom serve` with no --model use
// models/fathom-nano on the CPU; a /v1/completions request for "def fibonacci(n):" answers with transformers'
// greedy continuation (models/fathom-nano/golden/golden.json) within seconds.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "fathom_process.h"

namespace fathom {
namespace {

using testing::RunResult;
using testing::run;
using testing::ServeProcess;

nlohmann::json golden_prompt(const std::string& name) {
  std::ifstream in(std::string(FATHOM_SOURCE_DIR) + "/models/fathom-nano/golden/golden.json");
  std::stringstream text;
  text << in.rdbuf();
  const nlohmann::json golden = nlohmann::json::parse(text.str());
  for (const auto& prompt : golden["prompts"]) {
    if (prompt["name"] == name) return prompt;
  }
  ADD_FAILURE() << "no golden prompt " << name;
  return {};
}

// One HTTP/1.1 request with Connection: close; returns {status, body} ({0, ""} when the connection fails).
std::pair<int, std::string> http_request(int port, const std::string& method, const std::string& path,
                                         const std::string& body) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, "127.0.0.1", &address.sin_addr);
  if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    close(fd);
    return {0, ""};
  }
  const std::string request = method + " " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                              "Connection: close\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  for (size_t sent = 0; sent < request.size();) {
    const ssize_t n = ::send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) break;
    sent += static_cast<size_t>(n);
  }
  std::string response;
  char buffer[4096];
  for (ssize_t n; (n = ::recv(fd, buffer, sizeof(buffer), 0)) > 0;) response.append(buffer, static_cast<size_t>(n));
  close(fd);
  const size_t header_end = response.find("\r\n\r\n");
  if (response.rfind("HTTP/1.1 ", 0) != 0 || header_end == std::string::npos) return {0, response};
  return {std::stoi(response.substr(9, 3)), response.substr(header_end + 4)};
}

TEST(DefaultModel, GeneratePromptUsesFathomNano) {
  const nlohmann::json golden = golden_prompt("fibonacci");
  RunResult result = run("generate --prompt 'def fibonacci(n):' --max-new-tokens 12 --threads 2");
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_NE(result.output.find("using the default model"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("models/fathom-nano"), std::string::npos) << result.output;
  // stdout: the prompt and its greedy continuation, which starts transformers' greedy continuation
  const size_t at = result.output.find("def fibonacci(n):");
  ASSERT_NE(at, std::string::npos) << result.output;
  std::string continuation = result.output.substr(at + 17);
  ASSERT_FALSE(continuation.empty());
  continuation.pop_back();  // the newline after the text
  const std::string completion = golden["completion"].get<std::string>();
  EXPECT_GT(continuation.size(), 10u);
  EXPECT_EQ(completion.rfind(continuation, 0), 0u) << continuation << "\nvs transformers:\n" << completion;

  RunResult both = run("generate --prompt x --ids 1");
  EXPECT_NE(both.exit_code, 0);
  EXPECT_NE(both.output.find("give either --ids or --prompt, not both"), std::string::npos) << both.output;
}

TEST(DefaultModel, ServeAnswersACompletionWithCodeWithinSeconds) {
  const nlohmann::json golden = golden_prompt("fibonacci");
  ServeProcess serve({"serve", "--host", "127.0.0.1", "--port", "0", "--threads", "2", "--max-total-tokens", "8192"});
  const std::string url = serve.wait_for(std::regex("listening on (http://[0-9.:]+)"));
  const int port = std::stoi(url.substr(url.rfind(':') + 1));
  EXPECT_NE(serve.output().find("models/fathom-nano"), std::string::npos) << serve.output();

  const auto start = std::chrono::steady_clock::now();
  auto [status, body] = http_request(port, "POST", "/v1/completions",
                                     R"({"prompt": "def fibonacci(n):", "max_tokens": 32, "temperature": 0})");
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_EQ(status, 200) << body;
  const nlohmann::json response = nlohmann::json::parse(body);
  const std::string text = response["choices"][0]["text"].get<std::string>();
  EXPECT_EQ(text, golden["completion"].get<std::string>());  // transformers' greedy, 32 tokens, no special tokens
  EXPECT_EQ(response["usage"]["completion_tokens"], 32);
  EXPECT_LT(seconds, 10.0);
  std::printf("[fathom-nano] /v1/completions, 32 tokens: %.3f s\n%s%s\n", seconds, "def fibonacci(n):", text.c_str());

  auto [chat_status, chat_body] = http_request(
      port, "POST", "/v1/chat/completions",
      R"({"messages": [{"role": "user", "content": "Hello! Who are you?"}], "max_tokens": 48, "temperature": 0})");
  ASSERT_EQ(chat_status, 200) << chat_body;
  const nlohmann::json chat = nlohmann::json::parse(chat_body);
  EXPECT_EQ(chat["choices"][0]["finish_reason"], "stop") << chat_body;
  std::string expected = golden_prompt("chat_hello")["completion"].get<std::string>();
  expected = expected.substr(0, expected.find("<｜end▁of▁sentence｜>"));
  EXPECT_EQ(chat["choices"][0]["message"]["content"], expected) << chat_body;
}

}  // namespace
}  // namespace fathom
