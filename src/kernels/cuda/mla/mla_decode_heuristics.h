#pragma once
// Tuning choices of the MLA decode kernel, kept apart from the kernel: the head-group size (heads that
// share one read of each KV row inside a CTA) and the split-KV count (CTAs along the sequence).
// The split count changes results only by rounding (each split's output is rounded to bf16 like the unsplit output, then
// the splits are merged in fp32 by a fixed-order LSE merge).
#include <cstddef>
#include <cstdint>

namespace fathom::kernels::cuda {

struct MlaDecodePlan {
  int32_t head_group = 64;  // 16, 32 or 64 heads per CTA
  int32_t num_splits = 1;   // CTAs along the sequence per (sequence, head group); 1 = no combine pass
  // > 0: every sequence is cut into splits of this many 64-token tiles (num_splits covers the longest); 0: each
  // sequence's tiles are divided evenly among num_splits.
  int32_t tiles_per_split = 0;
  // With tiles_per_split 0: fewest tiles per split, so a sequence shorter than the plan's context bound (CUDA graphs
  // plan for their bucket's bound) runs fewer, fuller splits; the splits left empty write nothing.
  int32_t min_tiles_per_split = 1;
  bool score_wgmma = true;  // head_group 64: scores with wgmma from shared memory (else ldmatrix + mma.sync)
  bool value_wgmma = true;  // head_group 64, kv_lora 512 (padded), with score_wgmma: P·V with wgmma too
  // With score_wgmma and value_wgmma, kv_lora 512, rope 64 and 16-byte-aligned rows: the warp-specialized kernel
  // (one warpgroup scores whole tiles, the other loads; mla_decode_warp_specialized_kernel.cuh). The plans set it
  // for CTAs of at least 2 tiles.
  bool warp_specialized = true;
  // With warp_specialized, on a cache whose page size is a multiple of 64 tokens: the seesaw kernel instead (two
  // warpgroups score alternate tiles loaded by TMA; mla_decode_seesaw_kernel.cuh). Other page sizes ignore it. The
  // plans set it for CTAs of at least 32 tiles.
  bool seesaw = true;
  // The combine's deep form (mla_decode_combine.cuh: its rows in flight before the weights, one CTA per SM): the
  // plans set it where its grid (heads x batch) fits one CTA per SM. Same bits.
  bool deep_combine = false;
  // The seesaw / warp-specialized kernels let the combine launch only at their output, not at their start: the plans
  // set it where the combine's grid (heads x batch) is at most 4 CTAs per SM. Same bits.
  bool late_combine_launch = false;
  // The decode kernels issue their first KV tiles' loads (seesaw / warp-specialized: two, the shared-phase kernel:
  // one) before waiting for their predecessor (the cache rows and page table are written two or more launches back;
  // only Q needs the wait): the plans set it for split plans. Same bits.
  bool kv_loads_before_wait = false;
  // With a value projection (MlaDecodeArgs::value_weights), the split combine computes it too, in one launch
  // (mla_project_split_values): the plans set it for split plans of 1-4 sequences at 128 heads or more. Same bits.
  bool fused_value_projection = false;
};

inline constexpr int32_t kMlaDecodeMaxSplits = 64;
inline constexpr int32_t kMlaDecodeTileTokens = 64;  // KV rows per pipeline stage of the kernel
// Bytes per element of a split's partial output: bf16, rounded like the unsplit output (the lse stays fp32).
inline constexpr size_t kMlaDecodePartialBytes = 2;

// Thread groups (of 128 threads) across the splits in the combine pass of a num_splits plan: more groups put more
// loads in flight per head (1 x 16384 tokens, 64 splits: 13.1 -> 9.6 us, H100 ncu), but cost bigger CTAs where few
// splits leave little to overlap (4 groups at 16 x 1024-16384 in 4 splits: 3-15% slower, H100). 1, 2 or 4; the
// combine's result does not depend on it.
int32_t mla_decode_combine_split_groups(int32_t num_splits);

// Head group for `num_heads` heads (the fewest padded heads, capped at 64).
int32_t mla_decode_head_group(int32_t num_heads);

// Plan for a batch: picks the split count minimizing (waves of CTAs) x (tiles per CTA + split overhead).
// num_sms: the device's multiprocessor count; max_context_tokens: an upper bound of the batch's seq_lens
// (the plan is made on the host, so a captured graph replays it for any seq_lens up to that bound).
MlaDecodePlan mla_decode_plan(int32_t num_sms, int32_t batch, int32_t num_heads, int32_t max_context_tokens);

// How a batch-invariant plan cuts a sequence, never by the batch or the context bound: splits of tiles_per_split tiles,
// or (divisor > 0) its own tiles divided by `divisor`, at least `min_tiles` per split.
struct MlaInvariantSplitRule {
  int32_t tiles_per_split = 0;
  int32_t divisor = 0;
  int32_t min_tiles = 0;
};
// The tuned rule: own-length splits at 16-32-head groups (up to 64 of at least 8 tiles at 16 heads, 16 at 32: short
// CTAs cost little there); 64-head groups, whose CTAs carry more fixed cost (Q and the partial output of 64 heads;
// own-length splits lost 1.5-2.8x at batch 64-128, bench/RESULTS.md forty-first session), splits of 16 tiles, more
// where the model's longest context would need over 64 (V3's 163840 tokens: 40).
MlaInvariantSplitRule mla_decode_invariant_split_rule(int32_t num_heads, int32_t max_model_context_tokens);

// Batch-invariant plan: each sequence's splits follow its split rule (the tuned one, or `rule` where it has a field
// set, for benchmarks) and the kernel follows the rule only, so a sequence's attention output is the same in any batch.
// The batch and num_sms pick only the launch choices that give the same bits (deep / late combine, KV loads before the
// wait, the fused value projection), as in mla_decode_plan.
MlaDecodePlan mla_decode_plan_batch_invariant(int32_t num_sms, int32_t batch, int32_t num_heads,
                                              int32_t max_context_tokens, int32_t max_model_context_tokens,
                                              MlaInvariantSplitRule rule = {});

// Where a split plan's partials sit in the workspace: partial_out [batch, splits, heads, kv_lora] bf16 at offset 0,
// then partial_lse [batch, splits, heads] fp32 at lse_offset_bytes (16-byte aligned); all zeros when num_splits == 1.
struct MlaDecodeWorkspaceLayout {
  size_t lse_offset_bytes = 0;
  size_t total_bytes = 0;
};
MlaDecodeWorkspaceLayout mla_decode_workspace_layout(const MlaDecodePlan& plan, int32_t batch, int32_t num_heads,
                                                     int32_t kv_lora_dim);

// Workspace one decode call with this plan needs (mla_decode_workspace_layout's total; 0 when num_splits == 1).
size_t mla_decode_workspace_bytes(const MlaDecodePlan& plan, int32_t batch, int32_t num_heads, int32_t kv_lora_dim);

// Workspace that covers every plan mla_decode_plan returns for batch sizes 1..max_batch (allocate once).
size_t mla_decode_max_workspace_bytes(int32_t num_sms, int32_t max_batch, int32_t num_heads, int32_t kv_lora_dim,
                                      int32_t max_context_tokens);

}  // namespace fathom::kernels::cuda
