#pragma once
// A fixed pool of worker threads for data-parallel loops; owned by whoever runs the compute (no global pool).
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace fathom {

class ThreadPool {
 public:
  // num_threads == 0 means std::thread::hardware_concurrency().
  explicit ThreadPool(int num_threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return static_cast<int>(workers_.size()) + 1; }

  // Calls body(begin, end) on disjoint chunks covering [0, count); blocks until all are done.
  // The calling thread takes part. Exceptions from a chunk are rethrown here (the first one wins).
  void parallel_for(int64_t count, const std::function<void(int64_t, int64_t)>& body,
                    int64_t min_chunk = 1);

 private:
  void worker_loop(int worker_index);
  void run_chunks();

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_workers_;
  std::condition_variable job_done_;
  const std::function<void(int64_t, int64_t)>* job_body_ = nullptr;
  int64_t job_count_ = 0;
  int64_t job_chunk_ = 1;
  int64_t next_chunk_start_ = 0;
  int active_workers_ = 0;
  uint64_t job_generation_ = 0;
  bool stopping_ = false;
  std::exception_ptr job_error_;
};

}  // namespace fathom
