#include "core/thread_pool.h"

#include <algorithm>

namespace fathom {

ThreadPool::ThreadPool(int num_threads) {
  if (num_threads <= 0) num_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  for (int i = 1; i < num_threads; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_workers_.notify_all();
  for (auto& worker : workers_) worker.join();
}

void ThreadPool::run_chunks() {
  while (true) {
    int64_t begin;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (next_chunk_start_ >= job_count_ || job_error_) return;
      begin = next_chunk_start_;
      next_chunk_start_ += job_chunk_;
    }
    int64_t end = std::min(begin + job_chunk_, job_count_);
    try {
      (*job_body_)(begin, end);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!job_error_) job_error_ = std::current_exception();
    }
  }
}

void ThreadPool::worker_loop(int) {
  uint64_t seen_generation = 0;
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_workers_.wait(lock, [&] { return stopping_ || job_generation_ != seen_generation; });
      if (stopping_) return;
      seen_generation = job_generation_;
      ++active_workers_;
    }
    run_chunks();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      --active_workers_;
    }
    job_done_.notify_all();
  }
}

void ThreadPool::parallel_for(int64_t count, const std::function<void(int64_t, int64_t)>& body,
                              int64_t min_chunk) {
  if (count <= 0) return;
  int64_t threads = num_threads();
  int64_t chunk = std::max<int64_t>(min_chunk, (count + threads * 4 - 1) / (threads * 4));
  if (workers_.empty() || count <= chunk) {
    body(0, count);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    job_body_ = &body;
    job_count_ = count;
    job_chunk_ = chunk;
    next_chunk_start_ = 0;
    job_error_ = nullptr;
    ++job_generation_;
  }
  wake_workers_.notify_all();
  run_chunks();
  std::exception_ptr error;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    // All chunks are claimed once run_chunks returns; wait for workers still inside one.
    job_done_.wait(lock, [&] { return active_workers_ == 0; });
    // A worker still to wake for this job must find no chunk (a failed job leaves some unclaimed) and no body.
    next_chunk_start_ = job_count_;
    job_body_ = nullptr;
    error = job_error_;
    job_error_ = nullptr;
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace fathom
