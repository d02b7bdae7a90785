#pragma once
// Blocking loopback HTTP/1.1 client helpers for the server tests: raw request bytes in, parsed responses out
// (Content-Length, chunked, or close-delimited bodies), plus SSE event splitting.
#include <chrono>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace fathom::testing {

struct TestResponse {
  int status = 0;
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;
  bool chunked = false;
  nlohmann::json json() const { return nlohmann::json::parse(body); }
};

class TestConnection {
 public:
  explicit TestConnection(int port);
  ~TestConnection();
  TestConnection(const TestConnection&) = delete;
  TestConnection& operator=(const TestConnection&) = delete;

  void send(const std::string& bytes);
  // Reads one response; throws on timeout or when the server closed before a complete response.
  TestResponse read_response(std::chrono::milliseconds timeout = std::chrono::seconds(10));
  // Reads until at least `needle` appears in what was received after the headers; returns everything so far.
  std::string read_until(const std::string& needle, std::chrono::milliseconds timeout = std::chrono::seconds(10));
  // True when the server closes the connection within the timeout (pending data is discarded).
  bool wait_closed(std::chrono::milliseconds timeout);
  void close();
  int fd() const { return fd_; }

 private:
  bool fill(std::chrono::steady_clock::time_point deadline);  // false on EOF
  int fd_ = -1;
  std::string buffer_;
};

// "POST /path HTTP/1.1" with Host, Content-Length (when body or POST) and the extra header lines.
std::string build_request(const std::string& method, const std::string& path, const std::string& body = "",
                          const std::vector<std::string>& extra_headers = {});

// One request on a fresh connection.
TestResponse http_call(int port, const std::string& method, const std::string& path, const std::string& body = "",
                       const std::vector<std::string>& extra_headers = {});

// The JSON payloads of the "data:" events; "[DONE]" becomes the string "[DONE]".
std::vector<nlohmann::json> sse_events(const std::string& body);

// Decodes a chunked body (for raw captures); throws on malformed framing.
std::string dechunk(const std::string& chunked);

}  // namespace fathom::testing
