#include "kernels/cuda/mla/mla_decode_heuristics.h"

#include <algorithm>

#include "core/error.h"

namespace fathom::kernels::cuda {

namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Cost of one CTA beyond its KV tiles, in tile units (one 64-row KV tile loaded by every SM at once): loading Q,
// and for split CTAs the launch of the combine pass.
constexpr double kSplitOverheadTiles = 1.0;
constexpr double kUnsplitOverheadTiles = 0.5;

// Fewest tiles per split: one tile per split lost to two in the measured plans from 1024 tokens up (mla_bench "plans":
// H100, 64-head groups, best 2-4 tiles per split; H200, 16-head groups with two tiles in flight, 1 x 1024 tokens
// 14.7-15.1 us at 8 splits vs 17.2 at 16), but won at 256 tokens (1 x 256: 12.5-12.8 us at 4 splits vs 13.8-14.2 at 2).
int64_t min_tiles_per_split(int64_t context_tiles) { return context_tiles <= 4 ? 1 : 2; }

// The partial outputs of all splits ([batch, splits, heads, kv_lora], written once and read once by the combine), in
// tile units: these bytes grow with the split count, not with the CTAs per SM, so at batch 1 the 64-split plan (4096
// tokens) spent more on partials than it saved on tiles (H100, fp32 partials: 38.2 us vs 23.7 at 32 splits).
// Widths are V3's (kv_lora 512, rope 64, bf16 rows), the case the costs were fitted on. The partials are bf16 since
// the thirty-seventh session; the cost keeps the 4 bytes per element it was fitted with, so the plans stay the measured
// ones (counted at 2 bytes, 17 of 168 batch x context plans from 1 x 256 to 128 x 163840 change, none of them measured).
double partial_output_tiles(int32_t num_sms, int64_t batch, int64_t splits, int32_t num_heads) {
  constexpr double kLatentDim = 512, kRowBytes = (512 + 64) * 2, kFittedBytesPerElement = 4;
  constexpr double kTileBytes = kMlaDecodeTileTokens * kRowBytes;
  const double partial_bytes = static_cast<double>(batch) * splits * num_heads * kLatentDim * kFittedBytesPerElement;
  return 2.0 * partial_bytes / (kTileBytes * num_sms);
}

// Fewest tiles per CTA for the warp-specialized kernel (the shared-phase kernel below): from 2 tiles it is the faster
// one (mla_bench "plans", H100, the same splits: 1 x 4096 tokens in 32 splits of 2 tiles 23.8-24.5 vs 25.5-25.8 us,
// 3 x 2048 in 16 splits 24.5 vs 26.8, 4 x 1024 in 8 splits 21.4-21.6 vs 22.7-22.8; from 16 tiles by 15-30%).
constexpr int64_t kWarpSpecializedMinTiles = 2;
// Fewest tiles per CTA for the seesaw kernel (pages of a multiple of 64 tokens): its two score warpgroups only
// take turns from the second pair on, so short CTAs are faster on the warp-specialized one (mla_bench, H100:
// 16-tile CTAs 2-4% slower, 4-tile ones 9-10%; 64-tile CTAs 3-5% faster, 256-tile ones 4-14%).
constexpr int64_t kSeesawMinTiles = 32;
// CTAs of fewer tiles than this pay their prologue (the first two tiles load before any MMA) on fewer tiles: the
// split cost counts their tiles as kShortSplitTileCost each, so 4-tile splits win over 3-tile ones (H100: 2 x 4096
// in 16 splits 26.2-26.4 us vs 22 splits of 3 tiles 27.3-27.4, 3 x 4096 29.3-29.5 vs 32.6-32.8, 4 x 2048 in 8
// splits 24.9-25.1 vs 26.0-26.1 in 11) while the 2-tile splits of batch 1-4 at 1024-4096 tokens stay.
constexpr int64_t kShortSplitTiles = 4;
constexpr double kShortSplitTileCost = 1.2;

// Batch-invariant plans at 16-32-head groups: each sequence's tiles in up to 64 splits of at least this many tiles.
// The fewest tiles bound the partials' share at large batch (a split's bf16 rows, written and read, are ~44% of one
// tile's KV bytes at 16 heads) and the CTAs' length at small batch (~2 us per tile per CTA at 16 heads).
// mla_bench attention_chain (H100, forty-second session), 16 heads, at least 8 tiles against 16: batch 1-4 x
// 1024-16384 tokens 30.6-44.6 us per layer vs 48.0-52.0, batch 16 x 1024-4096 9-35% faster, x 16384 +6.7%; batch
// 64-128 +4.1% to +8.1% from 4096 tokens, 128 x 1024 +13.7% (2 splits vs 1). At least 4 tiles: batch 1-4 to 4096
// tokens a further 6-8 us faster, batch 64-128 8-23% slower than 16. The fixed 40-tile splits of the fortieth
// session: 1 x 4096 3x slower (95.5 us, forty-first).
constexpr int32_t kInvariantOwnLengthMinTiles16Heads = 8;
// 32 heads (V3 under TP4), at least 16 tiles against the fixed 40-tile splits (forty-second session, H100): batch 1-16
// x 4096 2.1x faster per layer, x 16384 1.06-2.1x, batch 64 x 4096-16384 6-10% faster, 128 x 4096 12% faster, 128 x
// 16384 9.5% slower; 1024 tokens even (one split either way). At least 8 (one round): batch 1-16 27-39% faster to
// 4096 tokens, batch 128 7.5-19% slower, 16 x 16384 12% slower.
constexpr int32_t kInvariantOwnLengthMinTiles32Heads = 16;

}  // namespace

