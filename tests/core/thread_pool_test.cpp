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

}  // namespace
}  // namespace fathom
