#pragma once
// Checks of a sequence's per-position KV slots before a forward reads them. A backend runs them every step over
// every position of every sequence, so each is one vectorized pass when the slots are valid; the slow path only
// finds the offending position for the error message.
#include <cstdint>
#include <span>

namespace fathom::kv_cache {

// Throws fathom::Error naming the first slot outside [0, num_slots).
void check_slots_in_cache(std::span<const int32_t> slots, int64_t num_slots);

// Throws fathom::Error unless every page-aligned run of page_size positions (the last one may be shorter) lies, in
// order, in one page of a cache of num_slots slots: the run's first slot a multiple of page_size, the next ones
// consecutive. Readers of whole pages (a paged attention kernel) rely on it.
void check_slots_in_pages(std::span<const int32_t> slots, int64_t page_size, int64_t num_slots);

}  // namespace fathom::kv_cache
