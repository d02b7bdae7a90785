// Per-position KV slot checks: valid layouts pass; each kind of bad slot is rejected naming its position or slot.
#include <gtest/gtest.h>

#include <numeric>
#include <string>
#include <vector>

#include "error_message.h"
#include "kv_cache/kv_slot_pool.h"
#include "kv_cache/slot_checks.h"

namespace fathom::kv_cache {
namespace {

using fathom::testing::error_of;

std::vector<int32_t> iota_slots(size_t count, int32_t first) {
  std::vector<int32_t> slots(count);
  std::iota(slots.begin(), slots.end(), first);
  return slots;
}

TEST(SlotChecks, SlotsInCache) {
  EXPECT_EQ(error_of([] { check_slots_in_cache(iota_slots(100, 924), 1024); }), "");
  EXPECT_EQ(error_of([] { check_slots_in_cache({}, 1024); }), "");
  std::vector<int32_t> negative = iota_slots(50, 0);
  negative[37] = -1;
  EXPECT_NE(error_of([&] { check_slots_in_cache(negative, 1024); }).find("KV slot -1 outside the cache of 1024 slots"),
            std::string::npos);
  EXPECT_NE(error_of([] { check_slots_in_cache(iota_slots(100, 925), 1024); }).find("KV slot 1024 outside"),
            std::string::npos);
  // A cache above 2^31 slots admits every non-negative int32 slot, never a negative one.
  EXPECT_EQ(error_of([] { check_slots_in_cache(std::vector<int32_t>{0, 2147483647}, int64_t{1} << 33); }), "");
  EXPECT_NE(error_of([] { check_slots_in_cache(std::vector<int32_t>{5, -2147483647 - 1}, int64_t{1} << 33); }).find("KV slot -2147483648"),
            std::string::npos);
}

TEST(SlotChecks, WholePagesFromThePoolPass) {
  KvSlotPool pool(64 * 40, 64);
  auto first = pool.allocate(64 * 3);
  auto second = pool.allocate(64 * 5);  // interleaved ownership: pages of both sequences are not contiguous
  ASSERT_TRUE(first && second);
  for (size_t len : {size_t{1}, size_t{63}, size_t{64}, size_t{65}, size_t{64 * 5}}) {
    EXPECT_EQ(error_of([&] { check_slots_in_pages(std::span(*second).first(len), 64, pool.total_slots()); }), "")
        << len;
  }
  EXPECT_EQ(error_of([&] { check_slots_in_pages(*first, 64, pool.total_slots()); }), "");
  // Page size 1 makes every in-cache slot its own page.
  EXPECT_EQ(error_of([] { check_slots_in_pages(std::vector<int32_t>{7, 3, 1000, 0}, 1, 1024); }), "");
}

TEST(SlotChecks, RunsOutsideTheirPageAreRejected) {
  struct Case {
    std::vector<int32_t> slots;
    std::string expected;
  };
  std::vector<int32_t> split_page = iota_slots(100, 0);  // positions 64.. start a page at 192, then jump at 80
  for (size_t i = 64; i < split_page.size(); ++i) split_page[i] = static_cast<int32_t>(192 + i - 64 + (i >= 80 ? 64 : 0));
  std::vector<int32_t> swapped = iota_slots(64, 128);  // every slot in the page, two out of order
  std::swap(swapped[10], swapped[11]);
  std::vector<int32_t> high_bit = iota_slots(64, 0);  // differs from its run only in the sign bit
  high_bit[5] = static_cast<int32_t>(0x80000005u);
  const Case cases[] = {
      {split_page, "position 80 of a sequence is in KV slot 272, not in the page of 64 slots its run began in (slot 192)"},
      {iota_slots(100, 1), "position 0 of a sequence is in KV slot 1, not in the page of 64"},
      {iota_slots(100, 1024 - 64), "KV slot 1024 outside the cache of 1024 slots"},
      {swapped, "position 10 of a sequence is in KV slot 139"},
      {high_bit, "KV slot -2147483643 outside the cache"},
      {{64, 65, -1}, "KV slot -1 outside the cache"},
  };
  for (const Case& c : cases) {
    const std::string message = error_of([&] { check_slots_in_pages(c.slots, 64, 1024); });
    EXPECT_NE(message.find(c.expected), std::string::npos) << "expected: " << c.expected << "\ngot: " << message;
  }
  EXPECT_NE(error_of([] { check_slots_in_pages(std::vector<int32_t>{0}, 0, 1024); }).find("KV page size 0"), std::string::npos);
}

}  // namespace
}  // namespace fathom::kv_cache
