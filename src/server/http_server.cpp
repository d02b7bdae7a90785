#include "server/http_server.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"
#include "server/event_loop.h"
#include "server/http_exchange.h"

namespace fathom::server {

namespace {

std::string describe_peer(const sockaddr_storage& address) {
  char host[INET6_ADDRSTRLEN] = "?";
  int port = 0;
  if (address.ss_family == AF_INET) {
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(&address);
    inet_ntop(AF_INET, &v4->sin_addr, host, sizeof(host));
    port = ntohs(v4->sin_port);
  } else if (address.ss_family == AF_INET6) {
    const auto* v6 = reinterpret_cast<const sockaddr_in6*>(&address);
    inet_ntop(AF_INET6, &v6->sin6_addr, host, sizeof(host));
    return "[" + std::string(host) + "]:" + std::to_string(ntohs(v6->sin6_port));  // RFC 3986's form
  }
  return std::string(host) + ":" + std::to_string(port);
}

// Binds host:port (every resolved address until one works) and listens when backlog > 0; returns the fd.
int open_listening_socket(const std::string& host, int port, int backlog) {
  FATHOM_CHECK(port >= 0 && port <= 65535, "invalid port " << port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* addresses = nullptr;
  const std::string port_text = std::to_string(port);
  int lookup = getaddrinfo(host.empty() ? nullptr : host.c_str(), port_text.c_str(), &hints, &addresses);
  FATHOM_CHECK(lookup == 0, "cannot resolve host '" << host << "': " << gai_strerror(lookup));
  std::string last_error = "no address";
  int listen_fd = -1;
  for (addrinfo* address = addresses; address != nullptr; address = address->ai_next) {
    int fd = ::socket(address->ai_family, address->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, address->ai_protocol);
    if (fd < 0) {
      last_error = std::strerror(errno);
      continue;
    }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd, address->ai_addr, address->ai_addrlen) != 0 || (backlog > 0 && ::listen(fd, backlog) != 0)) {
      last_error = std::strerror(errno);
      ::close(fd);
      continue;
    }
    listen_fd = fd;
    break;
  }
  freeaddrinfo(addresses);
  FATHOM_CHECK(listen_fd >= 0, "cannot listen on " << host << ":" << port << ": " << last_error);
  return listen_fd;
}

}  // namespace

void check_listen_address_free(const std::string& host, int port) {
  ::close(open_listening_socket(host, port, /*backlog=*/0));
}

HttpServer::HttpServer(EventLoop& loop, HttpServerConfig config, RequestHandler handler, ErrorResponder error_responder)
    : loop_(loop), config_(std::move(config)) {
  hooks_.on_request = std::move(handler);
  hooks_.make_error_response = std::move(error_responder);
  hooks_.on_closed = [this](uint64_t connection_id) {
    // Destroy later: the connection may be deep inside its own call stack.
    loop_.post([this, connection_id] { connections_.erase(connection_id); });
  };
}

HttpServer::~HttpServer() {
  if (sweep_timer_ != 0) loop_.cancel_timer(sweep_timer_);
  if (accept_retry_timer_ != 0) loop_.cancel_timer(accept_retry_timer_);
  connections_.clear();
  if (listen_fd_ >= 0) {
    loop_.unwatch(listen_fd_);
    ::close(listen_fd_);
  }
}

void HttpServer::listen() {
  listen_fd_ = open_listening_socket(config_.host, config_.port, config_.listen_backlog);
  sockaddr_storage bound{};
  socklen_t bound_length = sizeof(bound);
  getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&bound), &bound_length);
  bound_port_ = bound.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
                                            : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  loop_.watch(listen_fd_, EPOLLIN, [this](uint32_t) { on_accept_ready(); });
  accepting_ = true;
  schedule_sweep();
}

void HttpServer::on_accept_ready() {
  while (accepting_) {
    sockaddr_storage peer{};
    socklen_t peer_length = sizeof(peer);
    int fd = ::accept4(listen_fd_, reinterpret_cast<sockaddr*>(&peer), &peer_length, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        // Out of descriptors: pause accepting briefly instead of spinning on a readable listen socket.
        loop_.unwatch(listen_fd_);
        accept_retry_timer_ = loop_.run_after(std::chrono::milliseconds(100), [this] {
          accept_retry_timer_ = 0;
          if (accepting_) loop_.watch(listen_fd_, EPOLLIN, [this](uint32_t) { on_accept_ready(); });
        });
        return;
      }
      return;
    }
    if (connections_.size() >= config_.max_connections) {
      ::close(fd);
      continue;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    const uint64_t id = next_connection_id_++;
    ++accepted_total_;
    auto connection = std::make_unique<HttpConnection>(loop_, fd, id, describe_peer(peer), config_.connection, hooks_);
    HttpConnection* raw = connection.get();
    connections_.emplace(id, std::move(connection));
    raw->start();
  }
}

void HttpServer::stop_accepting() {
  if (!accepting_) return;
  accepting_ = false;
  if (accept_retry_timer_ != 0) loop_.cancel_timer(accept_retry_timer_);
  accept_retry_timer_ = 0;
  if (listen_fd_ >= 0) {
    loop_.unwatch(listen_fd_);
    ::close(listen_fd_);
    listen_fd_ = -1;
  }
}

void HttpServer::begin_drain() {
  stop_accepting();
  draining_ = true;
  for (auto& [id, connection] : connections_) connection->set_draining();
}

void HttpServer::close_all() {
  for (auto& [id, connection] : connections_) connection->close();
}

size_t HttpServer::busy_connection_count() const {
  size_t busy = 0;
  for (const auto& [id, connection] : connections_) {
    if (!connection->is_closed() && (connection->has_exchange() || connection->output_pending())) ++busy;
  }
  return busy;
}

void HttpServer::schedule_sweep() {
  sweep_timer_ = loop_.run_after(config_.timeout_sweep_interval, [this] {
    sweep_timeouts();
    schedule_sweep();
  });
}

void HttpServer::sweep_timeouts() {
  const auto now = HttpConnection::Clock::now();
  for (auto& [id, connection] : connections_) connection->check_timeouts(now);
}

}  // namespace fathom::server
