// The event loop's exception barrier: a posted task, a timer or an I/O handler that throws is logged and the loop goes
// on with the next one. (One that threw once ended the loop thread, and with it the server: std::terminate.)
#include <gtest/gtest.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "core/log.h"
#include "log_capture.h"
#include "server/event_loop.h"

namespace fathom::testing {
namespace {

int count_lines_with(const std::vector<std::string>& lines, const std::string& text) {
  int count = 0;
  for (const std::string& line : lines) count += line.find(text) != std::string::npos;
  return count;
}

TEST(EventLoop, ThrowingTasksTimersAndHandlersAreLoggedAndTheLoopGoesOn) {
  LogCapture capture;
  server::EventLoop loop(std::make_shared<const Logger>(LogLevel::kInfo, capture.file()));
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  std::vector<std::string> ran;  // loop thread only until it is joined
  loop.post([&] { throw std::runtime_error("task one failed"); });
  loop.post([&] { ran.push_back("task"); });
  loop.post([&] {
    loop.run_after(std::chrono::milliseconds(1), [] { throw 7; });
    loop.run_after(std::chrono::milliseconds(2), [&] {
      ran.push_back("timer");
      loop.watch(pipe_fds[0], EPOLLIN, [&](uint32_t) {
        loop.unwatch(pipe_fds[0]);  // the fd stays readable: called once
        throw std::runtime_error("handler failed");
      });
      ASSERT_EQ(write(pipe_fds[1], "x", 1), 1);
      loop.run_after(std::chrono::milliseconds(20), [&] {
        ran.push_back("after the handler");
        loop.stop();
      });
    });
  });
  std::thread thread([&] { loop.run(); });
  thread.join();
  close(pipe_fds[0]);
  close(pipe_fds[1]);
  EXPECT_EQ(ran, (std::vector<std::string>{"task", "timer", "after the handler"}));
  const std::vector<std::string> lines = capture.lines();
  EXPECT_EQ(count_lines_with(lines, " ERROR fathom: an event loop task failed: task one failed; the loop goes on"), 1);
  EXPECT_EQ(count_lines_with(lines, " ERROR fathom: an event loop timer failed: an exception that is not a std::exception; the loop goes on"), 1);
  EXPECT_EQ(count_lines_with(lines, " ERROR fathom: an event loop I/O handler failed: handler failed; the loop goes on"), 1);
  EXPECT_EQ(lines.size(), 3u);
}

}  // namespace
}  // namespace fathom::testing