// Most combine CTAs per SM for which the split kernels let the combine launch late. Launched at the decode's start,
// the combine cost 2-3.6% more at batch 1-4 (one-wave plans of 1 x 131072, 2 x 65536, 4 x 32768 tokens; 128-512 CTAs
// on 132 SMs) and saved 0.4-1.5% at batch 8-16 (1024-2048 CTAs; H100, bench/RESULTS.md thirty-eighth session).
constexpr int64_t kLateCombineLaunchMaxCtasPerSm = 4;

// Where the value projection is fused with the split combine (one CTA per head combines the rows of every sequence,
// then streams the head's W_UV): batches of at most 4 sequences at 128 heads (V3 without tensor parallelism, as under
// DP attention). mla_bench attention_chain (H100, thirty-ninth session): 128 heads, batch 1-4, 1024-16384 tokens
// 2-13% faster per layer (the 8.4 MB W_UV stream hides the combine); batch 8 9-12% slower (8 sequences combined one
// after another); 16-64 heads mostly slower (16 heads, TP8: 2-16% at batch 1, 11-46% at batch 4-8).
constexpr int32_t kFusedValueProjectionMaxBatch = 4;
constexpr int32_t kFusedValueProjectionMinHeads = 128;

namespace {

// The plan's launch choices that never change a bit (the combine's form and launch, KV before the wait, the fused value
// projection), for a batch of `batch` sequences; both plan kinds use them.
void set_launch_choices(MlaDecodePlan& plan, int32_t num_sms, int32_t batch, int32_t num_heads) {
  const bool split = plan.num_splits > 1;
  // The deep form (always launched late, as its grid is one CTA per SM) is faster at every measured context: H100,
  // batch 1 x 2048-65536 tokens by 0.3-2.2 us per call (thirty-sixth session), 131072-163840 tokens by 1.5-1.8 us over
  // the plain form launched late (thirty-eighth; launched early it was 1.3-2.9 us slower there).
  plan.deep_combine = split && static_cast<int64_t>(batch) * num_heads <= num_sms;
  plan.late_combine_launch =
      split && static_cast<int64_t>(batch) * num_heads <= kLateCombineLaunchMaxCtasPerSm * num_sms;
  // The first KV tiles in flight while the W_UK product before the decode ends: mla_bench attention_chain (H100,
  // thirty-eighth session) 1.4-5.1% faster per layer at batch 1-16 (split plans), 1.3-1.7% slower at batch 128 x
  // 1024-16384 (one split), even at batch 64.
  plan.kv_loads_before_wait = split;
  plan.fused_value_projection = split && batch <= kFusedValueProjectionMaxBatch &&
                                num_heads >= kFusedValueProjectionMinHeads;
}

}  // namespace

int32_t mla_decode_combine_split_groups(int32_t num_splits) { return num_splits >= 16 ? 4 : num_splits >= 8 ? 2 : 1; }

