// `fathom bench-serving`: online serving benchmark against a running server (fathom serve or any OpenAI-compatible
// one). Random prompts arrive as a Poisson process (or all at once), capped by a concurrency limit; each request
// streams over its own blocking HTTP/1.1 connection on a worker thread. Reports the metrics SGLang's
// bench_serving reports (throughput, E2E latency, TTFT, TPOT, ITL), optionally appended as one JSON line.
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <mutex>
#include <optional>
#include <random>
#include <system_error>
#include <thread>

#include <nlohmann/json.hpp>

#include "app/commands.h"
#include "core/cli_args.h"
#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace fathom::app {

namespace {

using Clock = std::chrono::steady_clock;
using Json = nlohmann::json;

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

struct Endpoint {
  std::string host;
  std::string port;
  std::string prefix;  // path prefix from --base-url, without a trailing '/'
};

// A TCP port as the connect() side needs it: 1..65535 (0 is only meaningful for a listener).
std::string checked_port(const std::string& text, const std::string& what) {
  char* end = nullptr;
  const long long port = std::strtoll(text.c_str(), &end, 10);
  FATHOM_CHECK(!text.empty() && end && *end == '\0' && port >= 1 && port <= 65535,
               what << ": port must be an integer in [1, 65535], got '" << text << "'");
  return std::to_string(port);
}

Endpoint parse_base_url(const std::string& url) {
  std::string rest = url;
  const std::string scheme = "http://";
  FATHOM_CHECK(rest.rfind(scheme, 0) == 0, "--base-url " << url << ": only http:// URLs are supported");
  rest = rest.substr(scheme.size());
  const size_t slash = rest.find('/');
  std::string authority = rest.substr(0, slash);
  Endpoint endpoint;
  endpoint.prefix = slash == std::string::npos ? "" : rest.substr(slash);
  while (!endpoint.prefix.empty() && endpoint.prefix.back() == '/') endpoint.prefix.pop_back();
  const size_t colon = authority.rfind(':');
  endpoint.host = colon == std::string::npos ? authority : authority.substr(0, colon);
  endpoint.port = colon == std::string::npos ? "80" : checked_port(authority.substr(colon + 1), "--base-url " + url);
  FATHOM_CHECK(!endpoint.host.empty(), "--base-url " << url << ": no host");
  return endpoint;
}

// One request/response over a fresh connection (Connection: close). The body is handed to `on_body` as it
// arrives (chunked transfer coding removed). Throws fathom::Error on a transport failure.
class HttpCall {
 public:
  HttpCall(const Endpoint& endpoint, const std::string& method, const std::string& path, const std::string& body) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    const int rc = getaddrinfo(endpoint.host.c_str(), endpoint.port.c_str(), &hints, &found);
    FATHOM_CHECK(rc == 0, "cannot resolve " << endpoint.host << ": " << gai_strerror(rc));
    int connect_errno = 0;
    for (addrinfo* address = found; address && fd_ < 0; address = address->ai_next) {
      fd_ = socket(address->ai_family, address->ai_socktype, address->ai_protocol);
      if (fd_ < 0) connect_errno = errno;
      if (fd_ >= 0 && connect(fd_, address->ai_addr, address->ai_addrlen) != 0) {
        connect_errno = errno;
        close(fd_);
        fd_ = -1;
      }
    }
    freeaddrinfo(found);
    FATHOM_CHECK(fd_ >= 0, "cannot connect to " << endpoint.host << ":" << endpoint.port << ": "
                                                << std::strerror(connect_errno));
    std::string request = method + " " + endpoint.prefix + path + " HTTP/1.1\r\nHost: " + endpoint.host + ":" +
                          endpoint.port + "\r\nConnection: close\r\nAccept: */*\r\n";
    if (!body.empty() || method == "POST") {
      request += "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
    }
    request += "\r\n" + body;
    size_t sent = 0;
    while (sent < request.size()) {
      const ssize_t n = send(fd_, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
      FATHOM_CHECK(n > 0, "send to " << endpoint.host << ":" << endpoint.port << " failed");
      sent += static_cast<size_t>(n);
    }
  }
  ~HttpCall() {
    if (fd_ >= 0) close(fd_);
  }
  HttpCall(const HttpCall&) = delete;
  HttpCall& operator=(const HttpCall&) = delete;

