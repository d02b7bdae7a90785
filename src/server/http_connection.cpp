#include "server/http_connection.h"

#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

#include "server/event_loop.h"
#include "server/http_exchange.h"

namespace fathom::server {

namespace {
constexpr size_t kReadChunkBytes = 64 * 1024;
constexpr size_t kMaxReadPerWakeupBytes = 1024 * 1024;  // fairness between connections
constexpr size_t kCompactThresholdBytes = 256 * 1024;
}  // namespace

HttpConnection::HttpConnection(EventLoop& loop, int fd, uint64_t id, std::string peer, const HttpConnectionConfig& config,
                               const Hooks& hooks)
    : loop_(loop), fd_(fd), id_(id), peer_(std::move(peer)), config_(config), hooks_(hooks), parser_(config.limits) {
  last_activity_ = request_started_ = last_write_progress_ = Clock::now();
}

HttpConnection::~HttpConnection() {
  if (fd_ >= 0) {
    loop_.unwatch(fd_);
    ::close(fd_);
    fd_ = -1;
  }
  if (exchange_) exchange_->detach();
}

void HttpConnection::start() {
  interest_ = EPOLLIN | EPOLLRDHUP;
  loop_.watch(fd_, interest_, [this](uint32_t events) { on_io(events); });
}

void HttpConnection::close() {
  if (fd_ < 0) return;
  loop_.unwatch(fd_);
  ::close(fd_);
  fd_ = -1;
  out_.clear();
  out_offset_ = 0;
  std::shared_ptr<HttpExchange> exchange = std::move(exchange_);
  exchange_ = nullptr;
  if (exchange) exchange->detach();
  hooks_.on_closed(id_);
}

void HttpConnection::set_draining() {
  draining_ = true;
  if (fd_ < 0 || exchange_ || parser_.started()) return;
  if (output_pending()) {
    close_after_flush_ = true;
  } else {
    close();
  }
}

void HttpConnection::on_io(uint32_t events) {
  if (events & EPOLLERR) {
    close();
    return;
  }
  if (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP)) read_available();
  // The peer will send nothing more (even if a full input buffer kept us from reading up to its FIN).
  if (fd_ >= 0 && (events & (EPOLLRDHUP | EPOLLHUP))) peer_closed_ = true;
  if (fd_ >= 0 && (events & EPOLLOUT)) flush_output();
  if (fd_ >= 0) process_input();
  if (fd_ >= 0 && peer_closed_) {
    // The client is gone (or half-closed): an unfinished exchange is abandoned; finished output is still flushed.
    if (exchange_ || !output_pending()) {
      close();
      return;
    }
    close_after_flush_ = true;
  }
}

