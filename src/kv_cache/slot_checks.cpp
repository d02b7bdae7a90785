#include "kv_cache/slot_checks.h"

#include <algorithm>

#include "core/error.h"

namespace fathom::kv_cache {

void check_slots_in_cache(std::span<const int32_t> slots, int64_t num_slots) {
  // Negative slots read as unsigned lie above every limit (at most 2^31: slots are int32).
  const auto limit = static_cast<uint32_t>(std::clamp<int64_t>(num_slots, 0, int64_t{1} << 31));
  uint32_t outside = 0;
  for (const int32_t slot : slots) outside |= static_cast<uint32_t>(static_cast<uint32_t>(slot) >= limit);
  if (outside == 0) return;
  for (const int32_t slot : slots)
    FATHOM_CHECK(slot >= 0 && slot < num_slots, "KV slot " << slot << " outside the cache of " << num_slots << " slots");
}

void check_slots_in_pages(std::span<const int32_t> slots, int64_t page_size, int64_t num_slots) {
  FATHOM_CHECK(page_size >= 1, "KV page size " << page_size);
  const auto num_positions = static_cast<int64_t>(slots.size());
  for (int64_t begin = 0; begin < num_positions; begin += page_size) {
    const int64_t count = std::min(page_size, num_positions - begin);
    const int32_t* run = slots.data() + begin;
    const int64_t first = run[0];
    const bool in_page = first >= 0 && first % page_size == 0 && first + count <= num_slots;
    // Bits that differ from first, first + 1, ... (unsigned: wraps, never overflows).
    uint32_t mismatch = 0;
    for (uint32_t i = 0; i < static_cast<uint32_t>(count); ++i)
      mismatch |= static_cast<uint32_t>(run[i]) ^ (static_cast<uint32_t>(first) + i);
    if (in_page && mismatch == 0) continue;
    for (int64_t i = 0; i < count; ++i) {
      FATHOM_CHECK(run[i] >= 0 && run[i] < num_slots, "KV slot " << run[i] << " outside the cache of " << num_slots << " slots");
      FATHOM_CHECK(first % page_size == 0 && run[i] == first + i,
                   "position " << begin + i << " of a sequence is in KV slot " << run[i] << ", not in the page of "
                               << page_size << " slots its run began in (slot " << first
                               << "): the slots must come in whole pages (--page-size)");
    }
  }
}

}  // namespace fathom::kv_cache
