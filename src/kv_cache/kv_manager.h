#pragma once
// Per-sequence KV bookkeeping over a KvSlotPool and an optional RadixCache (disabled = no prefix sharing):
// which slots a sequence holds, which of them it shares with the prefix cache, and the global accounting
// invariant free + evictable + locked + owned-by-sequences == total.
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "kv_cache/kv_slot_pool.h"
#include "kv_cache/radix_cache.h"

namespace fathom::kv_cache {

struct KvManagerConfig {
  int64_t num_slots = 0;           // KV capacity in tokens (rounded down to whole pages)
  int64_t page_size = 1;
  bool disable_radix_cache = false;
};

// The KV of one sequence: the slot of every reserved position. Positions [0, cached_len) are the radix tree's
// (kept alive by the lock on locked_node); the rest are the sequence's own pages.
struct SequenceKv {
  std::vector<int32_t> slots;        // [reserved_positions], a whole number of pages
  int64_t cached_len = 0;            // prefix shared with the prefix cache (page aligned)
  RadixNode* locked_node = nullptr;  // deepest shared node, locked while held (null: nothing locked)

  int64_t reserved_positions() const { return static_cast<int64_t>(slots.size()); }
  int64_t owned_slots() const { return reserved_positions() - cached_len; }
  bool empty() const { return slots.empty() && locked_node == nullptr; }
};

class KvManager {
 public:
  explicit KvManager(const KvManagerConfig& config);

  int64_t page_size() const { return pool_.page_size(); }
  int64_t total_slots() const { return pool_.total_slots(); }
  int64_t free_slots() const { return pool_.free_slots(); }
  int64_t evictable_slots() const { return radix_ ? radix_->evictable_slots() : 0; }
  int64_t locked_slots() const { return radix_ ? radix_->locked_slots() : 0; }
  int64_t sequence_owned_slots() const { return owned_slots_; }
  int64_t available_slots() const { return free_slots() + evictable_slots(); }     // obtainable without retraction
  int64_t used_slots() const { return total_slots() - available_slots(); }        // locked + sequence-owned
  bool radix_enabled() const { return radix_ != nullptr; }
  // Slots that reserving positions [0, num_positions) for `seq` would take from the pool.
  int64_t slots_needed(const SequenceKv& seq, int64_t num_positions) const;

  // Read-only; length of the longest cached page-aligned prefix of `tokens` (0 when disabled).
  int64_t peek_prefix_length(std::span<const int32_t> tokens) const;
  // Single-threaded; `seq` must be empty (throws otherwise); shares and locks the longest cached page-aligned
  // prefix of `tokens` (nothing when disabled) and returns its length.
  int64_t acquire_prefix(std::span<const int32_t> tokens, SequenceKv& seq);
  // Single-threaded; extends seq.slots to cover positions [0, num_positions) with new pages, evicting unlocked
  // cache entries as needed; false with no change when not enough can be freed.
  bool reserve(SequenceKv& seq, int64_t num_positions);
  // Single-threaded; publishes the page-aligned prefix of `tokens` (their KV must be written, tokens.size() <=
  // reserved positions) in the prefix cache, with the known `scores` of its tokens (empty or [tokens]); the sequence
  // then shares it: its duplicate slots are freed and its lock moves to the new deepest node. No-op when disabled.
  void commit(std::span<const int32_t> tokens, SequenceKv& seq, std::span<const std::optional<TokenScore>> scores = {});
  // Single-threaded; ends the sequence: commits `tokens` (and `scores`) first when cache_tokens, then frees its own
  // pages and unlocks its prefix; `seq` becomes empty. Never fails for a sequence this manager set up.
  void release(std::span<const int32_t> tokens, SequenceKv& seq, bool cache_tokens,
               std::span<const std::optional<TokenScore>> scores = {});
  // Read-only; RadixCache::cached_score_run and cached_scores (0 and none when disabled).
  size_t cached_score_run(std::span<const int32_t> tokens, size_t begin, int32_t min_top_n) const;
  std::vector<TokenScore> cached_scores(std::span<const int32_t> tokens, size_t begin, int32_t min_top_n,
                                        size_t count) const;

  // Single-threaded; frees up to num_slots of unlocked cache (LRU); returns the amount freed.
  int64_t evict(int64_t num_slots);
  // Single-threaded; drops all unlocked cache entries; false (no change) when any prefix is locked.
  bool flush();
  // Throws fathom::Error unless free + evictable + locked + sequence-owned == total (and the tree is consistent).
  void check_invariant() const;

  KvSlotPool& pool() { return pool_; }
  const KvSlotPool& pool() const { return pool_; }
  RadixCache* radix() { return radix_.get(); }

 private:
  KvSlotPool pool_;
  std::unique_ptr<RadixCache> radix_;  // null when the prefix cache is disabled
  int64_t owned_slots_ = 0;
};

}  // namespace fathom::kv_cache
