#pragma once
// The table a paged decode attention reads: for each sequence of a batch, the cache page of every page_size positions
// of its context, built on the host every decode step from the sequences' per-position slots.
#include <cstdint>
#include <span>

namespace fathom::kv_cache {

// Writes table [rows, width]: row s < sequence_slots.size() holds the pages of positions [0, kv_lens[s]) of sequence
// s, page p being sequence_slots[s][p * page_size] / page_size (with pages of one token: every position's slot), for
// p < min(width, ceil(kv_lens[s] / page_size)); every other entry, and every row past the sequences, padding_page.
// Slots must already satisfy check_slots_in_pages (a page's first slot names it). Throws on inconsistent sizes.
void fill_decode_page_table(std::span<const int32_t* const> sequence_slots, std::span<const int32_t> kv_lens,
                            int32_t page_size, int32_t padding_page, size_t rows, int32_t width,
                            std::span<int32_t> table);

}  // namespace fathom::kv_cache
