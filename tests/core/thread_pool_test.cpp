#include "core/thread_pool.h"

#include <atomic>
#include <stdexcept>
#include <vector>

#include <gtest/gtest.h>

namespace fathom {
namespace {

TEST(ThreadPool, CoversEveryIndexOnce) {
  ThreadPool pool(4);
  for (int64_t count : {0, 1, 7, 1000, 100003}) {
    std::vector<std::atomic<int>> hits(static_cast<size_t>(count));
    pool.parallel_for(count, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) hits[i]++;
    });
    for (int64_t i = 0; i < count; ++i) ASSERT_EQ(hits[i].load(), 1) << "count " << count << " index " << i;
  }
}

TEST(ThreadPool, RethrowsChunkErrors) {
  ThreadPool pool(3);
  EXPECT_THROW(pool.parallel_for(100, [](int64_t begin, int64_t) {
    if (begin > 50) throw std::runtime_error("boom");
  }), std::runtime_error);
  // Still usable afterwards.
  std::atomic<int64_t> sum{0};
  pool.parallel_for(10, [&](int64_t begin, int64_t end) { for (int64_t i = begin; i < end; ++i) sum += i; });
  EXPECT_EQ(sum.load(), 45);
}

// A job that throws leaves chunks unclaimed; a worker that wakes only after parallel_for returned must find none
// (it once claimed one and called the finished job's body through a null pointer). Many short jobs on more threads
// than cores make such late wake-ups common.
TEST(ThreadPool, WorkersWakingAfterAFailedJobRunNothing) {
  ThreadPool pool(8);
  for (int round = 0; round < 3000; ++round) {
    std::atomic<bool> thrown{false};
    EXPECT_THROW(pool.parallel_for(64, [&](int64_t, int64_t) {
      if (!thrown.exchange(true)) throw std::runtime_error("first chunk fails");
    }), std::runtime_error);
  }
  std::atomic<int64_t> sum{0};
  pool.parallel_for(1000, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) sum += i;
  });
  EXPECT_EQ(sum.load(), 999 * 1000 / 2);
}

}  // namespace
}  // namespace fathom
