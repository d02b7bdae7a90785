#pragma once
// One request/response exchange on a connection, handed to the request handler. The handler answers with
// respond() or with start_stream()/send()/end_stream(), possibly later (after the engine produced output).
// All methods run on the event loop's thread; after the client disconnected they are no-ops and the close
// handler has been called once.
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "server/access_log.h"
#include "server/http_message.h"

namespace fathom::server {

class EventLoop;
class HttpConnection;

class HttpExchange {
 public:
  using Clock = std::chrono::steady_clock;

  HttpExchange(HttpConnection* connection, EventLoop& loop, HttpRequest request, std::string peer);

  const HttpRequest& request() const { return request_; }
  EventLoop& loop() { return loop_; }
  const std::string& peer() const { return peer_; }
  Clock::time_point received_at() const { return received_at_; }

  // The client went away (or the connection was closed) before the response finished.
  bool disconnected() const { return connection_ == nullptr && !finished_; }
  bool finished() const { return finished_; }
  bool streaming() const { return streaming_; }
  int status() const { return status_; }

  // A complete response; ignored once a response was started.
  void respond(HttpResponse response);
  // Streamed response: headers now, body pieces as they come, then end_stream(). Returns false when the
  // client is gone (or its unread output exceeded the server's limit, which closes the connection).
  bool start_stream(int status, HttpHeaders headers);
  bool send(std::string_view data);
  void end_stream();

  // A header for whichever response this exchange sends, complete or streamed (the server's policy, e.g. CORS).
  void add_response_header(std::string name, std::string value) {
    extra_headers_.emplace_back(std::move(name), std::move(value));
  }

  // Called once, on the loop thread, when the connection closes before the response finished.
  void set_close_handler(std::function<void()> handler) { close_handler_ = std::move(handler); }
  // Told once, on the loop thread, when the response finished or the client left before it did (the access log).
  void set_done_observer(std::function<void(const ExchangeRecord&)> observer) { done_observer_ = std::move(observer); }

 private:
  friend class HttpConnection;
  void detach();  // by the connection when it closes
  void report_done(bool connection_closed);

  HttpConnection* connection_;
  EventLoop& loop_;
  HttpRequest request_;
  std::string peer_;
  Clock::time_point received_at_;
  std::function<void()> close_handler_;
  std::function<void(const ExchangeRecord&)> done_observer_;
  HttpHeaders extra_headers_;
  bool streaming_ = false;
  bool finished_ = false;
  int status_ = 0;
};

}  // namespace fathom::server
