// RadixCache: unit cases plus thousands of random operations checked against a reference model that stores every
// cached token prefix in a map (slot, last use, lock count), after every operation.
#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <random>
#include <set>

#include "core/error.h"
#include "kv_cache/radix_cache.h"

namespace fathom::kv_cache {
namespace {

using Tokens = std::vector<int32_t>;

std::vector<int32_t> take(KvSlotPool& pool, int64_t count) {
  auto slots = pool.allocate(count);
  EXPECT_TRUE(slots.has_value());
  return slots.value_or(std::vector<int32_t>{});
}

// Prompt scores ride with their tokens: kept through splits, read along the cached path until a token without one
// (or with too few alternatives), filled in (or upgraded) by a later insert of the same tokens, freed with the node.
TEST(RadixCache, ScoresFollowTheirTokens) {
  KvSlotPool pool(32);
  RadixCache cache(pool);
  auto score = [](float logprob, int32_t top_n) { return std::optional<TokenScore>(TokenScore{logprob, 1, top_n, {}}); };
  const Tokens a = {1, 2, 3, 4, 5, 6};
  std::vector<std::optional<TokenScore>> scores_a = {std::nullopt, score(-1, 2), score(-2, 2), score(-3, 2),
                                                     std::nullopt, score(-6, 2)};
  EXPECT_EQ(cache.insert(a, take(pool, 6), scores_a), 0);
  auto logprobs = [&](const Tokens& tokens, size_t begin, int32_t top_n) {
    std::vector<float> values;
    const size_t run = cache.cached_score_run(tokens, begin, top_n);
    for (const TokenScore& s : cache.cached_scores(tokens, begin, top_n, run)) values.push_back(s.logprob);
    return values;
  };
  EXPECT_EQ(logprobs(a, 1, 2), std::vector<float>({-1, -2, -3}));  // stops at token 5 (none)
  EXPECT_EQ(logprobs(a, 0, 0), std::vector<float>());               // token 1 has none
  EXPECT_EQ(logprobs(a, 1, 3), std::vector<float>());               // too few alternatives
  EXPECT_EQ(logprobs(Tokens{1, 2, 9}, 1, 0), std::vector<float>({-1}));  // off the path after token 2
  EXPECT_EQ(logprobs(a, 5, 1), std::vector<float>({-6}));
  // A split keeps each token's score.
  const Tokens b = {1, 2, 3, 8};
  std::vector<int32_t> slots_b = cache.match_prefix(b).slots;  // the tree's own slots for the shared prefix
  slots_b.push_back(take(pool, 1).front());
  EXPECT_EQ(cache.insert(b, slots_b, std::vector<std::optional<TokenScore>>{std::nullopt, std::nullopt, score(-20, 5),
                                                                            score(-8, 5)}),
            3);
  EXPECT_EQ(logprobs(a, 1, 2), std::vector<float>({-1, -20, -3}));  // token 3 upgraded to 5 alternatives
  EXPECT_EQ(logprobs(b, 1, 2), std::vector<float>({-1, -20, -8}));
  EXPECT_EQ(logprobs(b, 2, 5), std::vector<float>({-20, -8}));
  // Filling in a token that had none.
  std::vector<std::optional<TokenScore>> fill(6);
  fill[4] = score(-5, 2);
  EXPECT_EQ(cache.insert(a, cache.match_prefix(a).slots, fill), 6);
  EXPECT_EQ(logprobs(a, 1, 2), std::vector<float>({-1, -20, -3, -5, -6}));
  cache.check_consistency();
  EXPECT_EQ(cache.evict(100), 7);
  EXPECT_EQ(cache.cached_score_run(a, 1, 0), 0u);
  cache.check_consistency();
  EXPECT_THROW(cache.insert(Tokens{1, 2}, take(pool, 2), std::vector<std::optional<TokenScore>>(1)), Error);
}

// With pages of 4: scores are read through a page the request shares only in part, and a split made by a match
// keeps them (a half with none keeps none).
TEST(RadixCache, ScoresAcrossPartialPages) {
  KvSlotPool pool(32, 4);
  RadixCache cache(pool);
  const Tokens a = {1, 2, 3, 4, 5, 6, 7, 8};
  std::vector<std::optional<TokenScore>> scores(8);
  for (size_t i = 1; i < 8; ++i) scores[i] = TokenScore{-static_cast<float>(i), 1, 1, {}};
  EXPECT_EQ(cache.insert(a, take(pool, 8), scores), 0);
  EXPECT_EQ(cache.cached_score_run(Tokens{1, 2, 3, 4, 5, 6, 9, 9}, 1, 1), 5u);  // positions 1..5
  EXPECT_EQ(cache.cached_score_run(Tokens{1, 2, 3, 4, 5, 6}, 1, 1), 5u);        // a partial last page
  EXPECT_EQ(cache.cached_scores(Tokens{1, 2, 3, 4, 5, 6}, 2, 1, 3).back().logprob, -4.0f);
  RadixCache::Match match = cache.match_prefix(Tokens{1, 2, 3, 4, 9, 9, 9, 9});  // splits after the first page
  EXPECT_EQ(match.slots.size(), 4u);
  EXPECT_EQ(cache.num_nodes(), 2);
  EXPECT_EQ(cache.cached_score_run(a, 1, 1), 7u);
  cache.check_consistency();
}

TEST(RadixCache, MatchInsertSplitAndLock) {
  KvSlotPool pool(32);
  RadixCache cache(pool);
  const Tokens a = {1, 2, 3, 4, 5};
  const std::vector<int32_t> slots_a = take(pool, 5);
  EXPECT_EQ(cache.insert(a, slots_a), 0);
  EXPECT_EQ(cache.evictable_slots(), 5);

  RadixCache::Match match = cache.match_prefix(Tokens{1, 2, 3, 9});
  EXPECT_EQ(match.slots, std::vector<int32_t>(slots_a.begin(), slots_a.begin() + 3));
  EXPECT_EQ(cache.num_nodes(), 2);  // split at 3
  cache.lock(match.node);
  EXPECT_EQ(cache.locked_slots(), 3);
  EXPECT_EQ(cache.evictable_slots(), 2);

  // Inserting a sequence that shares the prefix: the caller keeps its duplicate slots for the shared part.
  const Tokens b = {1, 2, 3, 7, 8};
  std::vector<int32_t> slots_b = match.slots;
  std::vector<int32_t> own = take(pool, 2);
  slots_b.insert(slots_b.end(), own.begin(), own.end());
  EXPECT_EQ(cache.insert(b, slots_b), 3);
  EXPECT_EQ(cache.cached_slots(), 7);

  EXPECT_EQ(cache.evict(100), 4);  // both unlocked leaves; the locked prefix stays
  EXPECT_EQ(cache.locked_slots(), 3);
  EXPECT_FALSE(cache.reset());
  cache.unlock(match.node);
  EXPECT_THROW(cache.unlock(match.node), Error);
  EXPECT_TRUE(cache.reset());
  EXPECT_EQ(pool.free_slots(), 32);
  cache.check_consistency();
}

TEST(RadixCache, EvictsLeastRecentlyUsedFirst) {
  KvSlotPool pool(16);
  RadixCache cache(pool);
  cache.insert(Tokens{1, 1}, take(pool, 2));
  cache.insert(Tokens{2, 2}, take(pool, 2));
  cache.insert(Tokens{3, 3}, take(pool, 2));
  cache.match_prefix(Tokens{1, 1});  // 1 is now the most recent
  EXPECT_EQ(cache.evict(1), 2);
  EXPECT_EQ(cache.peek_prefix_length(Tokens{2, 2}), 0);
  EXPECT_EQ(cache.peek_prefix_length(Tokens{3, 3}), 2);
  EXPECT_EQ(cache.evict(1), 2);
  EXPECT_EQ(cache.peek_prefix_length(Tokens{3, 3}), 0);
  EXPECT_EQ(cache.peek_prefix_length(Tokens{1, 1, 5}), 2);
}

TEST(RadixCache, PagedMatchesAreWholePages) {
  KvSlotPool pool(32, 4);
  RadixCache cache(pool);
  const Tokens tokens = {1, 2, 3, 4, 5, 6, 7, 8};
  std::vector<int32_t> slots = take(pool, 8);
  EXPECT_EQ(cache.insert(tokens, slots), 0);
  EXPECT_THROW(cache.insert(Tokens{1, 2, 3}, std::vector<int32_t>{0, 1, 2}), Error);
  EXPECT_EQ(cache.peek_prefix_length(Tokens{1, 2, 3, 4, 5, 6, 7}), 4);
  EXPECT_EQ(cache.peek_prefix_length(Tokens{1, 2, 3, 4, 5, 6, 9, 9}), 4);  // a page differs
  EXPECT_EQ(cache.peek_prefix_length(Tokens{1, 2, 3}), 0);
  RadixCache::Match match = cache.match_prefix(Tokens{1, 2, 3, 4, 5, 6, 9, 9, 9});
  EXPECT_EQ(match.slots.size(), 4u);
  cache.check_consistency();
}

// ---- randomized comparison with a reference model ----

struct RefEntry {  // one cached page: the prefix ending with it maps to its slots
  std::vector<int32_t> slots;
  uint64_t last_use = 0;
  int64_t locks = 0;
};

struct Handle {  // a "request" holding a locked prefix
  Tokens tokens;
  int64_t matched = 0;
  RadixNode* node = nullptr;
  std::vector<int32_t> slots;  // the tree's slots of the matched prefix
};

class RadixReference {
 public:
  explicit RadixReference(int64_t page) : page_(page) {}
  std::map<Tokens, RefEntry> entries;  // every cached page-aligned token prefix

