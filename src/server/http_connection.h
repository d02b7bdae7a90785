#pragma once
// One client TCP connection: non-blocking reads into the request parser, keep-alive and pipelining (one
// exchange at a time, later requests wait in the buffer), buffered non-blocking writes, timeouts, and
// disconnect detection (which notifies the exchange in flight).
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <memory>
#include <string>
#include <string_view>

#include "server/access_log.h"
#include "server/http_message.h"
#include "server/http_request_parser.h"

namespace fathom::server {

class EventLoop;
class HttpExchange;

struct HttpConnectionConfig {
  HttpLimits limits;
  std::chrono::milliseconds keep_alive_timeout{30'000};    // idle between requests
  std::chrono::milliseconds request_read_timeout{60'000};  // first byte of a request to its last
  std::chrono::milliseconds write_stall_timeout{120'000};  // unsent output that makes no progress
  std::chrono::milliseconds linger_timeout{2'000};         // after our last response: wait for the client's FIN
  size_t max_output_buffer_bytes = 16u << 20;              // unread streamed output before we give up on the client
  size_t max_pipelined_bytes = 1u << 20;                   // buffered input while an exchange is in flight
};

class HttpConnection {
 public:
  using Clock = std::chrono::steady_clock;
  struct Hooks {
    std::function<void(std::shared_ptr<HttpExchange>)> on_request;
    // The connection's own error answers (protocol errors, timeouts); `partial`: the request as far as it parsed
    // (its headers are there once complete, e.g. for a 413).
    std::function<HttpResponse(int status, const std::string& message, const HttpRequest& partial)> make_error_response;
    std::function<void(uint64_t connection_id)> on_closed;  // the owner destroys the connection later (not inside this call)
    // Optional: asked once a request's headers are in and it expects 100-continue; a response refuses it before the
    // client sends its body (the connection then closes), nullopt lets it continue.
    std::function<std::optional<HttpResponse>(const HttpRequest& headers)> refuse_before_body;
    // Optional: each exchange's record when it finished or its client left, and each request answered by the
    // connection itself (a protocol error, a timeout, a refused body), for the access log.
    std::function<void(const ExchangeRecord&)> on_exchange_done;
  };

  HttpConnection(EventLoop& loop, int fd, uint64_t id, std::string peer, const HttpConnectionConfig& config, const Hooks& hooks);
  ~HttpConnection();
  HttpConnection(const HttpConnection&) = delete;
  HttpConnection& operator=(const HttpConnection&) = delete;

  void start();
  // Closes the socket now; an unfinished exchange is told through its close handler. Idempotent.
  void close();
  // Finish the exchange in flight (its response says Connection: close), then close; closes now when idle.
  void set_draining();
  void check_timeouts(Clock::time_point now);

  uint64_t id() const { return id_; }
  bool is_closed() const { return fd_ < 0; }
  bool has_exchange() const { return exchange_ != nullptr; }
  bool output_pending() const { return out_offset_ < out_.size(); }

  // Used by HttpExchange.
  void write_response(const HttpResponse& response);
  bool write_stream_head(int status, const HttpHeaders& headers);
  bool write_stream_data(std::string_view data);
  void write_stream_end();

 private:
  void on_io(uint32_t events);
  void read_available();
  void process_input();
  void flush_output();
  void update_interest();
  void finish_exchange();
  void reply_and_close(const HttpResponse& response);  // answers without reading further input, then closes
  void reply_protocol_error(int status, const std::string& message);
  void begin_lingering_close();

  EventLoop& loop_;
  int fd_;
  uint64_t id_;
  std::string peer_;
  const HttpConnectionConfig& config_;
  const Hooks& hooks_;
  HttpRequestParser parser_;

  std::string in_;
  size_t in_offset_ = 0;
  std::string out_;
  size_t out_offset_ = 0;
  uint32_t interest_ = 0;

  std::shared_ptr<HttpExchange> exchange_;
  bool exchange_keep_alive_ = true;
  bool exchange_head_only_ = false;
  int exchange_version_minor_ = 1;
  bool exchange_done_ = false;       // response fully queued; waiting only for the flush
  bool sent_continue_ = false;
  bool close_after_flush_ = false;
  bool draining_ = false;
  bool peer_closed_ = false;
  bool processing_ = false;          // inside process_input (avoids recursion on synchronous responses)
  // Our side is shut down after the last response; unread client bytes are discarded until the client closes,
  // so that closing does not reset the connection before the client read that response (e.g. a 413).
  bool lingering_ = false;
  Clock::time_point linger_started_;

  Clock::time_point last_activity_;
  Clock::time_point request_started_;
  Clock::time_point last_write_progress_;
};

}  // namespace fathom::server
