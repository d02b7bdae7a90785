#include "kernels/cuda/sampling/score_tokens.h"

#include <climits>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/sampling/cluster_row.cuh"
#include "kernels/cuda/sampling/threshold_select.cuh"

namespace fathom::kernels::cuda {
namespace {

namespace cg = cooperative_groups;

constexpr int kWarps = kRowThreads / 32;
constexpr int32_t kNoToken = INT_MAX;
constexpr int kBlockCandidates = kMaxScoreTopN;  // a block's tokens at or above the top list's threshold, at most
static_assert(kClusterBlocks * kBlockCandidates <= kRowThreads);  // rank 0 ranks them one per thread

// A (logit, token id) pair in the order of the top list: larger logit first, lower id on ties.
struct Candidate {
  float value;
  int32_t id;  // kNoToken: no candidate (loses to every token, -inf ones included)
};

__device__ __forceinline__ bool better(const Candidate& a, const Candidate& b) {
  return a.value > b.value || (a.value == b.value && a.id < b.id);
}

__device__ __forceinline__ Candidate warp_best(Candidate c) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    const Candidate other{__shfl_xor_sync(0xffffffffu, c.value, offset), __shfl_xor_sync(0xffffffffu, c.id, offset)};
    if (better(other, c)) c = other;
  }
  return c;
}

// This thread's best element strictly after `cut` in the top-list order.
__device__ __forceinline__ Candidate best_after(const RowSlice& s, const Candidate& cut) {
  Candidate best{-INFINITY, kNoToken};
  for (int j = 0; j < s.per_thread; ++j) {
    if (!s.valid(j)) break;  // a thread's indices ascend: the rest lie past the vocabulary too
    const Candidate e{s.get(j), static_cast<int32_t>(s.index(j))};
    if (better(cut, e) && better(e, best)) best = e;
  }
  return best;
}

struct SharedState {
  ThresholdShared threshold;
  RowSoftmaxStats partials[32];
  RowSoftmaxStats block_stats;  // read by the cluster's other blocks
  Candidate warp_candidates[kWarps];
  Candidate block_top[kMaxScoreTopN];          // rounds: this block's slice's top list; read by block 0
  Candidate candidates[kBlockCandidates];      // this block's tokens at or above the threshold; read by block 0
  Candidate merged[kClusterBlocks * kBlockCandidates];  // block 0: every block's candidates
  unsigned candidate_count;                    // may exceed kBlockCandidates (then the rounds run); read by others
  unsigned first[kClusterBlocks + 1];          // block r's candidates are merged[first[r], first[r + 1])
  bool gathered;                               // every block's candidates fit
  unsigned warp_counts[kWarps];
  unsigned long long block_count;  // logits of this slice above the target's; read by block 0
};
// A block's shared memory at the largest vocabulary stays within the 227 KB a Hopper block may use.
static_assert(sizeof(SharedState) + sizeof(float) * kRowThreads * kMaxElementsPerThread <= 227 * 1024);

// Top list by rounds of block-wide argmax (only the winner's thread rescans its elements), each block's merged by
// block 0: for rows whose threshold is tied by more tokens than the candidate lists hold.
__device__ void top_list_by_rounds(const RowSlice& s, int top_n, int64_t keep, float log_normalizer, SharedState& sh,
                                   cg::cluster_group& cluster, float* top_logprobs,  // [max_top_n] of this row
                                   int32_t* top_ids) {                               // [max_top_n] of this row
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  Candidate mine = best_after(s, Candidate{INFINITY, -1});
  for (int round = 0; round < top_n; ++round) {
    const Candidate w = warp_best(mine);
    if (lane == 0) sh.warp_candidates[warp] = w;
    __syncthreads();
    if (warp == 0) {
      const Candidate c = warp_best(lane < kWarps ? sh.warp_candidates[lane] : Candidate{-INFINITY, kNoToken});
      if (lane == 0) sh.block_top[round] = c;
    }
    __syncthreads();
    const Candidate winner = sh.block_top[round];
    if (winner.id == mine.id && winner.id != kNoToken) mine = best_after(s, winner);
  }
  cluster.sync();
  if (cluster.block_rank() == 0 && threadIdx.x == 0) {
    int head[kClusterBlocks] = {};
    for (int64_t k = 0; k < keep; ++k) {
      Candidate best{-INFINITY, kNoToken};
      int from = -1;
      for (int r = 0; r < kClusterBlocks; ++r) {
        if (head[r] >= top_n) continue;
        const Candidate c = cluster.map_shared_rank(sh.block_top, r)[head[r]];
        if (c.id != kNoToken && better(c, best)) {
          best = c;
          from = r;
        }
      }
      if (from < 0) break;  // cannot happen: the blocks hold min(top_n, vocab) tokens between them
      ++head[from];
      top_ids[k] = best.id;
      top_logprobs[k] = best.value - log_normalizer;
    }
  }
}

