// The decode page table built from per-position slots: every entry written (pages, then padding), for pages of one
// token (a bulk copy) and larger pages, against a position-by-position reference.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "core/error.h"
#include "kv_cache/decode_page_table.h"

namespace fathom::kv_cache {
namespace {

// Slots of a sequence of `length` positions on shuffled pages of `page_size` slots out of `num_pages`.
std::vector<int32_t> paged_slots(int32_t length, int32_t page_size, int32_t num_pages, std::mt19937& rng) {
  std::vector<int32_t> pages(static_cast<size_t>(num_pages));
  for (int32_t p = 0; p < num_pages; ++p) pages[static_cast<size_t>(p)] = p;
  std::shuffle(pages.begin(), pages.end(), rng);
  std::vector<int32_t> slots(static_cast<size_t>(length));
  for (int32_t i = 0; i < length; ++i)
    slots[static_cast<size_t>(i)] = pages[static_cast<size_t>(i / page_size)] * page_size + i % page_size;
  return slots;
}

// Entry (s, p): the page holding position p * page_size of sequence s while inside its context and the table.
std::vector<int32_t> reference_table(const std::vector<std::vector<int32_t>>& slots, int32_t page_size,
                                     int32_t padding_page, size_t rows, int32_t width) {
  std::vector<int32_t> table(rows * static_cast<size_t>(width), padding_page);
  for (size_t s = 0; s < slots.size(); ++s)
    for (int32_t p = 0; p < width && static_cast<size_t>(p) * page_size < slots[s].size(); ++p)
      table[s * static_cast<size_t>(width) + static_cast<size_t>(p)] = slots[s][static_cast<size_t>(p) * page_size] / page_size;
  return table;
}

TEST(DecodePageTable, MatchesThePositionByPositionTableForEveryPageSize) {
  std::mt19937 rng(17);
  for (const int32_t page_size : {1, 16, 64}) {
    SCOPED_TRACE(page_size);
    // Empty, one token, a page edge on each side, whole pages, and a context longer than the table is wide.
    const std::vector<int32_t> lengths = {0, 1, page_size - 1, page_size, page_size + 1, 3 * page_size, 300, 1000};
    std::vector<std::vector<int32_t>> slots;
    std::vector<const int32_t*> pointers;
    std::vector<int32_t> kv_lens;
    for (const int32_t length : lengths) {
      slots.push_back(paged_slots(length, page_size, 1000 / page_size + 4, rng));
      pointers.push_back(slots.back().data());
      kv_lens.push_back(length);
    }
    const int32_t padding_page = 4321;
    const int32_t width = 700 / page_size + 1;  // cuts the 1000-token sequence short (as a table narrower than it)
    const size_t rows = lengths.size() + 3;    // padded rows past the sequences (captured batch sizes)
    std::vector<int32_t> table(rows * static_cast<size_t>(width) + 5, -7);  // poisoned; the 5 past the end stay
    fill_decode_page_table(pointers, kv_lens, page_size, padding_page, rows, width, table);
    const std::vector<int32_t> expected = reference_table(slots, page_size, padding_page, rows, width);
    for (size_t i = 0; i < expected.size(); ++i) ASSERT_EQ(table[i], expected[i]) << "entry " << i;
    for (size_t i = expected.size(); i < table.size(); ++i) EXPECT_EQ(table[i], -7) << "written past the table";
  }
}

TEST(DecodePageTable, RejectsInconsistentSizes) {
  const std::vector<int32_t> slots = {0, 1, 2, 3};
  const std::vector<const int32_t*> pointers = {slots.data(), slots.data()};
  std::vector<int32_t> table(8);
  EXPECT_THROW(fill_decode_page_table(pointers, std::vector<int32_t>{4}, 1, 0, 2, 4, table), Error);  // one length
  EXPECT_THROW(fill_decode_page_table(pointers, std::vector<int32_t>{4, 4}, 1, 0, 1, 4, table), Error);  // one row
  EXPECT_THROW(fill_decode_page_table(pointers, std::vector<int32_t>{4, 4}, 1, 0, 2, 5, table), Error);  // too small
  EXPECT_THROW(fill_decode_page_table(pointers, std::vector<int32_t>{4, 4}, 0, 0, 2, 4, table), Error);  // page 0
  EXPECT_NO_THROW(fill_decode_page_table(pointers, std::vector<int32_t>{4, 4}, 1, 0, 2, 4, table));
  EXPECT_EQ(table, (std::vector<int32_t>{0, 1, 2, 3, 0, 1, 2, 3}));
}

}  // namespace
}  // namespace fathom::kv_cache
