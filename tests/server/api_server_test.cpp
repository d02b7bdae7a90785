// The server over real loopback sockets with a fake engine: endpoints, streaming, errors that keep the server
// serving, keep-alive and pipelining, auth, timeouts, disconnect -> abort, and graceful shutdown.
#include <gtest/gtest.h>

#include <sys/socket.h>

#include <thread>

#include "server_harness.h"
#include "test_http_client.h"

namespace fathom::testing {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

std::string chat_body(const std::string& extra = "") {
  return R"({"model": "tiny", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 5, "temperature": 0)" +
         (extra.empty() ? "" : ", " + extra) + "}";
}

std::string streamed_text(const std::vector<json>& events, const char* field = "content") {
  std::string text;
  for (const json& event : events) {
    if (!event.is_object() || !event.contains("choices")) continue;
    for (const json& choice : event["choices"]) {
      if (choice.contains("delta") && choice["delta"].contains(field)) text += choice["delta"][field].get<std::string>();
      if (choice.contains("text")) text += choice["text"].get<std::string>();
    }
  }
  return text;
}

template <typename Predicate>
bool eventually(Predicate predicate, std::chrono::milliseconds timeout = 5s) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (predicate()) return true;
    std::this_thread::sleep_for(5ms);
  }
  return predicate();
}

std::string expected_fake_text(const std::vector<int32_t>& input_ids, int tokens) {
  scheduler::GenerateRequest request;
  request.input_ids = input_ids;
  request.sampling.temperature = 0.0f;
  std::string text;
  for (int i = 0; i < tokens; ++i) text += FakeEngine::token_text(FakeEngine::token_at(request, i));
  return text;
}