  // Reads the status line and headers; returns the status code.
  int read_head() {
    size_t end;
    while ((end = buffer_.find("\r\n\r\n")) == std::string::npos) {
      FATHOM_CHECK(fill(), "connection closed before the response headers");
    }
    const std::string head = buffer_.substr(0, end);
    buffer_.erase(0, end + 4);
    FATHOM_CHECK(head.rfind("HTTP/1.", 0) == 0 && head.size() >= 12, "malformed status line");
    const int status = std::atoi(head.c_str() + 9);
    std::string lower = head;
    std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
    chunked_ = lower.find("transfer-encoding: chunked") != std::string::npos;
    const size_t length_at = lower.find("content-length:");
    if (length_at != std::string::npos) remaining_ = std::stoll(lower.substr(length_at + 15));
    return status;
  }

  // Calls on_body with each decoded piece of the body until it ends.
  template <typename OnBody>
  void read_body(OnBody&& on_body) {
    if (!chunked_) {
      for (;;) {
        if (!buffer_.empty()) {
          on_body(buffer_);
          if (remaining_ >= 0) remaining_ -= static_cast<int64_t>(buffer_.size());
          buffer_.clear();
        }
        if (remaining_ == 0 || !fill()) return;
      }
    }
    for (;;) {
      size_t line_end;
      while ((line_end = buffer_.find("\r\n")) == std::string::npos) FATHOM_CHECK(fill(), "truncated chunked body");
      const size_t size = std::stoul(buffer_.substr(0, line_end), nullptr, 16);
      buffer_.erase(0, line_end + 2);
      if (size == 0) return;
      while (buffer_.size() < size + 2) FATHOM_CHECK(fill(), "truncated chunked body");
      on_body(buffer_.substr(0, size));
      buffer_.erase(0, size + 2);
    }
  }

 private:
  bool fill() {
    char chunk[16384];
    const ssize_t n = recv(fd_, chunk, sizeof(chunk), 0);
    if (n <= 0) return false;
    buffer_.append(chunk, static_cast<size_t>(n));
    return true;
  }

