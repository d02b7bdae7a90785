#pragma once
// A few worker threads that run queued tasks in order of submission; used for request preparation
// (JSON parsing, chat templating, tokenization) so that long prompts never stall the event loop.
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "core/log.h"

namespace fathom::server {

class TaskPool {
 public:
  // `logger` reports tasks that throw; null: errors on stderr.
  explicit TaskPool(int num_threads, std::shared_ptr<const Logger> logger = nullptr);
  ~TaskPool();  // runs the queued tasks, then joins
  TaskPool(const TaskPool&) = delete;
  TaskPool& operator=(const TaskPool&) = delete;

  // A task answers its own requester, errors included; one that throws anyway is logged, and its worker goes on.
  void submit(std::function<void()> task);
  // Finishes the queued tasks and joins the threads; later submits are ignored. Idempotent.
  void stop();

 private:
  void worker();
  std::shared_ptr<const Logger> logger_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> queue_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace fathom::server
