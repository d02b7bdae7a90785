#pragma once
// Prefix cache: a radix tree over token ids whose edges own the KV slots of their tokens. Requests share a cached
// prefix by locking its deepest node (reference counts on the whole root path); unlocked leaves are evicted in
// least-recently-used order and their slots go back to the KvSlotPool. With page size P every edge holds a whole
// number of pages, so matches and inserts are rounded down to multiples of P.
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "kv_cache/kv_slot_pool.h"
#include "kv_cache/token_score.h"

namespace fathom::kv_cache {

struct RadixNode {
  std::vector<int32_t> key;    // [edge_len] tokens of the edge from the parent (a multiple of the page size)
  std::vector<int32_t> slots;  // [edge_len] KV slot of each token, owned by the tree
  std::vector<std::optional<TokenScore>> scores;  // [edge_len] or empty (none): each token's prompt score, if known
  RadixNode* parent = nullptr;
  std::map<std::vector<int32_t>, std::unique_ptr<RadixNode>> children;  // keyed by the child's first page of tokens
  int64_t lock_ref = 0;        // requests using this node (or a descendant)
  uint64_t last_access = 0;    // logical clock of the last match or insert through this node
  uint64_t id = 0;             // creation order; breaks LRU ties deterministically
};

class RadixCache {
 public:
  // The pool (page size, slot ownership) must outlive the cache.
  explicit RadixCache(KvSlotPool& pool);
  ~RadixCache();
  RadixCache(const RadixCache&) = delete;
  RadixCache& operator=(const RadixCache&) = delete;

  struct Match {
    std::vector<int32_t> slots;  // [matched_len] the tree's slots of the matched prefix (still owned by the tree)
    RadixNode* node = nullptr;   // deepest matched node (the root when nothing matched); what lock() takes
  };

  // Single-threaded; longest cached page-aligned prefix of `tokens`; marks the path as used now (LRU) and may
  // split an edge so the match ends on a node; never fails.
  Match match_prefix(std::span<const int32_t> tokens);
  // Single-threaded, read-only; the length match_prefix would return.
  int64_t peek_prefix_length(std::span<const int32_t> tokens) const;
  // Single-threaded; caches tokens -> slots (equal sizes, a page multiple, else throws). Returns the length p of the
  // prefix that was already cached: the tree takes ownership of slots[p:], the caller keeps slots[:p] (the tree
  // has its own slots for those tokens). `scores` is empty or [tokens]: each known one is kept for its token, also
  // where the token was cached already (unless the tree's has as many alternatives).
  int64_t insert(std::span<const int32_t> tokens, std::span<const int32_t> slots,
                 std::span<const std::optional<TokenScore>> scores = {});
  // Single-threaded, read-only; how many of tokens[begin], tokens[begin + 1], ... have a score cached along the cached
  // path of `tokens` (with at least min_top_n alternatives), up to the first that has none or is off the path.
  size_t cached_score_run(std::span<const int32_t> tokens, size_t begin, int32_t min_top_n) const;
  // The first `count` (<= cached_score_run) of those scores.
  std::vector<TokenScore> cached_scores(std::span<const int32_t> tokens, size_t begin, int32_t min_top_n,
                                        size_t count) const;

  // Single-threaded; reference counts on node and all its ancestors; locked nodes are never evicted.
  // unlock throws fathom::Error when the node is not locked.
  void lock(RadixNode* node);
  void unlock(RadixNode* node);

  // Single-threaded; frees unlocked leaves, least recently used first, until at least num_slots slots went back
  // to the pool or nothing evictable is left; returns the number freed.
  int64_t evict(int64_t num_slots);
  // Single-threaded; drops every entry (slots back to the pool); false and no change when any node is locked.
  bool reset();

  int64_t page_size() const { return page_size_; }
  int64_t evictable_slots() const { return evictable_slots_; }
  int64_t locked_slots() const { return locked_slots_; }
  int64_t cached_slots() const { return evictable_slots_ + locked_slots_; }
  int64_t num_nodes() const { return num_nodes_; }
  const RadixNode* root() const { return root_.get(); }

  struct CachedSequence {
    std::vector<int32_t> tokens;  // root-to-leaf path
    std::vector<int32_t> slots;
  };
  // Every root-to-leaf path (each cached prefix is a prefix of one of them), for tests and debugging.
  std::vector<CachedSequence> dump() const;
  // Recomputes sizes and lock counts from the tree; throws fathom::Error on any inconsistency.
  void check_consistency() const;

 private:
  std::vector<int32_t> page_key(std::span<const int32_t> tokens, size_t begin) const;
  size_t matched_length(const RadixNode& node, std::span<const int32_t> tokens, size_t begin) const;
  RadixNode* split(RadixNode* node, size_t length);
  // Calls visit(score) for tokens[begin], ... along the cached path while each has a score of min_top_n alternatives
  // and visit returns true.
  template <typename Visit>
  void walk_scores(std::span<const int32_t> tokens, size_t begin, int32_t min_top_n, Visit&& visit) const;
  void free_subtree(RadixNode* node);

  KvSlotPool& pool_;
  int64_t page_size_;
  std::unique_ptr<RadixNode> root_;
  int64_t evictable_slots_ = 0;
  int64_t locked_slots_ = 0;
  int64_t num_nodes_ = 0;  // excluding the root
  uint64_t clock_ = 0;
  uint64_t next_node_id_ = 1;
};

}  // namespace fathom::kv_cache
