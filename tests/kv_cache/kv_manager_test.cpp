// KvManager: sequences sharing prefixes through the radix cache, duplicate slots, pages, eviction and accounting.
#include <gtest/gtest.h>

#include "core/error.h"
#include "kv_cache/kv_manager.h"

namespace fathom::kv_cache {
namespace {

using Tokens = std::vector<int32_t>;

TEST(KvManager, SharesCommittedPrefixes) {
  KvManager kv({16, 1, false});
  SequenceKv a;
  const Tokens tokens_a = {5, 6, 7, 8, 9};
  EXPECT_EQ(kv.acquire_prefix(tokens_a, a), 0);
  ASSERT_TRUE(kv.reserve(a, 5));
  EXPECT_EQ(kv.sequence_owned_slots(), 5);
  kv.check_invariant();
  kv.commit(Tokens{5, 6, 7}, a);  // first chunk done
  EXPECT_EQ(a.cached_len, 3);
  EXPECT_EQ(kv.locked_slots(), 3);
  EXPECT_EQ(kv.sequence_owned_slots(), 2);
  kv.check_invariant();

  SequenceKv b;
  EXPECT_EQ(kv.acquire_prefix(Tokens{5, 6, 7, 1}, b), 3);
  EXPECT_EQ(std::vector<int32_t>(b.slots.begin(), b.slots.end()), std::vector<int32_t>(a.slots.begin(), a.slots.begin() + 3));
  ASSERT_TRUE(kv.reserve(b, 4));
  kv.release(Tokens{5, 6, 7, 1}, b, true);
  kv.release(tokens_a, a, true);
  EXPECT_EQ(kv.locked_slots(), 0);
  EXPECT_EQ(kv.sequence_owned_slots(), 0);
  EXPECT_EQ(kv.evictable_slots(), 6);  // 5,6,7 + 8,9 + 1
  EXPECT_EQ(kv.free_slots() + kv.evictable_slots(), 16);
  kv.check_invariant();
}

TEST(KvManager, DuplicateSlotsAreFreedOnCommit) {
  KvManager kv({16, 1, false});
  SequenceKv a, b;
  kv.acquire_prefix(Tokens{1, 2, 3}, a);
  kv.acquire_prefix(Tokens{1, 2, 3}, b);  // both computed the same prefix independently
  ASSERT_TRUE(kv.reserve(a, 4));
  ASSERT_TRUE(kv.reserve(b, 4));
  kv.commit(Tokens{1, 2, 3, 4}, a);
  kv.commit(Tokens{1, 2, 3, 4}, b);
  EXPECT_EQ(a.slots, b.slots);
  EXPECT_EQ(kv.free_slots(), 12);
  kv.check_invariant();
  kv.release(Tokens{1, 2, 3, 4}, a, true);
  kv.release(Tokens{1, 2, 3, 4}, b, true);
  EXPECT_EQ(kv.evictable_slots(), 4);
  kv.check_invariant();
}

TEST(KvManager, ReserveEvictsUnlockedCacheAndFailsCleanly) {
  KvManager kv({8, 1, false});
  SequenceKv a;
  kv.acquire_prefix(Tokens{1, 2, 3, 4, 5, 6}, a);
  ASSERT_TRUE(kv.reserve(a, 6));
  kv.release(Tokens{1, 2, 3, 4, 5, 6}, a, true);
  EXPECT_EQ(kv.evictable_slots(), 6);
  SequenceKv b;
  kv.acquire_prefix(Tokens{9, 9, 9, 9, 9, 9, 9}, b);
  ASSERT_TRUE(kv.reserve(b, 7));  // evicts the cached sequence
  EXPECT_EQ(kv.evictable_slots(), 0);
  SequenceKv c;
  EXPECT_FALSE(kv.reserve(c, 2));
  EXPECT_TRUE(c.slots.empty());
  kv.check_invariant();
  kv.release({}, b, false);
  EXPECT_EQ(kv.free_slots(), 8);
}

TEST(KvManager, PagedSequencesCommitWholePages) {
  KvManager kv({32, 4, false});
  SequenceKv a;
  const Tokens tokens = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  kv.acquire_prefix(tokens, a);
  ASSERT_TRUE(kv.reserve(a, 10));
  EXPECT_EQ(a.reserved_positions(), 12);
  EXPECT_EQ(kv.slots_needed(a, 13), 4);
  for (int i = 0; i < 12; ++i) EXPECT_EQ(a.slots[i] % 4, i % 4);
  kv.release(tokens, a, true);  // 8 tokens (two pages) cached, the partial page freed
  EXPECT_EQ(kv.evictable_slots(), 8);
  EXPECT_EQ(kv.free_slots(), 24);
  SequenceKv b;
  EXPECT_EQ(kv.acquire_prefix(tokens, b), 8);
  ASSERT_TRUE(kv.reserve(b, 11));
  EXPECT_EQ(b.reserved_positions(), 12);
  kv.check_invariant();
  kv.release({}, b, false);
  kv.check_invariant();
}

TEST(KvManager, DisabledRadixCacheSharesNothing) {
  KvManager kv({16, 1, true});
  SequenceKv a, b;
  kv.acquire_prefix(Tokens{1, 2, 3}, a);
  ASSERT_TRUE(kv.reserve(a, 3));
  kv.release(Tokens{1, 2, 3}, a, true);
  EXPECT_EQ(kv.free_slots(), 16);
  EXPECT_EQ(kv.acquire_prefix(Tokens{1, 2, 3}, b), 0);
  kv.check_invariant();
  EXPECT_TRUE(kv.flush());
}

TEST(KvManager, FlushRefusedWhileLocked) {
  KvManager kv({16, 1, false});
  SequenceKv a, b;
  kv.acquire_prefix(Tokens{1, 2}, a);
  ASSERT_TRUE(kv.reserve(a, 2));
  kv.release(Tokens{1, 2}, a, true);
  kv.acquire_prefix(Tokens{1, 2, 3}, b);
  EXPECT_FALSE(kv.flush());
  kv.release({}, b, false);
  EXPECT_TRUE(kv.flush());
  EXPECT_EQ(kv.free_slots(), 16);
  EXPECT_THROW(kv.acquire_prefix(Tokens{1}, a = SequenceKv{{1}, 0, nullptr}), Error);
}

}  // namespace
}  // namespace fathom::kv_cache
