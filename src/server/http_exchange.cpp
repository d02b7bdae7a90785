#include "server/http_exchange.h"

#include "server/http_connection.h"

namespace fathom::server {

HttpExchange::HttpExchange(HttpConnection* connection, EventLoop& loop, HttpRequest request, std::string peer)
    : connection_(connection), loop_(loop), request_(std::move(request)), peer_(std::move(peer)), received_at_(Clock::now()) {}

void HttpExchange::respond(HttpResponse response) {
  if (finished_ || streaming_) return;
  finished_ = true;
  status_ = response.status;
  close_handler_ = nullptr;
  if (connection_ == nullptr) return;
  response.headers.insert(response.headers.end(), extra_headers_.begin(), extra_headers_.end());
  HttpConnection* connection = connection_;
  connection_ = nullptr;
  report_done(false);  // before the write, which may start (and answer) the next pipelined request
  connection->write_response(response);
}

bool HttpExchange::start_stream(int status, HttpHeaders headers) {
  if (finished_ || streaming_ || connection_ == nullptr) return false;
  streaming_ = true;
  status_ = status;
  headers.insert(headers.end(), extra_headers_.begin(), extra_headers_.end());
  return connection_->write_stream_head(status, headers);
}

bool HttpExchange::send(std::string_view data) {
  if (!streaming_ || finished_ || connection_ == nullptr) return false;
  return connection_->write_stream_data(data);
}

void HttpExchange::end_stream() {
  if (!streaming_ || finished_) return;
  finished_ = true;
  close_handler_ = nullptr;
  if (connection_ == nullptr) return;
  HttpConnection* connection = connection_;
  connection_ = nullptr;
  report_done(false);  // before the write, which may start (and answer) the next pipelined request
  connection->write_stream_end();
}

void HttpExchange::detach() {
  connection_ = nullptr;
  if (finished_) return;
  report_done(true);
  std::function<void()> handler = std::move(close_handler_);
  close_handler_ = nullptr;
  if (handler) handler();
}

void HttpExchange::report_done(bool connection_closed) {
  std::function<void(const ExchangeRecord&)> observer = std::move(done_observer_);
  done_observer_ = nullptr;
  if (!observer) return;
  ExchangeRecord record;
  record.peer = peer_;
  record.method = request_.method;
  record.target = request_.target;
  record.version_minor = request_.version_minor;
  record.status = status_;
  record.connection_closed = connection_closed;
  record.duration_ms = std::chrono::duration<double, std::milli>(Clock::now() - received_at_).count();
  observer(record);
}

}  // namespace fathom::server