TEST(ApiServer, InfoEndpoints) {
  ServerHarness harness;
  TestResponse health = http_call(harness.port(), "GET", "/health");
  EXPECT_EQ(health.status, 200);
  EXPECT_TRUE(health.body.empty());

  TestResponse models = http_call(harness.port(), "GET", "/v1/models");
  ASSERT_EQ(models.status, 200);
  EXPECT_EQ(models.headers["content-type"], "application/json");
  EXPECT_EQ(models.json()["object"], "list");
  EXPECT_EQ(models.json()["data"][0]["id"], "tiny");
  EXPECT_EQ(models.json()["data"][0]["max_model_len"], 256);
  EXPECT_EQ(http_call(harness.port(), "GET", "/v1/models/tiny").json()["id"], "tiny");
  TestResponse missing = http_call(harness.port(), "GET", "/v1/models/other");
  EXPECT_EQ(missing.status, 404);
  EXPECT_EQ(missing.json()["error"]["code"], "model_not_found");

  json model_info = http_call(harness.port(), "GET", "/get_model_info").json();
  EXPECT_EQ(model_info["model_path"], "/models/tiny");
  EXPECT_EQ(model_info["is_generation"], true);

  json server_info = http_call(harness.port(), "GET", "/get_server_info").json();
  EXPECT_EQ(server_info["page_size"], 1);
  EXPECT_EQ(server_info["engine"]["kv_used_tokens"], 0);
  EXPECT_EQ(server_info["internal_states"][0]["kv_total_tokens"], 1 << 20);

  EXPECT_EQ(http_call(harness.port(), "POST", "/flush_cache").status, 200);
  harness.engine.set_flush_result(false);
  EXPECT_EQ(http_call(harness.port(), "POST", "/flush_cache").status, 400);

  TestResponse metrics = http_call(harness.port(), "GET", "/metrics");
  EXPECT_EQ(metrics.status, 200);
  EXPECT_NE(metrics.headers["content-type"].find("text/plain"), std::string::npos);
  EXPECT_NE(metrics.body.find("fathom:num_running_reqs"), std::string::npos);
  EXPECT_NE(metrics.body.find("fathom:time_to_first_token_seconds_bucket"), std::string::npos);

  TestConnection head(harness.port());
  head.send("HEAD /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  std::string raw = head.read_until("\r\n\r\n");
  EXPECT_EQ(raw.rfind("HTTP/1.1 200", 0), 0u);
  EXPECT_TRUE(head.wait_closed(2s));

  EXPECT_EQ(http_call(harness.port(), "GET", "/health_generate").status, 200);
}

TEST(ApiServer, ChatStreamingMatchesNonStreaming) {
  ServerHarness harness;
  TestResponse plain = http_call(harness.port(), "POST", "/v1/chat/completions", chat_body());
  ASSERT_EQ(plain.status, 200) << plain.body;
  json response = plain.json();
  EXPECT_EQ(response["object"], "chat.completion");
  EXPECT_EQ(response["id"].get<std::string>().rfind("chatcmpl-", 0), 0u);
  const std::string text = response["choices"][0]["message"]["content"];
  EXPECT_EQ(text, expected_fake_text(FakeCodec().encode("user: hello\nassistant:", false), 5));
  EXPECT_EQ(response["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(response["usage"]["completion_tokens"], 5);
  EXPECT_EQ(response["usage"]["prompt_tokens"], 22);
  EXPECT_EQ(response["usage"]["prompt_tokens_details"]["cached_tokens"], 11);

  TestResponse streamed = http_call(harness.port(), "POST", "/v1/chat/completions",
                                    chat_body(R"("stream": true, "stream_options": {"include_usage": true})"));
  ASSERT_EQ(streamed.status, 200);
  EXPECT_TRUE(streamed.chunked);
  EXPECT_EQ(streamed.headers["content-type"], "text/event-stream; charset=utf-8");
  std::vector<json> events = sse_events(streamed.body);
  ASSERT_GE(events.size(), 4u);
  EXPECT_EQ(events.back(), "[DONE]");
  EXPECT_EQ(streamed_text(events), text);
  const json& usage_chunk = events[events.size() - 2];
  EXPECT_TRUE(usage_chunk["choices"].empty());
  EXPECT_EQ(usage_chunk["usage"]["total_tokens"], 27);
}

TEST(ApiServer, CompletionsChoicesSeedsAndStops) {
  ServerHarness harness;
  auto completion = [&](const std::string& body) {
    TestResponse response = http_call(harness.port(), "POST", "/v1/completions", body);
    EXPECT_EQ(response.status, 200) << response.body;
    return response.json();
  };
  json two = completion(R"({"prompt": "abc", "n": 2, "max_tokens": 4, "temperature": 1, "seed": 3})");
  ASSERT_EQ(two["choices"].size(), 2u);
  EXPECT_NE(two["choices"][0]["text"], two["choices"][1]["text"]);
  EXPECT_EQ(two["usage"]["prompt_tokens"], 4);  // counted once for both choices
  json again = completion(R"({"prompt": "abc", "n": 2, "max_tokens": 4, "temperature": 1, "seed": 3})");
  EXPECT_EQ(again["choices"], two["choices"]);

  json batch = completion(R"({"prompt": ["a", [1, 2, 3]], "max_tokens": 2})");
  ASSERT_EQ(batch["choices"].size(), 2u);
  EXPECT_EQ(batch["choices"][1]["index"], 1);

  const std::string full = expected_fake_text({FakeCodec::kBos, 'x'}, 6);
  const std::string stop = full.substr(full.find(' ', 8) + 1, 3);  // a stop string inside the third token
  json stopped = completion(R"({"prompt": "x", "max_tokens": 6, "temperature": 0, "stop": [")" + stop + R"("]})");
  EXPECT_EQ(stopped["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(stopped["choices"][0]["matched_stop"], stop);
  EXPECT_EQ(stopped["choices"][0]["text"], full.substr(0, full.find(stop)));

  json echoed = completion(R"({"prompt": "echo me ", "max_tokens": 1, "echo": true})");
  EXPECT_EQ(echoed["choices"][0]["text"].get<std::string>().rfind("echo me ", 0), 0u);
  // vLLM's echo without generation: max_tokens 0 runs one token and returns the prompt only.
  json echo_only = completion(R"({"prompt": "echo me ", "max_tokens": 0, "echo": true, "stop": ["t"]})");
  EXPECT_EQ(echo_only["choices"][0]["text"], "echo me ");
  EXPECT_EQ(echo_only["choices"][0]["finish_reason"], "length");
  EXPECT_FALSE(echo_only["choices"][0].contains("matched_stop") && !echo_only["choices"][0]["matched_stop"].is_null());
  EXPECT_EQ(echo_only["usage"]["completion_tokens"], 0);
  EXPECT_EQ(harness.engine.submitted().back().sampling.max_new_tokens, 1);
  TestResponse echo_stream = http_call(harness.port(), "POST", "/v1/completions",
                                       R"({"prompt": "echo me ", "max_tokens": 0, "echo": true, "stream": true})");
  std::string echo_stream_text, echo_finish;
  for (const json& event : sse_events(echo_stream.body)) {
    if (!event.is_object() || event["choices"].empty()) continue;
    echo_stream_text += event["choices"][0]["text"].get<std::string>();
    if (!event["choices"][0]["finish_reason"].is_null()) echo_finish = event["choices"][0]["finish_reason"];
  }
  EXPECT_EQ(echo_stream_text, "echo me ");
  EXPECT_EQ(echo_finish, "length");

  json with_logprobs = completion(R"({"prompt": "x", "max_tokens": 3, "logprobs": 2})");
  EXPECT_EQ(with_logprobs["choices"][0]["logprobs"]["tokens"].size(), 3u);
  EXPECT_EQ(with_logprobs["choices"][0]["logprobs"]["top_logprobs"][0].size(), 2u);
  // OpenAI: "the API will always return the logprob of the sampled token" among top_logprobs (up to logprobs + 1).
  json sampled_only = completion(R"({"prompt": "x", "max_tokens": 2, "logprobs": 0})");
  const json& sampled_logprobs = sampled_only["choices"][0]["logprobs"];
  for (size_t i = 0; i < 2; ++i) {
    ASSERT_EQ(sampled_logprobs["top_logprobs"][i].size(), 1u) << sampled_logprobs.dump();
    EXPECT_EQ(sampled_logprobs["top_logprobs"][i][sampled_logprobs["tokens"][i].get<std::string>()],
              sampled_logprobs["token_logprobs"][i]);
  }

  TestResponse streamed = http_call(harness.port(), "POST", "/v1/completions", R"({"prompt": "x", "max_tokens": 6, "stream": true, "n": 2, "temperature": 0})");
  std::vector<json> events = sse_events(streamed.body);
  std::string first_choice;
  for (const json& event : events) {
    if (event.is_object() && event["choices"][0]["index"] == 0) first_choice += event["choices"][0]["text"].get<std::string>();
  }
  EXPECT_EQ(first_choice, full);
}

TEST(ApiServer, NativeGenerate) {
  ServerHarness harness;
  TestResponse single = http_call(harness.port(), "POST", "/generate",
                                  R"({"input_ids": [5, 6], "sampling_params": {"max_new_tokens": 3, "temperature": 0}})");
  ASSERT_EQ(single.status, 200) << single.body;
  EXPECT_EQ(single.json()["text"], expected_fake_text({5, 6}, 3));
  EXPECT_EQ(single.json()["meta_info"]["completion_tokens"], 3);
  EXPECT_EQ(single.json()["meta_info"]["finish_reason"]["type"], "length");

  TestResponse prompt_only = http_call(harness.port(), "POST", "/generate",
                                       R"({"input_ids": [5, 6], "sampling_params": {"max_new_tokens": 0}})");
  ASSERT_EQ(prompt_only.status, 200) << prompt_only.body;
  EXPECT_EQ(prompt_only.json()["text"], "");
  EXPECT_EQ(prompt_only.json()["output_ids"], json::array());
  EXPECT_EQ(prompt_only.json()["meta_info"]["completion_tokens"], 0);
  EXPECT_EQ(prompt_only.json()["meta_info"]["finish_reason"]["type"], "length");

  TestResponse batch = http_call(harness.port(), "POST", "/generate", R"({"text": ["a", "b"], "sampling_params": {"max_new_tokens": 2}})");
  ASSERT_TRUE(batch.json().is_array());
  EXPECT_EQ(batch.json().size(), 2u);

  TestResponse streamed = http_call(harness.port(), "POST", "/generate",
                                    R"({"input_ids": [5, 6], "sampling_params": {"max_new_tokens": 3, "temperature": 0}, "stream": true})");
  std::vector<json> events = sse_events(streamed.body);
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(events[2]["text"], expected_fake_text({5, 6}, 3));  // cumulative
  EXPECT_EQ(events[2]["meta_info"]["finish_reason"]["type"], "length");
  EXPECT_EQ(events[3], "[DONE]");
}

// vLLM's /tokenize and /detokenize: a prompt with or without special tokens, a chat rendered as
// /v1/chat/completions runs it, and the text of ids; bad input is a 400 (or 404 for another model).
TEST(ApiServer, TokenizeAndDetokenize) {
  ServerHarness harness;
  TestResponse text = http_call(harness.port(), "POST", "/tokenize", R"({"prompt": "hi", "return_token_strs": true})");
  ASSERT_EQ(text.status, 200) << text.body;
  EXPECT_EQ(text.json()["tokens"], json::array({FakeCodec::kBos, 'h', 'i'}));
  EXPECT_EQ(text.json()["count"], 3);
  EXPECT_EQ(text.json()["max_model_len"], harness.engine.max_context_tokens());
  EXPECT_EQ(text.json()["token_strs"], json::array({"v256", "v104", "v105"}));  // the vocabulary's strings (vLLM)
  TestResponse plain = http_call(harness.port(), "POST", "/tokenize", R"({"prompt": "hi", "add_special_tokens": false})");
  EXPECT_EQ(plain.json()["tokens"], json::array({'h', 'i'}));
  EXPECT_FALSE(plain.json().contains("token_strs"));
  TestResponse chat = http_call(harness.port(), "POST", "/tokenize",
                                R"({"messages": [{"role": "user", "content": "yo"}]})");
  ASSERT_EQ(chat.status, 200) << chat.body;
  std::vector<int32_t> expected;
  for (char c : std::string("user: yo\nassistant:")) expected.push_back(static_cast<unsigned char>(c));
  EXPECT_EQ(chat.json()["tokens"], json(expected));
  // The same ids a chat completion runs.
  http_call(harness.port(), "POST", "/v1/chat/completions", R"({"messages": [{"role": "user", "content": "yo"}], "max_tokens": 1})");
  EXPECT_EQ(harness.engine.submitted().back().input_ids, expected);
  // add_special_tokens (vLLM): off for chats by default (the template renders them), on for completions' text prompts.
  std::vector<int32_t> with_bos = expected;
  with_bos.insert(with_bos.begin(), FakeCodec::kBos);
  TestResponse chat_bos = http_call(harness.port(), "POST", "/tokenize",
                                    R"({"messages": [{"role": "user", "content": "yo"}], "add_special_tokens": true,
                                        "return_token_strs": true})");
  EXPECT_EQ(chat_bos.json()["tokens"], json(with_bos));
  EXPECT_EQ(chat_bos.json()["token_strs"][0], "v256");
  http_call(harness.port(), "POST", "/v1/chat/completions",
            R"({"messages": [{"role": "user", "content": "yo"}], "max_tokens": 1, "add_special_tokens": true})");
  EXPECT_EQ(harness.engine.submitted().back().input_ids, with_bos);
  http_call(harness.port(), "POST", "/v1/completions", R"({"prompt": "hi", "max_tokens": 1, "add_special_tokens": false})");
  EXPECT_EQ(harness.engine.submitted().back().input_ids, std::vector<int32_t>({'h', 'i'}));
  http_call(harness.port(), "POST", "/v1/completions", R"({"prompt": "hi", "max_tokens": 1})");
  EXPECT_EQ(harness.engine.submitted().back().input_ids, std::vector<int32_t>({FakeCodec::kBos, 'h', 'i'}));

  TestResponse detokenized = http_call(harness.port(), "POST", "/detokenize", R"({"tokens": [104, 105]})");
  ASSERT_EQ(detokenized.status, 200) << detokenized.body;
  EXPECT_EQ(detokenized.json()["prompt"], "hi");
  EXPECT_EQ(http_call(harness.port(), "POST", "/detokenize", R"({"tokens": [5000]})").json()["error"]["param"], "tokens");
  EXPECT_EQ(http_call(harness.port(), "POST", "/detokenize", R"({})").status, 400);
  EXPECT_EQ(http_call(harness.port(), "POST", "/tokenize", R"({"prompt": "a", "messages": []})").status, 400);
  EXPECT_EQ(http_call(harness.port(), "POST", "/tokenize", R"({})").status, 400);
  EXPECT_EQ(http_call(harness.port(), "POST", "/tokenize", R"({"prompt": 5})").json()["error"]["code"], "invalid_type");
  EXPECT_EQ(http_call(harness.port(), "POST", "/tokenize", R"({"model": "other", "prompt": "a"})").status, 404);
  TestResponse empty = http_call(harness.port(), "POST", "/tokenize", R"({"prompt": "", "add_special_tokens": false})");
  EXPECT_EQ(empty.json()["count"], 0);  // vLLM counts it, no error
}

TEST(ApiServer, ErrorsKeepTheConnectionAndServerServing) {
  FakeEngineOptions options;
  options.max_context_tokens = 16;
  ServerHarness harness(options);
  TestConnection connection(harness.port());
  auto call = [&](const std::string& method, const std::string& path, const std::string& body) {
    connection.send(build_request(method, path, body));
    return connection.read_response();
  };
  struct Case {
    std::string method, path, body;
    int status;
    std::string code;
  };
  const std::vector<Case> cases = {
      {"POST", "/v1/chat/completions", "{not json", 400, "invalid_json"},
      {"POST", "/v1/chat/completions", R"({"model": "tiny"})", 400, "missing_required_parameter"},
      {"POST", "/v1/chat/completions", R"({"model": "nope", "messages": [{"role": "user", "content": "x"}]})", 404, "model_not_found"},
      {"POST", "/v1/chat/completions", R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 0})", 400, "invalid_value"},
      {"POST", "/v1/chat/completions", R"({"messages": [{"role": "user", "content": "x"}], "temperature": "warm"})", 400, "invalid_type"},
      {"POST", "/v1/completions", R"({"prompt": "this prompt is longer than sixteen tokens"})", 400, "context_length_exceeded"},
      {"POST", "/v1/completions", R"({"prompt": "this prompt is longer than sixteen tokens", "stream": true})", 400, "context_length_exceeded"},
      {"GET", "/v1/completions", "", 405, "method_not_allowed"},
      {"GET", "/nowhere", "", 404, "unknown_url"},
      {"POST", "/generate", R"({"text": "x", "sampling_params": {"bogus": 1}})", 400, "unknown_parameter"},
  };
  for (const Case& c : cases) {
    TestResponse response = call(c.method, c.path, c.body);
    EXPECT_EQ(response.status, c.status) << c.path << " " << c.body << " -> " << response.body;
    json error = response.json()["error"];
    EXPECT_EQ(error["code"], c.code) << response.body;
    EXPECT_FALSE(error["message"].get<std::string>().empty());
    EXPECT_EQ(error["message"].get<std::string>().find("[src/"), std::string::npos) << "source location leaked";
    if (c.status == 405) {
      EXPECT_EQ(response.headers["allow"], "POST");
    }
  }
  TestResponse prompt_error = call("POST", "/v1/completions", R"({"prompt": "this prompt is longer than sixteen tokens"})");
  EXPECT_NE(prompt_error.json()["error"]["message"].get<std::string>().find("context"), std::string::npos);
  // Same connection still works.
  TestResponse ok = call("POST", "/v1/completions", R"({"prompt": "ok", "max_tokens": 2})");
  EXPECT_EQ(ok.status, 200);
}

// The engine refusing a request that passed the server's checks (a full KV pool) is a 400 engine_error, streamed
// or not, and the server keeps serving.
TEST(ApiServer, EngineRefusalsAreEngineErrors) {
  FakeEngineOptions options;
  options.refuse_prompt_tokens = 8;
  ServerHarness harness(options);
  for (const char* body : {R"({"prompt": "a prompt of many tokens", "max_tokens": 2})",
                           R"({"prompt": "a prompt of many tokens", "max_tokens": 2, "stream": true})"}) {
    TestResponse response = http_call(harness.port(), "POST", "/v1/completions", body);
    EXPECT_EQ(response.status, 400) << response.body;
    EXPECT_EQ(response.json()["error"]["code"], "engine_error") << response.body;
  }
  EXPECT_EQ(http_call(harness.port(), "POST", "/v1/completions", R"({"prompt": "ok", "max_tokens": 2})").status, 200);
}

// An engine submit that throws (an engine out of memory) fails its request alone with a 500, streamed or not: the
// choices the engine took before it are aborted, nothing stays active, the rids are free again, the server serves on
// and shuts down. (The exception once escaped onto the event loop thread and ended the server.)
TEST(ApiServer, EngineSubmitThatThrowsIsA500AndLeavesNothingBehind) {
  FakeEngineOptions options;
  options.token_delay = 5ms;          // the first choice still runs when the second one's submit throws
  options.throwing_submits = {2, 5};  // the second choice of the first request; the streamed request
  ServerHarness harness(options);
  const std::string two_choices =
      R"({"text": ["a", "b"], "rid": ["r1", "r2"], "sampling_params": {"max_new_tokens": 200}})";
  TestResponse failed = http_call(harness.port(), "POST", "/generate", two_choices);
  EXPECT_EQ(failed.status, 500) << failed.body;
  EXPECT_EQ(failed.json()["error"]["code"], "engine_error") << failed.body;
  EXPECT_NE(failed.json()["error"]["message"].get<std::string>().find(
                "the engine could not take it: fake engine: submit 2 throws"),
            std::string::npos)
      << failed.body;
  ASSERT_TRUE(eventually([&] { return harness.engine.aborted_ids().size() == 1; }));
  EXPECT_EQ(harness.engine.aborted_ids()[0], harness.engine.submitted()[0].request_id);
  ASSERT_TRUE(eventually(
      [&] { return http_call(harness.port(), "GET", "/get_server_info").json()["http"]["active_generations"] == 0; }));

  TestResponse again =
      http_call(harness.port(), "POST", "/generate",
                R"({"text": ["a", "b"], "rid": ["r1", "r2"], "sampling_params": {"max_new_tokens": 2}})");
  EXPECT_EQ(again.status, 200) << again.body;  // the rids were released
  TestResponse streamed =
      http_call(harness.port(), "POST", "/v1/completions", R"({"prompt": "x", "max_tokens": 2, "stream": true})");
  EXPECT_EQ(streamed.status, 500) << streamed.body;
  EXPECT_EQ(streamed.json()["error"]["code"], "engine_error") << streamed.body;
  EXPECT_EQ(http_call(harness.port(), "POST", "/v1/completions", R"({"prompt": "ok", "max_tokens": 2})").status, 200);

  const auto shutdown_began = std::chrono::steady_clock::now();
  harness.server->shutdown();  // waits for every preparation to end and every generation to leave
  EXPECT_LT(std::chrono::steady_clock::now() - shutdown_began, 5s);
}

// A full engine queue (--max-queued-requests) is the server's condition: 503 with Retry-After, streamed or not.
TEST(ApiServer, FullQueueIs503ToRetry) {
  FakeEngineOptions options;
  options.queue_full = true;
  ServerHarness harness(options, [](server::ApiServerConfig& config) { config.allowed_origins = {"*"}; });
  for (const char* stream : {"false", "true"}) {
    TestResponse response = http_call(harness.port(), "POST", "/v1/chat/completions",
                                      chat_body(std::string("\"stream\": ") + stream),
                                      {"Origin: http://app.example", "Content-Type: application/json"});
    EXPECT_EQ(response.status, 503) << response.body;
    EXPECT_EQ(response.headers["retry-after"], "1");
    EXPECT_EQ(response.headers["access-control-expose-headers"], "Retry-After");  // a page can read the hint
    EXPECT_EQ(response.json()["error"]["code"], "queue_full");
    EXPECT_NE(response.json()["error"]["message"].get<std::string>().find("queue is full"), std::string::npos);
  }
  EXPECT_EQ(http_call(harness.port(), "GET", "/health").status, 200);  // the server itself is fine
}

// A /health_generate probe refused by a full queue reports load, not failure: healthy once the engine progresses.
TEST(ApiServer, HealthGenerateIsHealthyWhenItsProbeFindsTheQueueFull) {
  FakeEngineOptions options;
  options.token_delay = 10ms;
  options.queue_full_at = 1;
  ServerHarness harness(options);
  TestConnection busy(harness.port());
  busy.send(build_request("POST", "/v1/completions", R"({"prompt": "x", "max_tokens": 250, "stream": true})"));
  busy.read_until("\"text\":\"t");
  TestResponse health = http_call(harness.port(), "GET", "/health_generate");
  EXPECT_EQ(health.status, 200) << health.body;
  TestResponse refused = http_call(harness.port(), "POST", "/v1/completions", R"({"prompt": "y", "max_tokens": 2})");
  EXPECT_EQ(refused.status, 503);
}

TEST(ApiServer, JsonBodiesNeedAJsonContentTypeWhenOneIsNamed) {
  ServerHarness harness;
  const std::string body = R"({"prompt": "p", "max_tokens": 2})";
  auto post = [&](const std::string& content_type) {
    std::string request = "POST /v1/completions HTTP/1.1\r\nHost: x\r\n";
    if (!content_type.empty()) request += "Content-Type: " + content_type + "\r\n";
    request += "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
    TestConnection connection(harness.port());
    connection.send(request);
    return connection.read_response();
  };
  for (const char* refused : {"text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"}) {
    TestResponse response = post(refused);
    EXPECT_EQ(response.status, 415) << refused;
    EXPECT_EQ(response.json()["error"]["code"], "unsupported_media_type") << refused;
  }
  for (const char* accepted : {"", "application/json", "Application/JSON; charset=utf-8", "application/vnd.api+json"}) {
    EXPECT_EQ(post(accepted).status, 200) << accepted;
  }
  // A compressed body is an unsupported media type (RFC 9110 15.5.16), not malformed JSON.
  for (const char* encoding : {"gzip", "br"}) {
    TestResponse compressed = http_call(harness.port(), "POST", "/v1/completions", body,
                                        {"Content-Type: application/json", std::string("Content-Encoding: ") + encoding});
    EXPECT_EQ(compressed.status, 415) << encoding;
    EXPECT_NE(compressed.body.find("Content-Encoding"), std::string::npos) << compressed.body;
    EXPECT_EQ(compressed.headers["accept-encoding"], "identity");  // RFC 7694: the codings the server takes
  }
  EXPECT_EQ(http_call(harness.port(), "POST", "/v1/completions", body, {"Content-Encoding: identity"}).status, 200);
}

TEST(ApiServer, ExpectContinueWithoutTheKeyGets401BeforeTheBody) {
  ServerHarness harness({}, [](server::ApiServerConfig& config) { config.api_key = "sk-secret"; });
  TestConnection connection(harness.port());
  connection.send("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  "Expect: 100-continue\r\nContent-Length: 1000000\r\n\r\n");
  TestResponse response = connection.read_response();
  EXPECT_EQ(response.status, 401);
  EXPECT_EQ(response.json()["error"]["code"], "invalid_api_key");
  EXPECT_TRUE(connection.wait_closed(2s));
  TestConnection keyed(harness.port());
  keyed.send("POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sk-secret\r\n"
             "Expect: 100-continue\r\nContent-Length: 2\r\n\r\n");
  EXPECT_NE(keyed.read_until("100 Continue").find("HTTP/1.1 100 Continue"), std::string::npos);
}

TEST(ApiServer, MetricsOnlyWithEnableMetrics) {
  ServerHarness harness({}, [](server::ApiServerConfig& config) { config.enable_metrics = false; });
  TestResponse metrics = http_call(harness.port(), "GET", "/metrics");
  EXPECT_EQ(metrics.status, 404) << metrics.body;
  EXPECT_EQ(http_call(harness.port(), "GET", "/health").status, 200);
}

TEST(ApiServer, ProtocolErrorsAnswerThenClose) {
  ServerHarness harness({}, [](server::ApiServerConfig& config) {
    config.http.connection.limits.max_body_bytes = 1000;
    config.http.connection.limits.max_header_bytes = 2000;
  });
  {
    TestConnection connection(harness.port());
    connection.send(build_request("POST", "/v1/completions", std::string(2000, 'x')));
    TestResponse response = connection.read_response();
    EXPECT_EQ(response.status, 413);
    EXPECT_EQ(response.headers["connection"], "close");
    EXPECT_EQ(response.json()["error"]["type"], "invalid_request_error");
    EXPECT_EQ(response.json()["error"]["code"], "request_too_large");
    EXPECT_TRUE(connection.wait_closed(2s));
  }
  {
    TestConnection connection(harness.port());
    connection.send("GET /health HTTP/2.0\r\n\r\n");
    TestResponse response = connection.read_response();
    EXPECT_EQ(response.status, 505);
    EXPECT_EQ(response.json()["error"]["type"], "invalid_request_error");  // the client's error, not the server's
    EXPECT_EQ(response.json()["error"]["code"], "http_version_not_supported");
  }
  {
    TestConnection connection(harness.port());
    connection.send("GET /health HTTP/1.1\r\nX-Big: " + std::string(5000, 'a') + "\r\n\r\n");
    EXPECT_EQ(connection.read_response().status, 431);
    EXPECT_TRUE(connection.wait_closed(2s));
  }
  {
    TestConnection connection(harness.port());
    connection.send("NOT HTTP AT ALL\r\n\r\n");
    EXPECT_EQ(connection.read_response().status, 400);
  }
  EXPECT_EQ(http_call(harness.port(), "GET", "/health").status, 200);
  // The HTTP layer's own answers count in the response metrics too.
  const std::string metrics = http_call(harness.port(), "GET", "/metrics").body;
  for (const char* code : {"400", "413", "431", "505"}) {
    EXPECT_NE(metrics.find(std::string("fathom:http_responses_total{code=\"") + code + "\"} 1\n"), std::string::npos)
        << code << "\n" << metrics;
  }
}

TEST(ApiServer, KeepAlivePipeliningChunkedBodiesAndContinue) {
  ServerHarness harness;
  TestConnection connection(harness.port());
  const std::string body = R"({"prompt": "p", "max_tokens": 2})";
  connection.send(build_request("POST", "/v1/completions", body) + build_request("GET", "/health") +
                  build_request("POST", "/v1/completions", body));
  TestResponse first = connection.read_response();
  TestResponse second = connection.read_response();
  TestResponse third = connection.read_response();
  EXPECT_EQ(first.status, 200);
  EXPECT_EQ(first.json()["object"], "text_completion");
  EXPECT_EQ(second.status, 200);
  EXPECT_TRUE(second.body.empty());
  EXPECT_EQ(third.json()["choices"], first.json()["choices"]);

  const std::string chunked_body = body.substr(0, 10) + "|" + body.substr(10);
  std::string request = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n";
  request += "a\r\n" + body.substr(0, 10) + "\r\n";
  char size[16];
  std::snprintf(size, sizeof(size), "%zx", body.size() - 10);
  request += std::string(size) + "\r\n" + body.substr(10) + "\r\n0\r\n\r\n";
  connection.send(request);
  EXPECT_EQ(connection.read_response().json()["choices"], first.json()["choices"]);

  connection.send("POST /v1/completions HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: " +
                  std::to_string(body.size()) + "\r\n\r\n");
  EXPECT_NE(connection.read_until("100 Continue").find("HTTP/1.1 100 Continue\r\n\r\n"), std::string::npos);
  connection.send(body);
  EXPECT_EQ(connection.read_response().status, 200);
}

TEST(ApiServer, Http10StreamIsCloseDelimited) {
  ServerHarness harness;
  TestConnection connection(harness.port());
  const std::string body = R"({"prompt": "p", "max_tokens": 3, "stream": true})";
  connection.send("POST /v1/completions HTTP/1.0\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body);
  TestResponse response = connection.read_response();
  EXPECT_EQ(response.status, 200);
  EXPECT_FALSE(response.chunked);
  EXPECT_EQ(sse_events(response.body).back(), "[DONE]");
}

TEST(ApiServer, ApiKey) {
  ServerHarness harness({}, [](server::ApiServerConfig& config) { config.api_key = "sk-secret"; });
  TestResponse missing = http_call(harness.port(), "GET", "/v1/models");
  EXPECT_EQ(missing.status, 401);
  EXPECT_EQ(missing.json()["error"]["code"], "invalid_api_key");
  EXPECT_EQ(http_call(harness.port(), "GET", "/v1/models", "", {"Authorization: Bearer wrong"}).status, 401);
  EXPECT_EQ(http_call(harness.port(), "GET", "/v1/models", "", {"Authorization: Bearer sk-secre"}).status, 401);
  EXPECT_EQ(http_call(harness.port(), "GET", "/v1/models", "", {"Authorization: Basic sk-secret"}).status, 401);
  EXPECT_EQ(http_call(harness.port(), "POST", "/v1/completions", R"({"prompt": "x"})").status, 401);
  EXPECT_EQ(http_call(harness.port(), "GET", "/v1/models", "", {"Authorization: Bearer sk-secret"}).status, 200);
  EXPECT_EQ(http_call(harness.port(), "GET", "/v1/models", "", {"authorization: bearer sk-secret"}).status, 200);
  EXPECT_EQ(http_call(harness.port(), "GET", "/health").status, 200);
  EXPECT_EQ(harness.engine.submitted_count(), 0u);
}

// /health_generate: a probe queued behind a full batch answers 200 once the engine makes progress (SGLang: any output
// since the probe arrived), not after its own generation; an engine that makes none at all gets 503.
TEST(ApiServer, HealthGenerateIsHealthyWhileTheEngineProgresses) {
  FakeEngineOptions busy;
  busy.token_delay = 10ms;
  busy.max_running = 1;  // the probe waits behind the long request
  ServerHarness harness(busy, [](server::ApiServerConfig& config) { config.health_generate_timeout = 1500ms; });
  TestConnection long_request(harness.port());
  long_request.send(build_request("POST", "/v1/completions", R"({"prompt": "x", "max_tokens": 250, "stream": true})"));
  while (harness.engine.stats().generated_tokens_total == 0) std::this_thread::sleep_for(1ms);
  const auto started = std::chrono::steady_clock::now();
  TestResponse probe = http_call(harness.port(), "GET", "/health_generate");
  EXPECT_EQ(probe.status, 200) << probe.body;
  EXPECT_LT(std::chrono::steady_clock::now() - started, 1200ms);  // answered by progress, not by its own token
  EXPECT_GT(harness.engine.stats().running_requests, 0);          // the long request is still generating

  FakeEngineOptions stalled;
  stalled.hold_until_requests = 100;  // generates nothing
  ServerHarness stuck(stalled, [](server::ApiServerConfig& config) { config.health_generate_timeout = 300ms; });
  TestResponse down = http_call(stuck.port(), "GET", "/health_generate");
  EXPECT_EQ(down.status, 503) << down.body;
  EXPECT_NE(down.body.find("no progress"), std::string::npos) << down.body;
  EXPECT_EQ(http_call(stuck.port(), "GET", "/health").status, 200);
}

// An engine that refuses every request (its idle invariant check failed) makes /health answer 503 with the reason.
TEST(ApiServer, HealthIsDownWhenTheEngineRefusesEverything) {
  ServerHarness harness;
  EXPECT_EQ(http_call(harness.port(), "GET", "/health").status, 200);
  harness.engine.set_internal_error("engine internal error: KV accounting");
  TestResponse down = http_call(harness.port(), "GET", "/health");
  EXPECT_EQ(down.status, 503);
  EXPECT_NE(down.body.find("KV accounting"), std::string::npos) << down.body;
}

// CORS with --allowed-origins '*': a browser's preflight (OPTIONS with Origin and Access-Control-Request-Method) is
// answered without the API key; responses to requests from an origin, complete or streamed, allow it.
TEST(ApiServer, CorsAllowsAnyOrigin) {
  ServerHarness harness({}, [](server::ApiServerConfig& config) {
    config.api_key = "sk-secret";
    config.allowed_origins = {"*"};
  });
  const std::vector<std::string> preflight_headers = {"Origin: http://app.example", "Access-Control-Request-Method: POST",
                                                      "Access-Control-Request-Headers: authorization, content-type"};
  TestResponse preflight = http_call(harness.port(), "OPTIONS", "/v1/chat/completions", "", preflight_headers);
  EXPECT_EQ(preflight.status, 200) << preflight.body;
  EXPECT_EQ(preflight.headers["access-control-allow-origin"], "*");
  EXPECT_EQ(preflight.headers["access-control-allow-methods"], "POST, OPTIONS");
  EXPECT_EQ(preflight.headers["access-control-allow-headers"], "authorization, content-type");
  std::vector<std::string> unknown_path = preflight_headers;
  unknown_path.push_back("Authorization: Bearer sk-secret");
  EXPECT_EQ(http_call(harness.port(), "OPTIONS", "/nowhere", "", unknown_path).status, 404);
  // Not a preflight (no Access-Control-Request-Method): the usual 405, with the origin allowed so the page can read it.
  TestResponse options_only = http_call(harness.port(), "OPTIONS", "/v1/models", "",
                                        {"Origin: http://app.example", "Authorization: Bearer sk-secret"});
  EXPECT_EQ(options_only.status, 405);
  EXPECT_EQ(options_only.headers["access-control-allow-origin"], "*");

  const std::vector<std::string> authorized = {"Origin: http://app.example", "Authorization: Bearer sk-secret",
                                               "Content-Type: application/json"};
  TestResponse models = http_call(harness.port(), "GET", "/v1/models", "", authorized);
  EXPECT_EQ(models.status, 200);
  EXPECT_EQ(models.headers["access-control-allow-origin"], "*");
  TestResponse streamed = http_call(harness.port(), "POST", "/v1/completions",
                                    R"({"prompt": "x", "max_tokens": 2, "stream": true})", authorized);
  EXPECT_EQ(streamed.status, 200);
  EXPECT_TRUE(streamed.chunked);
  EXPECT_EQ(streamed.headers["access-control-allow-origin"], "*");
  TestResponse refused = http_call(harness.port(), "GET", "/v1/models", "", {"Origin: http://app.example"});
  EXPECT_EQ(refused.status, 401);
  EXPECT_EQ(refused.headers["access-control-allow-origin"], "*");
  // Without an Origin (not a browser), no CORS headers.
  EXPECT_EQ(http_call(harness.port(), "GET", "/health").headers.count("access-control-allow-origin"), 0u);
}

// Without --allowed-origins no origin is allowed (a page the operator visits cannot drive a keyless server); a listed
// origin is echoed with Vary: Origin, others get nothing.
TEST(ApiServer, CorsOnlyForTheAllowedOrigins) {
  const std::vector<std::string> preflight = {"Origin: http://app.example", "Access-Control-Request-Method: POST"};
  ServerHarness closed;
  TestResponse refused = http_call(closed.port(), "OPTIONS", "/v1/chat/completions", "", preflight);
  EXPECT_EQ(refused.status, 405);
  EXPECT_EQ(refused.headers.count("access-control-allow-origin"), 0u);
  EXPECT_EQ(http_call(closed.port(), "GET", "/v1/models", "", {"Origin: http://app.example"})
                .headers.count("access-control-allow-origin"),
            0u);

  ServerHarness listed({}, [](server::ApiServerConfig& config) { config.allowed_origins = {"http://app.example"}; });
  TestResponse allowed = http_call(listed.port(), "OPTIONS", "/v1/chat/completions", "", preflight);
  EXPECT_EQ(allowed.status, 200);
  EXPECT_EQ(allowed.headers["access-control-allow-origin"], "http://app.example");
  EXPECT_EQ(allowed.headers["vary"], "Origin");
  TestResponse other = http_call(listed.port(), "GET", "/v1/models", "", {"Origin: http://evil.example"});
  EXPECT_EQ(other.status, 200);
  EXPECT_EQ(other.headers.count("access-control-allow-origin"), 0u);
}

// The answers the HTTP layer sends itself (a 413 for a body over the limit, a 401 before a 100-continue upload) carry
// the CORS headers too, so a page reads the error instead of a CORS failure.
TEST(ApiServer, CorsOnTheHttpLayersOwnAnswers) {
  ServerHarness harness({}, [](server::ApiServerConfig& config) {
    config.allowed_origins = {"http://app.example"};
    config.api_key = "sk-secret";
    config.http.connection.limits.max_body_bytes = 100;
  });
  {
    TestConnection connection(harness.port());
    connection.send(build_request("POST", "/v1/completions", std::string(200, 'x'),
                                  {"Origin: http://app.example", "Authorization: Bearer sk-secret"}));
    TestResponse too_large = connection.read_response();
    EXPECT_EQ(too_large.status, 413);
    EXPECT_EQ(too_large.headers["access-control-allow-origin"], "http://app.example");
    EXPECT_EQ(too_large.headers["vary"], "Origin");
  }
  {
    TestConnection connection(harness.port());
    connection.send("POST /v1/completions HTTP/1.1\r\nHost: x\r\nOrigin: http://app.example\r\n"
                    "Content-Length: 10\r\nExpect: 100-continue\r\n\r\n");
    TestResponse refused = connection.read_response();
    EXPECT_EQ(refused.status, 401);
    EXPECT_EQ(refused.headers["access-control-allow-origin"], "http://app.example");
  }
  {
    TestConnection connection(harness.port());
    connection.send(build_request("POST", "/v1/completions", std::string(200, 'x'),
                                  {"Origin: http://evil.example", "Authorization: Bearer sk-secret"}));
    TestResponse other = connection.read_response();
    EXPECT_EQ(other.status, 413);
    EXPECT_EQ(other.headers.count("access-control-allow-origin"), 0u);
  }
}

TEST(ApiServer, AbortRequestByRidAndAll) {
  FakeEngineOptions options;
  options.token_delay = 10ms;  // 250 tokens outlast the checks before abort_all by seconds
  ServerHarness harness(options);
  TestConnection first(harness.port());
  first.send(build_request("POST", "/generate", R"({"text": ["long", "long"], "rid": ["r1", "r2"], "stream": true,
                                                  "sampling_params": {"max_new_tokens": 250}})"));
  first.read_until("output_ids");
  // A rid in use is refused; the running one is untouched.
  TestResponse duplicate = http_call(harness.port(), "POST", "/generate", R"({"text": "x", "rid": "r2"})");
  EXPECT_EQ(duplicate.status, 400) << duplicate.body;
  EXPECT_NE(duplicate.json()["error"]["message"].get<std::string>().find("in use"), std::string::npos);

  TestResponse aborted = http_call(harness.port(), "POST", "/abort_request", R"({"rid": "r1"})");
  ASSERT_EQ(aborted.status, 200) << aborted.body;
  EXPECT_EQ(aborted.json()["aborted"], 1);
  ASSERT_TRUE(eventually([&] { return harness.engine.aborted_ids().size() == 1; }));
  EXPECT_EQ(harness.engine.running(), 1);  // r2 goes on
  EXPECT_EQ(http_call(harness.port(), "POST", "/abort_request", R"({"rid": "nobody"})").json()["aborted"], 0);
  EXPECT_EQ(http_call(harness.port(), "POST", "/abort_request", R"({})").status, 400);
  EXPECT_EQ(http_call(harness.port(), "POST", "/abort_request", R"({"rid": ")" + std::string(2 << 20, 'x') + R"("})").status,
            413);

  TestConnection second(harness.port());
  second.send(build_request("POST", "/v1/completions", R"({"prompt": "long", "max_tokens": 250, "stream": true, "n": 2})"));
  second.read_until("\"text\":\"t");
  TestResponse all = http_call(harness.port(), "POST", "/abort_request", R"({"abort_all": true})");
  EXPECT_EQ(all.json()["aborted"], 3);  // r2 and both completion choices
  std::vector<nlohmann::json> events = sse_events(first.read_response().body);
  ASSERT_GE(events.size(), 2u);
  EXPECT_EQ(events.back(), "[DONE]");
  TestResponse completions = second.read_response();
  EXPECT_NE(completions.body.find("\"finish_reason\":\"abort\""), std::string::npos) << completions.body;
  // Once r1 and r2 are done, their ids are free again.
  ASSERT_TRUE(eventually([&] { return harness.engine.running() == 0; }));
  ASSERT_TRUE(eventually([&] {
    return http_call(harness.port(), "POST", "/generate", R"({"text": "x", "rid": "r2", "sampling_params": {"max_new_tokens": 1}})")
               .status == 200;
  }));
}

TEST(ApiServer, ClientDisconnectMidStreamAbortsTheEngineRequest) {
  FakeEngineOptions options;
  options.token_delay = 5ms;
  ServerHarness harness(options);
  {
    TestConnection connection(harness.port());
    connection.send(build_request("POST", "/v1/completions", R"({"prompt": "long", "max_tokens": 250, "stream": true, "n": 2})"));
    connection.read_until("\"text\":\"t");
    ASSERT_TRUE(eventually([&] { return harness.engine.running() == 2; }));
  }  // closes the socket mid-stream
  ASSERT_TRUE(eventually([&] { return harness.engine.aborted_ids().size() == 2; })) << harness.engine.aborted_ids().size();
  ASSERT_TRUE(eventually([&] { return harness.engine.stats().kv_used_tokens == 0; }));
  ASSERT_TRUE(eventually([&] {
    return http_call(harness.port(), "GET", "/get_server_info").json()["http"]["active_generations"] == 0;
  }));
  std::string metrics = http_call(harness.port(), "GET", "/metrics").body;
  EXPECT_NE(metrics.find("fathom:num_requests_total{finish_reason=\"abort\"} 2"), std::string::npos) << metrics;

  // Non-streaming requests are aborted too.
  {
    TestConnection connection(harness.port());
    connection.send(build_request("POST", "/v1/chat/completions", chat_body().replace(chat_body().find("\"max_tokens\": 5"), 15, "\"max_tokens\": 200")));
    ASSERT_TRUE(eventually([&] { return harness.engine.running() == 1; }));
  }
  ASSERT_TRUE(eventually([&] { return harness.engine.aborted_ids().size() == 3; }));
}

TEST(ApiServer, HalfClosedClientStillGetsAnImmediateAnswer) {
  ServerHarness harness;
  TestConnection connection(harness.port());
  connection.send(build_request("GET", "/v1/models"));
  ::shutdown(connection.fd(), SHUT_WR);
  TestResponse response = connection.read_response();
  EXPECT_EQ(response.status, 200);
  EXPECT_TRUE(connection.wait_closed(2s));
  EXPECT_EQ(http_call(harness.port(), "GET", "/health").status, 200);
}

TEST(ApiServer, IdleConnectionsTimeOut) {
  ServerHarness harness({}, [](server::ApiServerConfig& config) {
    config.http.connection.keep_alive_timeout = 150ms;
    config.http.connection.request_read_timeout = 300ms;
  });
  TestConnection idle(harness.port());
  idle.send(build_request("GET", "/health"));
  EXPECT_EQ(idle.read_response().status, 200);
  EXPECT_TRUE(idle.wait_closed(3s));

  TestConnection slow(harness.port());
  slow.send("GET /health HTTP/1.1\r\nHost");  // never finishes its headers
  EXPECT_EQ(slow.read_response(3s).status, 408);
}

TEST(ApiServer, GracefulShutdownFinishesStreamsInFlight) {
  FakeEngineOptions options;
  options.token_delay = 2ms;
  ServerHarness harness(options);
  TestConnection streaming(harness.port());
  streaming.send(build_request("POST", "/v1/completions", R"({"prompt": "x", "max_tokens": 200, "stream": true, "temperature": 0})"));
  streaming.read_until("\"text\":\"t");
  TestConnection idle(harness.port());

  std::thread stopper([&] { harness.server->shutdown(); });
  TestResponse response = streaming.read_response();
  stopper.join();
  EXPECT_TRUE(harness.engine.shutdown_called());
  std::vector<json> events = sse_events(response.body);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back(), "[DONE]");
  EXPECT_EQ(events[events.size() - 2]["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(streamed_text(events), expected_fake_text({FakeCodec::kBos, 'x'}, 200));
  EXPECT_TRUE(idle.wait_closed(2s));
  EXPECT_THROW(TestConnection refused(harness.port()), std::runtime_error);
}

}  // namespace
}  // namespace fathom::testing