// Top list by threshold: the keep-th largest logit's key (threshold_select.cuh), every block's tokens at
// or above it gathered (fewer than keep above it, and its ties), ranked by block 0 one per thread. Returns false,
// writing nothing, when some block holds more than kBlockCandidates of them (a threshold tied many times over).
__device__ bool top_list_by_threshold(const RowSlice& s, int64_t keep, float row_max, float log_normalizer,
                                      SharedState& sh, cg::cluster_group& cluster, float* top_logprobs,
                                      int32_t* top_ids) {
  uint32_t min_key = 0;  // keep == vocab: every token
  if (keep < s.vocab) {
    int radix_pass = 0;
    min_key = select_threshold_key<false>(s, Scaling{1.0f, row_max}, 0, static_cast<int>(keep), 1.0f, sh.threshold,
                                          cluster, radix_pass);
  }
  if (threadIdx.x == 0) sh.candidate_count = 0;
  __syncthreads();
  const unsigned lane_bit = 1u << (threadIdx.x % 32);
  for (int j = 0; j < s.per_thread; ++j) {
    const bool take = s.valid(j) && order_key(s.get(j)) >= min_key;
    const unsigned takers = __ballot_sync(0xffffffffu, take);
    if (takers == 0) continue;
    unsigned base = 0;
    if ((threadIdx.x % 32) == __ffs(takers) - 1) base = atomicAdd(&sh.candidate_count, __popc(takers));
    base = __shfl_sync(0xffffffffu, base, __ffs(takers) - 1);
    const unsigned slot = base + __popc(takers & (lane_bit - 1u));
    if (take && slot < kBlockCandidates) sh.candidates[slot] = Candidate{s.get(j), static_cast<int32_t>(s.index(j))};
  }
  cluster.sync();
  if (threadIdx.x == 0) {  // one thread reads the blocks' counts (remote reads are dear); the block shares them
    bool overflow = false;
    sh.first[0] = 0;
    for (int r = 0; r < kClusterBlocks; ++r) {
      const unsigned count = *cluster.map_shared_rank(&sh.candidate_count, r);
      overflow |= count > kBlockCandidates;
      sh.first[r + 1] = sh.first[r] + min(count, static_cast<unsigned>(kBlockCandidates));
    }
    sh.gathered = !overflow && sh.first[kClusterBlocks] >= keep;
  }
  __syncthreads();
  // Every block read the same counts. (Fewer than keep cannot happen: count(key >= threshold) >= keep.)
  if (!sh.gathered) return false;
  if (cluster.block_rank() == 0) {
    const unsigned total = sh.first[kClusterBlocks];
    Candidate mine{-INFINITY, kNoToken};
    if (threadIdx.x < total) {
      int r = 0;
      while (threadIdx.x >= sh.first[r + 1]) ++r;
      mine = cluster.map_shared_rank(sh.candidates, r)[threadIdx.x - sh.first[r]];
      sh.merged[threadIdx.x] = mine;
    }
    __syncthreads();
    if (threadIdx.x < total) {
      unsigned rank = 0;  // ids are distinct: every candidate gets its own place
      for (unsigned i = 0; i < total; ++i) rank += better(sh.merged[i], mine) ? 1u : 0u;
      if (rank < keep) {
        top_ids[rank] = mine.id;
        top_logprobs[rank] = mine.value - log_normalizer;
      }
    }
  }
  return true;
}

