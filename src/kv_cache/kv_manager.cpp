#include "kv_cache/kv_manager.h"

#include <algorithm>

#include "core/error.h"

namespace fathom::kv_cache {

KvManager::KvManager(const KvManagerConfig& config) : pool_(config.num_slots, config.page_size) {
  if (!config.disable_radix_cache) radix_ = std::make_unique<RadixCache>(pool_);
}

int64_t KvManager::slots_needed(const SequenceKv& seq, int64_t num_positions) const {
  return std::max<int64_t>(0, pool_.round_up_to_pages(num_positions) - seq.reserved_positions());
}

int64_t KvManager::peek_prefix_length(std::span<const int32_t> tokens) const {
  return radix_ ? radix_->peek_prefix_length(tokens) : 0;
}

int64_t KvManager::acquire_prefix(std::span<const int32_t> tokens, SequenceKv& seq) {
  FATHOM_CHECK(seq.empty(), "KV manager: acquire_prefix on a sequence that already holds " << seq.slots.size() << " slots");
  if (!radix_) return 0;
  RadixCache::Match match = radix_->match_prefix(tokens);
  radix_->lock(match.node);
  seq.slots = std::move(match.slots);
  seq.cached_len = seq.reserved_positions();
  seq.locked_node = match.node;
  return seq.cached_len;
}

bool KvManager::reserve(SequenceKv& seq, int64_t num_positions) {
  const int64_t needed = slots_needed(seq, num_positions);
  if (needed == 0) return true;
  if (needed > available_slots()) return false;
  if (pool_.free_slots() < needed) evict(needed - pool_.free_slots());
  std::optional<std::vector<int32_t>> pages = pool_.allocate(needed);
  FATHOM_CHECK(pages.has_value(), "KV manager: " << needed << " slots were available but allocation failed");
  seq.slots.insert(seq.slots.end(), pages->begin(), pages->end());
  owned_slots_ += needed;
  return true;
}

size_t KvManager::cached_score_run(std::span<const int32_t> tokens, size_t begin, int32_t min_top_n) const {
  return radix_ ? radix_->cached_score_run(tokens, begin, min_top_n) : 0;
}

std::vector<TokenScore> KvManager::cached_scores(std::span<const int32_t> tokens, size_t begin, int32_t min_top_n,
                                                 size_t count) const {
  return radix_ ? radix_->cached_scores(tokens, begin, min_top_n, count) : std::vector<TokenScore>{};
}

void KvManager::commit(std::span<const int32_t> tokens, SequenceKv& seq, std::span<const std::optional<TokenScore>> scores) {
  if (!radix_) return;
  FATHOM_CHECK(static_cast<int64_t>(tokens.size()) <= seq.reserved_positions(),
               "KV manager: committing " << tokens.size() << " tokens of a sequence with " << seq.reserved_positions()
                                         << " reserved positions");
  FATHOM_CHECK(scores.empty() || scores.size() == tokens.size(),
               "KV manager: committing " << tokens.size() << " tokens with " << scores.size() << " scores");
  const int64_t aligned = static_cast<int64_t>(tokens.size()) / page_size() * page_size();
  if (aligned <= seq.cached_len) return;
  tokens = tokens.first(static_cast<size_t>(aligned));
  if (!scores.empty()) scores = scores.first(static_cast<size_t>(aligned));
  const std::span<const int32_t> slots(seq.slots.data(), static_cast<size_t>(aligned));
  const int64_t already_cached = radix_->insert(tokens, slots, scores);
  FATHOM_CHECK(already_cached >= seq.cached_len, "KV manager: the cache lost a locked prefix (" << already_cached << " < "
                                                                                              << seq.cached_len << ")");
  // Our slots for tokens someone else cached first are duplicates: free them and use the tree's.
  if (already_cached > seq.cached_len) {
    pool_.free(std::span<const int32_t>(seq.slots.data() + seq.cached_len, static_cast<size_t>(already_cached - seq.cached_len)));
  }
  RadixCache::Match match = radix_->match_prefix(tokens);
  FATHOM_CHECK(static_cast<int64_t>(match.slots.size()) == aligned, "KV manager: inserted " << aligned
                                                                     << " tokens but only " << match.slots.size() << " match");
  radix_->lock(match.node);
  if (seq.locked_node) radix_->unlock(seq.locked_node);
  std::copy(match.slots.begin(), match.slots.end(), seq.slots.begin());
  owned_slots_ -= aligned - seq.cached_len;
  seq.cached_len = aligned;
  seq.locked_node = match.node;
}

void KvManager::release(std::span<const int32_t> tokens, SequenceKv& seq, bool cache_tokens,
                        std::span<const std::optional<TokenScore>> scores) {
  if (cache_tokens) commit(tokens, seq, scores);
  const int64_t owned = seq.owned_slots();
  if (owned > 0) pool_.free(std::span<const int32_t>(seq.slots.data() + seq.cached_len, static_cast<size_t>(owned)));
  owned_slots_ -= owned;
  if (seq.locked_node) radix_->unlock(seq.locked_node);
  seq = SequenceKv{};
}

int64_t KvManager::evict(int64_t num_slots) { return radix_ ? radix_->evict(num_slots) : 0; }

bool KvManager::flush() { return radix_ ? radix_->reset() : true; }

void KvManager::check_invariant() const {
  if (radix_) radix_->check_consistency();
  const int64_t accounted = free_slots() + evictable_slots() + locked_slots() + owned_slots_;
  FATHOM_CHECK(accounted == total_slots(), "KV accounting broken: free " << free_slots() << " + evictable " << evictable_slots()
                                                                         << " + locked " << locked_slots() << " + owned "
                                                                         << owned_slots_ << " != total " << total_slots());
}

}  // namespace fathom::kv_cache
