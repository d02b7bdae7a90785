#pragma once
// Incremental HTTP/1.1 request parser: request line, headers, Content-Length or chunked bodies, with size
// limits. Bytes may arrive in any split; one request is consumed at a time so pipelined requests stay in
// the caller's buffer. Protocol errors carry the HTTP status to answer with (400, 413, 431, 501, 505).
#include <string>
#include <string_view>

#include "server/http_message.h"

namespace fathom::server {

class HttpRequestParser {
 public:
  enum class Status { kNeedMore, kComplete, kError };

  explicit HttpRequestParser(const HttpLimits& limits) : limits_(limits) {}

  // Consumes bytes of the current request and returns how many were used; stops at the end of one request
  // (status kComplete) or at an error (status kError). Call take_request() before feeding the next request.
  size_t feed(std::string_view data);

  Status status() const { return status_; }
  bool started() const { return state_ != State::kStart || !line_.empty(); }
  bool headers_done() const { return state_ > State::kHeaders; }
  // The client sent "Expect: 100-continue" and the body has not started yet.
  bool expects_continue() const { return expect_continue_; }
  const HttpRequest& request() const { return request_; }

  // The finished request; resets the parser for the next one.
  HttpRequest take_request();

  int error_status() const { return error_status_; }
  const std::string& error_message() const { return error_message_; }

 private:
  enum class State { kStart, kHeaders, kBodyLength, kChunkSize, kChunkData, kChunkDataEnd, kTrailers, kDone, kFailed };

  void fail(int status, std::string message);
  bool parse_head(std::string_view head);  // request line + header lines, without the blank line
  bool parse_request_line(std::string_view line);
  bool parse_header_line(std::string_view line);
  bool finish_headers();
  // Moves one line (without CR LF) out of data into line_out; false when more bytes are needed.
  bool take_line(std::string_view data, size_t& position, std::string& line_out, size_t max_line_bytes);

  HttpLimits limits_;
  State state_ = State::kStart;
  Status status_ = Status::kNeedMore;
  HttpRequest request_;
  std::string head_;         // raw request line + headers being collected
  std::string line_;         // partial chunk-size / trailer line
  size_t trailer_bytes_ = 0;
  size_t body_remaining_ = 0;  // Content-Length left, or bytes left in the current chunk
  bool expect_continue_ = false;
  bool chunked_ = false;
  int error_status_ = 0;
  std::string error_message_;
};

}  // namespace fathom::server
