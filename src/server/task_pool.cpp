#include "server/task_pool.h"

#include "core/error.h"
#include "server/logged_call.h"

namespace fathom::server {

TaskPool::TaskPool(int num_threads, std::shared_ptr<const Logger> logger)
    : logger_(logger ? std::move(logger) : std::make_shared<const Logger>(LogLevel::kError)) {
  FATHOM_CHECK(num_threads >= 1, "TaskPool needs at least one thread, got " << num_threads);
  for (int i = 0; i < num_threads; ++i) threads_.emplace_back([this] { worker(); });
}

TaskPool::~TaskPool() { stop(); }

void TaskPool::submit(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) return;
    queue_.push_back(std::move(task));
  }
  wake_.notify_one();
}

void TaskPool::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (std::thread& thread : threads_) {
    if (thread.joinable()) thread.join();
  }
}

void TaskPool::worker() {
  for (;;) {
    std::function<void()> task;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    call_logging_exceptions(*logger_, "a worker task", "the worker goes on", task);
  }
}

}  // namespace fathom::server