  int fd_ = -1;
  std::string buffer_;
  bool chunked_ = false;
  int64_t remaining_ = -1;
};

struct Prompt {
  std::optional<std::string> text;
  std::vector<int32_t> ids;
  int64_t input_len = 0;  // planned prompt length in tokens
  int64_t output_len = 0;
};

struct RequestResult {
  bool success = false;
  std::string error;
  // The planned prompt length, as SGLang's bench_serving counts input tokens; the server's count only where the
  // length is not known here (--prompts-file text without --tokenizer).
  int64_t prompt_tokens = 0;
  int64_t output_tokens = 0;
  double latency_s = 0;
  double ttft_s = 0;
  std::vector<double> itl_s;
  Clock::time_point start;
};

struct Options {
  std::string backend;
  Endpoint endpoint;
  std::optional<std::string> model;
  bool stream = true;
};

std::string request_body(const Options& options, const Prompt& prompt) {
  Json body;
  if (options.backend == "fathom") {
    if (prompt.text) body["text"] = *prompt.text;
    else body["input_ids"] = prompt.ids;
    body["sampling_params"] = {{"max_new_tokens", prompt.output_len}, {"ignore_eos", true}, {"temperature", 0.0}};
    body["stream"] = options.stream;
  } else {
    if (options.model) body["model"] = *options.model;
    if (prompt.text) body["prompt"] = *prompt.text;
    else body["prompt"] = prompt.ids;
    body["max_tokens"] = prompt.output_len;
    body["temperature"] = 0.0;
    body["ignore_eos"] = true;
    body["stream"] = options.stream;
    if (options.stream) body["stream_options"] = {{"include_usage", true}};
  }
  return body.dump();
}

// Sends one request and measures it; never throws.
RequestResult send_request(const Options& options, const Prompt& prompt) {
  RequestResult result;
  result.prompt_tokens = prompt.input_len;
  const bool count_prompt_from_server = prompt.input_len == 0;
  result.start = Clock::now();
  try {
    HttpCall call(options.endpoint, "POST", options.backend == "fathom" ? "/generate" : "/v1/completions",
                  request_body(options, prompt));
    const int status = call.read_head();
    std::string body;  // whole body for errors / non-streaming; pending partial line for SSE
    int64_t chunks = 0;
    int64_t reported_tokens = -1;
    int64_t seen_tokens = 0;  // fathom backend: completion_tokens of the previous event
    Clock::time_point last = result.start;
    bool done = false;
    // An event carrying k > 1 tokens (speculative decoding, stream intervals) adds k inter-token latencies of
    // gap / k, as SGLang's bench_serving counts them; the first event's tokens give the TTFT only.
    auto on_token_event = [&](Clock::time_point now, int64_t tokens) {
      if (chunks == 0) {
        result.ttft_s = seconds_between(result.start, now);
      } else {
        const double gap_s = seconds_between(last, now) / static_cast<double>(tokens);
        result.itl_s.insert(result.itl_s.end(), static_cast<size_t>(tokens), gap_s);
      }
      last = now;
      ++chunks;
    };
    auto on_event = [&](const std::string& data, Clock::time_point now) {
      if (data == "[DONE]") {
        done = true;
        return;
      }
      Json event = Json::parse(data);
      if (event.contains("error")) FATHOM_FAIL("server error event: " << event["error"].dump());
      if (options.backend == "fathom") {
        const Json& meta = event.at("meta_info");
        const int64_t completion = meta.value("completion_tokens", seen_tokens);
        if (count_prompt_from_server) result.prompt_tokens = meta.value("prompt_tokens", result.prompt_tokens);
        if (completion > seen_tokens) on_token_event(now, completion - seen_tokens);
        seen_tokens = completion;
        reported_tokens = completion;
      } else {
        if (event.contains("usage") && event["usage"].is_object()) {
          const Json& usage = event["usage"];
          reported_tokens = usage.value("completion_tokens", reported_tokens);
          if (count_prompt_from_server) result.prompt_tokens = usage.value("prompt_tokens", result.prompt_tokens);
        }
        if (event.contains("choices") && !event["choices"].empty()) {
          const Json& choice = event["choices"][0];
          const bool has_text =
              choice.contains("text") && choice["text"].is_string() && !choice["text"].get<std::string>().empty();
          if (has_text || chunks == 0 || choice.value("finish_reason", Json()).is_null()) on_token_event(now, 1);
        }
      }
    };
    call.read_body([&](const std::string& piece) {
      const Clock::time_point now = Clock::now();
      body += piece;
      if (status != 200 || !options.stream) return;
      size_t line_end;
      while ((line_end = body.find('\n')) != std::string::npos) {
        std::string line = body.substr(0, line_end);
        body.erase(0, line_end + 1);
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if (line.rfind("data:", 0) != 0) continue;
        std::string data = line.substr(5);
        if (!data.empty() && data.front() == ' ') data.erase(0, 1);
        on_event(data, now);
      }
    });
    const Clock::time_point end = Clock::now();
    FATHOM_CHECK(status == 200, "HTTP " << status << ": " << body.substr(0, 300));
    if (!options.stream) {
      Json response = Json::parse(body);
      result.ttft_s = seconds_between(result.start, end);
      if (options.backend == "fathom") {
        reported_tokens = response.at("meta_info").value("completion_tokens", int64_t{0});
        if (count_prompt_from_server) result.prompt_tokens = response["meta_info"].value("prompt_tokens", int64_t{0});
      } else {
        reported_tokens = response.at("usage").value("completion_tokens", int64_t{0});
        if (count_prompt_from_server) result.prompt_tokens = response["usage"].value("prompt_tokens", int64_t{0});
      }
      chunks = 1;
    } else {
      FATHOM_CHECK(done, "stream ended without data: [DONE]");
      FATHOM_CHECK(chunks > 0, "stream carried no tokens");
    }
    result.output_tokens = reported_tokens >= 0 ? reported_tokens : chunks;
    result.latency_s = seconds_between(result.start, end);
    result.success = true;
  } catch (const std::exception& error) {
    result.success = false;
    result.error = error.what();
    result.latency_s = seconds_between(result.start, Clock::now());
  }
  return result;
}

// The server's vocabulary size from GET /get_model_info ("vocab_size", reported by fathom serve), so that random
// token ids stay in range without a local tokenizer. Throws, suggesting --tokenizer, when the server does not say.
int32_t server_vocab_size(const Endpoint& endpoint) {
  const std::string where = "http://" + endpoint.host + ":" + endpoint.port + endpoint.prefix + "/get_model_info";
  const std::string hint = "; pass --tokenizer DIR (the served model's tokenizer) to draw prompt token ids locally";
  int status = 0;
  std::string body;
  try {
    HttpCall call(endpoint, "GET", "/get_model_info", "");
    status = call.read_head();
    call.read_body([&](const std::string& piece) { body += piece; });
  } catch (const std::exception& error) {
    FATHOM_FAIL("cannot ask the server for its vocabulary size (GET " << where << "): " << error.what()
                                                                         << "; is the server running there?");
  }
  FATHOM_CHECK(status == 200, "GET " << where << " answered HTTP " << status << ": " << body.substr(0, 300) << hint);
  Json info;
  try {
    info = Json::parse(body);
  } catch (const std::exception& error) {
    FATHOM_FAIL("GET " << where << " answered a body that is not JSON (" << error.what() << ")" << hint);
  }
  const bool has_vocab = info.is_object() && info.contains("vocab_size") && info["vocab_size"].is_number_integer();
  FATHOM_CHECK(has_vocab, "GET " << where << " does not report an integer \"vocab_size\"" << hint);
  const int64_t vocab = info["vocab_size"].get<int64_t>();
  FATHOM_CHECK(vocab > 0 && vocab <= INT32_MAX, "GET " << where << " reports vocab_size " << vocab << hint);
  return static_cast<int32_t>(vocab);
}

// ---- dataset ----

constexpr const char* kWords[] = {
    "the",   "of",    "and",    "to",     "in",     "is",     "was",   "for",    "that",  "with",  "as",    "on",
    "by",    "at",    "from",   "his",    "an",     "were",   "are",   "which",  "this",  "be",    "or",    "has",
    "had",   "first", "one",    "their",  "its",    "new",    "after", "who",    "they",  "have",  "her",   "she",
    "two",   "been",  "other",  "when",   "there",  "all",    "during", "into",  "school", "time", "may",   "years",
    "more",  "most",  "only",   "over",   "city",   "some",   "world", "would",  "where", "later", "up",    "such",
    "used",  "many",  "can",    "state",  "about",  "national", "out", "known",  "university", "united", "then", "made",
    "river", "light", "market", "garden", "number", "system", "water", "family", "music", "north", "south", "house"};

// Token ids come from [0, tok->vocab_size()) less special tokens, or from [0, server_vocab) without a tokenizer.
std::vector<Prompt> random_prompts(int64_t count, int64_t input_len, int64_t output_len, double range_ratio,
                                   uint64_t seed, bool want_text, const tokenizer::Tokenizer* tok,
                                   int32_t server_vocab) {
  std::mt19937_64 rng(seed);
  auto length = [&](int64_t full) {
    const int64_t low = std::max<int64_t>(1, static_cast<int64_t>(std::floor(static_cast<double>(full) * range_ratio)));
    return std::uniform_int_distribution<int64_t>(std::min(low, full), full)(rng);
  };
  // Ids of ordinary tokens (no special / added tokens), so that the decoded text re-encodes to about as many.
  const int32_t vocab = tok ? tok->vocab_size() : server_vocab;
  FATHOM_CHECK(vocab > 0 || want_text, "random token ids need a vocabulary size (from --tokenizer or the server)");
  std::uniform_int_distribution<int32_t> token(0, std::max<int32_t>(vocab, 1) - 1);
  auto ordinary_id = [&] {
    for (;;) {
      const int32_t id = token(rng);
      if (!tok || !tok->is_special(id)) return id;
    }
  };
  std::vector<Prompt> prompts(static_cast<size_t>(count));
  for (Prompt& prompt : prompts) {
    prompt.input_len = length(input_len);
    prompt.output_len = length(output_len);
  }
  for (Prompt& prompt : prompts) {
    if (!want_text) {
      for (int64_t i = 0; i < prompt.input_len; ++i) prompt.ids.push_back(ordinary_id());
    } else if (tok) {
      std::vector<int32_t> ids;
      for (int64_t i = 0; i < prompt.input_len; ++i) ids.push_back(ordinary_id());
      prompt.text = tok->decode(ids, true);
    } else {
      std::string text;
      std::uniform_int_distribution<size_t> word(0, std::size(kWords) - 1);
      for (int64_t i = 0; i < prompt.input_len; ++i) {
        if (i) text += ' ';
        text += kWords[word(rng)];
      }
      prompt.text = std::move(text);
    }
  }
  return prompts;
}

// One JSON value per non-empty line: a string (text prompt), an array of token ids, or
// {"prompt": string | [ids], "output_len": N}.
std::vector<Prompt> file_prompts(const std::string& path, int64_t default_output_len, const tokenizer::Tokenizer* tok) {
  std::ifstream in(path);
  FATHOM_CHECK(in, "cannot open --prompts-file " << path);
  std::vector<Prompt> prompts;
  int line_number = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_number;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    Json value;
    try {
      value = Json::parse(line);
    } catch (const std::exception& error) {
      FATHOM_FAIL(path << ":" << line_number << ": not JSON: " << error.what());
    }
    Prompt prompt;
    prompt.output_len = default_output_len;
    Json body = value;
    if (value.is_object()) {
      FATHOM_CHECK(value.contains("prompt"), path << ":" << line_number << ": object without \"prompt\"");
      body = value["prompt"];
      prompt.output_len = value.value("output_len", default_output_len);
    }
    if (body.is_string()) {
      prompt.text = body.get<std::string>();
      prompt.input_len = tok ? static_cast<int64_t>(tok->encode(*prompt.text, false).size()) : 0;
    } else if (body.is_array() && !body.empty()) {
      prompt.ids = body.get<std::vector<int32_t>>();
      prompt.input_len = static_cast<int64_t>(prompt.ids.size());
    } else {
      FATHOM_FAIL(path << ":" << line_number << ": expected a string, an array of token ids, or {\"prompt\": ...}");
    }
    FATHOM_CHECK(prompt.output_len > 0, path << ":" << line_number << ": output_len must be positive");
    prompts.push_back(std::move(prompt));
  }
  FATHOM_CHECK(!prompts.empty(), "--prompts-file " << path << " has no prompts");
  return prompts;
}

