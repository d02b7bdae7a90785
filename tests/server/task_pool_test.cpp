// The request preparation pool: its tasks run in submission order, and one that throws is logged while its worker
// goes on with the next task.
#include <gtest/gtest.h>

#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/log.h"
#include "log_capture.h"
#include "server/task_pool.h"

namespace fathom::testing {
namespace {

// One worker: the tasks after the throwing ones can only run if that worker survived them. (A throwing task once
// ended the process: std::terminate.)
TEST(TaskPool, ATaskThatThrowsIsLoggedAndItsWorkerGoesOn) {
  LogCapture capture;
  std::mutex mutex;
  std::vector<int> ran;
  {
    server::TaskPool pool(1, std::make_shared<const Logger>(LogLevel::kInfo, capture.file()));
    pool.submit([&] {
      std::lock_guard<std::mutex> lock(mutex);
      ran.push_back(1);
    });
    pool.submit([] { throw std::runtime_error("the tokenizer failed"); });
    pool.submit([] { throw 42; });
    pool.submit([&] {
      std::lock_guard<std::mutex> lock(mutex);
      ran.push_back(2);
    });
    pool.stop();  // runs the queued tasks
  }
  EXPECT_EQ(ran, (std::vector<int>{1, 2}));
  const std::vector<std::string> lines = capture.lines();
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_NE(lines[0].find(" ERROR fathom: a worker task failed: the tokenizer failed; the worker goes on"), std::string::npos) << lines[0];
  EXPECT_NE(lines[1].find(" ERROR fathom: a worker task failed: an exception that is not a std::exception; the worker goes on"),
            std::string::npos)
      << lines[1];
}

}  // namespace
}  // namespace fathom::testing
