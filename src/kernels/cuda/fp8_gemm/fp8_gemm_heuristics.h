#pragma once
// Launch-shape heuristics for the FP8 GEMMs, kept apart from the kernels.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <iterator>

namespace fathom::kernels::cuda {

// Warps to keep resident per SM so enough weight bytes are in flight to saturate HBM (each warp streams
// 16 rows x 128 bytes per K block with one block prefetched).
constexpr int64_t kSmallMTargetWarpsPerSm = 16;

// Split-K for the small-M kernel: enough (row tile, K range) work items to fill the machine, at least 2 K blocks
// per split so the prefetch has something to overlap. A function of the weight shape only (batch invariance).
inline int small_m_split_count(int64_t rows, int64_t cols, int num_sms) {
  const int64_t row_tiles = (rows + 15) / 16;
  const int64_t k_blocks = (cols + 127) / 128;
  const int64_t wanted = (static_cast<int64_t>(num_sms) * kSmallMTargetWarpsPerSm + row_tiles - 1) / row_tiles;
  const int64_t max_splits = std::max<int64_t>(1, k_blocks / 2);
  return static_cast<int>(std::clamp<int64_t>(wanted, 1, max_splits));
}

// Splits a K range of k_blocks really has when asked for `splits`: every split takes ceil(k_blocks / splits) blocks
// and none is left empty (e.g. 56 blocks asked for 16 splits: 4 blocks each, 14 splits).
constexpr int64_t used_split_count(int64_t k_blocks, int64_t splits) {
  const int64_t per_split = (k_blocks + splits - 1) / splits;
  return (k_blocks + per_split - 1) / per_split;
}
static_assert(used_split_count(56, 16) == 14 && used_split_count(16, 5) == 4 && used_split_count(12, 2) == 2);

// Kernel variants of the small-M path for 1..16 tokens. All are bit-identical (same per-element arithmetic, same
// split count and split ranges); they differ only in data movement. kReference: fp8_gemm_small_m_kernel (8 warps,
// activations staged in shared memory, one K block prefetched, split-K summed by a second kernel). kW<w>D<d>[F]:
// fp8_gemm_gemv_kernel with w warps per CTA, d K blocks of loads in flight per warp, F = split-K reduction fused
// into the GEMM (needs Fp8GemmWorkspace::split_counters; without them the F variants run unfused), P<p> = each warp
// also prefetches its weight rows p K blocks ahead into L2 (more bytes in flight without more registers).
// kCta: fp8_gemm_gemv_cta_kernel (w4d2p2's warps, one CTA per 16-row tile holding all of its K splits, summed in
// shared memory: no partials in global memory, no reduce launch) where gemv_cta_applies, else w4d2p2.
enum class SmallMVariant {
  kReference, kW4D2, kW4D4, kW8D2, kW8D4, kW4D2F, kW4D3F, kW4D4F, kW8D2F, kW8D3F, kW8D4F, kW4D2P2, kW4D2P4, kW4D2P8,
  kCta, kCount
};

struct SmallMVariantInfo {
  const char* name;
  int warps, depth;  // depth 1 with warps 8: the reference kernel; warps 0 for kCta (one per split)
  bool fused;
  int prefetch_blocks;  // L2 prefetch distance in K blocks (0: none)
  bool cta = false;     // fp8_gemm_gemv_cta_kernel
};

inline constexpr SmallMVariantInfo kSmallMVariants[] = {
    {"reference", 8, 1, false, 0}, {"w4d2", 4, 2, false, 0},    {"w4d4", 4, 4, false, 0},    {"w8d2", 8, 2, false, 0},
    {"w8d4", 8, 4, false, 0},      {"w4d2f", 4, 2, true, 0},    {"w4d3f", 4, 3, true, 0},    {"w4d4f", 4, 4, true, 0},
    {"w8d2f", 8, 2, true, 0},      {"w8d3f", 8, 3, true, 0},    {"w8d4f", 8, 4, true, 0},    {"w4d2p2", 4, 2, false, 2},
    {"w4d2p4", 4, 2, false, 4},    {"w4d2p8", 4, 2, false, 8},    {"cta", 0, 2, false, 2, true},
};
static_assert(std::size(kSmallMVariants) == static_cast<size_t>(SmallMVariant::kCount));

constexpr const SmallMVariantInfo& small_m_variant_info(SmallMVariant v) { return kSmallMVariants[static_cast<int>(v)]; }

// Weights on which kCta runs fp8_gemm_gemv_cta_kernel: short K splits, where the split-K reduce launch it saves
// (1-3 us) is a large part of the GEMM, and enough 16-row tiles to give every other SM a CTA. H200, graph us at
// 1 / 8 tokens, w4d2p2 (with its reduce) -> cta (bench_fp8_gemm floor, bench/RESULTS.md eleventh session):
// fused q_a + kv_a (4 K blocks per split) 7.60 / 8.10 -> 6.23 / 6.51, q_b (6) 14.62 / 15.64 -> 13.05 / 13.75,
// shared expert gate_up (7) 10.74 / 11.02 -> 9.19 / 9.91, down (4) 7.32 / 7.56 -> 5.26 / 5.53. Long splits lose:
// o_proj (26) 33.8 -> 43.1 (five-warp CTAs at 118 registers need a second wave; capped at 96 registers the
// short-split weights lose 4-15% instead), and kv_a alone (36 tiles) 3.75 -> 4.80.
constexpr int64_t kGemvCtaMaxBlocksPerSplit = 8;
inline bool gemv_cta_applies(int64_t rows, int64_t cols, int splits, int num_sms) {
  const int64_t k_blocks = (cols + 127) / 128, row_tiles = (rows + 15) / 16;
  const int64_t per_split = (k_blocks + splits - 1) / splits;
  return per_split <= kGemvCtaMaxBlocksPerSplit && 2 * row_tiles >= num_sms;
}

// The variant Fp8Gemm's mma.sync family runs for 1..16 tokens (more take the reference kernel; under
// DecodeKernel::kAuto 9..64 tokens run the wgmma decode kernel instead). Switch it to the variant that
// bench_fp8_gemm's "best" lines name; tests/kernels/cuda/fp8_gemm_test.cu checks every variant.
// w4d2p2 (4 warps, 2 K blocks in flight, L2 prefetch 2 blocks ahead, separate split-K reduce): fastest summed
// over M = 1..16 on 5 of the 9 V3 decode weights on an H200 (o_proj 34.7 -> 34.0 us and dense down 38.8 -> 37.9 at
// M = 1; bench/RESULTS.md), w4d2 on 2; the fused reduction (w4d2f) wins only on dense gate_up (one split) and loses
// 10-30% on the many-split small weights (q_a, kv_a); prefetching 4 or 8 blocks ahead is slower. cta is w4d2p2
// with the reduce launch folded into the CTA on the weights where that wins (gemv_cta_applies), so it is the default.
constexpr SmallMVariant kSmallMDefaultVariant = SmallMVariant::kCta;

// The variant a deferred decode GEMM (partials left to the consumer, Fp8Gemm::run_small_m_deferred) runs at 1..8
// tokens under the default variant: kW8D2 where its grid of 128-row x K-split CTAs fits one wave at two CTAs per SM
// (8 warps at <= 128 registers), else the default. H100, graph us in chains, 1 / 8 tokens, default -> w8d2 deferred
// (bench_fp8_gemm floor, bench/RESULTS.md twenty-second session): the shared expert's gate_up (256 CTAs) 11.26 /
// 12.32 -> 10.96 / 11.50 and down (224) 6.15 / 6.36 -> 6.03 / 6.24, which the model defers; fused q_a + kv_a (238)
// 7.24 / 7.50 -> 6.25 / 6.43, which it does not (cuda_attention.cpp says why). On multi-wave grids its 8-warp CTAs
// leave a long last wave (o_proj, 280 CTAs: 44.5 us with w4d2p2, 54.6 with w8d2), and at 9..16 tokens it loses to
// kCta (shared gate_up 16.4 vs 14.9 us).
inline SmallMVariant small_m_deferred_variant(int64_t rows, int64_t cols, int64_t tokens, int num_sms) {
  const int64_t used_splits = used_split_count((cols + 127) / 128, small_m_split_count(rows, cols, num_sms));
  const int64_t rows_per_cta = small_m_variant_info(SmallMVariant::kW8D2).warps * 16;  // 16 rows per warp
  const int64_t ctas = (rows + rows_per_cta - 1) / rows_per_cta * used_splits;
  return tokens <= 8 && ctas <= 2 * static_cast<int64_t>(num_sms) ? SmallMVariant::kW8D2 : kSmallMDefaultVariant;
}

// L2 prefetch distance (K blocks) of the grouped MoE decode GEMV (fp8_grouped_gemm, active-expert grid): 2 measured
// best at 1..64 tokens on an H200 (expert gate_up at 1 token: 73.9 us without, 69.1 with 2, 76.9 with 4, 103 with 8).
constexpr int kGroupedGemvPrefetchBlocks = 2;

// Dense decode GEMMs with at least this many tokens (and at most Fp8Gemm::kSmallMMaxTokens) run the wgmma decode
// kernel (sm90/fp8_gemm_decode_wgmma.cuh) unless batch invariance is asked for. H200 (bench_fp8_gemm, bench/RESULTS.md
// seventh session): at 8 tokens the gemv kernel (one 8-token pass) and wgmma are even; from 9 the gemv kernel makes
// two passes and falls to 36-60% of copy bandwidth where wgmma holds 41-83%.
constexpr int64_t kWgmmaDecodeMinTokens = 9;
constexpr int kWgmmaDecodeMaxSplits = 16;
// Cost model of the wgmma decode kernel's split-K (units: one K block of a 128-row tile, 16 KB of weight), fitted to
// bench_fp8_gemm's split sweep on an H200 (bench/RESULTS.md, seventh session): an SM streams at most
// kWgmmaDecodeSmRateShare times its even share of HBM bandwidth, and a tile costs kWgmmaDecodeTileOverheadBlocks
// more than its K blocks (pipeline fill, epilogue).
constexpr double kWgmmaDecodeSmRateShare = 2.0;
constexpr int64_t kWgmmaDecodeTileOverheadBlocks = 2;

// Split-K of the wgmma decode kernel: the count minimising the modelled time: the larger of streaming every weight
// block at HBM rate and the busiest SM's ceil(tiles / SMs) rounds of (K range + overhead) at its rate, plus the fp32
// partials of 64 tokens written and read back. A function of the weight shape only, so a token's bits do not depend
// on the batch.
inline int wgmma_decode_split_count(int64_t rows, int64_t cols, int num_sms) {
  const int64_t row_blocks = (rows + 127) / 128, k_blocks = (cols + 127) / 128;
  const double block_bytes = 128.0 * 128.0;
  const double all_blocks = static_cast<double>(row_blocks * k_blocks);
  int best = 1;
  double best_cost = 0.0;
  for (int64_t splits = 1; splits <= std::min<int64_t>(k_blocks, kWgmmaDecodeMaxSplits); ++splits) {
    const int64_t per_split = (k_blocks + splits - 1) / splits;
    if ((k_blocks + per_split - 1) / per_split != splits) continue;  // some split would be empty
    const int64_t rounds = (row_blocks * splits + num_sms - 1) / num_sms;
    const double busiest = static_cast<double>(rounds * (per_split + kWgmmaDecodeTileOverheadBlocks)) * num_sms /
                           kWgmmaDecodeSmRateShare;
    const double partials = splits > 1 ? 2.0 * static_cast<double>(splits) * 64.0 * static_cast<double>(rows) * 4.0 /
                                             block_bytes
                                       : 0.0;
    const double cost = std::max(all_blocks, busiest) + partials;
    if (splits == 1 || cost < best_cost) best = static_cast<int>(splits), best_cost = cost;
  }
  return best;
}

// Token tile of the grouped prefill kernel (64, 128 or 192 tokens) from the average rows per expert a. 256 experts
// top-8, kernel us with 64- / 128- / 192-token tiles (bench_fp8_gemm_tiled, bench/RESULTS.md ninth session),
// H200 | H100:
//   a = 32 (1024 tokens): gate_up 1839 / 1908 / 2679 | 2663 / 2598 / 2740; down 919 / 1029 / 1438 | 1358 / 1355 / 1348
//   a = 64 (2048): gate_up 2610 / 2718 / 2679 | 3810 / 2840 / 2917; down 1262 / 1418 / 1465 | 1879 / 1396 / 1393
//   a = 128 (4096): gate_up 4378 / 4036 / 4216 | 5984 / 4179 / 3936; down 2231 / 2154 / 2016 | 2170 / 2097 / 2279
//   a = 256 (8192): gate_up 7767 / 7297 / 7116 | 7833 / 7268 / 6910; down 3997 / 3921 / 3482 | 3724 / 4082 / 3410
// 64-token tiles run 34% slower on the H100 at a = 64, where 128 costs the H200 4% (gate_up) and 12% (down); the
// larger tiles stream each expert's weight fewer times; at a = 128 the choice is within 9% either way on both.
// Rechecked after the warpgroups split rows and an expert's tiles share its rows evenly (fifteenth session, H100,
// alternating runs, a = 256): gate_up 128 / 192: 5659-5830 / 5455-5469 us, down 3054-3228 / 2740-2944.
inline int wgmma_tokens_per_tile(int64_t x_rows, int32_t num_experts) {
  constexpr int64_t kMediumTileMinAverageRows = 64, kLargeTileMinAverageRows = 128;
  const int64_t experts = std::max<int32_t>(num_experts, 1);
  if (x_rows >= kLargeTileMinAverageRows * experts) return 192;
  return x_rows >= kMediumTileMinAverageRows * experts ? 128 : 64;
}

// Activation quantization (act_quant.cu, bf16 rows of whole 16-byte vectors): four (token, 128-channel) units per
// warp, so each lane has two 16-byte loads in flight, from this many units (the warps of two-unit launches would
// then exceed the ~8.4k an H100 / H200 holds at once); two below it (more, shorter warps). H100, warm us against the
// scalar kernel (bench_small_ops, bench/RESULTS.md thirty-first session): 4096 tokens x 7168 / 16384 channels
// 56.6 -> 34.5 / 127.2 -> 76.3 (four units), 256 tokens 5.0 -> 3.3 / 9.0 -> 5.6, 1-32 tokens even or faster (two
// units; four there were 0.3-0.4 us slower than the scalar kernel).
constexpr int64_t kActQuantFourUnitsMinUnits = 32768;

}  // namespace fathom::kernels::cuda
