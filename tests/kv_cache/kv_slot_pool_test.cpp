// KvSlotPool: page-granular allocation, reuse, and rejection of bad frees.
#include <gtest/gtest.h>

#include <set>

#include "core/error.h"
#include "kv_cache/kv_slot_pool.h"

namespace fathom::kv_cache {
namespace {

TEST(KvSlotPool, AllocatesDistinctSlotsUntilFull) {
  KvSlotPool pool(10);
  EXPECT_EQ(pool.total_slots(), 10);
  auto first = pool.allocate(4);
  auto second = pool.allocate(6);
  ASSERT_TRUE(first && second);
  std::set<int32_t> all(first->begin(), first->end());
  all.insert(second->begin(), second->end());
  EXPECT_EQ(all.size(), 10u);
  EXPECT_EQ(*all.begin(), 0);
  EXPECT_EQ(*all.rbegin(), 9);
  EXPECT_EQ(pool.free_slots(), 0);
  EXPECT_FALSE(pool.allocate(1).has_value());
  pool.free(*first);
  EXPECT_EQ(pool.free_slots(), 4);
  auto again = pool.allocate(4);
  ASSERT_TRUE(again);
  EXPECT_EQ(std::set<int32_t>(again->begin(), again->end()), std::set<int32_t>(first->begin(), first->end()));
}

TEST(KvSlotPool, PagesAreConsecutiveAndAligned) {
  KvSlotPool pool(18, 4);  // rounds down to 4 pages
  EXPECT_EQ(pool.total_slots(), 16);
  EXPECT_EQ(pool.round_up_to_pages(5), 8);
  EXPECT_THROW(pool.allocate(3), Error);
  auto slots = pool.allocate(8);
  ASSERT_TRUE(slots);
  for (size_t i = 0; i < slots->size(); i += 4) {
    EXPECT_EQ((*slots)[i] % 4, 0);
    for (int j = 1; j < 4; ++j) EXPECT_EQ((*slots)[i + j], (*slots)[i] + j);
  }
  EXPECT_FALSE(pool.is_free((*slots)[5]));
  pool.free(*slots);
  EXPECT_TRUE(pool.is_free((*slots)[5]));
}

TEST(KvSlotPool, BadFreesThrowAndChangeNothing) {
  KvSlotPool pool(8, 2);
  auto slots = pool.allocate(4);
  ASSERT_TRUE(slots);
  const std::vector<int32_t> misaligned = {(*slots)[1], (*slots)[1] + 1};
  EXPECT_THROW(pool.free(misaligned), Error);
  EXPECT_THROW(pool.free(std::vector<int32_t>{(*slots)[0]}), Error);  // half a page
  EXPECT_THROW(pool.free(std::vector<int32_t>{100, 101}), Error);
  const std::vector<int32_t> twice = {(*slots)[0], (*slots)[1], (*slots)[0], (*slots)[1]};
  EXPECT_THROW(pool.free(twice), Error);
  EXPECT_EQ(pool.free_slots(), 4);
  pool.free(*slots);
  EXPECT_THROW(pool.free(*slots), Error);  // double free
  EXPECT_EQ(pool.free_slots(), 8);
}

}  // namespace
}  // namespace fathom::kv_cache
