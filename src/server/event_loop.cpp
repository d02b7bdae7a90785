#include "server/event_loop.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"
#include "server/logged_call.h"

namespace fathom::server {

namespace {
constexpr int kMaxEventsPerWait = 256;
uint64_t pack(int fd, uint32_t generation) { return (static_cast<uint64_t>(generation) << 32) | static_cast<uint32_t>(fd); }
}  // namespace

EventLoop::EventLoop(std::shared_ptr<const Logger> logger)
    : logger_(logger ? std::move(logger) : std::make_shared<const Logger>(LogLevel::kError)) {
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  FATHOM_CHECK(epoll_fd_ >= 0, "epoll_create1 failed: " << std::strerror(errno));
  wakeup_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  FATHOM_CHECK(wakeup_fd_ >= 0, "eventfd failed: " << std::strerror(errno));
  epoll_event event{};
  event.events = EPOLLIN;
  event.data.u64 = pack(wakeup_fd_, 0);
  FATHOM_CHECK(epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wakeup_fd_, &event) == 0,
               "epoll_ctl(ADD wakeup eventfd) failed: " << std::strerror(errno));
}

EventLoop::~EventLoop() {
  if (wakeup_fd_ >= 0) close(wakeup_fd_);
  if (epoll_fd_ >= 0) close(epoll_fd_);
}

void EventLoop::watch(int fd, uint32_t epoll_events, IoHandler handler) {
  Watch& watch = handlers_[fd];
  watch.generation = next_generation_++;
  if (next_generation_ == 0) next_generation_ = 1;  // 0 is the wakeup fd's tag
  watch.handler = std::move(handler);
  epoll_event event{};
  event.events = epoll_events;
  event.data.u64 = pack(fd, watch.generation);
  if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &event) != 0) {
    int saved = errno;
    handlers_.erase(fd);
    FATHOM_FAIL("epoll_ctl(ADD fd " << fd << ") failed: " << std::strerror(saved));
  }
}

void EventLoop::modify(int fd, uint32_t epoll_events) {
  auto it = handlers_.find(fd);
  FATHOM_CHECK(it != handlers_.end(), "EventLoop::modify: fd " << fd << " is not watched");
  epoll_event event{};
  event.events = epoll_events;
  event.data.u64 = pack(fd, it->second.generation);
  FATHOM_CHECK(epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, fd, &event) == 0,
               "epoll_ctl(MOD fd " << fd << ") failed: " << std::strerror(errno));
}

void EventLoop::unwatch(int fd) {
  if (handlers_.erase(fd) == 0) return;
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
}

void EventLoop::post(Task task) {
  bool need_wakeup = false;
  {
    std::lock_guard<std::mutex> lock(task_mutex_);
    pending_tasks_.push_back(std::move(task));
    if (!wakeup_pending_) {
      wakeup_pending_ = true;
      need_wakeup = true;
    }
  }
  if (need_wakeup) {
    uint64_t one = 1;
    ssize_t written = write(wakeup_fd_, &one, sizeof(one));
    (void)written;  // EAGAIN means the counter is already non-zero: the loop wakes anyway
  }
}

EventLoop::TimerId EventLoop::run_after(std::chrono::milliseconds delay, Task task) {
  TimerId id = next_timer_id_++;
  Clock::time_point due = Clock::now() + delay;
  timer_order_.emplace(due, id);
  timers_.emplace(id, std::make_pair(due, std::move(task)));
  return id;
}

void EventLoop::cancel_timer(TimerId id) {
  auto it = timers_.find(id);
  if (it == timers_.end()) return;
  auto range = timer_order_.equal_range(it->second.first);
  for (auto order = range.first; order != range.second; ++order) {
    if (order->second == id) {
      timer_order_.erase(order);
      break;
    }
  }
  timers_.erase(it);
}

void EventLoop::stop() {
  stop_requested_ = true;
  post([] {});
}

void EventLoop::drain_tasks() {
  std::vector<Task> tasks;
  {
    std::lock_guard<std::mutex> lock(task_mutex_);
    tasks.swap(pending_tasks_);
    wakeup_pending_ = false;
    uint64_t counter;
    while (read(wakeup_fd_, &counter, sizeof(counter)) > 0) {
    }
  }
  for (Task& task : tasks) call_logging_exceptions(*logger_, "an event loop task", "the loop goes on", task);
}

void EventLoop::fire_due_timers() {
  const Clock::time_point now = Clock::now();
  while (!timer_order_.empty() && timer_order_.begin()->first <= now) {
    TimerId id = timer_order_.begin()->second;
    timer_order_.erase(timer_order_.begin());
    auto it = timers_.find(id);
    if (it == timers_.end()) continue;
    Task task = std::move(it->second.second);
    timers_.erase(it);
    call_logging_exceptions(*logger_, "an event loop timer", "the loop goes on", task);
  }
}

int EventLoop::next_timeout_ms() const {
  if (timer_order_.empty()) return -1;
  auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(timer_order_.begin()->first - Clock::now());
  return wait.count() <= 0 ? 0 : static_cast<int>(wait.count()) + 1;
}

void EventLoop::run() {
  loop_thread_id_ = std::this_thread::get_id();
  epoll_event events[kMaxEventsPerWait];
  while (!stop_requested_) {
    int ready = epoll_wait(epoll_fd_, events, kMaxEventsPerWait, next_timeout_ms());
    if (ready < 0) {
      FATHOM_CHECK(errno == EINTR, "epoll_wait failed: " << std::strerror(errno));
      continue;
    }
    bool wakeup = false;
    for (int i = 0; i < ready; ++i) {
      const int fd = static_cast<int>(events[i].data.u64 & 0xffffffffu);
      const uint32_t generation = static_cast<uint32_t>(events[i].data.u64 >> 32);
      if (generation == 0) {
        wakeup = true;
        continue;
      }
      // A handler earlier in this batch may have closed this fd (or closed it and reused the number).
      auto it = handlers_.find(fd);
      if (it == handlers_.end() || it->second.generation != generation) continue;
      IoHandler handler = it->second.handler;  // copy: the handler may unwatch itself
      call_logging_exceptions(*logger_, "an event loop I/O handler", "the loop goes on",
                              [&] { handler(events[i].events); });
    }
    if (wakeup) drain_tasks();
    fire_due_timers();
  }
  drain_tasks();
  loop_thread_id_ = std::thread::id();
}

}  // namespace fathom::server