void HttpConnection::read_available() {
  char buffer[kReadChunkBytes];
  size_t total = 0;
  while (fd_ >= 0 && total < kMaxReadPerWakeupBytes) {
    if (exchange_ && in_.size() - in_offset_ >= config_.max_pipelined_bytes) break;
    ssize_t received = ::recv(fd_, buffer, sizeof(buffer), 0);
    if (received > 0 && lingering_) continue;  // discarded
    if (received > 0) {
      in_.append(buffer, static_cast<size_t>(received));
      total += static_cast<size_t>(received);
      last_activity_ = Clock::now();
      continue;
    }
    if (received == 0) {
      peer_closed_ = true;
      return;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return;
    close();  // ECONNRESET and friends
    return;
  }
}

void HttpConnection::process_input() {
  if (processing_) return;
  processing_ = true;
  while (fd_ >= 0 && !exchange_ && !close_after_flush_ && in_offset_ < in_.size()) {
    if (!parser_.started()) request_started_ = Clock::now();
    size_t used = parser_.feed(std::string_view(in_).substr(in_offset_));
    in_offset_ += used;
    if (in_offset_ == in_.size()) {
      in_.clear();
      in_offset_ = 0;
    } else if (in_offset_ > kCompactThresholdBytes) {
      in_.erase(0, in_offset_);
      in_offset_ = 0;
    }
    if (parser_.status() == HttpRequestParser::Status::kError) {
      reply_protocol_error(parser_.error_status(), parser_.error_message());
      break;
    }
    if (parser_.status() == HttpRequestParser::Status::kNeedMore) {
      if (parser_.headers_done() && parser_.expects_continue() && !sent_continue_ && parser_.request().version_minor == 1) {
        if (hooks_.refuse_before_body) {
          if (std::optional<HttpResponse> refusal = hooks_.refuse_before_body(parser_.request())) {
            reply_and_close(*refusal);
            break;
          }
        }
        sent_continue_ = true;
        out_ += "HTTP/1.1 100 Continue\r\n\r\n";
        flush_output();
      }
      break;
    }
    HttpRequest request = parser_.take_request();
    sent_continue_ = false;
    exchange_keep_alive_ = request.wants_keep_alive() && !draining_;
    exchange_head_only_ = request.method == "HEAD";
    exchange_version_minor_ = request.version_minor;
    exchange_done_ = false;
    exchange_ = std::make_shared<HttpExchange>(this, loop_, std::move(request), peer_);
    if (hooks_.on_exchange_done) exchange_->set_done_observer(hooks_.on_exchange_done);
    std::shared_ptr<HttpExchange> exchange = exchange_;
    hooks_.on_request(exchange);  // may answer synchronously (finish_exchange clears exchange_)
  }
  processing_ = false;
  if (fd_ >= 0) update_interest();
}

void HttpConnection::flush_output() {
  while (fd_ >= 0 && out_offset_ < out_.size()) {
    ssize_t sent = ::send(fd_, out_.data() + out_offset_, out_.size() - out_offset_, MSG_NOSIGNAL);
    if (sent > 0) {
      out_offset_ += static_cast<size_t>(sent);
      last_write_progress_ = Clock::now();
      continue;
    }
    if (sent < 0 && errno == EINTR) continue;
    if (sent < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    close();  // EPIPE, ECONNRESET: the client is gone
    return;
  }
  if (fd_ < 0) return;
  if (out_offset_ == out_.size()) {
    out_.clear();
    out_offset_ = 0;
    if (close_after_flush_ && !exchange_) {
      begin_lingering_close();
      return;
    }
  } else if (out_offset_ > kCompactThresholdBytes) {
    out_.erase(0, out_offset_);
    out_offset_ = 0;
  }
  update_interest();
}

void HttpConnection::begin_lingering_close() {
  if (lingering_ || fd_ < 0) return;
  if (peer_closed_) {
    close();
    return;
  }
  lingering_ = true;
  linger_started_ = Clock::now();
  ::shutdown(fd_, SHUT_WR);
  in_.clear();
  in_offset_ = 0;
  update_interest();
}

void HttpConnection::update_interest() {
  if (fd_ < 0) return;
  // Level-triggered: after the peer's FIN neither EPOLLIN nor EPOLLRDHUP may stay armed (they would fire forever).
  uint32_t wanted = 0;
  const bool input_full = exchange_ && in_.size() - in_offset_ >= config_.max_pipelined_bytes;
  if (!peer_closed_) {
    wanted |= EPOLLRDHUP;
    if (!input_full) wanted |= EPOLLIN;
  }
  if (output_pending()) wanted |= EPOLLOUT;
  if (wanted != interest_) {
    interest_ = wanted;
    loop_.modify(fd_, interest_);
  }
}

void HttpConnection::finish_exchange() {
  exchange_done_ = true;
  exchange_ = nullptr;
  last_activity_ = Clock::now();
  if (!exchange_keep_alive_ || draining_) close_after_flush_ = true;
  flush_output();
  if (fd_ < 0) return;
  if (peer_closed_ && !output_pending()) {
    close();
    return;
  }
  if (!close_after_flush_ && !processing_) process_input();
}

void HttpConnection::write_response(const HttpResponse& response) {
  if (fd_ < 0) return;
  const bool keep_alive = exchange_keep_alive_ && !draining_;
  out_ += serialize_response(response, exchange_version_minor_, keep_alive, exchange_head_only_);
  finish_exchange();
}

bool HttpConnection::write_stream_head(int status, const HttpHeaders& headers) {
  if (fd_ < 0) return false;
  const bool keep_alive = exchange_keep_alive_ && !draining_ && exchange_version_minor_ == 1;
  if (!keep_alive) exchange_keep_alive_ = false;
  out_ += serialize_stream_head(status, headers, exchange_version_minor_, keep_alive);
  flush_output();
  return fd_ >= 0;
}

bool HttpConnection::write_stream_data(std::string_view data) {
  if (fd_ < 0) return false;
  if (exchange_version_minor_ == 1) {
    append_chunk(out_, data);
  } else {
    out_.append(data);
  }
  if (out_.size() - out_offset_ > config_.max_output_buffer_bytes) {
    close();  // the client does not read: give up on it (the exchange's close handler aborts the work)
    return false;
  }
  flush_output();
  return fd_ >= 0;
}

void HttpConnection::write_stream_end() {
  if (fd_ < 0) return;
  if (exchange_version_minor_ == 1) {
    out_ += kLastChunk;
  } else {
    exchange_keep_alive_ = false;  // close-delimited body
  }
  finish_exchange();
}

void HttpConnection::reply_protocol_error(int status, const std::string& message) {
  reply_and_close(hooks_.make_error_response(status, message, parser_.request()));
}

void HttpConnection::reply_and_close(const HttpResponse& response) {
  if (hooks_.on_exchange_done) {
    ExchangeRecord record;
    record.peer = peer_;
    const bool have_line = !parser_.request().method.empty();  // its request line was parsed
    record.method = have_line ? parser_.request().method : "-";
    record.target = have_line ? parser_.request().target : "-";
    record.version_minor = have_line ? parser_.request().version_minor : 1;
    record.status = response.status;
    record.duration_ms = std::chrono::duration<double, std::milli>(Clock::now() - request_started_).count();
    hooks_.on_exchange_done(record);
  }
  out_ += serialize_response(response, 1, /*keep_alive=*/false, /*head_only=*/false);
  close_after_flush_ = true;
  in_.clear();
  in_offset_ = 0;
  flush_output();
}

void HttpConnection::check_timeouts(Clock::time_point now) {
  if (fd_ < 0) return;
  if (lingering_) {
    if (now - linger_started_ > config_.linger_timeout) close();
    return;
  }
  if (output_pending() && now - last_write_progress_ > config_.write_stall_timeout) {
    close();
    return;
  }
  if (exchange_ || close_after_flush_) return;
  if (parser_.started()) {
    if (now - request_started_ > config_.request_read_timeout) {
      reply_protocol_error(408, "request not received completely within " +
                                    std::to_string(config_.request_read_timeout.count()) + " ms");
    }
  } else if (!output_pending() && now - last_activity_ > config_.keep_alive_timeout) {
    close();
  }
}

}  // namespace fathom::server
