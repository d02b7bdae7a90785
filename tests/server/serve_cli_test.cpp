// `fathom serve` as a user runs it: flag errors, a taken port, token-id serving without a tokenizer, and
// SIGTERM -> drained exit 0. (The openai-client end-to-end tests live in tests/e2e.)
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <regex>

#include "test_http_client.h"
#include "fathom_process.h"
#include "tiny_model.h"

namespace fathom::testing {
namespace {

using namespace std::chrono_literals;

class ServeCli : public ::testing::Test {
 protected:
  void SetUp() override { write_config(dir_.path(), tiny_config_json()); }
  std::string model_flags() const { return "--model " + dir_.path() + " --load-format dummy --threads 1"; }
  TempDir dir_{"serve"};
};

TEST_F(ServeCli, FlagErrors) {
  RunResult unknown = run("serve " + model_flags() + " --no-such-flag");
  EXPECT_EQ(unknown.exit_code, 1);
  EXPECT_NE(unknown.output.find("unknown flag --no-such-flag"), std::string::npos) << unknown.output;
  RunResult no_model = run("serve --model " + dir_.path() + "/missing --port 0");  // no --model: models/fathom-nano
  EXPECT_EQ(no_model.exit_code, 1);
  EXPECT_NE(no_model.output.find("cannot open " + dir_.path() + "/missing/config.json"), std::string::npos) << no_model.output;
  RunResult bad_policy = run("serve " + model_flags() + " --skip-tokenizer-init --schedule-policy random");
  EXPECT_EQ(bad_policy.exit_code, 1);
  EXPECT_NE(bad_policy.output.find("random"), std::string::npos) << bad_policy.output;
  RunResult no_tokenizer = run("serve " + model_flags());
  EXPECT_EQ(no_tokenizer.exit_code, 1);
  EXPECT_NE(no_tokenizer.output.find("no tokenizer.json"), std::string::npos) << no_tokenizer.output;
  RunResult bad_tool_parser = run("serve " + model_flags() + " --skip-tokenizer-init --tool-call-parser hermes");
  EXPECT_EQ(bad_tool_parser.exit_code, 1);
  EXPECT_NE(bad_tool_parser.output.find("--tool-call-parser 'hermes' is not one of deepseekv3, deepseekv31"), std::string::npos)
      << bad_tool_parser.output;
  RunResult bad_reasoning_parser = run("serve " + model_flags() + " --skip-tokenizer-init --reasoning-parser qwen3");
  EXPECT_EQ(bad_reasoning_parser.exit_code, 1);
  EXPECT_NE(bad_reasoning_parser.output.find("--reasoning-parser 'qwen3' is not one of deepseek-r1"), std::string::npos)
      << bad_reasoning_parser.output;
  // Numeric flags out of range fail before the model loads, naming the flag.
  for (const std::string& flag : {"--context-length 1", "--context-length 100000", "--keep-alive-timeout-s 0",
                                  "--keep-alive-timeout-s 10000000000",
                                  "--max-request-body-bytes -1", "--random-seed -1", "--preparation-threads 0"}) {
    RunResult bad = run("serve " + model_flags() + " --skip-tokenizer-init " + flag);
    EXPECT_EQ(bad.exit_code, 1) << flag;
    EXPECT_NE(bad.output.find(flag.substr(0, flag.find(' ')) + " must be"), std::string::npos) << bad.output;
  }
  RunResult swallowed = run("serve " + model_flags() + " --skip-tokenizer-init --api-key --enable-metrics");
  EXPECT_EQ(swallowed.exit_code, 1);
  EXPECT_NE(swallowed.output.find("--api-key needs a value, got the flag --enable-metrics"), std::string::npos)
      << swallowed.output;
}

// SGLang's --context-length caps prompt + output below the model's max_position_embeddings.
TEST_F(ServeCli, ContextLengthCapsRequests) {
  ServeProcess serve({"serve", "--model", dir_.path(), "--load-format", "dummy", "--threads", "1", "--skip-tokenizer-init",
                      "--port", "0", "--context-length", "64"});
  const std::string url = serve.wait_for(std::regex("listening on (http://[0-9.:]+)"));
  const int port = std::stoi(url.substr(url.rfind(':') + 1));
  EXPECT_NE(serve.output().find("context 64 tokens"), std::string::npos) << serve.output();
  std::string ids = "5";
  for (int i = 0; i < 59; ++i) ids += ",5";
  TestResponse fits = http_call(port, "POST", "/generate",
                                R"({"input_ids": [)" + ids + R"(], "sampling_params": {"max_new_tokens": 4}})");
  EXPECT_EQ(fits.status, 200) << fits.body;
  TestResponse over = http_call(port, "POST", "/generate",
                                R"({"input_ids": [)" + ids + R"(], "sampling_params": {"max_new_tokens": 5}})");
  EXPECT_EQ(over.status, 400) << over.body;
  EXPECT_EQ(over.json()["error"]["code"], "context_length_exceeded");
  EXPECT_EQ(http_call(port, "GET", "/get_server_info").json()["context_length"], 64);
  EXPECT_EQ(serve.terminate_and_wait(), 0) << serve.output();
}

TEST_F(ServeCli, TakenPortIsReported) {
  int blocker = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(blocker, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  ASSERT_EQ(listen(blocker, 1), 0);
  socklen_t length = sizeof(address);
  getsockname(blocker, reinterpret_cast<sockaddr*>(&address), &length);
  const int port = ntohs(address.sin_port);
  RunResult result = run("serve " + model_flags() + " --skip-tokenizer-init --port " + std::to_string(port));
  // Checked before the tokenizer and weights load: this one has neither, and the port is still what is reported.
  RunResult before_load = run("serve --model " + dir_.path() + " --threads 1 --port " + std::to_string(port));
  close(blocker);
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_NE(result.output.find("cannot listen on 127.0.0.1:" + std::to_string(port)), std::string::npos) << result.output;
  EXPECT_EQ(before_load.exit_code, 1);
  EXPECT_NE(before_load.output.find("cannot listen on 127.0.0.1:" + std::to_string(port)), std::string::npos)
      << before_load.output;
  RunResult unknown_host = run("serve " + model_flags() + " --skip-tokenizer-init --host no-such-host.invalid --port 0");
  EXPECT_EQ(unknown_host.exit_code, 1);
  EXPECT_NE(unknown_host.output.find("cannot resolve host 'no-such-host.invalid'"), std::string::npos) << unknown_host.output;
}

TEST_F(ServeCli, ServesTokenIdsAndDrainsOnSigterm) {
  ServeProcess serve({"serve", "--model", dir_.path(), "--load-format", "dummy", "--threads", "1", "--skip-tokenizer-init",
                      "--port", "0", "--served-model-name", "tiny", "--max-total-tokens", "1024"});
  const std::string url = serve.wait_for(std::regex("listening on (http://[0-9.:]+)"));
  const int port = std::stoi(url.substr(url.rfind(':') + 1));

  TestResponse generated = http_call(port, "POST", "/generate",
                                     R"({"input_ids": [5, 6, 7], "sampling_params": {"max_new_tokens": 3, "ignore_eos": true}})");
  ASSERT_EQ(generated.status, 200) << generated.body;
  EXPECT_EQ(generated.json()["output_ids"].size(), 3u);
  EXPECT_EQ(generated.json()["text"], "");  // no tokenizer, no text

  TestResponse completion = http_call(port, "POST", "/v1/completions", R"({"model": "tiny", "prompt": [5, 6], "max_tokens": 2})");
  EXPECT_EQ(completion.status, 200) << completion.body;
  TestResponse text_prompt = http_call(port, "POST", "/v1/completions", R"({"prompt": "hello"})");
  EXPECT_EQ(text_prompt.status, 400);
  EXPECT_EQ(text_prompt.json()["error"]["code"], "tokenizer_unavailable");
  TestResponse out_of_vocab = http_call(port, "POST", "/generate", R"({"input_ids": [5, 300]})");
  EXPECT_EQ(out_of_vocab.status, 400);

  std::string ids = "5";
  for (int i = 0; i < 299; ++i) ids += ",5";
  TestResponse over_context = http_call(port, "POST", "/generate", R"({"input_ids": [)" + ids + "]}");
  EXPECT_EQ(over_context.status, 400) << over_context.body;
  EXPECT_EQ(over_context.json()["error"]["code"], "context_length_exceeded");

  TestConnection streaming(port);
  streaming.send(build_request("POST", "/generate", R"({"input_ids": [5, 6], "sampling_params": {"max_new_tokens": 40, "ignore_eos": true}, "stream": true})"));
  streaming.read_until("output_ids");
  EXPECT_EQ(serve.terminate_and_wait(), 0) << serve.output();
  TestResponse drained = streaming.read_response();
  std::vector<nlohmann::json> events = sse_events(drained.body);
  ASSERT_GE(events.size(), 2u);
  EXPECT_EQ(events.back(), "[DONE]");
  EXPECT_EQ(events[events.size() - 2]["meta_info"]["completion_tokens"], 40);
  EXPECT_NE(serve.output().find("SIGTERM received"), std::string::npos);
}

}  // namespace
}  // namespace fathom::testing