// ---- statistics ----

double mean(const std::vector<double>& values) {
  if (values.empty()) return 0;
  double sum = 0;
  for (double v : values) sum += v;
  return sum / static_cast<double>(values.size());
}

// Population standard deviation (numpy's np.std default, ddof 0).
double standard_deviation(const std::vector<double>& values) {
  if (values.empty()) return 0;
  const double average = mean(values);
  double squares = 0;
  for (double v : values) squares += (v - average) * (v - average);
  return std::sqrt(squares / static_cast<double>(values.size()));
}

double maximum(const std::vector<double>& values) {
  return values.empty() ? 0 : *std::max_element(values.begin(), values.end());
}

// Linear interpolation between closest ranks (numpy's default).
double percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const double rank = p / 100.0 * static_cast<double>(values.size() - 1);
  const size_t low = static_cast<size_t>(std::floor(rank));
  const size_t high = std::min(low + 1, values.size() - 1);
  return values[low] + (values[high] - values[low]) * (rank - static_cast<double>(low));
}

std::vector<double> to_ms(const std::vector<double>& seconds) {
  std::vector<double> ms;
  for (double s : seconds) ms.push_back(s * 1000.0);
  return ms;
}

class Progress {
 public:
  explicit Progress(int64_t total) : total_(total) { draw(); }
  void advance(bool failed) {
    std::lock_guard<std::mutex> lock(mutex_);
    ++done_;
    failed_ += failed;
    draw();
  }
  void finish() { std::fprintf(stderr, "\n"); }

