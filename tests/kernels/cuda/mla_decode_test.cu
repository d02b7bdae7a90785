// MLA decode (absorbed form, paged latent cache) vs the CPU reference kernels::cpu::mla_attention_absorbed.
//
// Tolerance: relative L2 error <= 1e-2. The GPU rounds the softmax probabilities to bf16 before P·V
// (relative error <= 2^-9 each, averaging out over keys) and rounds the output to bf16 (<= 2^-9 relative; a split
// plan rounds each split's output too, then the merged one); together ~3e-3 on random data; scores and sums are
// fp32 as in the reference.
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "core/thread_pool.h"
#include "kernels/cpu/mla_attention.h"
#include "kernels/cuda/mla/mla_decode.h"
#include "kernels/cuda/mla/sm90/mla_decode_splits.cuh"
#include "mla_test_util.h"
#include "programmatic_copy.cuh"

namespace fathom::testing {
namespace {

using kernels::cuda::MlaDecodeArgs;
using kernels::cuda::MlaDecodePlan;

constexpr double kTolerance = 1e-2;

struct DecodeCase {
  std::string name;
  int32_t heads, kv_lora, rope, page_size;
  std::vector<int32_t> seq_lens;
};

struct DecodeSetup {
  DecodeCase c;
  PagedLatentCache cache;
  std::vector<float> q_latent, q_pe;  // [batch, heads, kv_lora], [batch, heads, rope] (bf16-rounded)
  DeviceBuffer<__nv_bfloat16> q_latent_device, q_pe_device, out_device;
  float scale = 0;
  // q_pe_from_q (use_model_q_pe_layout): q_pe read from q_pe_in_q, [batch, heads, kQNope + rope] rows at offset
  // kQNope, instead of the packed q_pe_device.
  DeviceBuffer<__nv_bfloat16> q_pe_in_q;
  bool q_pe_from_q = false;
  int32_t batch() const { return static_cast<int32_t>(c.seq_lens.size()); }
  int32_t max_len() const { return *std::max_element(c.seq_lens.begin(), c.seq_lens.end()); }
};

DecodeSetup make_setup(const DecodeCase& c, uint32_t seed) {
  std::mt19937 rng(seed);
  DecodeSetup s{c, make_paged_cache(rng, c.seq_lens, c.kv_lora, c.rope, c.page_size), {}, {}, {}, {}, {}, 0};
  const size_t batch = c.seq_lens.size();
  s.q_latent = round_to_bf16(random_normal(rng, batch * c.heads * c.kv_lora));
  s.q_pe = round_to_bf16(random_normal(rng, batch * c.heads * c.rope));
  s.q_latent_device = DeviceBuffer<__nv_bfloat16>(float_to_bf16_vector(s.q_latent));
  s.q_pe_device = DeviceBuffer<__nv_bfloat16>(float_to_bf16_vector(s.q_pe));
  s.out_device = DeviceBuffer<__nv_bfloat16>(batch * c.heads * c.kv_lora);
  s.scale = 1.0f / std::sqrt(static_cast<float>(128 + c.rope));
  return s;
}

// The nope width of q in front of each head's rope part: the model passes q_pe as q + 128 at q's head stride.
constexpr int32_t kQNope = 128;

// q_pe as the model lays it out (built once): each head's rope values at offset kQNope of a [kQNope + rope] row of q,
// the nope columns NaN (a kernel reading outside the rope part shows). Packed q_pe again with `model_layout` false.
void use_model_q_pe_layout(DecodeSetup& s, bool model_layout) {
  s.q_pe_from_q = model_layout;
  if (!model_layout || s.q_pe_in_q.size() > 0) return;
  const int64_t rows = static_cast<int64_t>(s.batch()) * s.c.heads, row_elems = kQNope + s.c.rope;
  const std::vector<__nv_bfloat16> packed = float_to_bf16_vector(s.q_pe);
  __nv_bfloat16 nan_bits;
  const uint16_t all_ones = 0xffff;
  std::memcpy(&nan_bits, &all_ones, sizeof(nan_bits));
  std::vector<__nv_bfloat16> q(static_cast<size_t>(rows * row_elems), nan_bits);
  for (int64_t r = 0; r < rows; ++r)
    std::copy_n(packed.data() + r * s.c.rope, s.c.rope, q.data() + r * row_elems + kQNope);
  s.q_pe_in_q = DeviceBuffer<__nv_bfloat16>(q);
}

// Decode arguments over the setup's device tensors (output into s.out_device).
MlaDecodeArgs decode_args(DecodeSetup& s) {
  MlaDecodeArgs args;
  args.q_latent = s.q_latent_device.data();
  args.q_pe = s.q_pe_from_q ? s.q_pe_in_q.data() + kQNope : s.q_pe_device.data();
  args.q_pe_head_stride = s.q_pe_from_q ? kQNope + s.c.rope : s.c.rope;
  args.cache = s.cache.view();
  args.batch = s.cache.batch_view();
  args.out_latent = s.out_device.data();
  args.num_heads = s.c.heads;
  args.softmax_scale = s.scale;
  return args;
}

// Runs the GPU decode with `plan` (poisoned output first) and returns the output as floats.
std::vector<float> run_gpu(DecodeSetup& s, const MlaDecodePlan& plan, cudaStream_t stream = nullptr) {
  const MlaDecodeArgs args = decode_args(s);
  const size_t bytes = kernels::cuda::mla_decode_workspace_bytes(plan, s.batch(), s.c.heads, s.c.kv_lora);
  DeviceBuffer<uint8_t> workspace(bytes);
  workspace.fill_bytes(0xff);
  s.out_device.fill_bytes(0xff);
  kernels::cuda::mla_decode(args, plan, workspace.data(), bytes, stream);
  FATHOM_CUDA_CHECK(cudaStreamSynchronize(stream));
  return bf16_to_float_vector(s.out_device.download());
}

std::vector<float> run_cpu(const DecodeSetup& s) {
  const DecodeCase& c = s.c;
  ThreadPool pool;
  kernels::cpu::MlaShape shape{c.heads, 0, c.rope, 0, c.kv_lora, s.scale};  // q = q_pe only (nope part empty)
  std::vector<float> out(static_cast<size_t>(s.batch()) * c.heads * c.kv_lora);
  for (int b = 0; b < s.batch(); ++b) {
    const std::vector<const float*> rows = s.cache.row_pointers(b);
    const int32_t position = c.seq_lens[b] - 1;
    kernels::cpu::mla_attention_absorbed(s.q_latent.data() + static_cast<size_t>(b) * c.heads * c.kv_lora,
                                         s.q_pe.data() + static_cast<size_t>(b) * c.heads * c.rope, 1, &position,
                                         rows.data(), c.seq_lens[b], shape,
                                         out.data() + static_cast<size_t>(b) * c.heads * c.kv_lora, pool);
  }
  return out;
}

MlaDecodePlan heuristic_plan(const DecodeSetup& s) {
  return kernels::cuda::mla_decode_plan(device_sm_count(), s.batch(), s.c.heads, s.max_len());
}

// `plan` forced onto one head group and kernel path (0: seesaw, 1: warp-specialized (V3 dims), 2: wgmma S + PV,
// 3: wgmma S, 4: mma.sync; paths 1-4 and fixed splits only with 64-head groups) with splits of tiles_per_split tiles
// (0: the plan's split count); nullopt for the combinations that do not exist or need more splits than allowed.
std::optional<MlaDecodePlan> forced_path_plan(const MlaDecodePlan& plan, int32_t head_group, int path,
                                              int32_t tiles_per_split, int32_t max_len) {
  if ((path > 0 || tiles_per_split > 0) && head_group != 64) return std::nullopt;
  MlaDecodePlan forced = plan;
  forced.head_group = head_group;
  forced.seesaw = path == 0;
  forced.warp_specialized = path <= 1;
  forced.score_wgmma = path < 4;
  forced.value_wgmma = path < 3;
  if (tiles_per_split > 0) {
    forced.tiles_per_split = tiles_per_split;
    const int32_t split_tokens = kernels::cuda::kMlaDecodeTileTokens * tiles_per_split;
    forced.num_splits = (max_len + split_tokens - 1) / split_tokens;
    if (forced.num_splits > kernels::cuda::kMlaDecodeMaxSplits) return std::nullopt;
  }
  return forced;
}

class MlaDecodeSweep : public ::testing::TestWithParam<DecodeCase> {};

TEST_P(MlaDecodeSweep, MatchesCpuReferenceWithHeuristicAndForcedSplits) {
  FATHOM_REQUIRE_GPU();
  const DecodeCase& c = GetParam();
  DecodeSetup s = make_setup(c, static_cast<uint32_t>(std::hash<std::string>{}(c.name)));
  const std::vector<float> expected = run_cpu(s);
  const MlaDecodePlan plan = heuristic_plan(s);
  const std::vector<float> actual = run_gpu(s, plan);
  ASSERT_TRUE(all_finite(actual)) << "unwritten or non-finite output";
  const double error = relative_l2_error(actual, expected);
  EXPECT_LE(error, kTolerance) << "heuristic plan: head_group " << plan.head_group << ", splits " << plan.num_splits;
  double worst_variant = 0, worst_split_change = 0;
  // The split count changes results only by rounding: fp32 sums, and the bf16 rounding of the probabilities
  // (taken relative to each split's running max) and of the output, ~1e-3 relative each.
  // Fewest tiles per split 1-3: short sequences leave the later splits empty (nothing written, the combine skips them).
  const std::pair<int32_t, int32_t> kSplitsAndMinTiles[] = {{1, 1}, {3, 1}, {17, 1}, {17, 3}, {64, 2}};
  for (const auto& [splits, min_tiles] : kSplitsAndMinTiles) {
    MlaDecodePlan forced = plan;
    forced.num_splits = splits;
    forced.min_tiles_per_split = min_tiles;
    const std::vector<float> split_out = run_gpu(s, forced);
    ASSERT_TRUE(all_finite(split_out)) << "splits " << splits << ", min tiles " << min_tiles;
    const double split_error = relative_l2_error(split_out, expected);
    const double split_change = relative_l2_error(split_out, actual);
    EXPECT_LE(split_error, kTolerance) << "splits " << splits << ", min tiles " << min_tiles;
    EXPECT_LE(split_change, 5e-3) << "splits " << splits << ", min tiles " << min_tiles << " vs heuristic plan";
    worst_variant = std::max(worst_variant, split_error);
    worst_split_change = std::max(worst_split_change, split_change);
  }
  // Every head group size (and the seesaw, warp-specialized, wgmma and mma.sync paths of the 64-head group) gives the
  // same function, with the heuristic split count and with splits of 1, 2 and 3 tiles (the 64-head kernels). The
  // seesaw path runs on pages of a multiple of 64 tokens (elsewhere it is the warp-specialized kernel again).
  static const char* const kPathNames[] = {"seesaw", "warp-specialized", "wgmma S+PV", "wgmma S", "mma.sync"};
  for (int32_t head_group : {16, 32, 64})
    for (int path = 0; path < 5; ++path) {
      for (int32_t tiles_per_split : {0, 1, 2, 3}) {
        const std::optional<MlaDecodePlan> forced =
            forced_path_plan(plan, head_group, path, tiles_per_split, s.max_len());
        if (!forced) continue;
        const std::vector<float> variant = run_gpu(s, *forced);
        ASSERT_TRUE(all_finite(variant)) << "head_group " << head_group << ", path " << path << ", tiles/split "
                                         << tiles_per_split;
        const double variant_error = relative_l2_error(variant, expected);
        EXPECT_LE(variant_error, kTolerance)
            << "head_group " << head_group << ", path " << path << ", tiles/split " << tiles_per_split;
        worst_variant = std::max(worst_variant, variant_error);
        if (head_group == 64 && tiles_per_split == 0)
          std::printf("[ mla decode ] %-32s group 64 path %d (%s): rel_l2 %.2e\n", c.name.c_str(), path,
                      kPathNames[path], variant_error);
      }
    }
  std::printf("[ mla decode ] %-32s rel_l2 %.2e (group %d, splits %d), worst variant %.2e, split change %.2e\n",
              c.name.c_str(), error, plan.head_group, plan.num_splits, worst_variant, worst_split_change);
}

// q_pe at the model's head stride (inside q's rows, kQNope + rope apart) gives the packed layout's bits on every
// head group and 64-head path, with the heuristic split count and with splits of 2 tiles.
TEST_P(MlaDecodeSweep, QPeAtTheModelsHeadStrideGivesTheSameBits) {
  FATHOM_REQUIRE_GPU();
  const DecodeCase& c = GetParam();
  DecodeSetup s = make_setup(c, static_cast<uint32_t>(std::hash<std::string>{}(c.name)) + 1);
  const MlaDecodePlan plan = heuristic_plan(s);
  for (int32_t head_group : {16, 32, 64})
    for (int path = 0; path < 5; ++path) {
      for (int32_t tiles_per_split : {0, 2}) {
        const std::optional<MlaDecodePlan> forced =
            forced_path_plan(plan, head_group, path, tiles_per_split, s.max_len());
        if (!forced) continue;
        SCOPED_TRACE(::testing::Message() << "head_group " << head_group << ", path " << path << ", tiles/split "
                                          << tiles_per_split);
        use_model_q_pe_layout(s, false);
        const std::vector<float> packed = run_gpu(s, *forced);
        use_model_q_pe_layout(s, true);
        const std::vector<float> in_q = run_gpu(s, *forced);
        ASSERT_TRUE(all_finite(in_q));
        ASSERT_EQ(0, std::memcmp(packed.data(), in_q.data(), packed.size() * sizeof(float)));
      }
    }
}

std::vector<int32_t> random_lens(uint32_t seed, int count, int min_len, int max_len) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> dist(min_len, max_len);
  std::vector<int32_t> lens(static_cast<size_t>(count));
  for (int32_t& len : lens) len = dist(rng);
  return lens;
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, MlaDecodeSweep,
    ::testing::Values(
        // DeepSeek-V3 dims (128 heads, kv_lora 512, rope 64)
        DecodeCase{"v3_b1_len1_page1", 128, 512, 64, 1, {1}},
        DecodeCase{"v3_b1_len1000_page16", 128, 512, 64, 16, {1000}},
        DecodeCase{"v3_b3_page_edges_page64", 128, 512, 64, 64, {64, 65, 127}},
        DecodeCase{"v3_b5_mixed_page1", 128, 512, 64, 1, {1, 2, 129, 300, 63}},
        DecodeCase{"v3_b8_random_page16", 128, 512, 64, 16, random_lens(8, 8, 1, 700)},
        DecodeCase{"v3_b64_random_page64", 128, 512, 64, 64, random_lens(64, 64, 1, 300)},
        DecodeCase{"v3_tp8_16heads_page16", 16, 512, 64, 16, {1000, 17, 640}},
        DecodeCase{"v3_32heads_page64", 32, 512, 64, 64, {513, 2}},
        DecodeCase{"v3_long16k_b1_page64", 128, 512, 64, 64, {16384}},
        DecodeCase{"v3_b4_odd_tiles_page128", 128, 512, 64, 128, {1, 200, 4097, 640}},
        DecodeCase{"v3_b2_long_page64", 128, 512, 64, 64, {16377, 191}},
        DecodeCase{"v3_long16k_b2_page16", 128, 512, 64, 16, {16384, 9001}},
        DecodeCase{"v3_b4_page3", 128, 512, 64, 3, {1, 64, 190, 1000}},  // page size not a power of two
        // odd small dims (scalar load path, padded tiles)
        DecodeCase{"odd_h3_lora99_rope13_page1", 3, 99, 13, 1, {1, 77, 200}},
        DecodeCase{"odd_h17_lora40_rope8_page5", 17, 40, 8, 5, {5, 6, 131}},
        DecodeCase{"odd_h70_lora128_rope64_page16", 70, 128, 64, 16, {300, 1, 64}},
        DecodeCase{"odd_h33_lora200_rope24_page64", 33, 200, 24, 64, {1000}}),
    [](const ::testing::TestParamInfo<DecodeCase>& info) { return info.param.name; });

// The three 64-head wgmma kernels: the seesaw one (pages of 64 tokens), the warp-specialized and shared-phase ones.
struct WgmmaKernelVariant {
  const char* name;
  int32_t page_size;
  bool seesaw, warp_specialized;  // forced over the heuristic plan (whose seesaw flag needs CTAs of 32+ tiles)
};
constexpr WgmmaKernelVariant kWgmmaKernelVariants[] = {
    {"seesaw", 64, true, true}, {"warp-specialized", 16, false, true}, {"shared phases", 16, false, false}};

TEST(MlaDecode, DeterministicAndGraphReplayMatchesDirectLaunch) {
  FATHOM_REQUIRE_GPU();
  for (const WgmmaKernelVariant& variant : kWgmmaKernelVariants) {
    SCOPED_TRACE(variant.name);
    DecodeSetup s = make_setup(DecodeCase{"graph", 128, 512, 64, variant.page_size, {3000, 1, 777, 64}}, 1234);
    MlaDecodePlan plan = heuristic_plan(s);
    plan.num_splits = 5;  // exercise the combine kernel inside the graph
    plan.warp_specialized = variant.warp_specialized;
    plan.seesaw = variant.seesaw;
    const std::vector<float> direct = run_gpu(s, plan);
    const std::vector<float> again = run_gpu(s, plan);
    ASSERT_EQ(0, std::memcmp(direct.data(), again.data(), direct.size() * sizeof(float))) << "not deterministic";

    cudaStream_t stream;
    FATHOM_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    const size_t bytes = kernels::cuda::mla_decode_workspace_bytes(plan, s.batch(), s.c.heads, s.c.kv_lora);
    DeviceBuffer<uint8_t> workspace(bytes);
    workspace.fill_bytes(0xff);  // poisoned: a split read but never written shows as NaN
    FATHOM_CUDA_CHECK(cudaDeviceSynchronize());  // the fill (legacy stream) before the non-blocking stream's work
    const MlaDecodeArgs args = decode_args(s);
    cudaGraph_t graph;
    cudaGraphExec_t graph_exec;
    FATHOM_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    kernels::cuda::mla_decode(args, plan, workspace.data(), bytes, stream);
    FATHOM_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
    FATHOM_CUDA_CHECK(cudaGraphInstantiate(&graph_exec, graph, 0));
    s.out_device.fill_bytes(0xff);
    FATHOM_CUDA_CHECK(cudaDeviceSynchronize());  // the fill (legacy stream) before the non-blocking stream's replay
    FATHOM_CUDA_CHECK(cudaGraphLaunch(graph_exec, stream));
    FATHOM_CUDA_CHECK(cudaStreamSynchronize(stream));
    const std::vector<float> replayed = bf16_to_float_vector(s.out_device.download());
    EXPECT_EQ(0, std::memcmp(direct.data(), replayed.data(), direct.size() * sizeof(float))) << "graph replay differs";
    FATHOM_CUDA_CHECK(cudaGraphExecDestroy(graph_exec));
    FATHOM_CUDA_CHECK(cudaGraphDestroy(graph));
    FATHOM_CUDA_CHECK(cudaStreamDestroy(stream));
  }
}

// A batch of 0 sequences (a graph bucket or a step with nothing to decode) launches nothing: no workspace needed, the
// output untouched, with and without splits and the value projection.
TEST(MlaDecode, EmptyBatchIsANoOp) {
  FATHOM_REQUIRE_GPU();
  DecodeSetup s = make_setup(DecodeCase{"empty", 128, 512, 64, 64, {300}}, 77);
  std::mt19937 rng(5);
  constexpr int32_t kHeads = 128, kNope = 128, kV = 128, kKvLora = 512;
  DeviceBuffer<__nv_bfloat16> kv_b(float_to_bf16_vector(random_normal(rng, size_t{kHeads} * (kNope + kV) * kKvLora)));
  DeviceBuffer<__nv_bfloat16> values(size_t{kHeads} * kV);
  kernels::cuda::MlaKvBWeights weights{kv_b.data(), nullptr, false, kHeads, kNope, kV, kKvLora};
  for (const int32_t splits : {1, 4}) {
    for (const bool project : {false, true}) {
      SCOPED_TRACE(::testing::Message() << splits << " splits, value projection " << project);
      MlaDecodeArgs args = decode_args(s);
      args.batch.batch = 0;
      if (project) {
        args.value_weights = &weights;
        args.values_out = values.data();
      }
      MlaDecodePlan plan = heuristic_plan(s);
      plan.num_splits = splits;
      s.out_device.fill_bytes(0x5a);
      values.fill_bytes(0x5a);
      kernels::cuda::mla_decode(args, plan, nullptr, 0, nullptr);
      FATHOM_CUDA_CHECK(cudaDeviceSynchronize());
      for (DeviceBuffer<__nv_bfloat16>* buffer : {&s.out_device, &values}) {
        const std::vector<__nv_bfloat16> host = buffer->download();
        std::vector<uint16_t> bits(host.size());
        std::memcpy(bits.data(), host.data(), host.size() * sizeof(uint16_t));
        ASSERT_EQ(std::count(bits.begin(), bits.end(), uint16_t{0x5a5a}), static_cast<ptrdiff_t>(bits.size()))
            << (buffer == &values ? "values" : "output") << " written";
      }
    }
  }
}

constexpr int32_t kV3ContextTokens = 163840;

// Sequence b of the setup decoded alone (a batch of one: its page-table row, seq_len and query rows), with the plan
// mla_decode_plan_batch_invariant makes for it at context bound `bound` (V3's context, `rule`); its output rows
// [heads, kv_lora] as floats.
std::vector<float> run_gpu_alone(DecodeSetup& s, int b, int32_t bound, kernels::cuda::MlaInvariantSplitRule rule) {
  const MlaDecodePlan plan =
      kernels::cuda::mla_decode_plan_batch_invariant(device_sm_count(), 1, s.c.heads, bound, kV3ContextTokens, rule);
  const int64_t rows = static_cast<int64_t>(s.c.heads) * s.c.kv_lora;
  MlaDecodeArgs args = decode_args(s);
  args.q_latent += b * rows;
  args.q_pe += static_cast<int64_t>(b) * s.c.heads * s.c.rope;
  args.batch = {s.cache.page_table_device.data() + static_cast<int64_t>(b) * s.cache.max_pages_per_seq,
                s.cache.seq_lens_device.data() + b, 1, s.cache.max_pages_per_seq};
  DeviceBuffer<__nv_bfloat16> out(static_cast<size_t>(rows));
  out.fill_bytes(0xff);
  args.out_latent = out.data();
  const size_t bytes = kernels::cuda::mla_decode_workspace_bytes(plan, 1, s.c.heads, s.c.kv_lora);
  DeviceBuffer<uint8_t> workspace(std::max<size_t>(bytes, 16));
  workspace.fill_bytes(0xff);
  kernels::cuda::mla_decode(args, plan, workspace.data(), workspace.bytes(), nullptr);
  FATHOM_CUDA_CHECK(cudaDeviceSynchronize());
  return bf16_to_float_vector(out.download());
}

// Deterministic inference's plans: a sequence's output is the same bits decoded alone (a plan for its own length, or
// for a graph's larger bound) as in a batch of sequences of other lengths (the batch's plan, or a larger bound's),
// whatever the allocated split count and the launch choices by the batch: the tuned rules (fixed 40-tile splits at
// 128 heads, own-length splits at 16 and 32) and own-length splits of at least 2 or 8 tiles (mla_bench's other rules).
// Lengths: 1 tile, 2, 3 (odd), just past 64 tiles, 200 tiles.
TEST(MlaDecode, BatchInvariantPlanOutputFollowsTheSequenceOnly) {
  FATHOM_REQUIRE_GPU();
  struct RuleCase {
    int32_t heads;
    kernels::cuda::MlaInvariantSplitRule rule;
  };
  for (const RuleCase& rc : {RuleCase{128, {}}, RuleCase{128, {0, 32, 2}}, RuleCase{32, {}}, RuleCase{32, {0, 64, 8}},
                             RuleCase{16, {}}, RuleCase{16, {0, 64, 2}}})
    for (const int32_t page_size : {64, 16}) {
      const int32_t heads = rc.heads;
      SCOPED_TRACE(std::to_string(heads) + " heads, divisor " + std::to_string(rc.rule.divisor) + ", pages of " +
                   std::to_string(page_size));
      DecodeSetup s = make_setup(DecodeCase{"invariant", heads, 512, 64, page_size, {4100, 1, 130, 12800, 190, 64}},
                                 2468 + heads + page_size);
      const int sms = device_sm_count();
      const int64_t rows = static_cast<int64_t>(heads) * 512;
      for (const int32_t batch_bound : {s.max_len(), 16384}) {
        const std::vector<float> batched = run_gpu(
            s, kernels::cuda::mla_decode_plan_batch_invariant(sms, s.batch(), heads, batch_bound, kV3ContextTokens,
                                                              rc.rule));
        ASSERT_TRUE(all_finite(batched));
        EXPECT_LE(relative_l2_error(batched, run_cpu(s)), kTolerance) << "bound " << batch_bound;
        for (int b = 0; b < s.batch(); ++b)
          for (const int32_t alone_bound : {s.c.seq_lens[b], 16384}) {
            const std::vector<float> alone = run_gpu_alone(s, b, alone_bound, rc.rule);
            EXPECT_EQ(0, std::memcmp(alone.data(), batched.data() + b * rows, alone.size() * sizeof(float)))
                << "sequence " << b << " (" << s.c.seq_lens[b] << " tokens) alone at bound " << alone_bound
                << ", batched at bound " << batch_bound;
          }
      }
    }
}

// Plans that fix the tiles per split take the split count from the batch's longest sequence; the combine's thread
// groups follow that count. A sequence's output must not change with it: the same stored splits combined by 1, 2 and
// 4 thread groups, in the plain and the deep form, give the same bits.
TEST(MlaDecode, CombineBitsDoNotDependOnTheBatchSplitCount) {
  FATHOM_REQUIRE_GPU();
  for (const int32_t kv_lora : {512, 99}) {  // vector and scalar column paths
    SCOPED_TRACE(kv_lora);
    DecodeSetup s = make_setup(DecodeCase{"combine_groups", 128, kv_lora, 64, 64, {448, 64, 300}}, 4321);
    MlaDecodePlan plan = heuristic_plan(s);
    plan.tiles_per_split = 1;  // 7, 1 and 5 stored splits
    std::vector<float> reference;
    for (const int32_t splits : {7, 8, 12, 16, 64})  // 1, 2, 2, 4 and 4 thread groups; empty splits past 7
      for (const bool deep : {false, true}) {         // the combine's plain and deep forms
        plan.num_splits = splits;
        plan.deep_combine = deep;
        const std::vector<float> out = run_gpu(s, plan);
        ASSERT_TRUE(all_finite(out)) << "splits " << splits << ", deep " << deep;
        if (reference.empty()) {
          reference = out;
          EXPECT_LE(relative_l2_error(out, run_cpu(s)), kTolerance);
        } else {
          EXPECT_EQ(0, std::memcmp(reference.data(), out.data(), out.size() * sizeof(float)))
              << "splits " << splits << ", deep " << deep;
        }
      }
  }
}

// The combine alone on partials where the summation order shows: splits 0 and 4 hold +2^24 and -2^24, split 1 holds 1.
// Summed in the canonical order (split s into lane s % 4, then the lanes) the result is exactly 1/7 of the weight
// total; any other order that adds 1 to 2^24 before the cancellation loses it. Every allocated split count (1, 2 and 4
// thread groups) must give those bits, in the plain and the deep form; a sequence of length 0 gives zeros; 40 stored
// splits use every lane of warp 0; 100 take the deep form through a second round of rows.
TEST(MlaDecode, CombineSumsInTheCanonicalOrderForEveryGroupCount) {
  FATHOM_REQUIRE_GPU();
  constexpr int32_t kHeads = 3, kLora = 100;
  std::vector<int32_t> group_counts;
  for (const int32_t allocated : {7, 8, 12, 16, 64, 128}) {
    SCOPED_TRACE(allocated);
    group_counts.push_back(kernels::cuda::mla_decode_combine_split_groups(allocated));
    // Sequences: 7 tiles (7 stored splits of 1 tile), empty, and 100 or 40 tiles when the allocation holds them (else 7).
    const std::vector<int32_t> seq_lens = {7 * 64, 0, (allocated >= 100 ? 100 : allocated >= 40 ? 40 : 7) * 64};
    const auto batch = static_cast<int32_t>(seq_lens.size());
    std::vector<float> partial(static_cast<size_t>(batch) * allocated * kHeads * kLora, std::nanf(""));
    std::vector<float> lse(static_cast<size_t>(batch) * allocated * kHeads, std::nanf(""));
    auto at = [&](int b, int split, int h) { return (static_cast<size_t>(b) * allocated + split) * kHeads + h; };
    for (int b = 0; b < batch; ++b) {
      const int stored = (seq_lens[b] + 63) / 64;
      for (int split = 0; split < stored; ++split)
        for (int h = 0; h < kHeads; ++h) {
          lse[at(b, split, h)] = 3.0f;  // equal weights: each 1 relative to the maximum
          for (int c = 0; c < kLora; ++c) {
            float value = 0.0f;
            if (split == 0) value = 16777216.0f;
            if (split == 4) value = -16777216.0f;
            if (split == 1) value = 1.0f;
            partial[at(b, split, h) * kLora + c] = value;
          }
        }
    }
    DeviceBuffer<__nv_bfloat16> partial_device(float_to_bf16_vector(partial));  // +-2^24, 1, 0, NaN: exact in bf16
    DeviceBuffer<float> lse_device(lse);
    DeviceBuffer<int32_t> lens_device(seq_lens);
    DeviceBuffer<__nv_bfloat16> out(static_cast<size_t>(batch) * kHeads * kLora);
    out.fill_bytes(0xff);
    for (const bool deep : {false, true}) {  // the plain and the deep form (2 and 4 groups)
      MlaDecodePlan plan;
      plan.num_splits = allocated;
      plan.tiles_per_split = 1;
      plan.deep_combine = deep;
      out.fill_bytes(0xff);
      kernels::cuda::mla_decode_combine(partial_device.data(), lse_device.data(), out.data(), lens_device.data(),
                                        batch, kHeads, kLora, plan, nullptr);
      FATHOM_CUDA_CHECK(cudaDeviceSynchronize());
      const std::vector<float> result = bf16_to_float_vector(out.download());
      for (int b = 0; b < batch; ++b) {
        const int stored = (seq_lens[b] + 63) / 64;
        const float expected = stored == 0 ? 0.0f : round_to_bf16({1.0f / static_cast<float>(stored)})[0];
        for (int h = 0; h < kHeads; ++h)
          for (int c = 0; c < kLora; ++c)
            ASSERT_EQ(result[(static_cast<size_t>(b) * kHeads + h) * kLora + c], expected)
                << "sequence " << b << " (" << stored << " splits), head " << h << ", column " << c << ", deep "
                << deep;
      }
    }
  }
  EXPECT_EQ(group_counts, (std::vector<int32_t>{1, 2, 2, 4, 4, 4}));
}

// The decode as the model chains it: programmatic launches after the kernels that write its cache rows, page table
// and q_pe (two or more launches back) and q_latent (the launch right before), alternating between two setups of
// the same shape (different rows, page tables and queries), so a read of the other setup's data (before the wait,
// or a stale cached line) changes the output. Every run must give the bits of a plain launch of the same setup;
// split plan of 3 (the combine runs after it, let launch at the decode's start or at its output; the first KV tiles
// loaded before or after the wait). Guards any move of the kernel's reads ahead of its wait.
TEST(MlaDecode, ProgrammaticChainMatchesPlainLaunch) {
  FATHOM_REQUIRE_GPU();
  // The 64-head wgmma kernels at 128 heads, and the mma.sync shared-phase kernel's 16-head groups (V3 under TP8).
  constexpr WgmmaKernelVariant kMmaSync16Heads{"shared phases, 16 heads (mma.sync)", 16, false, false};
  std::vector<std::pair<WgmmaKernelVariant, int32_t>> variants;  // (kernel, heads)
  for (const WgmmaKernelVariant& variant : kWgmmaKernelVariants) variants.emplace_back(variant, 128);
  variants.emplace_back(kMmaSync16Heads, 16);
  for (const auto& [variant, heads] : variants) {
    for (const int timing : {0, 1, 2, 3}) {  // bit 0: the combine launched late; bit 1: KV tiles before the wait
      const bool late_combine_launch = (timing & 1) != 0, kv_loads_before_wait = (timing & 2) != 0;
      SCOPED_TRACE(std::string(variant.name) + (late_combine_launch ? ", late combine launch" : "") +
                   (kv_loads_before_wait ? ", KV loads before the wait" : ""));
      const DecodeCase c{"chain", heads, 512, 64, variant.page_size, {700, 1, 129}};
      DecodeSetup setups[2] = {make_setup(c, 71), make_setup(c, 72)};
      MlaDecodePlan plan = heuristic_plan(setups[0]);
      plan.num_splits = 3;
      if (heads == 16) ASSERT_EQ(16, plan.head_group);  // the mma.sync kernel with Q in registers
      plan.warp_specialized = variant.warp_specialized;
      plan.seesaw = variant.seesaw;
      plan.late_combine_launch = late_combine_launch;
      plan.kv_loads_before_wait = kv_loads_before_wait;
      std::vector<float> expected[2];
      for (int i = 0; i < 2; ++i) expected[i] = run_gpu(setups[i], plan);
      ASSERT_NE(0, std::memcmp(expected[0].data(), expected[1].data(), expected[0].size() * sizeof(float)));
      const DecodeSetup& shape = setups[0];
      DeviceBuffer<__nv_bfloat16> pool(shape.cache.pool.size()), q_latent(shape.q_latent_device.size()),
          q_pe(shape.q_pe_device.size()), out(shape.out_device.size());
      DeviceBuffer<int32_t> page_table(shape.cache.page_table_device.size());
      const size_t bytes = kernels::cuda::mla_decode_workspace_bytes(plan, shape.batch(), c.heads, c.kv_lora);
      DeviceBuffer<uint8_t> workspace(bytes);
      workspace.fill_bytes(0xff);  // poisoned: a split read but never written shows as NaN
      FATHOM_CUDA_CHECK(cudaDeviceSynchronize());  // the fill before the non-blocking stream's work
      MlaDecodeArgs args;
      args.q_latent = q_latent.data();
      args.q_pe = q_pe.data();
      args.q_pe_head_stride = c.rope;
      args.cache = shape.cache.view();
      args.cache.pool = pool.data();
      args.batch = shape.cache.batch_view();
      args.batch.page_table = page_table.data();
      args.out_latent = out.data();
      args.num_heads = c.heads;
      args.softmax_scale = shape.scale;
      cudaStream_t stream;
      FATHOM_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
      for (int run = 0; run < 20; ++run) {
        const DecodeSetup& s = setups[run % 2];
        FATHOM_CUDA_CHECK(cudaMemsetAsync(out.data(), 0xff, out.bytes(), stream));
        programmatic_copy(s.cache.pool.data(), pool.data(), pool.bytes(), stream);
        programmatic_copy(s.cache.page_table_device.data(), page_table.data(), page_table.bytes(), stream);
        programmatic_copy(s.q_pe_device.data(), q_pe.data(), q_pe.bytes(), stream);          // two launches back
        programmatic_copy(s.q_latent_device.data(), q_latent.data(), q_latent.bytes(), stream);  // the previous launch
        kernels::cuda::mla_decode(args, plan, workspace.data(), bytes, stream);
        FATHOM_CUDA_CHECK(cudaStreamSynchronize(stream));
        const std::vector<float> got = bf16_to_float_vector(out.download());
        ASSERT_EQ(0, std::memcmp(got.data(), expected[run % 2].data(), got.size() * sizeof(float))) << "run " << run;
      }
      FATHOM_CUDA_CHECK(cudaStreamDestroy(stream));
    }
  }
}

TEST(MlaDecode, PlanAndWorkspace) {  // host code: runs without a GPU (CI)
  using kernels::cuda::mla_decode_plan;
  // Large batches need no split; a single long sequence is split; splits never exceed the tile count.
  EXPECT_EQ(1, mla_decode_plan(132, 128, 128, 4096).num_splits);
  EXPECT_EQ(1, kernels::cuda::mla_decode_combine_split_groups(2));  // the combine's thread groups by split count
  EXPECT_EQ(2, kernels::cuda::mla_decode_combine_split_groups(8));
  EXPECT_EQ(4, kernels::cuda::mla_decode_combine_split_groups(64));
  EXPECT_GT(mla_decode_plan(132, 1, 128, 16384).num_splits, 16);
  EXPECT_EQ(1, mla_decode_plan(132, 1, 128, 64).num_splits);
  // The partials grow with the split count: batch 1 at 4096 tokens stops short of one tile per split.
  EXPECT_LE(mla_decode_plan(132, 1, 128, 4096).num_splits, 32);
  EXPECT_EQ(2, mla_decode_plan(132, 1, 128, 1024).min_tiles_per_split);
  EXPECT_EQ(1, mla_decode_plan(132, 1, 128, 256).min_tiles_per_split);
  // 64-head groups share each KV read among more heads; short contexts at small batches take 16-head groups (more
  // CTAs for a latency-bound call).
  EXPECT_EQ(64, mla_decode_plan(132, 1, 128, 4096).head_group);
  EXPECT_EQ(64, mla_decode_plan(132, 16, 128, 1024).head_group);
  EXPECT_EQ(16, mla_decode_plan(132, 1, 128, 100).head_group);
  EXPECT_EQ(16, mla_decode_plan(132, 2, 128, 1024).head_group);
  EXPECT_EQ(16, mla_decode_plan(132, 1, 128, 2048).head_group);  // one sequence: to 3072 tokens
  EXPECT_EQ(16, mla_decode_plan(132, 1, 128, 3072).head_group);
  EXPECT_EQ(64, mla_decode_plan(132, 2, 128, 2048).head_group);
  EXPECT_EQ(16, mla_decode_plan(132, 16, 128, 256).head_group);
  EXPECT_EQ(16, mla_decode_plan(132, 1, 16, 100).head_group);
  EXPECT_EQ(32, mla_decode_plan(132, 64, 32, 4096).head_group);
  // The warp-specialized kernel for CTAs of 2 tiles or more (2 at batch 1 x 4096 tokens, 64 at 128 x 4096); the
  // batch-invariant plan's choice depends only on its split rule.
  EXPECT_TRUE(mla_decode_plan(132, 1, 128, 4096).warp_specialized);
  EXPECT_TRUE(mla_decode_plan(132, 128, 128, 4096).warp_specialized);
  EXPECT_TRUE(mla_decode_plan(132, 16, 128, 16384).warp_specialized);
  EXPECT_TRUE(kernels::cuda::mla_decode_plan_batch_invariant(132, 1, 128, 100, 163840).warp_specialized);
  // The seesaw kernel (pages of 64 tokens) for CTAs of 32 tiles or more: batch 1 x 4096 splits into 2-tile CTAs.
  EXPECT_TRUE(mla_decode_plan(132, 128, 128, 4096).seesaw);
  EXPECT_TRUE(mla_decode_plan(132, 16, 128, 16384).seesaw);
  EXPECT_FALSE(mla_decode_plan(132, 1, 128, 4096).seesaw);
  EXPECT_FALSE(mla_decode_plan(132, 128, 128, 1024).seesaw);
  EXPECT_TRUE(kernels::cuda::mla_decode_plan_batch_invariant(132, 1, 128, 100, 163840).seesaw);  // 40-tile splits
  EXPECT_FALSE(kernels::cuda::mla_decode_plan_batch_invariant(132, 1, 128, 100, 32768).seesaw);  // 16-tile splits
  // Batch-invariant rules: fixed splits at 64-head groups (16 tiles, more where the model's context needs over 64
  // splits), own-length splits at 16-32-head groups (up to 64 of at least 8 or 16 tiles, allocated for the bound's
  // longest).
  using kernels::cuda::mla_decode_invariant_split_rule;
  EXPECT_EQ(40, mla_decode_invariant_split_rule(128, 163840).tiles_per_split);
  EXPECT_EQ(16, mla_decode_invariant_split_rule(64, 32768).tiles_per_split);
  for (const int heads : {16, 8, 32, 24}) {
    EXPECT_EQ(0, mla_decode_invariant_split_rule(heads, 163840).tiles_per_split) << heads;
    EXPECT_EQ(64, mla_decode_invariant_split_rule(heads, 163840).divisor) << heads;
  }
  EXPECT_EQ(8, mla_decode_invariant_split_rule(16, 163840).min_tiles);
  EXPECT_EQ(16, mla_decode_invariant_split_rule(32, 163840).min_tiles);
  auto tp8_plan = [](int32_t context) {
    return kernels::cuda::mla_decode_plan_batch_invariant(132, 1, 16, context, 163840);
  };
  EXPECT_EQ(1, tp8_plan(512).num_splits);  // 8 tiles
  EXPECT_EQ(2, tp8_plan(1024).num_splits);
  EXPECT_EQ(8, tp8_plan(4096).num_splits);
  EXPECT_EQ(32, tp8_plan(16384).num_splits);
  EXPECT_EQ(64, tp8_plan(32768).num_splits);  // 64 splits of 8 tiles
  EXPECT_EQ(64, tp8_plan(163840).num_splits);  // 64 of 40
  EXPECT_EQ(8, tp8_plan(4096).min_tiles_per_split);
  EXPECT_EQ(0, tp8_plan(4096).tiles_per_split);
  EXPECT_FALSE(tp8_plan(163840).seesaw);
  auto tp4_plan = [](int32_t context) {
    return kernels::cuda::mla_decode_plan_batch_invariant(132, 1, 32, context, 163840);
  };
  EXPECT_EQ(32, tp4_plan(4096).head_group);
  EXPECT_EQ(1, tp4_plan(1024).num_splits);  // 16 tiles
  EXPECT_EQ(4, tp4_plan(4096).num_splits);
  EXPECT_EQ(64, tp4_plan(65536).num_splits);  // 64 of 16
  EXPECT_EQ(16, tp4_plan(4096).min_tiles_per_split);
  EXPECT_EQ(40, kernels::cuda::mla_decode_plan_batch_invariant(132, 1, 128, 4096, 163840).tiles_per_split);
  const kernels::cuda::MlaInvariantSplitRule other_rule{0, 8, 4};
  EXPECT_EQ(8, kernels::cuda::mla_decode_plan_batch_invariant(132, 1, 128, 163840, 163840, other_rule).num_splits);
  EXPECT_EQ(3, kernels::cuda::mla_decode_plan_batch_invariant(132, 1, 128, 640, 163840, other_rule).num_splits);
  EXPECT_FALSE(kernels::cuda::mla_decode_plan_batch_invariant(132, 1, 128, 4096, 163840, other_rule).seesaw);
  // A 64-head plan takes 4-tile splits over 3-tile ones (short CTAs pay their prologue on fewer tiles).
  EXPECT_EQ(16, mla_decode_plan(132, 2, 128, 4096).num_splits);
  EXPECT_TRUE(mla_decode_plan(132, 2, 128, 4096).warp_specialized);
  // The combine's deep form: grids of one CTA per SM (batch 1 at 128 heads), at every context.
  EXPECT_TRUE(mla_decode_plan(132, 1, 128, 16384).deep_combine);
  EXPECT_TRUE(mla_decode_plan(132, 1, 128, 65536).deep_combine);
  EXPECT_TRUE(mla_decode_plan(132, 1, 128, 163840).deep_combine);
  EXPECT_FALSE(mla_decode_plan(132, 2, 128, 16384).deep_combine);
  EXPECT_FALSE(mla_decode_plan(132, 128, 128, 4096).deep_combine);  // one split: no combine
  // The batch-invariant plan takes the same bit-neutral launch choices by its batch.
  EXPECT_TRUE(kernels::cuda::mla_decode_plan_batch_invariant(132, 1, 128, 16384, 163840).deep_combine);
  EXPECT_FALSE(kernels::cuda::mla_decode_plan_batch_invariant(132, 2, 128, 16384, 163840).deep_combine);
  // Only those choices follow the batch: every field that changes a bit is the same for 1 and for 128 sequences.
  for (int heads : {16, 32, 128})
    for (int context : {100, 4096, 16384, 163840}) {
      const MlaDecodePlan one = kernels::cuda::mla_decode_plan_batch_invariant(132, 1, heads, context, 163840);
      for (int batch : {2, 4, 8, 128}) {
        const MlaDecodePlan many = kernels::cuda::mla_decode_plan_batch_invariant(132, batch, heads, context, 163840);
        SCOPED_TRACE(std::to_string(heads) + " heads, " + std::to_string(context) + " tokens, batch " +
                     std::to_string(batch));
        EXPECT_EQ(many.head_group, one.head_group);
        EXPECT_EQ(many.num_splits, one.num_splits);
        EXPECT_EQ(many.tiles_per_split, one.tiles_per_split);
        EXPECT_EQ(many.min_tiles_per_split, one.min_tiles_per_split);
        EXPECT_EQ(many.score_wgmma, one.score_wgmma);
        EXPECT_EQ(many.value_wgmma, one.value_wgmma);
        EXPECT_EQ(many.warp_specialized, one.warp_specialized);
        EXPECT_EQ(many.seesaw, one.seesaw);
      }
    }
  // The combine launched late: split plans whose combine grid is at most 4 CTAs per SM (batch 1-4 at 128 heads).
  EXPECT_TRUE(mla_decode_plan(132, 1, 128, 131072).late_combine_launch);
  EXPECT_TRUE(mla_decode_plan(132, 4, 128, 32768).late_combine_launch);
  EXPECT_FALSE(mla_decode_plan(132, 5, 128, 32768).late_combine_launch);
  EXPECT_FALSE(mla_decode_plan(132, 8, 128, 16384).late_combine_launch);
  EXPECT_FALSE(mla_decode_plan(132, 128, 128, 4096).late_combine_launch);  // one split: no combine
  // The first KV tiles loaded before the wait: split plans.
  EXPECT_TRUE(mla_decode_plan(132, 16, 128, 4096).kv_loads_before_wait);
  EXPECT_FALSE(mla_decode_plan(132, 128, 128, 4096).kv_loads_before_wait);
  const size_t max_bytes = kernels::cuda::mla_decode_max_workspace_bytes(132, 128, 128, 512, 16384);
  for (int batch : {1, 2, 16, 64, 128}) {
    const MlaDecodePlan plan = mla_decode_plan(132, batch, 128, 16384);
    EXPECT_LE(kernels::cuda::mla_decode_workspace_bytes(plan, batch, 128, 512), max_bytes) << batch;
  }
  // bf16 partial rows, then the fp32 log-sum-exps from the next 16-byte boundary (odd widths leave a gap).
  MlaDecodePlan split_plan;
  split_plan.num_splits = 7;
  const auto layout = kernels::cuda::mla_decode_workspace_layout(split_plan, 3, 5, 99);  // 105 rows of 99 columns
  EXPECT_EQ(20800u, layout.lse_offset_bytes);  // 105 * 99 * 2 = 20790, rounded up to 16
  EXPECT_EQ(20800u + 105 * 4, layout.total_bytes);
  EXPECT_EQ(layout.total_bytes, kernels::cuda::mla_decode_workspace_bytes(split_plan, 3, 5, 99));
  split_plan.num_splits = 1;
  EXPECT_EQ(0u, kernels::cuda::mla_decode_workspace_bytes(split_plan, 3, 5, 99));
}

// Host check of what BatchInvariantPlanOutputFollowsTheSequenceOnly runs on the GPU for a few lengths: under the
// batch-invariant plan a sequence's split size (split_tiles, as the kernels and the combine compute it from the plan)
// is its rule's count for its own length -- tiles_per_split, or max(ceil(tiles / divisor), min_tiles) -- whatever the
// batch and the plan's bound (a CUDA graph captured for a longer context), and the bound's allocation holds its splits.
TEST(MlaDecode, BatchInvariantSplitsFollowTheSequenceLengthOnly) {  // host code: runs without a GPU (CI)
  using kernels::cuda::MlaInvariantSplitRule;
  using kernels::cuda::mla_decode_plan_batch_invariant;
  using kernels::cuda::mla_detail::kDecodeTileTokens;
  constexpr int32_t kModelContext = 163840;
  struct RuleCase {
    int heads;
    MlaInvariantSplitRule rule;  // all 0: the tuned rule
  };
  const std::vector<RuleCase> cases = {{8, {}},          {16, {}},          {24, {}},         {32, {}},
                                       {64, {}},         {128, {}},         {16, {0, 64, 2}}, {128, {0, 32, 2}},
                                       {128, {0, 8, 4}}, {16, {0, 64, 16}}, {32, {0, 64, 8}}};
  std::vector<int32_t> bounds;
  for (int32_t tiles = 1; tiles <= 300; ++tiles) bounds.push_back(tiles * kDecodeTileTokens);
  for (const int32_t tokens : {20000, 32769, 65536, 65537, 100000, 131072, kModelContext}) bounds.push_back(tokens);
  for (const RuleCase& rc : cases) {
    const MlaInvariantSplitRule rule = rc.rule.tiles_per_split == 0 && rc.rule.divisor == 0
                                           ? kernels::cuda::mla_decode_invariant_split_rule(rc.heads, kModelContext)
                                           : rc.rule;
    for (const int32_t bound : bounds)
      for (const int batch : {1, 128}) {
        const MlaDecodePlan plan = mla_decode_plan_batch_invariant(132, batch, rc.heads, bound, kModelContext, rc.rule);
        ASSERT_LE(plan.num_splits, kernels::cuda::kMlaDecodeMaxSplits);
        for (int32_t length = 1; length <= bound; length += length < 2048 ? 61 : 997) {
          const int tiles = (length + kDecodeTileTokens - 1) / kDecodeTileTokens;
          const int expected = rule.tiles_per_split > 0
                                   ? rule.tiles_per_split
                                   : std::max((tiles + rule.divisor - 1) / rule.divisor, std::max(1, rule.min_tiles));
          const int split = kernels::cuda::mla_detail::split_tiles(tiles, plan.num_splits, plan.tiles_per_split,
                                                                   plan.min_tiles_per_split);
          ASSERT_EQ(expected, split) << rc.heads << " heads, divisor " << rule.divisor << ", " << length
                                     << " tokens, bound " << bound << ", batch " << batch;
          ASSERT_LE((tiles + split - 1) / split, plan.num_splits) << length << " tokens, bound " << bound;
        }
      }
  }
}

}  // namespace
}  // namespace fathom::testing
