#include "kv_cache/kv_slot_pool.h"

#include <algorithm>
#include <limits>

#include "core/error.h"

namespace fathom::kv_cache {

KvSlotPool::KvSlotPool(int64_t num_slots, int64_t page_size) : page_size_(page_size) {
  FATHOM_CHECK(page_size >= 1, "KV slot pool: page size must be >= 1, got " << page_size);
  FATHOM_CHECK(num_slots >= page_size, "KV slot pool: " << num_slots << " slots do not fill one page of " << page_size);
  FATHOM_CHECK(num_slots <= std::numeric_limits<int32_t>::max(), "KV slot pool: " << num_slots << " slots exceed int32 indices");
  num_pages_ = num_slots / page_size;
  page_is_free_.assign(static_cast<size_t>(num_pages_), 1);
  free_pages_.reserve(static_cast<size_t>(num_pages_));
  for (int64_t page = num_pages_ - 1; page >= 0; --page) free_pages_.push_back(static_cast<int32_t>(page));
}

int64_t KvSlotPool::round_up_to_pages(int64_t num_positions) const {
  return (num_positions + page_size_ - 1) / page_size_ * page_size_;
}

std::optional<std::vector<int32_t>> KvSlotPool::allocate(int64_t num_slots) {
  FATHOM_CHECK(num_slots >= 0 && num_slots % page_size_ == 0,
               "KV slot pool: allocation of " << num_slots << " slots is not a whole number of pages of " << page_size_);
  if (num_slots > free_slots()) return std::nullopt;
  std::vector<int32_t> slots;
  slots.reserve(static_cast<size_t>(num_slots));
  for (int64_t n = 0; n < num_slots / page_size_; ++n) {
    const int32_t page = free_pages_.back();
    free_pages_.pop_back();
    page_is_free_[static_cast<size_t>(page)] = 0;
    for (int64_t i = 0; i < page_size_; ++i) slots.push_back(static_cast<int32_t>(page * page_size_ + i));
  }
  return slots;
}

void KvSlotPool::free(std::span<const int32_t> slots) {
  FATHOM_CHECK(static_cast<int64_t>(slots.size()) % page_size_ == 0,
               "KV slot pool: freeing " << slots.size() << " slots, not a whole number of pages of " << page_size_);
  // Validate everything first so a bad call changes nothing.
  std::vector<int32_t> pages;
  pages.reserve(slots.size() / static_cast<size_t>(page_size_));
  for (size_t begin = 0; begin < slots.size(); begin += static_cast<size_t>(page_size_)) {
    const int32_t first = slots[begin];
    FATHOM_CHECK(first >= 0 && first < total_slots(), "KV slot pool: slot " << first << " out of range [0, " << total_slots() << ")");
    FATHOM_CHECK(first % page_size_ == 0, "KV slot pool: slot " << first << " does not start a page of " << page_size_);
    for (int64_t i = 1; i < page_size_; ++i) {
      FATHOM_CHECK(slots[begin + static_cast<size_t>(i)] == first + i,
                   "KV slot pool: page starting at slot " << first << " is not given as consecutive slots");
    }
    const int32_t page = static_cast<int32_t>(first / page_size_);
    FATHOM_CHECK(page_is_free_[static_cast<size_t>(page)] == 0, "KV slot pool: double free of slot " << first);
    pages.push_back(page);
  }
  std::vector<int32_t> sorted = pages;
  std::sort(sorted.begin(), sorted.end());
  const auto duplicate = std::adjacent_find(sorted.begin(), sorted.end());
  FATHOM_CHECK(duplicate == sorted.end(), "KV slot pool: slot " << *duplicate * page_size_ << " freed twice in one call");
  for (int32_t page : pages) {
    page_is_free_[static_cast<size_t>(page)] = 1;
    free_pages_.push_back(page);
  }
}

bool KvSlotPool::is_free(int32_t slot) const {
  FATHOM_CHECK(slot >= 0 && slot < total_slots(), "KV slot pool: slot " << slot << " out of range [0, " << total_slots() << ")");
  return page_is_free_[static_cast<size_t>(slot / page_size_)] == 1;
}

}  // namespace fathom::kv_cache