 private:
  void draw() {
    constexpr int kWidth = 40;
    const int filled = total_ ? static_cast<int>(kWidth * done_ / total_) : kWidth;
    std::string bar(static_cast<size_t>(filled), '#');
    bar.resize(kWidth, '.');
    std::fprintf(stderr, "\r[%s] %lld/%lld requests%s", bar.c_str(), static_cast<long long>(done_),
                 static_cast<long long>(total_), failed_ ? (" (" + std::to_string(failed_) + " failed)").c_str() : "");
    std::fflush(stderr);
  }
  std::mutex mutex_;
  int64_t total_;
  int64_t done_ = 0;
  int64_t failed_ = 0;
};

void print_row(const char* name, const std::string& value) { std::printf("%-40s %-10s\n", name, value.c_str()); }
void print_row(const char* name, double value) {
  char text[64];
  std::snprintf(text, sizeof(text), "%.2f", value);
  print_row(name, std::string(text));
}
void print_rule(const char* title) {
  const std::string text = title;
  const size_t width = 50;
  const size_t left = (width - std::min(width, text.size())) / 2;
  std::printf("%s%s%s\n", std::string(left, '-').c_str(), text.c_str(),
              std::string(width - left - std::min(width, text.size()), '-').c_str());
}

}  // namespace

