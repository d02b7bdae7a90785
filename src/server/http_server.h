#pragma once
// The listening socket and the table of connections on one event loop: accepts clients, enforces the
// connection limit, sweeps timeouts, and supports graceful draining (stop accepting, finish in-flight
// exchanges, close idle connections).
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>

#include "server/http_connection.h"

namespace fathom::server {

class EventLoop;
class HttpExchange;

struct HttpServerConfig {
  std::string host = "127.0.0.1";  // numeric address or name; "0.0.0.0" / "::" for all interfaces
  int port = 30000;                 // 0 = any free port (see HttpServer::port())
  int listen_backlog = 4096;
  size_t max_connections = 16384;   // further clients are accepted and closed at once
  std::chrono::milliseconds timeout_sweep_interval{1000};
  HttpConnectionConfig connection;
};

// Throws the error listen() would (naming host:port) when host:port cannot be bound now, e.g. another
// server holds it; binds nothing afterwards. Lets a slow start (model load) fail before it begins.
void check_listen_address_free(const std::string& host, int port);

class HttpServer {
 public:
  using RequestHandler = std::function<void(std::shared_ptr<HttpExchange>)>;
  using ErrorResponder =
      std::function<HttpResponse(int status, const std::string& message, const HttpRequest& partial)>;

  HttpServer(EventLoop& loop, HttpServerConfig config, RequestHandler handler, ErrorResponder error_responder);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds and listens (throws fathom::Error naming host:port on failure). Call before the loop runs or on
  // the loop thread.
  void listen();
  int port() const { return bound_port_; }
  // See HttpConnection::Hooks::refuse_before_body; set before listen().
  void set_refuse_before_body(std::function<std::optional<HttpResponse>(const HttpRequest&)> refuse) {
    hooks_.refuse_before_body = std::move(refuse);
  }
  // See HttpConnection::Hooks::on_exchange_done; set before listen().
  void set_exchange_observer(std::function<void(const ExchangeRecord&)> observer) {
    hooks_.on_exchange_done = std::move(observer);
  }
  const std::string& host() const { return config_.host; }

  // Loop thread only.
  void stop_accepting();
  void begin_drain();   // stop accepting; idle connections close, busy ones close after their response
  void close_all();
  size_t connection_count() const { return connections_.size(); }
  size_t busy_connection_count() const;  // with an exchange in flight or unsent output
  uint64_t accepted_total() const { return accepted_total_; }

 private:
  void on_accept_ready();
  void sweep_timeouts();
  void schedule_sweep();

  EventLoop& loop_;
  HttpServerConfig config_;
  HttpConnection::Hooks hooks_;
  int listen_fd_ = -1;
  int bound_port_ = 0;
  bool accepting_ = false;
  bool draining_ = false;
  uint64_t next_connection_id_ = 1;
  uint64_t accepted_total_ = 0;
  uint64_t sweep_timer_ = 0;
  uint64_t accept_retry_timer_ = 0;
  std::unordered_map<uint64_t, std::unique_ptr<HttpConnection>> connections_;
};

}  // namespace fathom::server
