#pragma once
// A single-threaded epoll event loop: fd readiness callbacks, one-shot timers, and a thread-safe task queue
// (woken through an eventfd) so other threads (the engine, worker pools, signal handlers) hand work to it.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/log.h"

namespace fathom::server {

class EventLoop {
 public:
  using IoHandler = std::function<void(uint32_t epoll_events)>;
  using Task = std::function<void()>;
  using Clock = std::chrono::steady_clock;
  using TimerId = uint64_t;

  // `logger` reports handlers, tasks and timers that throw (each one fails alone; the loop goes on); null: stderr.
  explicit EventLoop(std::shared_ptr<const Logger> logger = nullptr);
  ~EventLoop();
  EventLoop(const EventLoop&) = delete;
  EventLoop& operator=(const EventLoop&) = delete;

  // Loop thread only. `handler` is called with the ready epoll events of `fd` until unwatch(fd).
  void watch(int fd, uint32_t epoll_events, IoHandler handler);
  void modify(int fd, uint32_t epoll_events);
  void unwatch(int fd);  // does not close fd

  // Any thread. Tasks run on the loop thread in the order posted.
  void post(Task task);

  // Loop thread only. One-shot timer; returns an id for cancel_timer (cancelling a fired timer is a no-op).
  TimerId run_after(std::chrono::milliseconds delay, Task task);
  void cancel_timer(TimerId id);

  // Runs until stop() is called (from any thread). Tasks posted before stop() are still run.
  void run();
  void stop();

  bool in_loop_thread() const { return std::this_thread::get_id() == loop_thread_id_.load(); }
  size_t watched_fd_count() const { return handlers_.size(); }

 private:
  struct Watch {
    uint32_t generation = 0;
    IoHandler handler;
  };
  void drain_tasks();
  void fire_due_timers();
  int next_timeout_ms() const;

  std::shared_ptr<const Logger> logger_;
  int epoll_fd_ = -1;
  int wakeup_fd_ = -1;
  std::atomic<bool> stop_requested_{false};
  std::atomic<std::thread::id> loop_thread_id_{};

  std::unordered_map<int, Watch> handlers_;
  uint32_t next_generation_ = 1;

  std::mutex task_mutex_;
  std::vector<Task> pending_tasks_;
  bool wakeup_pending_ = false;

  std::multimap<Clock::time_point, TimerId> timer_order_;
  std::unordered_map<TimerId, std::pair<Clock::time_point, Task>> timers_;
  TimerId next_timer_id_ = 1;
};

}  // namespace fathom::server

namespace fathom::server {

// A postable reference to a loop that may be destroyed first: engine callbacks hold one, and once the
// loop's owner calls detach() their posts are dropped instead of touching freed memory.
class LoopPoster {
 public:
  explicit LoopPoster(EventLoop* loop) : loop_(loop) {}
  void post(EventLoop::Task task) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (loop_ != nullptr) loop_->post(std::move(task));
  }
  void detach() {
    std::lock_guard<std::mutex> lock(mutex_);
    loop_ = nullptr;
  }

 private:
  std::mutex mutex_;
  EventLoop* loop_;
};

}  // namespace fathom::server