int run_bench_serving(const Args& raw_args) {
  // SGLang's bench_serving spells the lengths --random-input-len / --random-output-len.
  const Args renamed =
      rename_flags(raw_args, {{"--random-input-len", "--random-input"}, {"--random-output-len", "--random-output"}});
  CliArgs args(renamed,
               {"--backend", "--host", "--port", "--base-url", "--model", "--dataset-name", "--random-input",
                "--random-output", "--random-range-ratio", "--num-prompts", "--request-rate", "--max-concurrency",
                "--seed", "--prompts-file", "--output-file", "--tokenizer"},
               {"--disable-stream"});
  Options options;
  options.backend = args.get_or("--backend", "fathom");
  FATHOM_CHECK(options.backend == "fathom" || options.backend == "openai",
               "--backend " << options.backend << ": expected fathom or openai");
  if (auto base_url = args.get("--base-url")) {
    options.endpoint = parse_base_url(*base_url);
  } else {
    options.endpoint.host = args.get_or("--host", "127.0.0.1");
    options.endpoint.port = checked_port(args.get_or("--port", "30000"), "--port");
  }
  options.model = args.get("--model");
  options.stream = !args.has("--disable-stream");
  const std::string dataset = args.get_or("--dataset-name", "random");
  FATHOM_CHECK(dataset == "random",
               "--dataset-name " << dataset << ": only 'random' is supported (or use --prompts-file)");
  const int64_t input_len = args.get_int_or("--random-input", 1024);
  const int64_t output_len = args.get_int_or("--random-output", 1024);
  const double range_ratio = args.get_double_or("--random-range-ratio", 0.0);
  const int64_t num_prompts = args.get_int_or("--num-prompts", 1000);
  const double request_rate = args.get_double_or("--request-rate", INFINITY);  // strtod also reads "inf"
  const int64_t max_concurrency = args.get_int_or("--max-concurrency", 0);
  const uint64_t seed = static_cast<uint64_t>(args.get_int_or("--seed", 1));
  FATHOM_CHECK(input_len > 0 && output_len > 0, "--random-input and --random-output must be positive");
  FATHOM_CHECK(range_ratio >= 0 && range_ratio <= 1, "--random-range-ratio must be in [0, 1]");
  FATHOM_CHECK(num_prompts > 0, "--num-prompts must be positive");
  FATHOM_CHECK(request_rate > 0,
               "--request-rate must be positive or inf, got '" << args.get_or("--request-rate", "") << "'");
  FATHOM_CHECK(max_concurrency >= 0, "--max-concurrency must be positive");

  std::optional<std::ofstream> output_file;  // opened now so a bad path fails before the benchmark, not after it
  if (auto path = args.get("--output-file")) output_file = open_output_file(*path, "--output-file", /*append=*/true);

  std::optional<tokenizer::Tokenizer> tok;
  if (auto dir = args.get("--tokenizer")) tok = tokenizer::Tokenizer::load(*dir);
  std::vector<Prompt> prompts;
  if (auto file = args.get("--prompts-file")) {
    prompts = file_prompts(*file, output_len, tok ? &*tok : nullptr);
  } else {
    const bool want_text = options.backend == "openai";
    // Ids outside the served model's vocabulary fail every request with HTTP 400: ask the server when no tokenizer.
    const int32_t server_vocab = !want_text && !tok ? server_vocab_size(options.endpoint) : 0;
    prompts = random_prompts(num_prompts, input_len, output_len, range_ratio, seed, want_text, tok ? &*tok : nullptr,
                             server_vocab);
  }
  const int64_t total = static_cast<int64_t>(prompts.size());

  std::printf("#Input tokens: %lld\n#Output tokens: %lld\n", static_cast<long long>([&] {
                int64_t n = 0;
                for (const Prompt& p : prompts) n += p.input_len;
                return n;
              }()),
              static_cast<long long>([&] {
                int64_t n = 0;
                for (const Prompt& p : prompts) n += p.output_len;
                return n;
              }()));
  std::printf("Starting warmup with 1 sequence...\n");
  std::fflush(stdout);
  {
    Prompt warmup = prompts.front();
    warmup.output_len = std::min<int64_t>(warmup.output_len, 16);
    RequestResult result = send_request(options, warmup);
    // As SGLang's bench_serving: a failing warmup means a wrong endpoint, model or prompt, so measuring is pointless.
    const char* path = options.backend == "fathom" ? "/generate" : "/v1/completions";
    FATHOM_CHECK(result.success, "warmup request to http://" << options.endpoint.host << ":" << options.endpoint.port
                                     << options.endpoint.prefix << path << " failed: " << result.error);
    std::printf("Warmup completed. Starting main benchmark run...\n");
    std::fflush(stdout);
  }

  // Arrival times (Poisson process, or all at once), then a worker pool capped by the concurrency limit:
  // requests wait in arrival order for a free worker, as SGLang's semaphore does.
  std::vector<double> arrival_s(static_cast<size_t>(total), 0.0);
  if (std::isfinite(request_rate)) {
    std::mt19937_64 rng(seed + 7);
    std::exponential_distribution<double> gap(request_rate);
    double t = 0;
    for (double& a : arrival_s) {
      a = t;
      t += gap(rng);
    }
  }
  const int64_t workers =
      std::min<int64_t>(total, max_concurrency > 0 ? max_concurrency : std::min<int64_t>(total, 4096));
  std::vector<RequestResult> results(static_cast<size_t>(total));
  std::mutex queue_mutex;
  std::condition_variable queue_ready;
  std::deque<int64_t> queue;
  bool all_queued = false;
  Progress progress(total);
  const Clock::time_point bench_start = Clock::now();
  std::vector<std::thread> pool;
  auto worker = [&] {
    for (;;) {
      int64_t index;
      {
        std::unique_lock<std::mutex> lock(queue_mutex);
        queue_ready.wait(lock, [&] { return !queue.empty() || all_queued; });
        if (queue.empty()) return;
        index = queue.front();
        queue.pop_front();
      }
      results[static_cast<size_t>(index)] = send_request(options, prompts[static_cast<size_t>(index)]);
      progress.advance(!results[static_cast<size_t>(index)].success);
    }
  };
  for (int64_t w = 0; w < workers; ++w) {
    try {
      pool.emplace_back(worker);
    } catch (const std::system_error& error) {  // a thread or process limit: stop the started workers, then report
      {
        std::lock_guard<std::mutex> lock(queue_mutex);
        all_queued = true;
      }
      queue_ready.notify_all();
      for (std::thread& thread : pool) thread.join();
      FATHOM_FAIL("bench-serving: could not start worker thread " << w + 1 << " of " << workers << " ("
                                                                   << error.what() << "); lower --max-concurrency");
    }
  }
  for (int64_t i = 0; i < total; ++i) {
    std::this_thread::sleep_until(bench_start + std::chrono::duration_cast<Clock::duration>(
                                                    std::chrono::duration<double>(arrival_s[static_cast<size_t>(i)])));
    std::lock_guard<std::mutex> lock(queue_mutex);
    queue.push_back(i);
    queue_ready.notify_one();
  }
  {
    std::lock_guard<std::mutex> lock(queue_mutex);
    all_queued = true;
  }
  queue_ready.notify_all();
  for (std::thread& thread : pool) thread.join();
  const double duration = seconds_between(bench_start, Clock::now());
  progress.finish();

  // ---- metrics ----
  int64_t completed = 0, failed = 0, total_input = 0, total_output = 0;
  std::vector<double> e2e, ttft, tpot, itl;
  std::string first_error;
  for (const RequestResult& r : results) {
    if (!r.success) {
      ++failed;
      if (first_error.empty()) first_error = r.error;
      continue;
    }
    ++completed;
    total_input += r.prompt_tokens;
    total_output += r.output_tokens;
    e2e.push_back(r.latency_s);
    ttft.push_back(r.ttft_s);
    if (r.output_tokens > 1) tpot.push_back((r.latency_s - r.ttft_s) / static_cast<double>(r.output_tokens - 1));
    itl.insert(itl.end(), r.itl_s.begin(), r.itl_s.end());
  }
  e2e = to_ms(e2e);
  ttft = to_ms(ttft);
  tpot = to_ms(tpot);
  itl = to_ms(itl);
  double latency_sum_s = 0;
  for (double ms : e2e) latency_sum_s += ms / 1000.0;
  const double safe_duration = duration > 0 ? duration : 1e-9;

  Json metrics = {
      {"backend", options.backend},
      {"dataset_name", args.has("--prompts-file") ? "file" : dataset},
      {"request_rate", std::isfinite(request_rate) ? Json(request_rate) : Json("inf")},
      {"max_concurrency", max_concurrency > 0 ? Json(max_concurrency) : Json(nullptr)},
      {"random_input_len", input_len},
      {"random_output_len", output_len},
      {"random_range_ratio", range_ratio},
      {"num_prompts", total},
      {"stream", options.stream},
      {"duration", duration},
      {"completed", completed},
      {"failed", failed},
      {"total_input_tokens", total_input},
      {"total_output_tokens", total_output},
      {"request_throughput", static_cast<double>(completed) / safe_duration},
      {"input_throughput", static_cast<double>(total_input) / safe_duration},
      {"output_throughput", static_cast<double>(total_output) / safe_duration},
      {"total_throughput", static_cast<double>(total_input + total_output) / safe_duration},
      {"concurrency", latency_sum_s / safe_duration},
      {"mean_e2e_latency_ms", mean(e2e)},
      {"median_e2e_latency_ms", percentile(e2e, 50)},
      {"std_e2e_latency_ms", standard_deviation(e2e)},
      {"p99_e2e_latency_ms", percentile(e2e, 99)},
      {"mean_ttft_ms", mean(ttft)},
      {"median_ttft_ms", percentile(ttft, 50)},
      {"std_ttft_ms", standard_deviation(ttft)},
      {"p99_ttft_ms", percentile(ttft, 99)},
      {"mean_tpot_ms", mean(tpot)},
      {"median_tpot_ms", percentile(tpot, 50)},
      {"std_tpot_ms", standard_deviation(tpot)},
      {"p99_tpot_ms", percentile(tpot, 99)},
      {"mean_itl_ms", mean(itl)},
      {"median_itl_ms", percentile(itl, 50)},
      {"std_itl_ms", standard_deviation(itl)},
      {"p95_itl_ms", percentile(itl, 95)},
      {"p99_itl_ms", percentile(itl, 99)},
      {"max_itl_ms", maximum(itl)},
  };

  std::printf("\n%s\n", "============ Serving Benchmark Result ============");
  print_row("Backend:", options.backend);
  if (std::isfinite(request_rate)) print_row("Traffic request rate:", request_rate);
  else print_row("Traffic request rate:", std::string("inf"));
  print_row("Max request concurrency:", max_concurrency > 0 ? std::to_string(max_concurrency) : std::string("not set"));
  print_row("Successful requests:", std::to_string(completed));
  print_row("Failed requests:", std::to_string(failed));
  print_row("Benchmark duration (s):", duration);
  print_row("Total input tokens:", std::to_string(total_input));
  print_row("Total generated tokens:", std::to_string(total_output));
  print_row("Request throughput (req/s):", metrics["request_throughput"].get<double>());
  print_row("Input token throughput (tok/s):", metrics["input_throughput"].get<double>());
  print_row("Output token throughput (tok/s):", metrics["output_throughput"].get<double>());
  print_row("Total token throughput (tok/s):", metrics["total_throughput"].get<double>());
  print_row("Concurrency:", metrics["concurrency"].get<double>());
  print_rule("End-to-End Latency");
  print_row("Mean E2E Latency (ms):", metrics["mean_e2e_latency_ms"].get<double>());
  print_row("Median E2E Latency (ms):", metrics["median_e2e_latency_ms"].get<double>());
  print_rule("Time to First Token");
  print_row("Mean TTFT (ms):", metrics["mean_ttft_ms"].get<double>());
  print_row("Median TTFT (ms):", metrics["median_ttft_ms"].get<double>());
  print_row("P99 TTFT (ms):", metrics["p99_ttft_ms"].get<double>());
  print_rule("Time per Output Token (excl. 1st token)");
  print_row("Mean TPOT (ms):", metrics["mean_tpot_ms"].get<double>());
  print_row("Median TPOT (ms):", metrics["median_tpot_ms"].get<double>());
  print_row("P99 TPOT (ms):", metrics["p99_tpot_ms"].get<double>());
  print_rule("Inter-Token Latency");
  print_row("Mean ITL (ms):", metrics["mean_itl_ms"].get<double>());
  print_row("Median ITL (ms):", metrics["median_itl_ms"].get<double>());
  print_row("P95 ITL (ms):", metrics["p95_itl_ms"].get<double>());
  print_row("P99 ITL (ms):", metrics["p99_itl_ms"].get<double>());
  print_row("Max ITL (ms):", metrics["max_itl_ms"].get<double>());
  std::printf("%s\n", "==================================================");
  if (failed > 0) std::printf("First failure: %s\n", first_error.c_str());
  std::fflush(stdout);

  if (output_file) {
    *output_file << metrics.dump() << "\n";
    finish_output_file(*output_file, *args.get("--output-file"), "--output-file");
  }
  if (completed == 0) {
    std::fprintf(stderr, "fathom bench-serving: error: all %lld requests failed; first failure: %s\n",
                 static_cast<long long>(total), first_error.c_str());
    return 1;
  }
  return 0;
}

}  // namespace fathom::app