  int64_t match_length(const Tokens& tokens) const {
    int64_t length = 0;
    for (int64_t end = page_; end <= static_cast<int64_t>(tokens.size()); end += page_) {
      if (!entries.count(Tokens(tokens.begin(), tokens.begin() + end))) break;
      length = end;
    }
    return length;
  }
  void touch(const Tokens& tokens, int64_t length, uint64_t now) {
    for (int64_t end = page_; end <= length; end += page_) entries.at(Tokens(tokens.begin(), tokens.begin() + end)).last_use = now;
  }
  void add_locks(const Tokens& tokens, int64_t length, int64_t delta) {
    for (int64_t end = page_; end <= length; end += page_) entries.at(Tokens(tokens.begin(), tokens.begin() + end)).locks += delta;
  }
  bool is_leaf(const Tokens& prefix) const {
    auto next = entries.upper_bound(prefix);
    return next == entries.end() || next->first.size() <= prefix.size() ||
           !std::equal(prefix.begin(), prefix.end(), next->first.begin());
  }

 private:
  int64_t page_;
};

std::map<Tokens, std::vector<int32_t>> tree_prefixes(const RadixCache& cache) {
  std::map<Tokens, std::vector<int32_t>> prefixes;  // page-aligned prefix -> slots of its last page
  const size_t page = static_cast<size_t>(cache.page_size());
  for (const RadixCache::CachedSequence& sequence : cache.dump()) {
    for (size_t end = page; end <= sequence.tokens.size(); end += page) {
      prefixes[Tokens(sequence.tokens.begin(), sequence.tokens.begin() + end)] =
          std::vector<int32_t>(sequence.slots.begin() + (end - page), sequence.slots.begin() + end);
    }
  }
  return prefixes;
}

void check_against_reference(const RadixCache& cache, const KvSlotPool& pool, const RadixReference& reference,
                             const std::vector<Handle>& handles, int step) {
  SCOPED_TRACE("step " + std::to_string(step));
  cache.check_consistency();
  const std::map<Tokens, std::vector<int32_t>> prefixes = tree_prefixes(cache);
  ASSERT_EQ(prefixes.size(), reference.entries.size());
  int64_t locked = 0;
  std::set<int32_t> slots;
  for (const auto& [prefix, entry] : reference.entries) {
    auto found = prefixes.find(prefix);
    ASSERT_NE(found, prefixes.end());
    EXPECT_EQ(found->second, entry.slots);
    for (int32_t slot : entry.slots) {
      EXPECT_TRUE(slots.insert(slot).second) << "slot " << slot << " cached twice";
      EXPECT_FALSE(pool.is_free(slot));
    }
    if (entry.locks > 0) locked += cache.page_size();
  }
  EXPECT_EQ(cache.locked_slots(), locked);
  EXPECT_EQ(cache.evictable_slots(), static_cast<int64_t>(reference.entries.size()) * cache.page_size() - locked);
  // Nothing outside the tree is held between operations: free + evictable + locked == total.
  EXPECT_EQ(pool.free_slots() + cache.evictable_slots() + cache.locked_slots(), pool.total_slots());
  (void)handles;
}

void run_random_ops(int64_t page, uint32_t seed, int num_ops) {
  SCOPED_TRACE("page " + std::to_string(page) + " seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  KvSlotPool pool(48, page);
  RadixCache cache(pool);
  RadixReference reference(page);
  std::vector<Handle> handles;
  uint64_t now = 0;  // mirrors the cache's logical clock: one tick per match or insert
  auto random_tokens = [&] {
    Tokens tokens(std::uniform_int_distribution<int>(1, 12)(rng));
    for (int32_t& token : tokens) token = std::uniform_int_distribution<int>(0, 2)(rng);
    return tokens;
  };
  int evictions_checked = 0;
  for (int step = 0; step < num_ops; ++step) {
    const int op = std::uniform_int_distribution<int>(0, 9)(rng);
    if (op <= 2 && handles.size() < 6) {  // match + lock
      Handle handle;
      handle.tokens = random_tokens();
      const int64_t expected = reference.match_length(handle.tokens);
      EXPECT_EQ(cache.peek_prefix_length(handle.tokens), expected);
      RadixCache::Match match = cache.match_prefix(handle.tokens);
      ++now;
      ASSERT_EQ(static_cast<int64_t>(match.slots.size()), expected);
      for (int64_t end = page; end <= expected; end += page) {
        EXPECT_EQ(std::vector<int32_t>(match.slots.begin() + (end - page), match.slots.begin() + end),
                  reference.entries.at(Tokens(handle.tokens.begin(), handle.tokens.begin() + end)).slots);
      }
      reference.touch(handle.tokens, expected, now);
      cache.lock(match.node);
      reference.add_locks(handle.tokens, expected, 1);
      handle.matched = expected;
      handle.node = match.node;
      handle.slots = match.slots;
      handles.push_back(std::move(handle));
    } else if (op <= 5 && !handles.empty()) {  // the request computed its tokens: insert them, then unlock
      const size_t index = std::uniform_int_distribution<size_t>(0, handles.size() - 1)(rng);
      Handle handle = handles[index];
      handles.erase(handles.begin() + static_cast<std::ptrdiff_t>(index));
      const int64_t length = static_cast<int64_t>(handle.tokens.size()) / page * page;
      const int64_t own_count = length - handle.matched;
      if (own_count > pool.free_slots()) cache.evict(own_count - pool.free_slots());
      // (a failed eviction here only means the tree is locked full; skip the insert then)
      std::vector<int32_t> slots = handle.slots;
      std::vector<int32_t> own;
      if (own_count > 0 && pool.free_slots() >= own_count) own = take(pool, own_count);
      if (static_cast<int64_t>(own.size()) == own_count) {
        slots.insert(slots.end(), own.begin(), own.end());
        const Tokens key(handle.tokens.begin(), handle.tokens.begin() + length);
        // Reference first sees the evictions (by diffing below), so compute expectations after them.
        std::map<Tokens, std::vector<int32_t>> before = tree_prefixes(cache);
        for (auto it = reference.entries.begin(); it != reference.entries.end();) {
          it = before.count(it->first) ? std::next(it) : reference.entries.erase(it);
        }
        const int64_t expected_present = reference.match_length(key);
        const int64_t present = cache.insert(key, slots);
        ++now;
        EXPECT_EQ(present, expected_present);
        EXPECT_GE(present, handle.matched);
        if (present > handle.matched) pool.free(std::vector<int32_t>(slots.begin() + handle.matched, slots.begin() + present));
        for (int64_t end = page; end <= length; end += page) {
          RefEntry& entry = reference.entries[Tokens(key.begin(), key.begin() + end)];
          if (end > present) entry.slots.assign(slots.begin() + (end - page), slots.begin() + end);
          entry.last_use = now;
        }
      }
      cache.unlock(handle.node);
      reference.add_locks(handle.tokens, handle.matched, -1);
    } else if (op <= 7) {  // evict
      const int64_t want = std::uniform_int_distribution<int64_t>(1, 16)(rng);
      const int64_t evictable_before = cache.evictable_slots();
      const int64_t freed = cache.evict(want);
      const std::map<Tokens, std::vector<int32_t>> after = tree_prefixes(cache);
      uint64_t newest_evicted = 0;
      int64_t evicted = 0;
      for (auto it = reference.entries.begin(); it != reference.entries.end();) {
        if (after.count(it->first)) {
          ++it;
          continue;
        }
        EXPECT_EQ(it->second.locks, 0) << "a locked prefix was evicted";
        for (int32_t slot : it->second.slots) EXPECT_TRUE(pool.is_free(slot));
        newest_evicted = std::max(newest_evicted, it->second.last_use);
        evicted += page;
        it = reference.entries.erase(it);
      }
      EXPECT_EQ(freed, evicted);
      if (evictable_before >= want) EXPECT_GE(freed, want);
      else EXPECT_EQ(freed, evictable_before);
      EXPECT_LT(freed - want, 12) << "evicted more than one extra leaf";
      if (evicted > 0) {
        ++evictions_checked;
        for (const auto& [prefix, entry] : reference.entries) {  // LRU: every remaining evictable leaf is newer
          if (entry.locks == 0 && reference.is_leaf(prefix)) EXPECT_GE(entry.last_use, newest_evicted);
        }
      }
    } else if (op == 8 && handles.empty()) {
      EXPECT_TRUE(cache.reset());
      reference.entries.clear();
    } else if (!handles.empty()) {  // give up a lock without inserting
      cache.unlock(handles.back().node);
      reference.add_locks(handles.back().tokens, handles.back().matched, -1);
      handles.pop_back();
    }
    check_against_reference(cache, pool, reference, handles, step);
    if (::testing::Test::HasFailure()) return;
  }
  EXPECT_GT(evictions_checked, num_ops / 50);
}

TEST(RadixCacheRandomized, MatchesReferenceModelPageSize1) {
  for (uint32_t seed = 1; seed <= 3; ++seed) run_random_ops(1, seed, 2000);
}

TEST(RadixCacheRandomized, MatchesReferenceModelPageSize2) {
  for (uint32_t seed = 1; seed <= 2; ++seed) run_random_ops(2, seed, 2000);
}

TEST(RadixCacheRandomized, MatchesReferenceModelPageSize4) { run_random_ops(4, 7, 2000); }

}  // namespace
}  // namespace fathom::kv_cache
