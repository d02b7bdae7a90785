#include "kv_cache/radix_cache.h"

#include <algorithm>
#include <functional>
#include <queue>
#include <tuple>

#include "core/error.h"

namespace fathom::kv_cache {

RadixCache::RadixCache(KvSlotPool& pool) : pool_(pool), page_size_(pool.page_size()), root_(std::make_unique<RadixNode>()) {}

RadixCache::~RadixCache() = default;  // slots are not handed back: the pool may already be gone

std::vector<int32_t> RadixCache::page_key(std::span<const int32_t> tokens, size_t begin) const {
  return std::vector<int32_t>(tokens.begin() + static_cast<std::ptrdiff_t>(begin),
                              tokens.begin() + static_cast<std::ptrdiff_t>(begin + static_cast<size_t>(page_size_)));
}

// Tokens of node.key equal to tokens[begin:], rounded down to whole pages.
size_t RadixCache::matched_length(const RadixNode& node, std::span<const int32_t> tokens, size_t begin) const {
  const size_t limit = std::min(node.key.size(), tokens.size() - begin);
  size_t same = 0;
  while (same < limit && node.key[same] == tokens[begin + same]) ++same;
  return same / static_cast<size_t>(page_size_) * static_cast<size_t>(page_size_);
}

// Splits `node`'s edge after `length` tokens; returns the new upper node (which keeps lock count and access time).
RadixNode* RadixCache::split(RadixNode* node, size_t length) {
  RadixNode* parent = node->parent;
  auto upper = std::make_unique<RadixNode>();
  upper->key.assign(node->key.begin(), node->key.begin() + static_cast<std::ptrdiff_t>(length));
  upper->slots.assign(node->slots.begin(), node->slots.begin() + static_cast<std::ptrdiff_t>(length));
  upper->parent = parent;
  upper->lock_ref = node->lock_ref;
  upper->last_access = node->last_access;
  upper->id = next_node_id_++;
  node->key.erase(node->key.begin(), node->key.begin() + static_cast<std::ptrdiff_t>(length));
  node->slots.erase(node->slots.begin(), node->slots.begin() + static_cast<std::ptrdiff_t>(length));
  if (!node->scores.empty()) {
    upper->scores.assign(std::make_move_iterator(node->scores.begin()),
                         std::make_move_iterator(node->scores.begin() + static_cast<std::ptrdiff_t>(length)));
    node->scores.erase(node->scores.begin(), node->scores.begin() + static_cast<std::ptrdiff_t>(length));
    for (RadixNode* half : {upper.get(), node}) {  // a half without any score keeps none
      if (std::none_of(half->scores.begin(), half->scores.end(), [](const auto& s) { return s.has_value(); })) {
        half->scores.clear();
      }
    }
  }
  auto entry = parent->children.find(page_key(upper->key, 0));
  std::unique_ptr<RadixNode> lower = std::move(entry->second);
  lower->parent = upper.get();
  upper->children.emplace(page_key(lower->key, 0), std::move(lower));
  RadixNode* result = upper.get();
  entry->second = std::move(upper);
  ++num_nodes_;
  return result;
}

RadixCache::Match RadixCache::match_prefix(std::span<const int32_t> tokens) {
  const size_t length = tokens.size() / static_cast<size_t>(page_size_) * static_cast<size_t>(page_size_);
  tokens = tokens.first(length);
  Match match;
  RadixNode* node = root_.get();
  const uint64_t now = ++clock_;
  node->last_access = now;
  size_t pos = 0;
  while (pos < length) {
    auto it = node->children.find(page_key(tokens, pos));
    if (it == node->children.end()) break;
    RadixNode* child = it->second.get();
    const size_t same = matched_length(*child, tokens, pos);
    const bool partial = same < child->key.size();
    if (partial) child = split(child, same);
    child->last_access = now;
    match.slots.insert(match.slots.end(), child->slots.begin(), child->slots.end());
    pos += same;
    node = child;
    if (partial) break;
  }
  match.node = node;
  return match;
}

int64_t RadixCache::peek_prefix_length(std::span<const int32_t> tokens) const {
  const size_t length = tokens.size() / static_cast<size_t>(page_size_) * static_cast<size_t>(page_size_);
  tokens = tokens.first(length);
  const RadixNode* node = root_.get();
  size_t pos = 0;
  while (pos < length) {
    auto it = node->children.find(page_key(tokens, pos));
    if (it == node->children.end()) break;
    const size_t same = matched_length(*it->second, tokens, pos);
    pos += same;
    if (same < it->second->key.size()) break;
    node = it->second.get();
  }
  return static_cast<int64_t>(pos);
}

namespace {

// Keeps `score` for the token of `node` at `index` unless the node holds one with as many alternatives.
void keep_score(RadixNode& node, size_t index, const std::optional<TokenScore>& score) {
  if (!score) return;
  if (node.scores.empty()) node.scores.resize(node.key.size());
  std::optional<TokenScore>& kept = node.scores[index];
  if (!kept || kept->top_n < score->top_n) kept = score;
}

}  // namespace

template <typename Visit>
void RadixCache::walk_scores(std::span<const int32_t> tokens, size_t begin, int32_t min_top_n, Visit&& visit) const {
  const RadixNode* node = root_.get();
  size_t pos = 0;  // tokens[0, pos) are on the path, ending at node's edge end
  while (pos < tokens.size()) {
    // Children are filed under their first page; a last partial page (or one the request shares only in part) is
    // found by scanning: any child agreeing on the tokens read holds the same scores for them.
    const RadixNode* child = nullptr;
    if (tokens.size() - pos >= static_cast<size_t>(page_size_)) {
      auto it = node->children.find(page_key(tokens, pos));
      if (it != node->children.end()) child = it->second.get();
    }
    if (!child) {
      size_t best = 0;  // the child agreeing on the most tokens
      for (const auto& [first_page, candidate] : node->children) {
        size_t same = 0;
        while (same < candidate->key.size() && pos + same < tokens.size() && candidate->key[same] == tokens[pos + same]) {
          ++same;
        }
        if (same > best) {
          best = same;
          child = candidate.get();
        }
      }
    }
    if (!child) return;
    for (size_t i = 0; i < child->key.size() && pos + i < tokens.size(); ++i) {
      if (child->key[i] != tokens[pos + i]) return;
      if (pos + i < begin) continue;
      const std::optional<TokenScore>* score = child->scores.empty() ? nullptr : &child->scores[i];
      if (!score || !*score || (*score)->top_n < min_top_n || !visit(**score)) return;
    }
    pos += child->key.size();
    node = child;
  }
}

size_t RadixCache::cached_score_run(std::span<const int32_t> tokens, size_t begin, int32_t min_top_n) const {
  size_t count = 0;
  walk_scores(tokens, begin, min_top_n, [&](const TokenScore&) { return ++count, true; });
  return count;
}

std::vector<TokenScore> RadixCache::cached_scores(std::span<const int32_t> tokens, size_t begin, int32_t min_top_n,
                                                  size_t count) const {
  std::vector<TokenScore> result;
  result.reserve(count);
  if (count == 0) return result;
  walk_scores(tokens, begin, min_top_n, [&](const TokenScore& score) {
    result.push_back(score);
    return result.size() < count;
  });
  FATHOM_CHECK(result.size() == count, "radix cache: " << count << " cached scores asked for, " << result.size() << " found");
  return result;
}

int64_t RadixCache::insert(std::span<const int32_t> tokens, std::span<const int32_t> slots,
                           std::span<const std::optional<TokenScore>> scores) {
  FATHOM_CHECK(tokens.size() == slots.size(),
               "radix cache insert: " << tokens.size() << " tokens but " << slots.size() << " slots");
  FATHOM_CHECK(scores.empty() || scores.size() == tokens.size(),
               "radix cache insert: " << tokens.size() << " tokens but " << scores.size() << " scores");
  FATHOM_CHECK(static_cast<int64_t>(tokens.size()) % page_size_ == 0,
               "radix cache insert: " << tokens.size() << " tokens are not a whole number of pages of " << page_size_);
  RadixNode* node = root_.get();
  const uint64_t now = ++clock_;
  node->last_access = now;
  size_t pos = 0;
  while (pos < tokens.size()) {
    std::vector<int32_t> first_page = page_key(tokens, pos);
    auto it = node->children.find(first_page);
    if (it == node->children.end()) {
      auto leaf = std::make_unique<RadixNode>();
      leaf->key.assign(tokens.begin() + static_cast<std::ptrdiff_t>(pos), tokens.end());
      leaf->slots.assign(slots.begin() + static_cast<std::ptrdiff_t>(pos), slots.end());
      for (size_t i = pos; i < scores.size(); ++i) keep_score(*leaf, i - pos, scores[i]);
      leaf->parent = node;
      leaf->last_access = now;
      leaf->id = next_node_id_++;
      evictable_slots_ += static_cast<int64_t>(leaf->key.size());
      node->children.emplace(std::move(first_page), std::move(leaf));
      ++num_nodes_;
      return static_cast<int64_t>(pos);
    }
    RadixNode* child = it->second.get();
    const size_t same = matched_length(*child, tokens, pos);
    if (same < child->key.size()) child = split(child, same);
    child->last_access = now;
    for (size_t i = 0; i < same && pos + i < scores.size(); ++i) keep_score(*child, i, scores[pos + i]);
    pos += same;
    node = child;
  }
  return static_cast<int64_t>(pos);
}

void RadixCache::lock(RadixNode* node) {
  FATHOM_CHECK(node != nullptr, "radix cache: lock of a null node");
  for (; node != root_.get(); node = node->parent) {
    if (node->lock_ref == 0) {
      evictable_slots_ -= static_cast<int64_t>(node->key.size());
      locked_slots_ += static_cast<int64_t>(node->key.size());
    }
    ++node->lock_ref;
  }
}

void RadixCache::unlock(RadixNode* node) {
  FATHOM_CHECK(node != nullptr, "radix cache: unlock of a null node");
  for (RadixNode* check = node; check != root_.get(); check = check->parent) {
    FATHOM_CHECK(check->lock_ref > 0, "radix cache: unlock of a node that is not locked (node " << check->id << ")");
  }
  for (; node != root_.get(); node = node->parent) {
    --node->lock_ref;
    if (node->lock_ref == 0) {
      evictable_slots_ += static_cast<int64_t>(node->key.size());
      locked_slots_ -= static_cast<int64_t>(node->key.size());
    }
  }
}

int64_t RadixCache::evict(int64_t num_slots) {
  using Entry = std::tuple<uint64_t, uint64_t, RadixNode*>;  // (last_access, id, node): oldest first
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> leaves;
  std::vector<RadixNode*> stack = {root_.get()};
  while (!stack.empty()) {
    RadixNode* node = stack.back();
    stack.pop_back();
    if (node != root_.get() && node->children.empty() && node->lock_ref == 0) {
      leaves.emplace(node->last_access, node->id, node);
    }
    for (auto& [first_page, child] : node->children) stack.push_back(child.get());
  }
  int64_t freed = 0;
  while (freed < num_slots && !leaves.empty()) {
    RadixNode* leaf = std::get<2>(leaves.top());
    leaves.pop();
    const int64_t size = static_cast<int64_t>(leaf->slots.size());
    pool_.free(leaf->slots);
    freed += size;
    evictable_slots_ -= size;
    RadixNode* parent = leaf->parent;
    parent->children.erase(page_key(leaf->key, 0));  // destroys leaf
    --num_nodes_;
    if (parent != root_.get() && parent->children.empty() && parent->lock_ref == 0) {
      leaves.emplace(parent->last_access, parent->id, parent);
    }
  }
  return freed;
}

void RadixCache::free_subtree(RadixNode* node) {
  for (auto& [first_page, child] : node->children) {
    free_subtree(child.get());
    pool_.free(child->slots);
  }
  node->children.clear();
}

bool RadixCache::reset() {
  if (locked_slots_ > 0) return false;
  free_subtree(root_.get());
  evictable_slots_ = 0;
  num_nodes_ = 0;
  return true;
}

std::vector<RadixCache::CachedSequence> RadixCache::dump() const {
  std::vector<CachedSequence> result;
  std::function<void(const RadixNode&, CachedSequence&)> walk = [&](const RadixNode& node, CachedSequence& path) {
    if (node.children.empty() && &node != root_.get()) result.push_back(path);
    for (const auto& [first_page, child] : node.children) {
      path.tokens.insert(path.tokens.end(), child->key.begin(), child->key.end());
      path.slots.insert(path.slots.end(), child->slots.begin(), child->slots.end());
      walk(*child, path);
      path.tokens.resize(path.tokens.size() - child->key.size());
      path.slots.resize(path.slots.size() - child->slots.size());
    }
  };
  CachedSequence path;
  walk(*root_, path);
  return result;
}

void RadixCache::check_consistency() const {
  int64_t evictable = 0, locked = 0, nodes = 0;
  std::function<void(const RadixNode&)> walk = [&](const RadixNode& node) {
    int64_t child_locks = 0;
    for (const auto& [first_page, child] : node.children) {
      FATHOM_CHECK(child->parent == &node, "radix cache: node " << child->id << " has a wrong parent pointer");
      FATHOM_CHECK(!child->key.empty() && child->key.size() == child->slots.size() &&
                       static_cast<int64_t>(child->key.size()) % page_size_ == 0,
                   "radix cache: node " << child->id << " has " << child->key.size() << " tokens and "
                                        << child->slots.size() << " slots (page size " << page_size_ << ")");
      FATHOM_CHECK(first_page == page_key(child->key, 0), "radix cache: node " << child->id << " is filed under a wrong key");
      FATHOM_CHECK(child->scores.empty() || child->scores.size() == child->key.size(),
                   "radix cache: node " << child->id << " has " << child->scores.size() << " scores for "
                                        << child->key.size() << " tokens");
      FATHOM_CHECK(child->last_access <= node.last_access || &node == root_.get(),
                   "radix cache: node " << child->id << " was used after its parent");
      for (int32_t slot : child->slots) {
        FATHOM_CHECK(!pool_.is_free(slot), "radix cache: node " << child->id << " holds slot " << slot << " that the pool has free");
      }
      (child->lock_ref > 0 ? locked : evictable) += static_cast<int64_t>(child->key.size());
      child_locks += child->lock_ref;
      ++nodes;
      walk(*child);
    }
    if (&node != root_.get()) {
      FATHOM_CHECK(node.lock_ref >= child_locks, "radix cache: node " << node.id << " has lock count " << node.lock_ref
                                                                        << " below its children's " << child_locks);
    }
  };
  walk(*root_);
  FATHOM_CHECK(evictable == evictable_slots_ && locked == locked_slots_ && nodes == num_nodes_,
               "radix cache: counted evictable=" << evictable << " locked=" << locked << " nodes=" << nodes
                                                 << ", recorded " << evictable_slots_ << "/" << locked_slots_ << "/" << num_nodes_);
}

}  // namespace fathom::kv_cache
