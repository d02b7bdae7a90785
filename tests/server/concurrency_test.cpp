// Many simultaneous streaming clients on one I/O thread: 1,000 concurrent SSE streams all complete, none lost,
// within a time bound.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>

#include "server_harness.h"
#include "test_http_client.h"

namespace fathom::testing {
namespace {

using namespace std::chrono_literals;

struct Client {
  int fd = -1;
  std::string request;
  size_t sent = 0;
  std::string received;
  bool done = false;
};

int connect_nonblocking(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 && errno != EINPROGRESS) {
    ::close(fd);
    return -1;
  }
  return fd;
}

TEST(Concurrency, ThousandConcurrentStreams) {
  // FATHOM_TEST_STREAMS raises the count for manual runs (the open-file limit must allow two fds per stream).
  const int kClients = std::getenv("FATHOM_TEST_STREAMS") ? std::atoi(std::getenv("FATHOM_TEST_STREAMS")) : 1000;
  constexpr int kTokens = 50;
  rlimit limit{};
  getrlimit(RLIMIT_NOFILE, &limit);
  const rlim_t wanted_fds = static_cast<rlim_t>(2 * kClients + 100);
  if (limit.rlim_cur < wanted_fds) {
    limit.rlim_cur = std::min<rlim_t>(limit.rlim_max, wanted_fds);
    setrlimit(RLIMIT_NOFILE, &limit);
    getrlimit(RLIMIT_NOFILE, &limit);
  }
  ASSERT_GE(limit.rlim_cur, static_cast<rlim_t>(2 * kClients + 50)) << "open-file limit too low for this test";

  FakeEngineOptions options;
  options.token_delay = 2ms;
  options.hold_until_requests = static_cast<size_t>(kClients);  // all streams are open before the first token
  ServerHarness harness(options);
  const std::string body = R"({"prompt": "load", "max_tokens": )" + std::to_string(kTokens) + R"(, "stream": true, "temperature": 0})";
  const std::string request = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: " +
                              std::to_string(body.size()) + "\r\n\r\n" + body;

  std::vector<Client> clients(kClients);
  for (Client& client : clients) {
    client.fd = connect_nonblocking(harness.port());
    ASSERT_GE(client.fd, 0) << std::strerror(errno);
    client.request = request;
  }
  // The clients are driven by epoll too, so that the client side does not dominate the measurement.
  int epoll_fd = epoll_create1(EPOLL_CLOEXEC);
  ASSERT_GE(epoll_fd, 0);
  for (int i = 0; i < kClients; ++i) {
    epoll_event event{};
    event.events = EPOLLIN | EPOLLOUT;
    event.data.u32 = static_cast<uint32_t>(i);
    ASSERT_EQ(epoll_ctl(epoll_fd, EPOLL_CTL_ADD, clients[i].fd, &event), 0);
  }
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + 60s;
  size_t remaining = kClients;
  size_t max_running = 0;
  std::vector<epoll_event> ready(1024);
  while (remaining > 0 && std::chrono::steady_clock::now() < deadline) {
    int count = epoll_wait(epoll_fd, ready.data(), static_cast<int>(ready.size()), 100);
    if (count < 0 && errno != EINTR) FAIL() << "epoll_wait: " << std::strerror(errno);
    for (int k = 0; k < count; ++k) {
      Client& client = clients[ready[k].data.u32];
      if (client.done) continue;
      if ((ready[k].events & EPOLLOUT) && client.sent < client.request.size()) {
        ssize_t n = ::send(client.fd, client.request.data() + client.sent, client.request.size() - client.sent, MSG_NOSIGNAL);
        if (n > 0) client.sent += static_cast<size_t>(n);
        if (client.sent == client.request.size()) {
          epoll_event event{};
          event.events = EPOLLIN;
          event.data.u32 = ready[k].data.u32;
          epoll_ctl(epoll_fd, EPOLL_CTL_MOD, client.fd, &event);
        }
      }
      if (ready[k].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
        char buffer[16384];
        ssize_t n = ::recv(client.fd, buffer, sizeof(buffer), 0);
        if (n > 0) {
          client.received.append(buffer, static_cast<size_t>(n));
        } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
          client.done = true;
          ::close(client.fd);
          --remaining;
        }
      }
    }
    max_running = std::max<size_t>(max_running, static_cast<size_t>(harness.engine.running()));
  }
  ::close(epoll_fd);
  const double elapsed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (Client& client : clients) {
    if (!client.done) ::close(client.fd);
  }
  ASSERT_EQ(remaining, 0u) << "streams still open after " << elapsed_s << " s";

  scheduler::GenerateRequest reference;
  reference.input_ids = FakeCodec().encode("load", true);
  reference.sampling.temperature = 0.0f;
  std::string expected;
  for (int i = 0; i < kTokens; ++i) expected += FakeEngine::token_text(FakeEngine::token_at(reference, i));
  int complete = 0;
  for (const Client& client : clients) {
    size_t head_end = client.received.find("\r\n\r\n");
    ASSERT_NE(head_end, std::string::npos);
    ASSERT_EQ(client.received.rfind("HTTP/1.1 200", 0), 0u) << client.received.substr(0, 200);
    std::string text;
    std::vector<nlohmann::json> events = sse_events(dechunk(client.received.substr(head_end + 4)));
    ASSERT_FALSE(events.empty());
    EXPECT_EQ(events.back(), "[DONE]");
    for (const auto& event : events) {
      if (event.is_object()) text += event["choices"][0]["text"].get<std::string>();
    }
    if (text == expected) ++complete;
  }
  EXPECT_EQ(complete, kClients);
  EXPECT_EQ(max_running, static_cast<size_t>(kClients)) << "the streams did not overlap";
  EXPECT_EQ(harness.engine.submitted_count(), static_cast<size_t>(kClients));
  std::printf("[ concurrency ] %d streams x %d tokens in %.2f s, up to %zu running at once\n", kClients, kTokens, elapsed_s, max_running);
}

}  // namespace
}  // namespace fathom::testing
