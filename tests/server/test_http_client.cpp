#include "test_http_client.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace fathom::testing {

namespace {

std::string lower(std::string text) {
  for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return text;
}

}  // namespace

TestConnection::TestConnection(int port) {
  fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd_ < 0) throw std::runtime_error(std::string("socket: ") + std::strerror(errno));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    int saved = errno;
    ::close(fd_);
    fd_ = -1;
    throw std::runtime_error(std::string("connect: ") + std::strerror(saved));
  }
}

TestConnection::~TestConnection() { close(); }

void TestConnection::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void TestConnection::send(const std::string& bytes) {
  size_t sent = 0;
  while (sent < bytes.size()) {
    ssize_t n = ::send(fd_, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw std::runtime_error(std::string("send: ") + std::strerror(errno));
    sent += static_cast<size_t>(n);
  }
}

bool TestConnection::fill(std::chrono::steady_clock::time_point deadline) {
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
    if (left <= 0) throw std::runtime_error("timed out waiting for the server; received so far: " + buffer_.substr(0, 400));
    pollfd poll_fd{fd_, POLLIN, 0};
    int ready = ::poll(&poll_fd, 1, static_cast<int>(left));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) continue;
    char chunk[65536];
    ssize_t n = ::recv(fd_, chunk, sizeof(chunk), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == ECONNRESET) return false;
    if (n < 0) throw std::runtime_error(std::string("recv: ") + std::strerror(errno));
    if (n == 0) return false;
    buffer_.append(chunk, static_cast<size_t>(n));
    return true;
  }
}

TestResponse TestConnection::read_response(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  TestResponse response;
  for (;;) {
    size_t head_end;
    while ((head_end = buffer_.find("\r\n\r\n")) == std::string::npos) {
      if (!fill(deadline)) throw std::runtime_error("connection closed before a response head; got: " + buffer_);
    }
    std::string head = buffer_.substr(0, head_end);
    buffer_.erase(0, head_end + 4);
    size_t line_end = head.find("\r\n");
    std::string status_line = head.substr(0, line_end);
    response.status = std::stoi(status_line.substr(9, 3));
    response.headers.clear();
    size_t position = line_end == std::string::npos ? head.size() : line_end + 2;
    while (position < head.size()) {
      size_t next = head.find("\r\n", position);
      if (next == std::string::npos) next = head.size();
      std::string line = head.substr(position, next - position);
      size_t colon = line.find(':');
      std::string value = line.substr(colon + 1);
      while (!value.empty() && value.front() == ' ') value.erase(0, 1);
      response.headers[lower(line.substr(0, colon))] = value;
      position = next + 2;
    }
    if (response.status != 100) break;  // skip interim responses
  }
  if (response.headers.count("content-length")) {
    size_t length = std::stoul(response.headers["content-length"]);
    while (buffer_.size() < length) {
      if (!fill(deadline)) throw std::runtime_error("connection closed inside a body");
    }
    response.body = buffer_.substr(0, length);
    buffer_.erase(0, length);
  } else if (lower(response.headers["transfer-encoding"]) == "chunked") {
    response.chunked = true;
    for (;;) {
      size_t line_end;
      while ((line_end = buffer_.find("\r\n")) == std::string::npos) {
        if (!fill(deadline)) throw std::runtime_error("connection closed inside a chunked body");
      }
      size_t size = std::stoul(buffer_.substr(0, line_end), nullptr, 16);
      while (buffer_.size() < line_end + 2 + size + 2) {
        if (!fill(deadline)) throw std::runtime_error("connection closed inside a chunk");
      }
      response.body += buffer_.substr(line_end + 2, size);
      buffer_.erase(0, line_end + 2 + size + 2);
      if (size == 0) break;
    }
  } else {
    while (fill(deadline)) {
    }
    response.body = buffer_;
    buffer_.clear();
  }
  return response;
}

std::string TestConnection::read_until(const std::string& needle, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (buffer_.find(needle) == std::string::npos) {
    if (!fill(deadline)) break;
  }
  return buffer_;
}

bool TestConnection::wait_closed(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  try {
    while (fill(deadline)) buffer_.clear();
    return true;
  } catch (const std::runtime_error&) {
    return false;
  }
}

std::string build_request(const std::string& method, const std::string& path, const std::string& body,
                          const std::vector<std::string>& extra_headers) {
  std::string request = method + " " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\n";
  for (const std::string& header : extra_headers) request += header + "\r\n";
  if (!body.empty() || method == "POST") request += "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  request += "\r\n" + body;
  return request;
}

TestResponse http_call(int port, const std::string& method, const std::string& path, const std::string& body,
                       const std::vector<std::string>& extra_headers) {
  TestConnection connection(port);
  connection.send(build_request(method, path, body, extra_headers));
  return connection.read_response();
}

std::vector<nlohmann::json> sse_events(const std::string& body) {
  std::vector<nlohmann::json> events;
  size_t position = 0;
  while (position < body.size()) {
    size_t end = body.find("\n\n", position);
    if (end == std::string::npos) end = body.size();
    std::string event = body.substr(position, end - position);
    if (event.rfind("data: ", 0) == 0) {
      std::string data = event.substr(6);
      events.push_back(data == "[DONE]" ? nlohmann::json("[DONE]") : nlohmann::json::parse(data));
    }
    position = end + 2;
  }
  return events;
}

std::string dechunk(const std::string& chunked) {
  std::string body;
  size_t position = 0;
  for (;;) {
    size_t line_end = chunked.find("\r\n", position);
    if (line_end == std::string::npos) throw std::runtime_error("dechunk: no size line");
    size_t size = std::stoul(chunked.substr(position, line_end - position), nullptr, 16);
    if (size == 0) return body;
    body += chunked.substr(line_end + 2, size);
    position = line_end + 2 + size + 2;
  }
}

}  // namespace fathom::testing