int32_t mla_decode_head_group(int32_t num_heads) {
  FATHOM_CHECK(num_heads > 0, "mla decode: num_heads " << num_heads);
  if (num_heads <= 16) return 16;
  if (num_heads <= 32) return 32;
  return 64;
}

MlaDecodePlan mla_decode_plan(int32_t num_sms, int32_t batch, int32_t num_heads, int32_t max_context_tokens) {
  FATHOM_CHECK(num_sms > 0 && batch > 0 && max_context_tokens >= 0,
               "mla decode plan: num_sms " << num_sms << ", batch " << batch << ", max_context " << max_context_tokens);
  MlaDecodePlan plan;
  plan.head_group = mla_decode_head_group(num_heads);
  // Latency regime: at short contexts and small batches 16-head groups (4x the CTAs, the mma.sync path) beat 64-head
  // groups by 10-20% (mla_bench "plans", H200: 1 x 256 tokens 13.5 vs 16.7 us, 1 x 1024 15.6 vs 17.9 us), and a
  // single sequence keeps them to 3072 tokens, where 64-head groups leave most SMs idle (H200, two runs: 1 x 2048
  // 18.8-18.9 vs 20.7-20.9 us, 1 x 3072 20.8-21.0 vs 21.9-22.3; 1 x 4096 even, 23.0-23.8 either way).
  if (max_context_tokens <= 256 || (max_context_tokens <= 1024 && batch <= 2) ||
      (batch == 1 && max_context_tokens <= 3072))
    plan.head_group = 16;
  const int64_t base_ctas = static_cast<int64_t>(batch) * ceil_div(num_heads, plan.head_group);
  const int64_t tiles = std::max<int64_t>(1, ceil_div(max_context_tokens, kMlaDecodeTileTokens));
  double best_cost = 0;
  for (int64_t splits = 1; splits <= std::min<int64_t>(kMlaDecodeMaxSplits, tiles); ++splits) {
    const int64_t waves = ceil_div(base_ctas * splits, num_sms);
    const int64_t tiles_per_cta = splits > 1 ? std::max(ceil_div(tiles, splits), min_tiles_per_split(tiles)) : tiles;
    const double tile_cost = plan.head_group == 64 && tiles_per_cta < kShortSplitTiles ? kShortSplitTileCost : 1.0;
    const double per_cta = static_cast<double>(tiles_per_cta) * tile_cost +
                           (splits > 1 ? kSplitOverheadTiles : kUnsplitOverheadTiles);
    const double cost = static_cast<double>(waves) * per_cta +
                        (splits > 1 ? partial_output_tiles(num_sms, batch, splits, num_heads) : 0.0);
    if (splits == 1 || cost < best_cost) {
      best_cost = cost;
      plan.num_splits = static_cast<int32_t>(splits);
      plan.warp_specialized = tiles_per_cta >= kWarpSpecializedMinTiles;
      plan.seesaw = tiles_per_cta >= kSeesawMinTiles;
    }
  }
  plan.min_tiles_per_split = static_cast<int32_t>(min_tiles_per_split(tiles));
  set_launch_choices(plan, num_sms, batch, num_heads);
  return plan;
}

MlaInvariantSplitRule mla_decode_invariant_split_rule(int32_t num_heads, int32_t max_model_context_tokens) {
  FATHOM_CHECK(max_model_context_tokens >= 0,
               "mla decode plan: the model's longest context " << max_model_context_tokens);
  MlaInvariantSplitRule rule;
  const int32_t head_group = mla_decode_head_group(num_heads);
  if (head_group <= 32) {
    rule.divisor = kMlaDecodeMaxSplits;
    rule.min_tiles = head_group == 16 ? kInvariantOwnLengthMinTiles16Heads : kInvariantOwnLengthMinTiles32Heads;
    return rule;
  }
  // 16 tiles (1024 tokens) per split, more when the longest context would need over kMlaDecodeMaxSplits splits.
  const int64_t model_tiles = std::max<int64_t>(1, ceil_div(max_model_context_tokens, kMlaDecodeTileTokens));
  rule.tiles_per_split = static_cast<int32_t>(std::max<int64_t>(16, ceil_div(model_tiles, kMlaDecodeMaxSplits)));
  return rule;
}

