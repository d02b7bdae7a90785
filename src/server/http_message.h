#pragma once
// HTTP/1.1 request and response values, the server's size limits, and response serialization.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace fathom::server {

struct HttpLimits {
  size_t max_header_bytes = 64 * 1024;        // request line + headers; larger -> 431
  size_t max_body_bytes = 32 * 1024 * 1024;   // decoded body; larger -> 413
  size_t max_header_count = 128;              // more -> 431
};

using HttpHeaders = std::vector<std::pair<std::string, std::string>>;  // request names are lower-cased

struct HttpRequest {
  std::string method;   // "GET", "POST", ...
  std::string target;   // as sent: "/v1/models?x=1"
  std::string path;     // "/v1/models"
  std::string query;    // "x=1"
  int version_minor = 1;  // HTTP/1.<minor>
  HttpHeaders headers;
  std::string body;

  // First header with this (lower-case) name.
  std::optional<std::string_view> header(std::string_view lower_name) const;
  // HTTP/1.1 default keep-alive unless "Connection: close"; HTTP/1.0 only with "Connection: keep-alive".
  bool wants_keep_alive() const;
};

struct HttpResponse {
  int status = 200;
  HttpHeaders headers;  // Content-Length / Connection / Date are added by serialization
  std::string body;

  static HttpResponse json(int status, std::string body);
  static HttpResponse text(int status, std::string body);
};

std::string_view http_status_text(int status);

// "Tue, 15 Nov 1994 08:12:31 GMT" for now.
std::string http_date_now();

// Status line + headers (+ body unless head_only). `keep_alive` selects the Connection header.
std::string serialize_response(const HttpResponse& response, int version_minor, bool keep_alive, bool head_only);

// Head of a streamed response: chunked for HTTP/1.1, close-delimited (no length) for HTTP/1.0.
std::string serialize_stream_head(int status, const HttpHeaders& headers, int version_minor, bool keep_alive);
// One chunk of a chunked body (empty data produces nothing: the empty chunk ends the body).
void append_chunk(std::string& out, std::string_view data);
inline constexpr std::string_view kLastChunk = "0\r\n\r\n";

// Case-insensitive ASCII comparison for header names and tokens.
bool equals_ignore_case(std::string_view a, std::string_view b);

}  // namespace fathom::server
