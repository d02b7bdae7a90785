#pragma once
// Free list of KV-cache slots (rows of a LatentKvCache), handed out in whole pages of `page_size` slots.
// A page is slots [p * page_size, (p + 1) * page_size); a sequence stores position i of a page-aligned run in
// page_start + i % page_size, so the slots of one page always hold consecutive positions of one sequence.
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace fathom::kv_cache {

class KvSlotPool {
 public:
  // num_slots is rounded down to whole pages; throws fathom::Error unless page_size >= 1 and one page fits.
  KvSlotPool(int64_t num_slots, int64_t page_size = 1);

  int64_t page_size() const { return page_size_; }
  int64_t total_slots() const { return num_pages_ * page_size_; }
  int64_t free_slots() const { return static_cast<int64_t>(free_pages_.size()) * page_size_; }
  int64_t used_slots() const { return total_slots() - free_slots(); }
  // Slots needed to cover positions [0, num_positions) in whole pages.
  int64_t round_up_to_pages(int64_t num_positions) const;

  // Single-threaded (owner's thread); the caller owns the returned slots (page runs, each page's slots
  // consecutive); nullopt and no change when fewer than num_slots are free; throws unless num_slots is a page multiple.
  std::optional<std::vector<int32_t>> allocate(int64_t num_slots);
  // Single-threaded; takes back ownership of whole pages (each given as its page_size consecutive slots, page
  // aligned); throws fathom::Error, changing nothing, on a misaligned run, an out-of-range slot or a double free.
  void free(std::span<const int32_t> slots);
  // Single-threaded; true when `slot` lies in a page that is currently free.
  bool is_free(int32_t slot) const;

 private:
  int64_t page_size_;
  int64_t num_pages_;
  std::vector<int32_t> free_pages_;   // stack of page indices; the lowest page is handed out first initially
  std::vector<uint8_t> page_is_free_;  // [num_pages]
};

}  // namespace fathom::kv_cache