MlaDecodePlan mla_decode_plan_batch_invariant(int32_t num_sms, int32_t batch, int32_t num_heads,
                                              int32_t max_context_tokens, int32_t max_model_context_tokens,
                                              MlaInvariantSplitRule rule) {
  FATHOM_CHECK(num_sms > 0 && batch > 0 && max_context_tokens >= 0 && max_model_context_tokens >= max_context_tokens,
               "mla decode plan: num_sms " << num_sms << ", batch " << batch << ", context " << max_context_tokens
                                           << " (the model's longest: " << max_model_context_tokens << ")");
  FATHOM_CHECK(rule.tiles_per_split >= 0 && rule.divisor >= 0 && rule.divisor <= kMlaDecodeMaxSplits &&
                   rule.min_tiles >= 0 && (rule.tiles_per_split == 0 || rule.divisor == 0),
               "mla decode plan: batch-invariant rule of " << rule.tiles_per_split << " tiles per split, divisor "
                                                            << rule.divisor << ", min tiles " << rule.min_tiles);
  if (rule.tiles_per_split == 0 && rule.divisor == 0) {
    rule = mla_decode_invariant_split_rule(num_heads, max_model_context_tokens);
  }
  MlaDecodePlan plan;
  plan.head_group = mla_decode_head_group(num_heads);
  const int64_t tiles = std::max<int64_t>(1, ceil_div(max_context_tokens, kMlaDecodeTileTokens));
  if (rule.tiles_per_split > 0) {
    plan.tiles_per_split = rule.tiles_per_split;
    plan.num_splits = static_cast<int32_t>(ceil_div(tiles, plan.tiles_per_split));
    plan.warp_specialized = plan.tiles_per_split >= kWarpSpecializedMinTiles;  // never depends on the batch
    plan.seesaw = plan.tiles_per_split >= kSeesawMinTiles;
  } else {
    // min(divisor, ceil(bound / min_tiles)) splits of at least min_tiles: the kernels' even division of a sequence of
    // n <= bound tiles among them gives max(ceil(n / divisor), min_tiles) tiles per split, its own length's count
    // (below the cap ceil(n / splits) <= min_tiles; at the cap the division is by the divisor).
    plan.min_tiles_per_split = std::max(1, rule.min_tiles);
    plan.num_splits = static_cast<int32_t>(std::min<int64_t>(rule.divisor, ceil_div(tiles, plan.min_tiles_per_split)));
    // One kernel for CTAs of any length: the seesaw kernel's bits differ from the warp-specialized one's.
    plan.warp_specialized = true;
    plan.seesaw = false;
  }
  // By the batch, but bit-neutral, so the results stay invariant. mla_bench attention_chain --plan invariant against
  // invariant-plain (H100, fortieth session): 128 heads, batch 1-2 x 4096-16384 tokens 1.6-4.1% faster per layer,
  // batch 4 within +-0.6%; 16 heads, batch 1 x 4096-16384, 0.9-1.3%.
  set_launch_choices(plan, num_sms, batch, num_heads);
  return plan;
}

MlaDecodeWorkspaceLayout mla_decode_workspace_layout(const MlaDecodePlan& plan, int32_t batch, int32_t num_heads,
                                                     int32_t kv_lora_dim) {
  MlaDecodeWorkspaceLayout layout;
  if (plan.num_splits <= 1) return layout;
  const size_t rows = static_cast<size_t>(batch) * plan.num_splits * num_heads;
  layout.lse_offset_bytes = (rows * kv_lora_dim * kMlaDecodePartialBytes + 15) / 16 * 16;
  layout.total_bytes = layout.lse_offset_bytes + rows * sizeof(float);
  return layout;
}

size_t mla_decode_workspace_bytes(const MlaDecodePlan& plan, int32_t batch, int32_t num_heads, int32_t kv_lora_dim) {
  return mla_decode_workspace_layout(plan, batch, num_heads, kv_lora_dim).total_bytes;
}

size_t mla_decode_max_workspace_bytes(int32_t num_sms, int32_t max_batch, int32_t num_heads, int32_t kv_lora_dim,
                                      int32_t max_context_tokens) {
  size_t bytes = 0;
  for (int32_t batch = 1; batch <= max_batch; ++batch) {
    const MlaDecodePlan plan = mla_decode_plan(num_sms, batch, num_heads, max_context_tokens);
    bytes = std::max(bytes, mla_decode_workspace_bytes(plan, batch, num_heads, kv_lora_dim));
  }
  return bytes;
}

}  // namespace fathom::kernels::cuda
