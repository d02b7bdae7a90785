#include "kv_cache/decode_page_table.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace fathom::kv_cache {

void fill_decode_page_table(std::span<const int32_t* const> sequence_slots, std::span<const int32_t> kv_lens,
                            int32_t page_size, int32_t padding_page, size_t rows, int32_t width,
                            std::span<int32_t> table) {
  FATHOM_CHECK(page_size >= 1 && width >= 0 && kv_lens.size() >= sequence_slots.size() &&
                   rows >= sequence_slots.size() && table.size() >= rows * static_cast<size_t>(width),
               "decode page table: page size " << page_size << ", width " << width << ", " << sequence_slots.size()
                                               << " sequences, " << kv_lens.size() << " lengths, " << rows << " rows, "
                                               << table.size() << " entries");
  for (size_t s = 0; s < rows; ++s) {
    int32_t* row = table.data() + s * static_cast<size_t>(width);
    int32_t used = 0;
    if (s < sequence_slots.size() && kv_lens[s] > 0) {
      const int64_t pages = (static_cast<int64_t>(kv_lens[s]) + page_size - 1) / page_size;
      used = static_cast<int32_t>(std::min<int64_t>(width, pages));
      const int32_t* slots = sequence_slots[s];
      if (page_size == 1) {
        std::memcpy(row, slots, static_cast<size_t>(used) * sizeof(int32_t));  // one bulk copy of the whole context
      } else {
        for (int32_t p = 0; p < used; ++p) row[p] = slots[static_cast<int64_t>(p) * page_size] / page_size;
      }
    }
    std::fill(row + used, row + width, padding_page);
  }
}

}  // namespace fathom::kv_cache