// One cluster of kClusterBlocks blocks per scored row: the row's stats and the target's count over the cluster, and
// the top list by threshold (by rounds where the threshold is tied too many times).
__global__ void __cluster_dims__(kClusterBlocks, 1, 1) __launch_bounds__(kRowThreads, 2)
    score_tokens_kernel(const float* __restrict__ logits,  // [logits rows, vocab]
                        int64_t vocab, int per_thread,
                        const ScoreRow* __restrict__ rows,  // [num_scored]
                        const int32_t* __restrict__ sampled_tokens, int32_t max_top_n, ScoreOutputs out) {
  extern __shared__ float slice[];  // [per_thread * kRowThreads]
  __shared__ SharedState sh;
  cg::cluster_group cluster = cg::this_cluster();
  const int64_t b = blockIdx.x / kClusterBlocks;
  const int rank = static_cast<int>(cluster.block_rank());
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const ScoreRow request = rows[b];
  const float* row = logits + static_cast<int64_t>(request.logits_row) * vocab;
  const int32_t target = request.target == kScoreSampledToken ? sampled_tokens[request.logits_row] : request.target;
  const bool target_valid = target >= 0 && target < vocab;
  const float target_value = target_valid ? logit_or_minus_inf(row[target]) : NAN;
  const int top_n = min(max(request.top_n, 0), max_top_n);
  const RowSlice s = load_row_slice(row, vocab, per_thread, rank, slice);
  const RowSoftmaxStats stats = cluster_row_stats(s, sh.partials, &sh.block_stats, cluster);

  unsigned above = 0;  // NaN target: nothing compares greater
  for (int j = 0; j < per_thread; ++j) above += s.valid(j) && s.get(j) > target_value ? 1u : 0u;
  above = __reduce_add_sync(0xffffffffu, above);
  if (lane == 0) sh.warp_counts[warp] = above;
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned long long count = 0;
    for (int w = 0; w < kWarps; ++w) count += sh.warp_counts[w];
    sh.block_count = count;
  }

  const float log_normalizer = stats.max + logf(stats.sum_exp);
  const int64_t keep = min(static_cast<int64_t>(top_n), vocab);
  float* top_logprobs = out.top_logprobs ? out.top_logprobs + b * max_top_n : nullptr;
  int32_t* top_ids = out.top_ids ? out.top_ids + b * max_top_n : nullptr;
  if (keep == 1) {  // the row's argmax: its lowest index of the maximum, as the list orders ties
    if (rank == 0 && threadIdx.x == 0) {
      top_ids[0] = static_cast<int32_t>(stats.argmax);
      top_logprobs[0] = stats.max - log_normalizer;
    }
  } else if (keep > 1 &&
             !top_list_by_threshold(s, keep, stats.max, log_normalizer, sh, cluster, top_logprobs, top_ids)) {
    top_list_by_rounds(s, top_n, keep, log_normalizer, sh, cluster, top_logprobs, top_ids);
  }
  cluster.sync();
  if (rank == 0 && threadIdx.x == 0) {
    unsigned long long count = 0;
    for (int r = 0; r < kClusterBlocks; ++r) count += cluster.map_shared_rank(&sh.block_count, r)[0];
    out.logprob[b] = target_valid ? target_value - log_normalizer : NAN;
    out.rank[b] = target_valid ? static_cast<int64_t>(count) + 1 : 0;
  }
  cluster.sync();  // block 0 reads the other blocks' shared memory until here
}

}  // namespace

void score_tokens(const float* logits, int64_t vocab, const ScoreRow* rows, int64_t num_scored,
                  const int32_t* sampled_tokens, int32_t max_top_n, const ScoreOutputs& out, cudaStream_t stream) {
  FATHOM_CHECK(num_scored >= 0 && num_scored * kClusterBlocks < (int64_t{1} << 31),
               "score_tokens: " << num_scored << " rows");
  FATHOM_CHECK(
      vocab > 0 && vocab < kNoToken && row_elements_per_thread(vocab) <= kMaxElementsPerThread,
      "score_tokens: vocab " << vocab << " above " << int64_t{kClusterBlocks} * kRowThreads * kMaxElementsPerThread);
  FATHOM_CHECK(max_top_n >= 0 && max_top_n <= kMaxScoreTopN,
               "score_tokens: max_top_n " << max_top_n << " outside [0, " << kMaxScoreTopN << "]");
  FATHOM_CHECK(out.logprob && out.rank && (max_top_n == 0 || (out.top_ids && out.top_logprobs)),
               "score_tokens: missing outputs");
  if (num_scored == 0) return;
  const int per_thread = row_elements_per_thread(vocab);
  const size_t shared_bytes = row_slice_bytes(per_thread);
  FATHOM_CUDA_CHECK(
      cudaFuncSetAttribute(score_tokens_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, max_row_slice_bytes()));
  score_tokens_kernel<<<static_cast<unsigned>(num_scored * kClusterBlocks), kRowThreads, shared_bytes, stream>>>(
      logits, vocab, per_thread, rows, sampled_tokens, max_top_n, out);
  FATHOM_CUDA_CHECK_LAUNCH();
}

}  // namespace fathom::kernels::cuda
